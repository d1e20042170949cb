import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Exit, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import * as Postgres from "../src/Postgres.js"
import { StoreError } from "../src/SessionStore.js"

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_session_postgres" })
})
afterAll(() => database?.drop())

const onDatabase = <A, E>(effect: Effect.Effect<A, E, SqlClient>) =>
  Effect.provide(effect, Postgres.layer({ url: Redacted.make(database.url) }))

describe("Postgres.layer", () => {
  it.effect("runs queries with parameters on the server", () =>
    onDatabase(
      Effect.gen(function* () {
        const sql = yield* SqlClient
        yield* sql`CREATE TABLE notes (id integer PRIMARY KEY, body text NOT NULL)`
        yield* sql`INSERT INTO notes ${sql.insert([
          { id: 1, body: "first" },
          { id: 2, body: "it's 'quoted'" }
        ])}`
        const rows = yield* sql<{
          id: number
          body: string
        }>`SELECT id, body FROM notes WHERE id >= ${1} ORDER BY id`
        assert.deepStrictEqual(
          rows.map((row) => [row.id, row.body]),
          [
            [1, "first"],
            [2, "it's 'quoted'"]
          ]
        )
        const [version] = yield* sql<{ server_version_num: string }>`SHOW server_version_num`
        assert.isAtLeast(Number(version?.server_version_num), 130000)
      })
    )
  )

  it.effect("withTransaction commits when the body succeeds and rolls back when it fails", () =>
    onDatabase(
      Effect.gen(function* () {
        const sql = yield* SqlClient
        yield* sql`CREATE TABLE ledger (entry text NOT NULL)`
        yield* sql.withTransaction(sql`INSERT INTO ledger VALUES ('kept')`)
        const failed = yield* Effect.exit(
          sql.withTransaction(
            Effect.andThen(
              sql`INSERT INTO ledger VALUES ('dropped')`,
              Effect.fail("the body failed" as const)
            )
          )
        )
        assert.isTrue(Exit.isFailure(failed))
        const rows = yield* sql<{ entry: string }>`SELECT entry FROM ledger`
        assert.deepStrictEqual(
          rows.map((row) => row.entry),
          ["kept"]
        )
      })
    )
  )

  it.effect("a wrong password fails while the layer is built, and the error does not show it", () =>
    Effect.gen(function* () {
      const url = new URL(database.url)
      url.password = "Wr0ng-Secret-Pa55"
      const exit = yield* Effect.exit(Effect.provide(Effect.void, Postgres.layer({ url: url.toString() })))
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? exit.cause.reasons[0] : undefined
      const failure = error !== undefined && "error" in error ? error.error : undefined
      assert.instanceOf(failure, StoreError)
      const text = `${failure?.message} ${JSON.stringify(failure)}`
      assert.notInclude(text, "Wr0ng-Secret-Pa55")
      assert.include(text, "***@127.0.0.1")
    })
  )

  it.effect("an unreachable server fails with the URL redacted", () =>
    Effect.gen(function* () {
      // Port 1 on the loopback: nothing listens there, the connection is refused at once.
      const exit = yield* Effect.exit(
        Effect.provide(
          Effect.void,
          Postgres.layer({ url: "postgres://noema:Sup3r-Secret@127.0.0.1:1/noema" })
        )
      )
      assert.isTrue(Exit.isFailure(exit))
      const text = Exit.isFailure(exit) ? `${exit.cause}` : ""
      assert.notInclude(text, "Sup3r-Secret")
      assert.include(text, "postgres://noema:***@127.0.0.1:1/noema")
    })
  )
})

describe("Postgres.redactUrl", () => {
  it("hides the password in the user part and in a password parameter", () => {
    assert.strictEqual(
      Postgres.redactUrl("postgres://alice:s%40cret@db.example:5432/noema?sslmode=require"),
      "postgres://alice:***@db.example:5432/noema?sslmode=require"
    )
    assert.strictEqual(
      Postgres.redactUrl("postgresql://alice@db/noema?password=hunter2"),
      "postgresql://alice@db/noema?password=***"
    )
    assert.strictEqual(Postgres.redactUrl("postgres://db/noema"), "postgres://db/noema")
  })

  it("shows nothing of a URL it cannot parse", () => {
    assert.strictEqual(Postgres.redactUrl("postgres://alice:hunter2@[bad"), "postgres://(unparseable URL)")
  })

  it("tells URLs from file paths", () => {
    assert.isTrue(Postgres.isUrl("postgres://db/noema"))
    assert.isTrue(Postgres.isUrl("postgresql://db/noema"))
    assert.isFalse(Postgres.isUrl("/home/alice/.noema/noema.db"))
    assert.isFalse(Postgres.isUrl("postgres.db"))
  })
})

// ---------------------------------------------------------------------------
// Two processes, one session: the row lock the SQL store relies on
// ---------------------------------------------------------------------------

