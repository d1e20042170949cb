import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Database } from "@noema/sql"
import { SqliteClient } from "@noema/sql-sqlite"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Redacted } from "effect"
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
})
