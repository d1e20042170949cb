import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as LocalEmbedder from "../src/LocalEmbedder.js"
import * as Resource from "../src/Resource.js"
import * as VectorIndex from "../src/VectorIndex.js"

const shelf = Resource.make("conversation", { name: "shelf" })
/** More vectors than the memory index starts with room for, so it grows (twice) while written. */
const books = Array.from({ length: 300 }, (_, i) =>
  Resource.make("chunk", {
    name: `book ${i}`,
    parent: shelf.meta.urn,
    text: `volume ${i} of the series, chapter ${i * 7}`
  })
)

describe("VectorIndex.makeMemory", () => {
  it.effect("keeps every vector where it was written as it grows past its first allocation", () =>
    Effect.gen(function* () {
      const index = yield* VectorIndex.makeMemory(LocalEmbedder.make())
      // Written a few at a time, as a planner writes them, so every growth copies vectors already there.
      for (let i = 0; i < books.length; i += 7) yield* index.upsert(books.slice(i, i + 7))
      assert.equal(yield* index.size, books.length)
      for (const book of [books[0]!, books[63]!, books[64]!, books[150]!, books[299]!]) {
        const [best] = yield* index.search({ text: VectorIndex.searchText(book) }, { limit: 1 })
        assert.equal(best?.urn, book.meta.urn)
        assert.closeTo(best?.score ?? 0, 1, 1e-6)
      }
    })
  )

  it("takes a resource's search text as it is now unless it is frozen", () => {
    const task = Resource.make("task", { name: "t", status: "pending", purpose: "paint the fence" })
    const editable = { ...task } as { purpose?: string }
    assert.include(VectorIndex.searchText(editable as Resource.Resource), "paint the fence")
    editable.purpose = "mow the lawn"
    assert.include(VectorIndex.searchText(editable as Resource.Resource), "mow the lawn")
    const frozen = Object.freeze({ ...task, meta: Object.freeze({ ...task.meta }) })
    assert.strictEqual(VectorIndex.searchText(frozen), VectorIndex.searchText(frozen))
    assert.include(VectorIndex.searchText(frozen), "paint the fence")
  })
})
