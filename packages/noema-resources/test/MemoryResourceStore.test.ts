import { describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as ResourceStoreConformance from "../src/ResourceStoreConformance.js"

describe("MemoryResourceStore conformance", () => {
  for (const testCase of ResourceStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(Effect.sync(MemoryResourceStore.make)))
  }
})
