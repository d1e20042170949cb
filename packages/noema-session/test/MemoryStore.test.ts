import { describe, it } from "@effect/vitest"
import * as MemoryStore from "../src/MemoryStore.js"
import * as SessionStoreConformance from "../src/SessionStoreConformance.js"

describe("MemoryStore conformance", () => {
  for (const testCase of SessionStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(MemoryStore.make()))
  }
})
