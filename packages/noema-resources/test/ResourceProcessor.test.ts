import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import * as LocalEmbedder from "../src/LocalEmbedder.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import * as ResourceProcessor from "../src/ResourceProcessor.js"
import * as VectorIndex from "../src/VectorIndex.js"

const options = (size: number, overlap: number) => {
  const checked = ResourceProcessor.checkOptions({ size, overlap })
  if (checked instanceof ResourceProcessor.ChunkingError) throw checked
  return checked
}

describe("ResourceProcessor.split", () => {
  it("cuts at the last whitespace before the size, and starts the next chunk `overlap` back, at a word", () => {
    const text = "the quick brown fox jumps over the lazy dog"
    assert.deepStrictEqual(ResourceProcessor.split(text, options(20, 8)), [
      "the quick brown fox",
      "fox jumps over the",
      "over the lazy dog"
    ])
    assert.deepStrictEqual(ResourceProcessor.split(text, options(20, 0)), [
      "the quick brown fox",
      "jumps over the lazy",
      "dog"
    ])
    // A word longer than the size is cut where the limit falls.
    assert.deepStrictEqual(ResourceProcessor.split("abcdefghij", options(4, 0)), ["abcd", "efgh", "ij"])
    assert.deepStrictEqual(ResourceProcessor.split(" \n\t ", options(4, 1)), [])
  })

  it("every chunk fits, none is empty, every word short enough is whole in one, and the same text splits the same", () => {
    const word = fc.stringMatching(/^[a-z]{1,12}$/)
    const space = fc.constantFrom(" ", "  ", "\n", "\n\n", "\t")
    fc.assert(
      fc.property(
        fc.array(fc.tuple(word, space), { maxLength: 200 }),
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 0, max: 299 }),
        (parts, size, overlapSeed) => {
          const overlap = overlapSeed % size
          const text = parts.map(([w, s]) => w + s).join("")
          const split = options(size, overlap)
          const passages = ResourceProcessor.split(text, split)
          assert.deepStrictEqual(ResourceProcessor.split(text, split), passages)
          for (const passage of passages) {
            assert.isAtMost(passage.length, size)
            assert.isAbove(passage.length, 0)
          }
          const words = new Set(passages.flatMap((passage) => passage.split(/\s+/)))
          for (const [w] of parts) if (w.length <= size) assert.ok(words.has(w), `"${w}" is whole in a chunk`)
        }
      ),
      { numRuns: 300 }
    )
  })

  it("refuses options that cannot split, saying why", () => {
    for (const [size, overlap, why] of [
      [0, 0, /size must be a whole number/],
      [1.5, 0, /size must be a whole number/],
      [10, 10, /overlap must be a whole number from 0 to less than the size \(10\)/],
      [10, -1, /overlap/]
    ] as const) {
      const error = ResourceProcessor.checkOptions({ size, overlap })
      assert.instanceOf(error, ResourceProcessor.ChunkingError)
      assert.match((error as ResourceProcessor.ChunkingError).message, why)
    }
    assert.deepStrictEqual(ResourceProcessor.checkOptions(), { size: 1000, overlap: 200 })
    assert.throws(
      () =>
        ResourceIndex.make(
          MemoryResourceStore.make(),
          Policy.failClosed("x", () => Effect.die("no")),
          { chunking: { size: 0 } }
        ),
      /size/
    )
  })
})

describe("a document put through a ResourceIndex", () => {
  const text = [
    "Tides rise and fall twice a day, pulled by the moon.",
    "Green tea is brewed at eighty degrees for two minutes.",
    "The harbour closes at dusk in winter."
  ].join(" ")
  const setup = Effect.gen(function* () {
    const store = MemoryResourceStore.make()
    const vectors = yield* VectorIndex.makeMemory(LocalEmbedder.make())
    const index = ResourceIndex.make(store, yield* Policy.allowAll, {
      vectors,
      chunking: { size: 60, overlap: 0 }
    })
    const document = Resource.make("document", { name: "notes", title: "Notes", text })
    return { store, vectors, index, document }
  })

  it.effect("is split into chunks under it, in order, each embedded: a search finds the passage", () =>
    Effect.gen(function* () {
      const { index, document } = yield* setup
      yield* index.put("cld:user.cli", document)
      const chunks = (yield* index.findByPrefix("cld:user.cli", document.meta.urn)) as Array<Resource.Chunk>
      assert.deepStrictEqual(
        chunks.map((chunk) => chunk.text).sort(),
        ResourceProcessor.split(text, options(60, 0)).sort()
      )
      for (const chunk of chunks) {
        assert.equal(chunk.meta.type, "chunk")
        assert.equal(chunk.source, document.meta.urn)
        assert.equal(chunk.meta.name, `chunk-${chunk.position}`)
      }
      const [best] = yield* index.search(
        "cld:user.cli",
        { text: "how hot to brew green tea" },
        { type: "chunk", limit: 1 }
      )
      assert.match((best as Resource.Chunk).text, /tea is brewed at eighty degrees/)
    })
  )

  it.effect("put again shorter: the chunks it no longer has are deleted; a chunk put by hand stays", () =>
    Effect.gen(function* () {
      const { index, document, vectors } = yield* setup
      yield* index.put("cld:user.cli", document)
      const mine = Resource.make("chunk", {
        name: "mine",
        parent: document.meta.urn,
        text: "a note of my own"
      })
      yield* index.put("cld:user.cli", mine)
      yield* index.put("cld:user.cli", { ...document, text: "Only tides now." })
      const below = yield* index.findByPrefix("cld:user.cli", document.meta.urn)
      assert.deepStrictEqual(below.map((chunk) => chunk.meta.name).sort(), ["chunk-1", "mine"])
      assert.equal(yield* vectors.size, 3)
    })
  )

  it.effect("chunking: false keeps a document whole", () =>
    Effect.gen(function* () {
      const store = MemoryResourceStore.make()
      const index = ResourceIndex.make(store, yield* Policy.allowAll, { chunking: false })
      const document = Resource.make("document", { name: "whole", text })
      yield* index.put("cld:user.cli", document)
      assert.deepStrictEqual(yield* store.findByPrefix(document.meta.urn), [])
    })
  )
})
