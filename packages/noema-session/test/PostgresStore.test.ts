import { afterAll, beforeAll, describe, it } from "@effect/vitest"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer } from "effect"
import * as PostgresStore from "../src/PostgresStore.js"
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
