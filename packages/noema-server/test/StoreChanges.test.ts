/**
 * The live feed follows the store's changes: on PostgreSQL a run written by
 * another process reaches a feed client through NOTIFY/LISTEN with no poll at
 * all; on SQLite through a poll that reads the file's versions, and the store
 * only when they moved. Waits are bounded by rounds; the SQLite poll is
 * driven by the test clock.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { assert, it as effectIt } from "@effect/vitest"
import { type RunsStore, SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Exit, Layer, Redacted, Scope, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { afterAll, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import * as StoreChanges from "../src/StoreChanges.js"
import { idleExecutor } from "./support/executor.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-server-changes-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const writeRun = path.join(import.meta.dirname, "fixtures", "WriteRun.ts")

/** Writes a thread and a run to `database` from another process; the run's id. */
const writeFromAnotherProcess = async (database: string) =>
  (await promisify(execFile)(process.execPath, [writeRun, database])).stdout.trim()

/** Waits, a round at a time, until `done` holds; fails after `rounds` rounds (a hang, not a slow machine). */
const eventually = async (done: () => boolean, what: string, rounds = 3000) => {
  for (let round = 0; round < rounds; round++) {
    if (done()) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`never: ${what}`)
}

/** The runs whose events a client of the server's feed was sent, as they come. */
const follow = (server: Server.Server) => {
  const runs = new Set<string>()
  let buffer = ""
  const request = http.get(
    `${server.url}/api/events`,
    { headers: { authorization: `Bearer ${server.token}` } },
    (response) => {
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        buffer += chunk
        for (const match of buffer.matchAll(/"run_id":"(run_[^"]+)"/g)) runs.add(match[1] ?? "")
      })
    }
  )
  request.on("error", () => {})
  return { runs, close: () => request.destroy() }
}

/**
 * A server on `database` (as `noema serve` runs it: the store and its changes from the
 * database), its feed never polled, counting the store's feed reads.
 */
const serve = async (database: Database.Options) => {
  const scope = Effect.runSync(Scope.make())
  const reads = { count: 0 }
  const server = await Effect.runPromise(
    Effect.gen(function* () {
      const context = yield* Layer.build(Database.layer(database))
      return yield* Effect.gen(function* () {
        const sqlStore = yield* SqlRunsStore.fromDatabase
        const store: RunsStore.Service = {
          ...sqlStore,
          feed: (after, limit) =>
            Effect.suspend(() => {
              reads.count++
              return sqlStore.feed(after, limit)
            })
        }
        return yield* Server.make({
          store,
          executor: idleExecutor(store, directory),
          workspace: directory,
          changes: yield* StoreChanges.fromDatabase({ pollMs: 20 }),
          feedPollMs: 3_600_000
        })
      }).pipe(Effect.provideContext(context))
    }).pipe(Scope.provide(scope))
  )
  return { server, reads, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

describe("the live feed follows the store's changes", () => {
  it("PostgreSQL: a run written by another process reaches a feed client through NOTIFY, and nothing is read while nothing changes", async () => {
    const database = await TestDatabase.make({ prefix: "noema_server_changes" })
    const url = await database.schema("feed")
    const { server, reads, close } = await serve({
      kind: "postgres",
      url: Redacted.make(url),
      maxConnections: 4
    })
    const client = follow(server)
    try {
      await eventually(() => server.feed().clients === 1, "the client in")
      // The start's reads: where "now" is, then one when the LISTEN is in place (covering what
      // came between); on a busy machine the second may come after the client is in.
      await eventually(() => reads.count >= 2, "the start's reads")
      // Idle: no poll, no read (a busy machine only makes fewer rounds go by).
      const idle = reads.count
      for (let round = 0; round < 20; round++) await new Promise((resolve) => setTimeout(resolve, 10))
      expect(reads.count).toBe(idle)
      const runId = await writeFromAnotherProcess(url)
      await eventually(() => client.runs.has(runId), "the other process's run in the feed")
    } finally {
      client.close()
      await close()
      await database.drop()
    }
  })

  it("SQLite: a run written by another process reaches a feed client through the file's versions", async () => {
    const filename = path.join(directory, "feed.db")
    const { server, close } = await serve({ kind: "sqlite", filename })
    const client = follow(server)
    try {
      await eventually(() => server.feed().clients === 1, "the client in")
      const runId = await writeFromAnotherProcess(filename)
      await eventually(() => client.runs.has(runId), "the other process's run in the feed")
    } finally {
      client.close()
      await close()
    }
  })
})

describe("StoreChanges on SQLite: the file's versions are read, not the store", () => {
  const filename = path.join(directory, "versions.db")
  const store = SqlRunsStore.layerFromDatabase

  effectIt.effect(
    "no commit, no change; another connection's commit or this one's own, one change each",
    () =>
      Effect.gen(function* () {
        const mine = yield* Layer.build(
          Layer.provideMerge(store, Database.layer({ kind: "sqlite", filename }))
        )
        const other = yield* Layer.build(
          Layer.provideMerge(store, Database.layer({ kind: "sqlite", filename }))
        )
        const changes = yield* Effect.provideContext(StoreChanges.fromDatabase({ pollMs: 10 }), mine)
        let seen = 0
        yield* Effect.forkScoped(Stream.runForEach(changes, () => Effect.sync(() => seen++)))
        yield* TestClock.adjust(10)
        // The first reading of the versions is a change (there is no earlier one).
        assert.strictEqual(seen, 1)
        yield* TestClock.adjust(1000)
        assert.strictEqual(seen, 1, "a hundred polls with no commit: no change")
        const write = (context: typeof mine) =>
          Effect.flatMap(
            SqlClient.SqlClient,
            (sql) => sql`INSERT INTO runs_threads (id, title, status, queue_policy, created_at)
          VALUES (${`thr_${seen}`}, '', 'open', 'reject', '2026-01-01')`
          ).pipe(Effect.provideContext(context))
        yield* write(other)
        yield* TestClock.adjust(10)
        assert.strictEqual(seen, 2, "another connection's commit")
        yield* write(mine)
        yield* TestClock.adjust(10)
        assert.strictEqual(seen, 3, "this connection's own commit")
        yield* TestClock.adjust(1000)
        assert.strictEqual(seen, 3)
      }).pipe(Effect.scoped)
  )
})
