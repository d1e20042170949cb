import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Database, GroupCommit } from "@noema/sql"
import { transactionCounter } from "@noema/sql/testing"
import { TestDatabase } from "@noema/testing-postgres"
import { Clock, Context, Deferred, Effect, Exit, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type * as Resource from "../src/Resource.js"
import * as ResourceStoreConformance from "../src/ResourceStoreConformance.js"
import * as SqlResourceStore from "../src/SqlResourceStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-resources-store-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const onDatabase = (options: Database.Options) =>
  Effect.flatMap(Layer.build(Database.layer(options)), (context) =>
    Effect.provideContext(SqlResourceStore.fromDatabase, context)
  )

let counter = 0
const sqliteFile = () => path.join(directory, `conformance-${counter++}.db`)

describe("SQLite ResourceStore conformance", () => {
  for (const testCase of ResourceStoreConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(Effect.suspend(() => onDatabase({ kind: "sqlite", filename: sqliteFile() })))
    )
  }
})

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_resources" })
})
afterAll(() => database?.drop())

describe("PostgreSQL ResourceStore conformance", () => {
  for (const testCase of ResourceStoreConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(
        Effect.flatMap(
          Effect.promise(() => database.schema("resources")),
          (url) => onDatabase({ kind: "postgres", url })
        )
      )
    )
  }
})

describe("reading", () => {
  it.effect(
    "an unchanged body is decoded once: its readers share one frozen resource; a changed one is decoded anew",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const store = yield* onDatabase({ kind: "sqlite", filename: sqliteFile() })
          const { conversation, m1, task } = ResourceStoreConformance.tree()
          // Its parents first: a put under a missing parent is refused.
          for (const resource of [conversation, m1, task]) yield* store.put(resource)
          const first = yield* store.get(task.meta.urn)
          assert.strictEqual(yield* store.get(task.meta.urn), first)
          assert.strictEqual((yield* store.getMany([task.meta.urn]))[0], first)
          assert.isTrue(Object.isFrozen(first) && Object.isFrozen(first.meta))
          yield* store.put({ ...task, status: "done" } as typeof task)
          const changed = yield* store.get(task.meta.urn)
          assert.notStrictEqual(changed, first)
          assert.strictEqual((changed as typeof task).status, "done")
        })
      )
  )
})

describe("writing", () => {
  it.effect(
    "a put again rewrites the row's body only, not its type index entry: fewer WAL pages than an upsert that assigns the unchanged type",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const file = sqliteFile()
          const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: file }))
          const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
          const sql = Context.get(context, SqlClient.SqlClient)
          const { conversation, m1, m2, task } = ResourceStoreConformance.tree()
          yield* store.putMany([conversation, m1, m2, task])
          /** The WAL pages `write` adds, from an emptied WAL. */
          const walPages = <E>(write: Effect.Effect<unknown, E>) =>
            Effect.gen(function* () {
              yield* sql.unsafe("PRAGMA wal_checkpoint(TRUNCATE)")
              yield* write
              return Math.round((fs.statSync(`${file}-wal`).size - 32) / (4096 + 24))
            })
          const again = yield* walPages(
            store.putMany([
              { ...m1, content: "hi again" },
              { ...m2, content: "hello again" }
            ])
          )
          assert.strictEqual(((yield* store.get(m2.meta.urn)) as typeof m2).content, "hello again")
          assert.strictEqual((yield* store.get(m2.meta.urn)).meta.type, "message")
          // The same rows through an upsert that assigns their (unchanged) type and parent too.
          const assigningType = yield* walPages(
            sql.withTransaction(
              Effect.forEach([m1, m2], (message) =>
                sql.unsafe(
                  `INSERT INTO ${SqlResourceStore.resourcesTable} (urn, type, parent, body) VALUES (?, ?, ?, ?)
                  ON CONFLICT (urn) DO UPDATE SET type = excluded.type, parent = excluded.parent, body = excluded.body`,
                  [message.meta.urn, message.meta.type, message.meta.parent, JSON.stringify(message)]
                )
              )
            )
          )
          assert.isAbove(again, 0)
          assert.isBelow(again, assigningType)
        })
      )
  )
})

/** `effect` with the clock standing at `millis`: which caller's services a grouped body ran with. */
const at = <A, E, R>(millis: number, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Clock.clockWith(Effect.succeed), (clock) =>
    Effect.provideService(effect, Clock.Clock, {
      ...clock,
      currentTimeMillisUnsafe: () => millis,
      currentTimeMillis: Effect.succeed(millis)
    })
  )

/**
 * A store on a fresh SQLite file, with its client, and `holdLock`: the write lock held by
 * another fiber until the effect it returns lets go, so writes made meanwhile queue behind it.
 */
