import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Database } from "@noema/sql"
import { SqliteClient } from "@noema/sql-sqlite"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Redacted } from "effect"
import type * as Run from "../src/Run.js"
import * as RunsStore from "../src/RunsStore.js"
import * as RunsStoreConformance from "../src/RunsStoreConformance.js"
import * as SqlRunsStore from "../src/SqlRunsStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-store-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

describe("memory RunsStore conformance", () => {
  const fresh = RunsStoreConformance.fromLayer(Layer.effect(RunsStore.RunsStore, RunsStore.makeMemory()))
  for (const testCase of RunsStoreConformance.cases) {
    it.live(testCase.name, () => testCase.run(fresh))
  }
})

let counter = 0
describe("SQLite RunsStore conformance", () => {
  const fresh = RunsStoreConformance.fromLayer(
    Layer.suspend(() =>
      SqlRunsStore.layerFromDatabase.pipe(
        Layer.provide(
          Database.layer({ kind: "sqlite", filename: path.join(directory, `runs-${counter++}.db`) })
        )
      )
    )
  )
  for (const testCase of RunsStoreConformance.cases) {
    it.live(testCase.name, () => testCase.run(fresh))
  }
})

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_runs_store" })
})
afterAll(() => database?.drop())

describe("PostgreSQL RunsStore conformance", () => {
  const fresh = RunsStoreConformance.fromLayer(
    Layer.unwrap(
      Effect.map(
        Effect.promise(() => database.schema("runs")),
        (url) =>
          SqlRunsStore.layerFromDatabase.pipe(
            Layer.provide(Database.layer({ kind: "postgres", url: Redacted.make(url), maxConnections: 4 }))
          )
      )
    )
  )
  for (const testCase of RunsStoreConformance.cases) {
    it.live(testCase.name, () => testCase.run(fresh))
  }
})

describe("SqlRunsStore on a SQLite file", () => {
  const onFile = <A, E>(
    filename: string,
    readonly: boolean,
    use: (store: RunsStore.Service) => Effect.Effect<A, E>
  ) =>
    Effect.flatMap(SqlRunsStore.fromDatabase, use).pipe(
      Effect.provide(Database.layer({ kind: "sqlite", filename, readonly }))
    )

  it.effect("claims the file: another application's database is refused and left untouched", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "other-app.db")
      const other = new DatabaseSync(filename)
      other.exec("CREATE TABLE users (id INTEGER PRIMARY KEY)")
      other.close()
      const before = fs.readFileSync(filename)
      // On the bare client (no `Database.layer`, which would check the file itself).
      const error = yield* Effect.flip(
        SqlRunsStore.make({ location: filename }).pipe(
          Effect.provide(SqliteClient.layer({ filename, wal: false }))
        )
      )
      assert.strictEqual(error.reason?._tag, "Foreign")
      assert.isTrue(fs.readFileSync(filename).equals(before))
    })
  )

  it.effect(
    "opened read-only, migrates nothing: a file without the runs tables is refused, one with them is read",
    () =>
      Effect.gen(function* () {
        const filename = path.join(directory, "readonly-runs.db")
        yield* Effect.scoped(Layer.build(Database.layer({ kind: "sqlite", filename })))
        const before = fs.readFileSync(filename)
        const error = yield* Effect.flip(onFile(filename, true, (store) => store.listThreads()))
        assert.strictEqual(error.reason?._tag, "NeedsMigration")
        assert.isTrue(fs.readFileSync(filename).equals(before))
        const thread = yield* onFile(filename, false, (store) => store.createThread({ title: "kept" }))
        const threads = yield* onFile(filename, true, (store) => store.listThreads())
        assert.deepStrictEqual(
          threads.map((each) => each.id),
          [thread.id]
        )
      })
  )

  it.effect(
    "the projections kept as events are appended, one batch at a time, are the ones rebuild() makes from the log",
    () =>
      Effect.gen(function* () {
        const filename = path.join(directory, "projections.db")
        const stages = [
          { key: "plan", position: 1, needsApproval: false },
          { key: "draft", position: 2, needsApproval: false }
        ]
        const artifact = (position: number, attempt: number, name: string) =>
          ({
            type: "ArtifactPublished",
            position,
            attempt,
            path: name,
            kind: "markdown",
            sha256: name,
            size: 1
          }) as const
        const batches: ReadonlyArray<ReadonlyArray<Run.EventData>> = [
          [{ type: "RunStarted" }],
          [{ type: "StageStarted", position: 1, attempt: 1 }],
          [
            artifact(1, 1, "lost.md"),
            {
              type: "StageFailed",
              position: 1,
              attempt: 1,
              error_code: "model",
              error_message: "down",
              retryable: true
            },
            { type: "RunFailed", error_code: "model", error_message: "down", retryable: true }
          ],
          [{ type: "RunStarted" }],
          [{ type: "StageStarted", position: 1, attempt: 2 }],
          [
            artifact(1, 2, "plan.md"),
            artifact(1, 2, "notes.md"),
            { type: "StageCompleted", position: 1, attempt: 2 }
          ],
          [{ type: "StageStarted", position: 2, attempt: 1 }],
          // Published over two batches: the second adds its rows to the first's.
          [artifact(2, 1, "draft.md")],
          [artifact(2, 1, "final.md"), { type: "StageCompleted", position: 2, attempt: 1 }],
          [{ type: "RunCompleted" }]
        ]
        yield* onFile(filename, false, (store) =>
          Effect.gen(function* () {
            const thread = yield* store.createThread()
            const run = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
            for (const batch of batches) yield* store.append(run.runId, batch)
          })
        )
        const rows = () => {
          const db = new DatabaseSync(filename, { readOnly: true })
          try {
            return {
              attempts: db
                .prepare("SELECT * FROM runs_stage_attempts ORDER BY run_id, position, attempt")
                .all(),
              artifacts: db
                .prepare("SELECT * FROM runs_artifacts ORDER BY run_id, position, attempt, path")
                .all()
            }
          } finally {
            db.close()
          }
        }
        const kept = rows()
        assert.strictEqual(kept.attempts.length, 3)
        assert.deepStrictEqual(
          kept.attempts.map((row) => [row.position, row.attempt, row.status]),
          [
            [1, 1, "failed"],
            [1, 2, "completed"],
            [2, 1, "completed"]
          ]
        )
        assert.strictEqual(kept.artifacts.length, 5)
        yield* onFile(filename, false, (store) => store.rebuild())
        assert.deepStrictEqual(rows(), kept)
      })
  )
})
