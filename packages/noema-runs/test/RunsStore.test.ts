import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, it } from "@effect/vitest"
import { Database } from "@noema/sql"
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
