import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { GroupCommit } from "@noema/sql"
import { transactionCounter } from "@noema/sql/testing"
import { SqliteClient } from "@noema/sql-sqlite"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Scheduler, Tracer } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import { SessionConflictError, SessionNotFoundError, StoreError } from "../src/SessionStore.js"
import * as SqlStore from "../src/SqlStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-group-commit-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

let files = 0

/** A store on a client of its own, and the client: the tests hold its write lock. */
const open = Effect.gen(function* () {
  const filename = path.join(directory, `group-${files++}.db`)
  const sql = yield* SqliteClient.make({ filename }).pipe(
    Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make)
  )
  const store = yield* SqlStore.make({ location: filename }).pipe(
    Effect.provideService(SqlClient.SqlClient, sql)
  )
  return { sql, store }
})

/**
 * Holds the client's write lock in a transaction of another fiber until `release`, so appends
 * made meanwhile queue up behind it, as they do behind a batch being committed.
 */
const holdLock = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const held = Deferred.makeUnsafe<void>()
    const released = Deferred.makeUnsafe<void>()
    const holder = yield* Effect.forkChild(
      sql.withTransaction(Effect.andThen(Deferred.succeed(held, undefined), Deferred.await(released)))
    )
    yield* Deferred.await(held)
    return Effect.andThen(Deferred.succeed(released, undefined), Fiber.join(holder))
  })

const turn = (label: string) => [Message.user(`${label} question`), Message.assistant(`${label} answer`)]

const failureOf = <A, E>(exit: Exit.Exit<A, E>): unknown =>
  Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined

