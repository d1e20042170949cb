import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, it } from "@effect/vitest"
import { Database } from "@noema/session"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer } from "effect"
import * as RoutineConformance from "../src/RoutineConformance.js"
import * as RoutineStore from "../src/RoutineStore.js"
import * as SqlRoutineStore from "../src/SqlRoutineStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-routines-store-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const onDatabase = (options: Database.Options) =>
  Effect.flatMap(Layer.build(Database.layer(options)), (context) =>
    Effect.provideContext(SqlRoutineStore.fromDatabase, context)
  )

describe("memory RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () => testCase.run(Effect.sync(RoutineStore.memory)))
  }
})

let counter = 0
describe("SQLite RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(
        Effect.suspend(() =>
          onDatabase({ kind: "sqlite", filename: path.join(directory, `conformance-${counter++}.db`) })
        )
      )
    )
  }
})

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_routines" })
})
afterAll(() => database?.drop())

describe("PostgreSQL RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(
        Effect.flatMap(
          Effect.promise(() => database.schema("routines")),
          (url) => onDatabase({ kind: "postgres", url })
        )
      )
    )
  }
})