const grouping = Effect.gen(function* () {
  const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: sqliteFile() }))
  const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
  const sql = Context.get(context, SqlClient.SqlClient)
  const holdLock = Effect.gen(function* () {
    const held = yield* Deferred.make<void>()
    const released = yield* Deferred.make<void>()
    const holder = yield* Effect.forkChild(
      sql.withTransaction(Effect.andThen(Deferred.succeed(held, undefined), Deferred.await(released)))
    )
    yield* Deferred.await(held)
    return Effect.andThen(Deferred.succeed(released, undefined), Fiber.join(holder))
  })
  return { store, sql, transaction: store.transaction!, holdLock }
})

describe("transactions on SQLite: group commit", () => {
  it.effect(
    "writes that arrive together share one transaction, each with its own outcome and its caller's services",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { store, transaction, holdLock } = yield* grouping
          const { conversation, other } = ResourceStoreConformance.tree()
          const orphan = ResourceStoreConformance.tree().task
          const release = yield* holdLock
          const counter = transactionCounter()
          const writes = yield* Effect.forkChild(
            Effect.all(
              [
                Effect.exit(at(Date.UTC(2026, 10, 5), transaction(store.putMany([conversation])))),
                Effect.exit(transaction(store.putMany([orphan]))),
                Effect.exit(at(Date.UTC(2026, 10, 6), transaction(store.putMany([other]))))
              ] as const,
              { concurrency: "unbounded" }
            ).pipe(Effect.withTracer(counter.tracer))
          )
          yield* Effect.yieldNow
          yield* release
          const [first, refused, third] = yield* Fiber.join(writes)
          assert.isTrue(Exit.isSuccess(first) && Exit.isSuccess(third))
          assert.isTrue(Exit.isFailure(refused))
          // Started in one turn: the three gathered into one transaction, the refused one
          // rolled back alone.
          assert.strictEqual(counter.count(), 1)
          assert.strictEqual(
            (yield* store.get(conversation.meta.urn)).meta.created,
            "2026-11-05T00:00:00.000Z"
          )
          assert.strictEqual((yield* store.get(other.meta.urn)).meta.created, "2026-11-06T00:00:00.000Z")
          assert.deepStrictEqual(yield* store.getMany([orphan.meta.urn]), [])
        })
      )
  )

  it.effect(
    "writes that start in one turn share one COMMIT with no lock held; writes one after another commit each",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { store, transaction } = yield* grouping
          const { conversation, m1, m2, other } = ResourceStoreConformance.tree()
          yield* transaction(store.putMany([conversation]))
          // node:sqlite is synchronous: without gathering, the first would commit before the
          // others ran, and each would commit alone (3 transactions).
          const together = transactionCounter()
          yield* Effect.all(
            [m1, m2, other].map((resource) => transaction(store.putMany([resource]))),
            { concurrency: "unbounded" }
          ).pipe(Effect.withTracer(together.tracer))
          assert.strictEqual(together.count(), 1)
          // One at a time, each caller waiting for its COMMIT: one transaction each.
          const inTurn = transactionCounter()
          for (const message of [m1, m2])
            yield* transaction(store.putMany([{ ...message, content: "again" }])).pipe(
              Effect.withTracer(inTurn.tracer)
            )
          assert.strictEqual(inTurn.count(), 2)
          assert.strictEqual(((yield* store.get(m2.meta.urn)) as typeof m2).content, "again")
        })
      )
  )

  it.effect(
    "a step registered with beforeCommit by gathered writes runs once, after all of them and before their COMMIT; elsewhere at once",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { store, sql, transaction } = yield* grouping
          const { conversation, m1, m2, other } = ResourceStoreConformance.tree()
          yield* transaction(store.putMany([conversation]))
          // What the step saw each time it ran: the resources its transaction held.
          const seen: Array<number> = []
          const step = Effect.flatMap(
            sql<{ n: number }>`SELECT count(*) AS n FROM ${sql(SqlResourceStore.resourcesTable)}`,
            (rows) => Effect.sync(() => seen.push(rows[0]?.n ?? -1))
          )
          const key = {}
          const counter = transactionCounter()
          const write = (resource: Resource.Resource, registerFirst: boolean) =>
            Effect.exit(
              transaction(
                registerFirst
                  ? Effect.andThen(GroupCommit.beforeCommit(sql, key, step), store.putMany([resource]))
                  : Effect.andThen(store.putMany([resource]), GroupCommit.beforeCommit(sql, key, step))
              )
            )
          // The second registers the step, then is refused (its parent is missing).
          const [first, refused, third] = yield* Effect.all(
            [
              write(m1, false),
              write(ResourceStoreConformance.tree().subtask, true),
              write(m2, false)
            ] as const,
            { concurrency: "unbounded" }
          ).pipe(Effect.withTracer(counter.tracer))
          assert.isTrue(Exit.isSuccess(first) && Exit.isSuccess(third) && Exit.isFailure(refused))
          assert.strictEqual(counter.count(), 1)
          // Once, with both accepted writes there: the conversation, m1 and m2.
          assert.deepStrictEqual(seen, [3])
          // Outside a group commit's transaction, at once: alone, and in a transaction of its own.
          yield* GroupCommit.beforeCommit(sql, key, step)
          yield* sql.withTransaction(
            Effect.andThen(store.putMany([other]), GroupCommit.beforeCommit(sql, key, step))
          )
          assert.deepStrictEqual(seen, [3, 3, 4])
        })
      )
  )

  it.effect("a transaction's body may open transactions of its own: savepoints of it, alone or grouped", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { store, sql, transaction, holdLock } = yield* grouping
        const { conversation, m1, other } = ResourceStoreConformance.tree()
        const nested = (resource: typeof conversation) =>
          transaction(sql.withTransaction(store.putMany([resource])))
        yield* nested(conversation)
        // Two at once behind a held write lock: committed as one group, each body nesting.
        const release = yield* holdLock
        const writes = yield* Effect.forkChild(
          Effect.all([nested(m1), nested(other), nested(ResourceStoreConformance.tree().m2)], {
            concurrency: "unbounded"
          })
        )
        yield* Effect.yieldNow
        yield* release
        yield* Fiber.join(writes)
        assert.strictEqual(
          (yield* store.getMany([conversation.meta.urn, m1.meta.urn, other.meta.urn])).length,
          3
        )
      })
    )
  )
})