describe("SqlStore on SQLite: group commit", () => {
  it.effect("appends queued together commit in one transaction, each with its own outcome", () =>
    Effect.gen(function* () {
      const { sql, store } = yield* open
      const [a, b, c, d] = yield* Effect.forEach([0, 1, 2, 3], () =>
        Effect.map(store.create(), (info) => info.id)
      )
      // A row already at c's first place: c's insert fails after its session row was updated.
      yield* sql.unsafe("INSERT INTO messages (session_id, seq, message, created_at) VALUES (?, 0, ?, 0)", [
        c,
        JSON.stringify(Message.user("in the way"))
      ])
      const counter = transactionCounter()
      const release = yield* holdLock(sql)
      const before = counter.count()
      const committedBefore = counter.committed()
      const appends = [
        store.append(a as string, 0, turn("a")),
        store.append(b as string, 0, turn("b")),
        store.append(a as string, 0, turn("a again")),
        store.append("missing", 0, turn("missing")),
        store.append(c as string, 0, turn("c")),
        store.append(d as string, 0, [Message.user("d"), { role: "wizard" } as unknown as Message.Message]),
        store.append(d as string, 0, turn("d"))
      ]
      const fibers = yield* Effect.forEach(appends, (append) =>
        Effect.forkChild(Effect.exit(append).pipe(Effect.withTracer(counter.tracer)))
      )
      // Every append is queued behind the lock before it is released.
      yield* Effect.yieldNow
      yield* release
      const exits = yield* Effect.forEach(fibers, Fiber.join)
      // The first append found no batch and waited for the lock alone, in its own transaction;
      // the six that came while it waited were committed together after it, in one COMMIT: their
      // first transaction, without savepoints, was rolled back when one of them failed, and the
      // batch ran again with a savepoint each.
      assert.strictEqual(counter.committed() - committedBefore, 2, "one commit for the six queued appends")
      assert.strictEqual(counter.count() - before, 3, "the six ran again once, with savepoints")

      const [first, second, conflict, missing, collided, invalid, last] = exits as Array<
        Exit.Exit<unknown, unknown>
      >
      assert.isTrue(Exit.isSuccess(first as Exit.Exit<unknown, unknown>))
      assert.isTrue(Exit.isSuccess(second as Exit.Exit<unknown, unknown>))
      assert.isTrue(Exit.isSuccess(last as Exit.Exit<unknown, unknown>))
      const conflictError = failureOf(conflict as Exit.Exit<unknown, unknown>)
      assert.instanceOf(conflictError, SessionConflictError)
      assert.strictEqual((conflictError as SessionConflictError).actualMessageCount, 2)
      assert.instanceOf(failureOf(missing as Exit.Exit<unknown, unknown>), SessionNotFoundError)
      const collision = failureOf(collided as Exit.Exit<unknown, unknown>)
      assert.instanceOf(collision, StoreError)
      const invalidError = failureOf(invalid as Exit.Exit<unknown, unknown>)
      assert.instanceOf(invalidError, StoreError)
      assert.strictEqual((invalidError as StoreError).reason._tag, "InvalidMessage")

      const contents = (id: string) =>
        Effect.map(store.load(id), ({ messages }) => messages.map((message) => message.content))
      assert.deepStrictEqual(yield* contents(a as string), ["a question", "a answer"])
      assert.deepStrictEqual(yield* contents(b as string), ["b question", "b answer"])
      assert.deepStrictEqual(yield* contents(d as string), ["d question", "d answer"])
      // The failed append was rolled back alone: c's row still counts no message.
      assert.strictEqual((yield* store.info(c as string)).messageCount, 0)
    }).pipe(Effect.scoped)
  )

  it.effect("a caller interrupted while its append is queued takes it out of the batch", () =>
    Effect.gen(function* () {
      const { sql, store } = yield* open
      const [first, left, stayed] = yield* Effect.forEach([0, 1, 2], () =>
        Effect.map(store.create(), (info) => info.id)
      )
      const release = yield* holdLock(sql)
      // The first waits for the lock alone; the other two queue behind it for the next batch.
      const fibers = yield* Effect.forEach([first, left, stayed], (id) =>
        Effect.forkChild(store.append(id as string, 0, turn(id as string)))
      )
      yield* Effect.yieldNow
      yield* Fiber.interrupt(fibers[1] as Fiber.Fiber<unknown, unknown>)
      yield* release
      yield* Fiber.join(fibers[0] as Fiber.Fiber<unknown, unknown>)
      yield* Fiber.join(fibers[2] as Fiber.Fiber<unknown, unknown>)
      assert.strictEqual((yield* store.info(first as string)).messageCount, 2)
      assert.strictEqual((yield* store.info(left as string)).messageCount, 0)
      assert.strictEqual((yield* store.info(stayed as string)).messageCount, 2)
      // The store goes on: the next append is committed.
      yield* store.append(left as string, 0, turn("after"))
      assert.strictEqual((yield* store.info(left as string)).messageCount, 2)
    }).pipe(Effect.scoped)
  )

  it.effect("writers committing at once share transactions; every turn is stored whole and in order", () =>
    Effect.gen(function* () {
      const { store } = yield* open
      const writers = 8
      const turns = 25
      const ids = yield* Effect.forEach(Array.from({ length: writers }), () =>
        Effect.map(store.create(), (info) => info.id)
      )
      const counter = transactionCounter()
      yield* Effect.forEach(
        ids,
        (id) =>
          Effect.forEach(
            Array.from({ length: turns }, (_, index) => index),
            (index) => store.append(id, index * 2, turn(`${id} ${index}`)),
            { discard: true }
          ),
        { concurrency: "unbounded", discard: true }
      ).pipe(Effect.withTracer(counter.tracer))
      const appends = writers * turns
      assert.isAtMost(counter.count(), appends / 4, `${counter.count()} transactions for ${appends} appends`)
      // No append failed, so no batch was run twice: every transaction begun was committed.
      assert.strictEqual(counter.committed(), counter.count())
      for (const id of ids) {
        const { messages } = yield* store.load(id)
        assert.deepStrictEqual(
          messages.map((message) => message.content),
          Array.from({ length: turns }, (_, index) => [
            `${id} ${index} question`,
            `${id} ${index} answer`
          ]).flat()
        )
      }
    }).pipe(Effect.scoped)
  )

  it.effect("a writer alone commits each append in a transaction of its own", () =>
    Effect.gen(function* () {
      const { store } = yield* open
      const { id } = yield* store.create()
      const counter = transactionCounter()
      for (let index = 0; index < 20; index++) {
        yield* store.append(id, index * 2, turn(`${index}`)).pipe(Effect.withTracer(counter.tracer))
      }
      assert.strictEqual(counter.count(), 20)
      assert.strictEqual((yield* store.info(id)).messageCount, 40)
    }).pipe(Effect.scoped)
  )

  it.effect("a writer alone waits for company ever more rarely; writers that join it are still grouped", () =>
    Effect.gen(function* () {
      const { store } = yield* open
      const { id } = yield* store.create()
      // A probe for company waits one turn of the event loop (the scheduler's own yields are put
      // off here): an immediate queued before an append runs before it returns only if it probed.
      const appends = 400
      let turns = 0
      let probes = 0
      for (let index = 0; index < appends; index++) {
        const before = turns
        setImmediate(() => {
          turns++
        })
        yield* store.append(id, index * 2, turn(`${index}`))
        if (turns !== before) probes++
      }
      // Runs of 8, 16, 32, then 64 appends alone between probes: 8 probes, where a probe every
      // 8 appends would make 50.
      assert.isAtLeast(probes, 1)
      assert.isAtMost(probes, Math.ceil(appends / GroupCommit.probeAtMost) + 2, `${probes} probes`)

      const writers = 8
      const turnsEach = 40
      const ids = yield* Effect.forEach(Array.from({ length: writers }), () =>
        Effect.map(store.create(), (info) => info.id)
      )
      const counter = transactionCounter()
      yield* Effect.forEach(
        ids,
        (writer) =>
          Effect.forEach(
            Array.from({ length: turnsEach }, (_, index) => index),
            (index) => store.append(writer, index * 2, turn(`${writer} ${index}`)),
            { discard: true }
          ),
        { concurrency: "unbounded", discard: true }
      ).pipe(Effect.withTracer(counter.tracer))
      // At most `probeAtMost` appends alone before the next probe finds them, then batches.
      const grouped = writers * turnsEach
      const bound = GroupCommit.probeAtMost + grouped / 4
      assert.isAtMost(counter.count(), bound, `${counter.count()} transactions for ${grouped} appends`)
    }).pipe(Effect.provideService(Scheduler.MaxOpsBeforeYield, Number.MAX_SAFE_INTEGER), Effect.scoped)
  )

  it.effect("a writer alone in one fiber commits alone again after a probe, in its own fiber", () =>
    Effect.gen(function* () {
      const { store } = yield* open
      const { id } = yield* store.create()
      // Each transaction's parent span: the append's own when it ran in the caller's fiber, the
      // span a batch fiber was started under otherwise.
      const parents: Array<string | undefined> = []
      const tracer = Tracer.make({
        span(options) {
          if (options.name === "sql.transaction") {
            const parent = Option.getOrUndefined(options.parent)
            parents.push(parent?._tag === "Span" ? parent.name : undefined)
          }
          return new Tracer.NativeSpan(options)
        }
      })
      const appends = 100
      for (let index = 0; index < appends; index++) {
        yield* store
          .append(id, index * 2, turn(`${index}`))
          .pipe(Effect.withSpan(`append ${index}`), Effect.withTracer(tracer))
      }
      const elsewhere = parents.filter((parent, index) => parent !== `append ${index}`).length
      // Only the probes (runs of 8, 16, 32, 64) ran in a batch fiber; every other append alone.
      assert.strictEqual(parents.length, appends)
      assert.isAtMost(elsewhere, 4, `${elsewhere} of ${appends} appends committed outside their own fiber`)
    }).pipe(Effect.scoped)
  )

  for (const rerunnable of [false, true]) {
    it.effect(
      rerunnable
        ? "rerunnable appends run first without savepoints, and again with them only after a failure"
        : "appends of any other kind run once each, in their savepoints, also when one fails",
      () =>
        Effect.gen(function* () {
          const { sql } = yield* open
          yield* sql`CREATE TABLE written (label TEXT PRIMARY KEY)`
          const runAppends = GroupCommit.make(sql, { rerunnable })
          const runs = new Map<string, number>()
          // Writes its row, then fails when asked to: its row must go with it, and only it.
          const append =
            (label: string, fails: boolean): GroupCommit.Append<string, string> =>
            (connection) =>
              Effect.andThen(
                Effect.sync(() => runs.set(label, (runs.get(label) ?? 0) + 1)),
                Effect.andThen(
                  connection.execute("INSERT INTO written (label) VALUES (?)", [label], undefined),
                  fails ? Effect.fail(`${label} failed`) : Effect.succeed(label)
                )
              )
          // Two batches: one where an append fails, one where none does.
          for (const [batch, failing] of [
            [["a", "b", "c"], "b"],
            [["d", "e", "f"], undefined]
          ] as const) {
            const release = yield* holdLock(sql)
            const fibers = yield* Effect.forEach(batch, (label) =>
              Effect.forkChild(Effect.exit(runAppends(append(label, label === failing))))
            )
            yield* Effect.yieldNow
            yield* release
            const exits = yield* Effect.forEach(fibers, Fiber.join)
            exits.forEach((exit, index) => {
              const label = batch[index] as string
              if (label === failing) assert.strictEqual(failureOf(exit), `${label} failed`)
              else assert.deepStrictEqual(exit, Exit.succeed(label))
            })
          }
          const rows = yield* sql<{ label: string }>`SELECT label FROM written ORDER BY label`
          assert.deepStrictEqual(
            rows.map((row) => row.label),
            ["a", "c", "d", "e", "f"]
          )
          // The first append waited for the lock alone (no batch to join) and ran once. Of the two
          // queued behind it, the failing one ran twice only when rerunnable (the first run stops
          // there, so the one after it ran once); the batch without a failure, once each.
          assert.deepStrictEqual(Object.fromEntries(runs), {
            a: 1,
            b: rerunnable ? 2 : 1,
            c: 1,
            d: 1,
            e: 1,
            f: 1
          })
        }).pipe(Effect.scoped)
    )
  }
})

