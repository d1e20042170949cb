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

  it.effect("keeps the best of any limit, ties by URN, as the whole ranking has them", () =>
    Effect.gen(function* () {
      const index = yield* VectorIndex.makeMemory(LocalEmbedder.make())
      // Twins: the same text under other names, so equal scores are ranked by URN.
      const twins = Array.from({ length: 40 }, (_, i) =>
        Resource.make("chunk", {
          name: `twin ${i}`,
          parent: shelf.meta.urn,
          text: `volume ${i % 10} of the series`
        })
      )
      yield* index.upsert([...books, ...twins])
      for (const text of ["volume 3 of the series", "chapter 14", "the series"]) {
        const all = yield* index.search({ text }, { limit: 1000 })
        assert.equal(all.length, books.length + twins.length)
        for (let i = 1; i < all.length; i++) {
          const [before, after] = [all[i - 1]!, all[i]!]
          assert.isTrue(
            before.score > after.score || (before.score === after.score && before.urn < after.urn)
          )
        }
        // Searches one after another, each keeping its own best (the top is reused between them).
        for (const limit of [1, 2, 5, 17, 64, 339])
          assert.deepStrictEqual(yield* index.search({ text }, { limit }), all.slice(0, limit))
        const underShelf = yield* index.search({ text }, { limit: 7, prefix: shelf.meta.urn, type: "chunk" })
        assert.deepStrictEqual(underShelf, all.slice(0, 7))
      }
    })
  )

  it.effect(
    "takes the local embedder's vectors as its embed gives them, bit for bit, and calls a wrapper's embed",
    () =>
      Effect.gen(function* () {
        const local = LocalEmbedder.make()
        let asked = 0
        // A wrapper replacing `embed`: the general path (core's plain number lists, copied).
        const wrapped = {
          ...local,
          embed: (texts: ReadonlyArray<string>) => {
            asked += texts.length
            return local.embed(texts)
          }
        }
        const direct = yield* VectorIndex.makeMemory(local)
        const listed = yield* VectorIndex.makeMemory(wrapped)
        yield* direct.upsert(books.slice(0, 40))
        yield* listed.upsert(books.slice(0, 40))
        assert.equal(asked, 40)
        for (const query of ["volume 3", "chapter 70 of the series", "nothing alike"]) {
          const [a, b] = [yield* direct.search({ text: query }), yield* listed.search({ text: query })]
          assert.deepStrictEqual(a, b)
        }
        const [vector] = (yield* local.embed(["volume 3"])).vectors
        assert.deepStrictEqual(
          yield* direct.search({ vector: vector! }, { limit: 5 }),
          yield* listed.search({ vector: vector! }, { limit: 5 })
        )
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
    // A spread of a made (checked) resource: its own text is the one read, whatever it changed.
    assert.strictEqual(VectorIndex.searchText({ ...task, status: "done" }), VectorIndex.searchText(task))
    const { purpose: _purpose, ...withoutPurpose } = task
    assert.strictEqual(VectorIndex.searchText(withoutPurpose as Resource.Resource), "t")
    const assistant = Resource.make("assistant", { name: "a", purpose: "cook", examples: ["soup"] })
    assert.include(VectorIndex.searchText({ ...assistant, examples: ["bread"] }), "bread")
  })
})