describe("the prefix lookup is a range scan", () => {
  it.effect("SQLite: EXPLAIN QUERY PLAN searches the primary key, no SCAN", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: sqliteFile() }))
        yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
        const sql = Context.get(context, SqlClient.SqlClient)
        const plan = yield* sql.unsafe<{ detail: string }>(
          `EXPLAIN QUERY PLAN SELECT body FROM ${SqlResourceStore.resourcesTable} WHERE urn >= ? AND urn < ? ORDER BY urn`,
          [...SqlResourceStore.prefixRange("cld:conversation.c1")]
        )
        const details = plan.map((row) => row.detail).join("\n")
        assert.match(
          details,
          /SEARCH .*USING (INDEX sqlite_autoindex_noema_resources_1|PRIMARY KEY) \(urn>\? AND urn<\?\)/
        )
        assert.notMatch(details, /SCAN/)
        assert.notMatch(details, /TEMP B-TREE/)
      })
    )
  )

  it.effect("PostgreSQL: the plan uses the primary key index with the range as index condition", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const url = yield* Effect.promise(() => database.schema("plan"))
        const context = yield* Layer.build(Database.layer({ kind: "postgres", url }))
        yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
        const sql = Context.get(context, SqlClient.SqlClient)
        // An empty table makes any plan cheap: turn off the sequential and bitmap scans (on the
        // transaction's one connection) so the plan shows whether the range can use the key's index.
        const plan = yield* sql.withTransaction(
          Effect.andThen(
            Effect.andThen(
              sql.unsafe("SET LOCAL enable_seqscan = off"),
              sql.unsafe("SET LOCAL enable_bitmapscan = off")
            ),
            sql.unsafe<{ "QUERY PLAN": string }>(
              `EXPLAIN SELECT body FROM ${SqlResourceStore.resourcesTable} WHERE urn >= 'cld:conversation.c1/' AND urn < 'cld:conversation.c10' ORDER BY urn`
            )
          )
        )
        const text = plan.map((row) => row["QUERY PLAN"]).join("\n")
        assert.match(text, /Index Scan using noema_resources_pkey/)
        assert.match(text, /Index Cond: \(\(urn >= /)
        assert.notMatch(text, /Sort/)
      })
    )
  )
})

describe("SqlResourceStore on a bare SQLite client", () => {
  it.effect("refuses another application's file, untouched, and marks an empty one as noema's", () =>
    Effect.gen(function* () {
      const { SqliteClient } = yield* Effect.promise(() => import("@noema/sql-sqlite"))
      const { DatabaseSync } = yield* Effect.promise(() => import("node:sqlite"))
      const foreign = path.join(directory, "foreign.db")
      const db = new DatabaseSync(foreign)
      db.exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
      db.close()
      const before = fs.readFileSync(foreign)
      const onBareClient = (filename: string) =>
        Effect.scoped(
          Effect.flatMap(Layer.build(SqliteClient.layer({ filename, wal: false })), (context) =>
            Effect.provideContext(SqlResourceStore.make({ location: filename }), context)
          )
        )
      const refused = yield* Effect.flip(onBareClient(foreign))
      assert.include(refused.message, "not a noema database")
      assert.isTrue(fs.readFileSync(foreign).equals(before))

      const empty = path.join(directory, "empty.db")
      yield* onBareClient(empty)
      const check = new DatabaseSync(empty, { readOnly: true })
      const mark = (check.prepare("PRAGMA application_id").get() as { application_id: number }).application_id
      check.close()
      assert.strictEqual(mark, 0x6e6f656d)
    })
  )
})
