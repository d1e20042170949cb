import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Embedder } from "../src/index.js"

describe("Embedder", () => {
  it.effect("make checks one vector per text and skips empty batches", () =>
    Effect.gen(function* () {
      let calls = 0
      const embedder = Embedder.make({
        provider: "test",
        model: "m",
        embed: (texts) =>
          Effect.sync(() => {
            calls++
            return { vectors: texts.slice(1).map((text) => [text.length]) }
          })
      })
      assert.deepStrictEqual((yield* embedder.embed([])).vectors, [])
      assert.strictEqual(calls, 0)
      const error = yield* Effect.flip(embedder.embed(["a", "bb"]))
      assert.strictEqual(error.reason._tag, "InvalidOutput")
      assert.match(error.message, /expected 2 vectors, got 1/)
    })
  )

  it("ranks by cosine similarity", () => {
    assert.closeTo(Embedder.cosineSimilarity([1, 0], [1, 0]), 1, 1e-12)
    assert.closeTo(Embedder.cosineSimilarity([1, 0], [0, 1]), 0, 1e-12)
    assert.strictEqual(Embedder.cosineSimilarity([0, 0], [1, 1]), 0)
    assert.throws(() => Embedder.cosineSimilarity([1], [1, 2]), RangeError)
    assert.deepStrictEqual(
      Embedder.rank(
        [1, 0],
        [
          [0, 1],
          [1, 0.1],
          [-1, 0]
        ]
      ).map((entry) => entry.index),
      [1, 0, 2]
    )
  })
})