const writer = fileURLToPath(new URL("./fixtures/postgres-writer.mjs", import.meta.url))

interface Writer {
  readonly child: ChildProcess
  readonly send: (line: string) => void
  /** Resolves with the next line the writer prints. */
  readonly next: () => Promise<string>
  readonly exited: Promise<number | null>
}

const startWriter = (sessionId: string, mode: "lock" | "nolock", name: string): Writer => {
  const child = spawn(process.execPath, [writer, database.url, sessionId, "0", mode, name], {
    stdio: ["pipe", "pipe", "pipe"]
  })
  const lines: Array<string> = []
  const waiting: Array<(line: string) => void> = []
  let stderr = ""
  let partial = ""
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk
  })
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n")
    partial = parts.pop() ?? ""
    for (const line of parts) {
      const resolve = waiting.shift()
      if (resolve === undefined) lines.push(line)
      else resolve(line)
    }
  })
  const exited = new Promise<number | null>((resolve) => child.on("close", resolve))
  return {
    child,
    exited,
    send: (line) => void child.stdin?.write(`${line}\n`),
    next: () => {
      const line = lines.shift()
      if (line !== undefined) return Promise.resolve(line)
      return new Promise<string>((resolve, reject) => {
        waiting.push(resolve)
        void exited.then((code) => reject(new Error(`${name} exited (${code}) before printing: ${stderr}`)))
      })
    }
  }
}

/** Waits until some backend of the test database waits for a lock (polled, bounded). */
const someoneWaitsForALock = (sql: SqlClient) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < 2_000; attempt++) {
      const [row] = yield* sql<{ waiting: number }>`
        SELECT count(*)::int AS waiting FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
      if ((row?.waiting ?? 0) > 0) return
      yield* Effect.sleep("5 millis")
    }
    return yield* Effect.die(new Error("no backend ever waited for the row lock"))
  })

/**
 * Two writers that both loaded the session at 0 messages. A reads the count and
 * holds its transaction open; then B reads; then A writes and commits; then B
 * writes if it still may. What B's read sees decides everything.
 */
const race = (mode: "lock" | "nolock") =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const sessionId = `session-${mode}`
    yield* sql`INSERT INTO sessions (id, message_count) VALUES (${sessionId}, 0)`
    const a = startWriter(sessionId, mode, "A")
    const b = startWriter(sessionId, mode, "B")
    try {
      a.send("go")
      assert.strictEqual(yield* Effect.promise(a.next), "read 0")
      b.send("go")
      let bRead: Promise<string>
      if (mode === "lock") {
        // B's FOR UPDATE must now wait for A's transaction.
        yield* someoneWaitsForALock(sql)
        bRead = b.next()
      } else {
        bRead = b.next()
        assert.strictEqual(yield* Effect.promise(() => bRead), "read 0")
      }
      a.send("write")
      assert.strictEqual(yield* Effect.promise(a.next), "committed")
      const bSaw = yield* Effect.promise(() => bRead)
      let bOutcome: string
      if (bSaw === "read 0") {
        b.send("write")
        bOutcome = yield* Effect.promise(b.next)
      } else {
        bOutcome = yield* Effect.promise(b.next)
      }
      yield* Effect.promise(() => Promise.all([a.exited, b.exited]))
      const rows = yield* sql<{
        body: string
      }>`SELECT body FROM messages WHERE session_id = ${sessionId} ORDER BY id`
      return { bSaw, bOutcome, bodies: rows.map((row) => row.body) }
    } finally {
      a.child.kill()
      b.child.kill()
    }
  })

describe("two processes appending to one session", () => {
  // Live clock: the lock wait is polled with real sleeps.
  it.live("SELECT ... FOR UPDATE makes the second writer see the first one's count and commit nothing", () =>
    onDatabase(
      Effect.gen(function* () {
        const sql = yield* SqlClient
        yield* sql`CREATE TABLE IF NOT EXISTS sessions (id text PRIMARY KEY, message_count integer NOT NULL)`
        yield* sql`CREATE TABLE IF NOT EXISTS messages (id bigserial PRIMARY KEY, session_id text NOT NULL, seq integer NOT NULL, body text NOT NULL)`
        const locked = yield* race("lock")
        assert.strictEqual(locked.bSaw, "read 2")
        assert.strictEqual(locked.bOutcome, "conflict 2")
        assert.deepStrictEqual(locked.bodies, ["A 0", "A 1"])

        // The same race with a plain SELECT: B reads 0 too and both turns land, interleaved.
        // This is what the lock prevents; if it did not, the first half would look like this.
        const unlocked = yield* race("nolock")
        assert.strictEqual(unlocked.bSaw, "read 0")
        assert.strictEqual(unlocked.bOutcome, "committed")
        assert.deepStrictEqual(unlocked.bodies, ["A 0", "A 1", "B 0", "B 1"])
      })
    )
  )
})
