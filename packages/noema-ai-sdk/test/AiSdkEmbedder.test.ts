/**
 * The embedder bridge over the AI SDK's mock embedding model: batches within
 * the model's limit, vectors in input order, usage, typed failures and
 * retries, and resources' vector index searching with it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Resource, VectorIndex } from "@noema/resources"
import { MockEmbeddingModelV3 } from "ai/test"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { AiSdkEmbedder } from "../src/index.js"
import { apiCallError } from "./support/scripted.js"

/** A tiny "meaning": how often a text names baking, cars and pasta (deterministic, enough to rank). */
const topics = [
  /bread|bak|oven|dough|sourdough|pastr/gi,
  /car|engine|oil|brake|spark/gi,
  /pasta|tomato|garlic/gi
]
const embed = (text: string): Array<number> => topics.map((topic) => (text.match(topic) ?? []).length + 0.01)

const topicModel = (maxEmbeddingsPerCall = 2) =>
  new MockEmbeddingModelV3({
    provider: "mock.embedding",
    modelId: "topics-3",
    maxEmbeddingsPerCall,
    supportsParallelCalls: true,
    doEmbed: async ({ values }) => ({
      embeddings: values.map(embed),
      usage: { tokens: values.join(" ").split(/\s+/).length },
      warnings: []
    })
  })

describe("AiSdkEmbedder", () => {
  it.effect("embeds in batches within the model's limit, in input order, adding up usage", () =>
    Effect.gen(function* () {
      const model = topicModel(2)
      const embedder = yield* AiSdkEmbedder.make(model, { dimensions: 3 })
      const texts = ["bread oven", "car engine", "pasta", "bake bread", "oil"]
      const result = yield* embedder.embed(texts)
      assert.deepStrictEqual(result.vectors, texts.map(embed))
      assert.deepStrictEqual(
        model.doEmbedCalls.map((call) => call.values),
        [["bread oven", "car engine"], ["pasta", "bake bread"], ["oil"]]
      )
      assert.strictEqual(result.usage?.inputTokens, 8)
      assert.strictEqual(embedder.provider, "mock.embedding")
      assert.strictEqual(embedder.model, "topics-3")
      assert.strictEqual(embedder.dimensions, 3)
    })
  )

  it.effect("a failure is a typed EmbedderError; retryable ones are retried by core's policy", () =>
    Effect.gen(function* () {
      let calls = 0
      const model = new MockEmbeddingModelV3({
        maxEmbeddingsPerCall: 10,
        doEmbed: async ({ values }) => {
          calls++
          if (calls === 1) throw apiCallError(429, { "retry-after": "1" })
          return { embeddings: values.map(embed), warnings: [] }
        }
      })
      const retried = yield* AiSdkEmbedder.make(model, { retry: { maxAttempts: 2 } })
      const fiber = yield* Effect.forkChild(retried.embed(["bread"]))
      yield* TestClock.adjust("2 seconds")
      const result = yield* Fiber.join(fiber)
      assert.deepStrictEqual(result.vectors, [embed("bread")])
      assert.strictEqual(calls, 2)
      const refused = yield* AiSdkEmbedder.make(
        new MockEmbeddingModelV3({ doEmbed: async () => Promise.reject(apiCallError(401)) }),
        { retry: { maxAttempts: 1 } }
      )
      const error = yield* Effect.flip(refused.embed(["x"]))
      assert.strictEqual(error._tag, "EmbedderError")
      assert.strictEqual(error.reason._tag, "Authentication")
      assert.isFalse(error.isRetryable)
    })
  )

  it.effect("resources' vector index searches with it", () =>
    Effect.gen(function* () {
      const embedder = yield* AiSdkEmbedder.make(topicModel(4), { dimensions: 3 })
      const index = yield* VectorIndex.makeMemory(embedder)
      const baker = Resource.make("assistant", {
        name: "baker",
        purpose: "Bakes bread and pastries",
        instructions: "Explain baking: dough, proofing, oven temperature.",
        applicability: "Questions about baking bread"
      })
      const mechanic = Resource.make("assistant", {
        name: "mechanic",
        purpose: "Repairs cars",
        instructions: "Diagnose engine trouble and explain repairs.",
        applicability: "Questions about car engines, oil, brakes"
      })
      const cook = Resource.make("assistant", {
        name: "cook",
        purpose: "Cooks pasta",
        instructions: "Tomato sauce with garlic.",
        applicability: "Questions about pasta"
      })
      yield* index.upsert([baker, mechanic, cook])
      assert.deepStrictEqual(index.identity, { provider: "mock.embedding", model: "topics-3", dimensions: 3 })
      const hits = yield* index.search({ text: "my car engine leaks oil" }, { type: "assistant" })
      assert.strictEqual(hits.length, 3)
      assert.strictEqual(hits[0]?.urn, mechanic.meta.urn)
      const bread = yield* index.search({ text: "sourdough bread in the oven" }, { limit: 1 })
      assert.strictEqual(bread[0]?.urn, baker.meta.urn)
    })
  )
})