describe("GroupCommit of rerunnable appends on noema's SQLite client", () => {
  /** A client with a `written` table, its rerunnable runner, and an append writing `label` (then failing, if asked). */
  const runner = Effect.gen(function* () {
    const { sql } = yield* open
    yield* sql`CREATE TABLE written (label TEXT PRIMARY KEY)`
    yield* sql`CREATE TABLE parents (id INTEGER PRIMARY KEY)`
    // Checked only at COMMIT, which SQLite then fails and leaves the transaction open.
    yield* sql`CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`
    const runAppends = GroupCommit.make(sql, { rerunnable: true })
    const labels = Effect.map(sql<{ label: string }>`SELECT label FROM written ORDER BY label`, (rows) =>
      rows.map((row) => row.label)
    )
    return { sql, runAppends, labels }
  })

  const write =
    (label: string, after: Effect.Effect<void, string> = Effect.void): GroupCommit.Append<string, string> =>
    (connection) =>
      Effect.andThen(
        connection.execute("INSERT INTO written (label) VALUES (?)", [label], undefined),
        Effect.as(after, label)
      )

  const orphan: GroupCommit.Append<string, never> = (connection) =>
    Effect.as(connection.execute("INSERT INTO children (parent) VALUES (42)", [], undefined), "orphan")

  it.effect("interrupting a writer alone rolls its append back; the next one commits", () =>
    Effect.gen(function* () {
      const { runAppends, labels } = yield* runner
      const inside = Deferred.makeUnsafe<void>()
      const fiber = yield* Effect.forkChild(
        runAppends(write("interrupted", Effect.andThen(Deferred.succeed(inside, undefined), Effect.never)))
      )
      yield* Deferred.await(inside)
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(yield* labels, [])
      assert.strictEqual(yield* runAppends(write("after")), "after")
      assert.deepStrictEqual(yield* labels, ["after"])
    }).pipe(Effect.scoped)
  )

  it.effect("a COMMIT that fails fails its appends, alone or batched, and leaves the connection clean", () =>
    Effect.gen(function* () {
      const { sql, runAppends, labels } = yield* runner
      const alone = yield* Effect.flip(runAppends(orphan))
      assert.strictEqual(alone._tag, "SqlError")
      assert.strictEqual(yield* runAppends(write("after alone")), "after alone")
      // The first waits for the lock alone; the two behind it are one batch, whose COMMIT's
      // failure goes to each append it held.
      const release = yield* holdLock(sql)
      const fibers = yield* Effect.forEach([write("alone"), write("in the batch"), orphan], (append) =>
        Effect.forkChild(Effect.exit(runAppends(append)))
      )
      yield* Effect.yieldNow
      yield* release
      const [first, ...batched] = yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(first, Exit.succeed("alone"))
      for (const exit of batched) {
        assert.strictEqual((failureOf(exit) as { _tag?: string } | undefined)?._tag, "SqlError")
      }
      assert.strictEqual(yield* runAppends(write("after the batch")), "after the batch")
      yield* sql.withTransaction(sql`INSERT INTO written (label) VALUES ('then')`)
      assert.deepStrictEqual(yield* labels, ["after alone", "after the batch", "alone", "then"])
      assert.deepStrictEqual(yield* sql`SELECT count(*) AS n FROM children`, [{ n: 0 }])
    }).pipe(Effect.scoped)
  )

  it.effect("writers arriving while a writer alone holds the lock are committed together after it", () =>
    Effect.gen(function* () {
      const { runAppends, labels } = yield* runner
      const inside = Deferred.makeUnsafe<void>()
      const go = Deferred.makeUnsafe<void>()
      const counter = transactionCounter()
      const first = yield* Effect.forkChild(
        runAppends(
          write("first", Effect.andThen(Deferred.succeed(inside, undefined), Deferred.await(go)))
        ).pipe(Effect.withTracer(counter.tracer))
      )
      yield* Deferred.await(inside)
      const others = yield* Effect.forEach(["second", "third", "fourth"], (label) =>
        Effect.forkChild(runAppends(write(label)).pipe(Effect.withTracer(counter.tracer)))
      )
      yield* Effect.yieldNow
      yield* Deferred.succeed(go, undefined)
      assert.strictEqual(yield* Fiber.join(first), "first")
      assert.deepStrictEqual(yield* Effect.forEach(others, Fiber.join), ["second", "third", "fourth"])
      assert.strictEqual(counter.count(), 2, "the alone's transaction, then one for the three")
      assert.strictEqual(counter.committed(), 2)
      assert.deepStrictEqual(yield* labels, ["first", "fourth", "second", "third"])
    }).pipe(Effect.scoped)
  )

  it.effect("an append inside a transaction already open is a savepoint of it", () =>
    Effect.gen(function* () {
      const { sql, runAppends, labels } = yield* runner
      yield* sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`INSERT INTO written (label) VALUES ('outer')`
          assert.strictEqual(yield* Effect.flip(runAppends(write("failed", Effect.fail("no")))), "no")
          yield* runAppends(write("inner"))
        })
      )
      assert.deepStrictEqual(yield* labels, ["inner", "outer"])
      // Committed with the transaction around it, or rolled back with it.
      const failed = yield* Effect.flip(
        sql.withTransaction(Effect.andThen(runAppends(write("rolled back")), Effect.fail("outer failed")))
      )
      assert.strictEqual(failed, "outer failed")
      assert.deepStrictEqual(yield* labels, ["inner", "outer"])
    }).pipe(Effect.scoped)
  )
})
