/**
 * Several `node` processes committing to ONE session through the real
 * PostgreSQL store: the row lock the append's `UPDATE ... WHERE message_count
 * = expected` takes makes every loser a `SessionConflictError`, and no turn is
 * ever split or interleaved with another.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Message } from "@noema/core"
import { Postgres } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Deferred, Effect, Fiber, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as PostgresStore from "../src/PostgresStore.js"
import type * as SessionStore from "../src/SessionStore.js"

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_pg_processes" })
})
afterAll(() => database?.drop())

const writerScript = fileURLToPath(new URL("./fixtures/postgres-store-writer.mjs", import.meta.url))

interface Writer {
  readonly name: string
  readonly child: ChildProcess
  readonly send: (line: string) => void
  /** Resolves with the next line the writer prints; rejects if it exits first. */
  readonly next: () => Promise<string>
  readonly exited: Promise<number | null>
}

const startWriter = (url: string, sessionId: string, name: string): Writer => {
  const child = spawn(process.execPath, [writerScript, url, sessionId, name], {
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
    name,
    child,
    exited,
    send: (line) => void child.stdin?.write(`${line}\n`),
    next: () => {
      const line = lines.shift()
      if (line !== undefined) return Promise.resolve(line)
      return new Promise<string>((resolve, reject) => {
        waiting.push(resolve)
        void exited.then((code) => reject(new Error(`${name} exited (${code}): ${stderr}`)))
      })
    }
  }
}

/** Runs `body` with a store on a fresh schema; its URL is given too, for the writers. */
const withStore = <A>(
  body: (store: SessionStore.Service, url: string) => Effect.Effect<A, unknown, Scope.Scope>
): Promise<A> =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const url = yield* Effect.promise(() => database.schema("processes"))
        return yield* body(yield* PostgresStore.make({ url }), url)
      })
    )
  )

/** Waits until at least `count` backends of the database wait for a lock (polled, bounded). */
const lockWaiters = (count: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    for (let attempt = 0; attempt < 2_000; attempt++) {
      const [row] = yield* sql<{ waiting: number }>`
        SELECT count(*)::int AS waiting FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'`
      if ((row?.waiting ?? 0) >= count) return
      yield* Effect.sleep("5 millis")
    }
    return yield* Effect.die(new Error(`fewer than ${count} backends ever waited for the row lock`))
  })

const contentsOf = (messages: ReadonlyArray<Message.Message>) =>
  messages.map((message) => Message.text(message))

describe("processes committing to one PostgreSQL session", () => {
  it("two writers on the same count, both held at the row lock: one commits, the other is a conflict", () =>
    withStore((store, url) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        const writers = [startWriter(url, id, "A"), startWriter(url, id, "B")]
        try {
          for (const writer of writers) assert.strictEqual(yield* Effect.promise(writer.next), "ready 0")
          // The test holds the session row, so both writers' appends start and then wait on it.
          const release = yield* Deferred.make<void>()
          const locked = yield* Deferred.make<void>()
          const holder = yield* Effect.forkChild(
            Effect.flatMap(SqlClient.SqlClient, (sql) =>
              sql.withTransaction(
                Effect.gen(function* () {
                  yield* sql`SELECT 1 FROM sessions WHERE id = ${id} FOR UPDATE`
                  yield* Deferred.succeed(locked, undefined)
                  yield* Deferred.await(release)
                })
              )
            ).pipe(Effect.provide(Postgres.layer({ url, maxConnections: 2 })))
          )
          yield* Deferred.await(locked)
          const outcomes = writers.map((writer) => {
            writer.send("commit")
            return writer.next()
          })
          yield* lockWaiters(2).pipe(Effect.provide(Postgres.layer({ url, maxConnections: 1 })))
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(holder)
          const results = (yield* Effect.promise(() => Promise.all(outcomes))).sort()
          // Exactly one wins at index 0; the other is told the session now holds the winner's 3.
          assert.deepStrictEqual(results, ["committed 0", "conflict 3"])
          const stored = yield* store.load(id)
          assert.strictEqual(stored.messages.length, 3)
          const [owner] = (Message.text(stored.messages[0] as Message.Message) ?? "").split(" ")
          assert.deepStrictEqual(
            contentsOf(stored.messages),
            [0, 1, 2].map((j) => `${owner} turn 0 message ${j}`)
          )
          for (const writer of writers) writer.send("exit")
          assert.deepStrictEqual(
            yield* Effect.promise(() => Promise.all(writers.map((w) => w.exited))),
            [0, 0]
          )
        } finally {
          for (const writer of writers) writer.child.kill()
        }
      })
    ))

  it(
    "four writers looping on one session: every turn whole, in order, where its writer was told",
    () =>
      withStore((store, url) =>
        Effect.gen(function* () {
          const turns = 12
          const names = ["A", "B", "C", "D"]
          const { id } = yield* store.create()
          const writers = names.map((name) => startWriter(url, id, name))
          try {
            for (const writer of writers) assert.strictEqual(yield* Effect.promise(writer.next), "ready 0")
            const reports = yield* Effect.promise(() =>
              Promise.all(
                writers.map((writer) => {
                  writer.send(`loop ${turns}`)
                  return writer.next()
                })
              )
            )
            const stored = yield* store.load(id)
            const contents = contentsOf(stored.messages)
            assert.strictEqual(contents.length, names.length * turns * 3)
            assert.strictEqual(stored.info.messageCount, contents.length)
            const claimed = new Set<number>()
            reports.forEach((report, index) => {
              const name = names[index] as string
              const [word, , firsts] = report.split(" ")
              assert.strictEqual(word, "done", `${name}: ${report}`)
              const indices = (firsts ?? "").split(",").map(Number)
              assert.strictEqual(indices.length, turns)
              indices.forEach((first, turn) => {
                assert.isFalse(claimed.has(first), `index ${first} claimed twice`)
                claimed.add(first)
                // The turn is whole, at the index its writer's commit returned.
                assert.deepStrictEqual(
                  contents.slice(first, first + 3),
                  [0, 1, 2].map((j) => `${name} turn ${turn} message ${j}`)
                )
                if (turn > 0) assert.isAbove(first, indices[turn - 1] as number, `${name}'s turns in order`)
              })
            })
            for (const writer of writers) writer.send("exit")
            yield* Effect.promise(() => Promise.all(writers.map((writer) => writer.exited)))
          } finally {
            for (const writer of writers) writer.child.kill()
          }
        })
      ),
    60_000
  )
})
