import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Exit, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { DatabaseError } from "../src/DatabaseError.js"
import * as Postgres from "../src/Postgres.js"

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
      assert.instanceOf(failure, DatabaseError)
      assert.strictEqual(failure?.reason._tag, "Connection")
      assert.isTrue(failure?.isRetryable)
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

  it("hides the password of a URL it cannot parse too", () => {
    assert.strictEqual(Postgres.redactUrl("postgres://alice:hunter2@[bad"), "postgres://alice:***@[bad")
  })

  it("tells URLs from file paths", () => {
    assert.isTrue(Postgres.isUrl("postgres://db/noema"))
    assert.isTrue(Postgres.isUrl("postgresql://db/noema"))
    assert.isFalse(Postgres.isUrl("/home/alice/.noema/noema.db"))
    assert.isFalse(Postgres.isUrl("postgres.db"))
  })
})
