/**
 * OpenAiEmbedder against the local OpenAI wire-format server: order, batching,
 * dimensions, usage, error mapping, retries and configuration.
 */
import { assert, describe, it } from "@effect/vitest"
import { Embedder } from "@noema/core"
import { ConfigProvider, Effect, Redacted } from "effect"
import { afterAll, afterEach, beforeAll } from "vitest"
import { OpenAiEmbedder } from "../src/index.js"
import { OpenAiTestServer } from "../src/testing.js"

let server: OpenAiTestServer.TestServer

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => server.reset())

const apiKey = "sk-test-embeddings-0123456789"

const makeEmbedder = (options: Partial<OpenAiEmbedder.Options> = {}) =>
  OpenAiEmbedder.make({
    model: "text-embedding-3-small",
    apiKey: Redacted.make(apiKey),
    baseURL: server.url,
    maxAttempts: 1,
    ...options
  }).pipe(
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} })),
    Effect.orDie
  )

const bodyOf = (index: number): Record<string, unknown> => {
  const body = server.requests[index]?.body
  assert.ok(typeof body === "object" && body !== null, `request #${index} has a JSON body`)
  return body as Record<string, unknown>
}

const inputsOf = (index: number): unknown => bodyOf(index).input

const texts = ["alpha", "beta", "gamma", "delta", "epsilon"]

