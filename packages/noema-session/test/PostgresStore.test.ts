import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { Postgres } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Deferred, Effect, Fiber, Layer, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as PostgresStore from "../src/PostgresStore.js"
import * as SessionStore from "../src/SessionStore.js"
import * as SessionStoreConformance from "../src/SessionStoreConformance.js"

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_pg_store" })
})
afterAll(() => database?.drop())

/** An empty store for each case: a schema of its own in the suite's database (a database per case costs ~80 ms). */
const freshStore = SessionStoreConformance.fromLayer(
  Layer.unwrap(
    Effect.map(
      Effect.promise(() => database.schema("conformance")),
      (url) => PostgresStore.layer({ url, maxConnections: 4 })
    )
  )
)

describe("PostgresStore conformance", () => {
  for (const testCase of SessionStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(freshStore))
  }
})

// ---------------------------------------------------------------------------
// What only a server-backed store can show
// ---------------------------------------------------------------------------

/** A raw connection to the schema `url` points at, for what the store must not be asked to do. */
const onServer = <A, E>(url: string, effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.provide(effect, Postgres.layer({ url, maxConnections: 2 }))

const freshUrl = (options?: string) =>
  Effect.promise(async () => {
    const url = new URL(await database.schema("store"))
    if (options !== undefined)
      url.searchParams.set("options", `${url.searchParams.get("options")} ${options}`)
    return url.toString()
  })

describe("PostgresStore", () => {
  it.effect("names the server without its password, and keeps sessions across reconnects", () =>
    Effect.gen(function* () {
      const url = yield* freshUrl()
      const password = new URL(url).password
      assert.isAbove(password.length, 8)
      const id = yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* PostgresStore.make({ url })
          assert.notInclude(store.location, password)
          assert.include(store.location, `:***@127.0.0.1:`)
          assert.include(store.location, database.name)
          const { id } = yield* store.create({ metadata: { systemPrompt: "Be brief." } })
          yield* store.append(id, 0, [Message.user("persist me"), Message.assistant("persisted")])
          return id
        })
      )
      const stored = yield* Effect.scoped(
        Effect.flatMap(PostgresStore.make({ url }), (store) => store.load(id))
      )
      assert.deepStrictEqual(
        stored.messages.map((message) => message.content),
        ["persist me", "persisted"]
      )
      assert.deepStrictEqual(stored.info.metadata, { systemPrompt: "Be brief." })
    })
  )

  it.live("times beyond 32 bits (BIGINT columns) come back as the numbers that went in", () =>
    Effect.gen(function* () {
      const url = yield* freshUrl()
      const store = yield* PostgresStore.make({ url })
      const createdAt = Date.now()
      assert.isAbove(createdAt, 2 ** 32)
      const { id } = yield* store.create()
      const message = Message.user("stamped", { id: "m-1", createdAt })
      const info = yield* store.append(id, 0, [message])
      const stored = yield* store.load(id)
      assert.deepStrictEqual(stored.messages, [message])
      assert.strictEqual(typeof stored.info.createdAt, "number")
      assert.isAtLeast(stored.info.createdAt, createdAt - 60_000)
      assert.deepStrictEqual(stored.info, info)
      assert.deepStrictEqual(yield* store.list(), [info])
    }).pipe(Effect.scoped)
  )

  it.effect("stores opened at once on an empty schema migrate it once, and all work", () =>
    Effect.gen(function* () {
      const url = yield* freshUrl()
      const stores = yield* Effect.all(
        Array.from({ length: 4 }, () => PostgresStore.make({ url, maxConnections: 1 })),
        { concurrency: "unbounded" }
      )
      const created = yield* Effect.forEach(stores, (store) => store.create(), { concurrency: "unbounded" })
      const listed = yield* (stores[0] as SessionStore.Service).list()
      assert.sameMembers(
        listed.map((info) => info.id),
        created.map((info) => info.id)
      )
      const applied = yield* onServer(
        url,
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT migration_id FROM noema_session_migrations`)
      )
      assert.strictEqual(applied.length, 1)
    }).pipe(Effect.scoped)
  )

  it.effect("a database migrated by a newer noema is refused as SchemaTooNew", () =>
    Effect.gen(function* () {
      const url = yield* freshUrl()
      yield* Effect.scoped(PostgresStore.make({ url }))
      yield* onServer(
        url,
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql`INSERT INTO noema_session_migrations (migration_id, name) VALUES (99, 'future')`
        )
      )
      const error = yield* Effect.flip(Effect.scoped(PostgresStore.make({ url })))
      assert.strictEqual(error.reason._tag, "SchemaTooNew")
      assert.include(error.message, "99")
      assert.notInclude(error.message, new URL(url).password)
    })
  )

  it.effect("another application's sessions table is refused as ForeignDatabase and left alone", () =>
    Effect.gen(function* () {
      const url = yield* freshUrl()
      yield* onServer(
        url,
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.andThen(
            sql`CREATE TABLE sessions (token text PRIMARY KEY)`,
            sql`INSERT INTO sessions VALUES ('keep me')`
          )
        )
      )
      const error = yield* Effect.flip(Effect.scoped(PostgresStore.make({ url })))
      assert.strictEqual(error.reason._tag, "Foreign")
      assert.include(error.message, "sessions")
      assert.notInclude(error.message, "\n")
      const rows = yield* onServer(
        url,
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ token: string }>`SELECT token FROM sessions`)
      )
      assert.deepStrictEqual(
        rows.map((row) => row.token),
        ["keep me"]
      )
    })
  )

  it.live(
    "a writer waiting on the session row gets SessionConflictError once the holder commits, " +
      "also when the server's default isolation is SERIALIZABLE",
    () =>
      Effect.gen(function* () {
        const url = yield* freshUrl("-c default_transaction_isolation=serializable")
        const store = yield* PostgresStore.make({ url })
        const { id } = yield* store.create()
        yield* store.append(id, 0, [Message.user("first")])
        const holderMayCommit = yield* Deferred.make<void>()
        const holderUpdated = yield* Deferred.make<void>()
        // Another writer, by hand: it takes the row lock and appends one message, then waits.
        const holder = yield* onServer(
          url,
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`UPDATE sessions SET message_count = 2 WHERE id = ${id}`
                yield* sql`INSERT INTO messages (session_id, seq, message, created_at)
                  VALUES (${id}, 1, ${JSON.stringify(Message.encode(Message.assistant("by hand")))}, 0)`
                yield* Deferred.succeed(holderUpdated, undefined)
                yield* Deferred.await(holderMayCommit)
              })
            )
          )
        ).pipe(Effect.forkChild)
        yield* Deferred.await(holderUpdated)
        const append = yield* Effect.forkChild(
          Effect.result(store.append(id, 1, [Message.assistant("from the store")]))
        )
        yield* onServer(url, waitForLockWaiter)
        yield* Deferred.succeed(holderMayCommit, undefined)
        yield* Fiber.join(holder)
        const result = yield* Fiber.join(append)
        assert.isTrue(Result.isFailure(result))
        const failure = Result.isFailure(result) ? result.failure : undefined
        assert.instanceOf(failure, SessionStore.SessionConflictError)
        assert.strictEqual(failure.actualMessageCount, 2)
        const stored = yield* store.load(id)
        assert.deepStrictEqual(
          stored.messages.map((message) => message.content),
          ["first", "by hand"]
        )
      }).pipe(Effect.scoped)
  )
})

/** Waits until a backend of the database waits for a lock (polled, bounded). */
const waitForLockWaiter = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  for (let attempt = 0; attempt < 2_000; attempt++) {
    const [row] = yield* sql<{ waiting: number }>`
      SELECT count(*)::int AS waiting FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`
    if ((row?.waiting ?? 0) > 0) return
    yield* Effect.sleep("5 millis")
  }
  return yield* Effect.die(new Error("no backend ever waited for the row lock"))
})