describe("OpenAiEmbedder", () => {
  it.live("returns one vector per text, in input order, with usage", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "embeddings", usage: { promptTokens: 9 } })
      const embedder = yield* makeEmbedder()
      const result = yield* embedder.embed(texts)
      assert.deepStrictEqual(
        result.vectors,
        texts.map((text) => OpenAiTestServer.deterministicEmbedding(text))
      )
      assert.deepStrictEqual(result.usage, { inputTokens: 9 })
      assert.deepStrictEqual(inputsOf(0), texts)
      assert.equal(embedder.provider, "openai")
      assert.equal(embedder.model, "text-embedding-3-small")
    })
  )

  it.live("puts vectors back in input order when the server lists them out of order", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "raw",
        body: JSON.stringify({
          object: "list",
          model: "text-embedding-3-small",
          data: [
            { object: "embedding", index: 2, embedding: [2, 2] },
            { object: "embedding", index: 0, embedding: [0, 0] },
            { object: "embedding", index: 1, embedding: [1, 1] }
          ],
          usage: { prompt_tokens: 3, total_tokens: 3 }
        })
      })
      const embedder = yield* makeEmbedder()
      const result = yield* embedder.embed(["a", "b", "c"])
      assert.deepStrictEqual(result.vectors, [
        [0, 0],
        [1, 1],
        [2, 2]
      ])
    })
  )

  it.live("splits many texts into batches and keeps the overall order", () =>
    Effect.gen(function* () {
      server.setFallback({ type: "embeddings", dimensions: 4, usage: { promptTokens: 2 } })
      const embedder = yield* makeEmbedder({ batchSize: 2, concurrency: 2 })
      const result = yield* embedder.embed(texts)
      assert.equal(server.requests.length, 3)
      const batches = server.requests.map((_, index) => inputsOf(index) as Array<string>)
      assert.deepStrictEqual(
        [...batches].sort((a, b) => texts.indexOf(a[0] ?? "") - texts.indexOf(b[0] ?? "")),
        [["alpha", "beta"], ["gamma", "delta"], ["epsilon"]]
      )
      assert.deepStrictEqual(
        result.vectors,
        texts.map((text) => OpenAiTestServer.deterministicEmbedding(text, 4))
      )
      assert.deepStrictEqual(result.usage, { inputTokens: 6 })
    })
  )

  it.live("sends dimensions and reports them", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "embeddings" })
      const embedder = yield* makeEmbedder({ dimensions: 16 })
      assert.equal(embedder.dimensions, 16)
      const result = yield* embedder.embed(["one"])
      assert.equal(bodyOf(0).dimensions, 16)
      assert.equal(result.vectors[0]?.length, 16)
    })
  )

  it.live("embeds nothing without a request", () =>
    Effect.gen(function* () {
      const embedder = yield* makeEmbedder()
      assert.deepStrictEqual((yield* embedder.embed([])).vectors, [])
      assert.equal(server.requests.length, 0)
    })
  )

  it.live("maps failures to EmbedderError reasons without echoing the key", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 429, headers: { "retry-after": "3" } },
        { type: "error", status: 401, message: `Incorrect API key provided: ${apiKey}.` },
        { type: "error", status: 400, message: "Input too long." },
        { type: "error", status: 503 },
        { type: "raw", body: "{ not json" },
        { type: "embeddings", vectors: [[1, 2]] },
        {
          type: "raw",
          body: JSON.stringify({
            data: [
              { index: 0, embedding: [1] },
              { index: 0, embedding: [2] }
            ]
          })
        },
        {
          type: "raw",
          body: JSON.stringify({
            data: [
              { index: 0, embedding: [1, "x"] },
              { index: 1, embedding: [2, 3] }
            ]
          })
        }
      )
      const embedder = yield* makeEmbedder()
      const next = Effect.flip(embedder.embed(["a", "b"]))
      const expected = [
        "RateLimited",
        "Authentication",
        "InvalidRequest",
        "Unavailable",
        "InvalidOutput",
        "InvalidOutput",
        "InvalidOutput",
        "InvalidOutput"
      ]
      for (const tag of expected) {
        const error = yield* next
        assert.ok(error instanceof Embedder.EmbedderError)
        assert.equal(error.reason._tag, tag, error.message)
        assert.ok(!error.message.includes(apiKey), error.message)
        assert.ok(!error.message.includes("\n"))
        if (error.reason._tag === "RateLimited") assert.equal(error.reason.retryAfterMillis, 3000)
      }
    })
  )

  it.live("retries retryable failures with the client's policy, not the others", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "error", status: 500 }, { type: "embeddings" })
      const embedder = yield* makeEmbedder({ maxAttempts: 3, retryBaseDelay: "1 millis" })
      assert.equal((yield* embedder.embed(["x"])).vectors.length, 1)
      assert.equal(server.requests.length, 2)
      server.reset()
      server.enqueue({ type: "error", status: 401 }, { type: "embeddings" })
      const error = yield* Effect.flip(embedder.embed(["x"]))
      assert.equal(error.reason._tag, "Authentication")
      assert.equal(server.requests.length, 1)
    })
  )

  it.live("out of quota is QuotaExceeded, not retried, and carries the request id", () =>
    Effect.gen(function* () {
      server.enqueue(
        {
          type: "error",
          status: 429,
          code: "insufficient_quota",
          message: "You exceeded your current quota."
        },
        { type: "embeddings" }
      )
      const embedder = yield* makeEmbedder({ maxAttempts: 3, retryBaseDelay: "1 millis" })
      const error = yield* Effect.flip(embedder.embed(["x"]))
      assert.equal(error.reason._tag, "QuotaExceeded")
      assert.match(error.requestId ?? "", /^req_test\d+$/)
      assert.equal(server.requests.length, 1)
    })
  )

  it.live("the layer reads OPENAI_API_KEY and OPENAI_BASE_URL", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "embeddings" })
      const secret = "sk-layer-secret-abcdefghijkl"
      const embedder = yield* Effect.service(Embedder.Embedder).pipe(
        Effect.provide(OpenAiEmbedder.layer({ model: "nomic-embed-text" })),
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnv({ env: { OPENAI_API_KEY: secret, OPENAI_BASE_URL: server.url } })
        )
      )
      yield* embedder.embed(["hello"])
      assert.equal(server.requests[0]?.headers.authorization, `Bearer ${secret}`)
      assert.equal(bodyOf(0).model, "nomic-embed-text")
    })
  )
})
