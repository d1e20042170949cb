import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { TestClock } from "effect/testing"
import { ChatModel, Message, ModelError } from "../src/index.js"

const request: ChatModel.ChatRequest = { messages: [Message.user("hi")] }

const fromChunks = (chunks: ReadonlyArray<ChatModel.StreamChunk>) =>
  ChatModel.make({ provider: "test", model: "m", stream: () => Stream.fromArray(chunks) })

describe("ChatModel.make", () => {
  it.effect("reassembles interleaved tool-call deltas by index, before finish", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "text-delta", delta: "Checking" },
        { type: "tool-call-delta", index: 0, id: "a", name: "weather", argumentsDelta: '{"ci' },
        { type: "tool-call-delta", index: 1, id: "b", name: "time", argumentsDelta: '{"tz"' },
        { type: "tool-call-delta", index: 0, argumentsDelta: 'ty":"Oslo"}' },
        { type: "tool-call-delta", index: 1, argumentsDelta: ':"UTC"}' },
        { type: "finish", finishReason: "tool-calls" },
        { type: "usage", usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 } }
      ])
      const chunks = yield* Stream.runCollect(model.stream(request))
      const types = chunks.map((chunk) => chunk.type)
      assert.deepStrictEqual(types.slice(-4), ["tool-call", "tool-call", "finish", "usage"])
      const response = yield* model.complete(request)
      assert.deepStrictEqual(response.toolCalls, [
        { id: "a", name: "weather", arguments: '{"city":"Oslo"}' },
        { id: "b", name: "time", arguments: '{"tz":"UTC"}' }
      ])
      assert.strictEqual(response.text, "Checking")
      assert.strictEqual(response.finishReason, "tool-calls")
      assert.deepStrictEqual(response.usage, { inputTokens: 1, outputTokens: 2, totalTokens: 3 })
    })
  )

  it.effect("adds a finish (and pending calls) when the provider ends without one", () =>
    Effect.gen(function* () {
      const model = fromChunks([{ type: "tool-call-delta", index: 0, name: "x", argumentsDelta: "{}" }])
      const chunks = yield* Stream.runCollect(model.stream(request))
      assert.deepStrictEqual(chunks.slice(1), [
        { type: "tool-call", toolCall: { id: "call_0", name: "x", arguments: "{}" } },
        { type: "finish", finishReason: "tool-calls" }
      ])
    })
  )

  it.effect("a stream that fails gets no finish, and what came before it still arrives", () =>
    Effect.gen(function* () {
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        stream: () =>
          Stream.concat(
            Stream.make(
              { type: "text-delta" as const, delta: "Half" },
              { type: "tool-call-delta" as const, index: 0, name: "x", argumentsDelta: "{" }
            ),
            Stream.fail(ChatModel.error("test", new ModelError.Network({ message: "reset" })))
          )
      })
      const seen: Array<ChatModel.StreamChunk> = []
      const error = yield* Effect.flip(
        Stream.runForEach(model.stream(request), (chunk) => Effect.sync(() => seen.push(chunk)))
      )
      assert.strictEqual(error.reason._tag, "Network")
      assert.deepStrictEqual(
        seen.map((chunk) => chunk.type),
        ["text-delta", "tool-call-delta"]
      )
    })
  )

  it.effect("normalising twice changes nothing, and every run of a stream starts afresh", () =>
    Effect.gen(function* () {
      const chunks: ReadonlyArray<ChatModel.StreamChunk> = [
        { type: "tool-call-delta", index: 0, id: "a", name: "weather", argumentsDelta: "{}" },
        { type: "finish", finishReason: "tool-calls" }
      ]
      const once = ChatModel.normaliseStream(Stream.fromArray(chunks))
      const expected = [
        chunks[0],
        { type: "tool-call", toolCall: { id: "a", name: "weather", arguments: "{}" } },
        { type: "finish", finishReason: "tool-calls" }
      ]
      assert.deepStrictEqual(yield* Stream.runCollect(once), expected)
      assert.deepStrictEqual(yield* Stream.runCollect(once), expected, "a second run of the same stream")
      assert.deepStrictEqual(yield* Stream.runCollect(ChatModel.normaliseStream(once)), expected)
      assert.deepStrictEqual(yield* Stream.runCollect(ChatModel.normaliseStream(Stream.empty)), [
        { type: "finish", finishReason: "stop" }
      ])
    })
  )

  it.effect("derives stream from complete", () =>
    Effect.gen(function* () {
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        complete: () =>
          Effect.succeed({
            text: "hello",
            toolCalls: [{ id: "1", name: "t", arguments: "{}" }],
            finishReason: "tool-calls" as const,
            usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }
          })
      })
      const response = yield* ChatModel.collect(model.stream(request))
      assert.strictEqual(response.text, "hello")
      assert.deepStrictEqual(response.toolCalls, [{ id: "1", name: "t", arguments: "{}" }])
      assert.deepStrictEqual(
        ChatModel.toMessage(response),
        Message.assistant("hello", { toolCalls: response.toolCalls })
      )
    })
  )

  it.effect("retries retryable failures with backoff, honouring retry-after", () =>
    Effect.gen(function* () {
      let attempts = 0
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        retry: { maxAttempts: 3, baseDelay: "10 millis" },
        complete: () =>
          Effect.suspend(() => {
            attempts++
            return attempts < 3
              ? Effect.fail(
                  ChatModel.error(
                    "test",
                    new ModelError.RateLimited({ message: "slow down", retryAfterMillis: 5_000 })
                  )
                )
              : Effect.succeed({ text: "ok", toolCalls: [], finishReason: "stop" as const })
          })
      })
      const fiber = yield* Effect.forkChild(model.complete(request))
      yield* TestClock.adjust("4 seconds")
      assert.strictEqual(attempts, 1, "waits at least the retry-after")
      yield* TestClock.adjust("2 seconds")
      assert.strictEqual(attempts, 2)
      yield* TestClock.adjust("6 seconds")
      const response = yield* Fiber.join(fiber)
      assert.strictEqual(response.text, "ok")
      assert.strictEqual(attempts, 3)
    })
  )

  it.effect("does not retry non-retryable failures and stops after maxAttempts", () =>
    Effect.gen(function* () {
      let attempts = 0
      const failing = (reason: ModelError.Reason) =>
        ChatModel.make({
          provider: "test",
          model: "m",
          retry: { maxAttempts: 2, baseDelay: "1 millis" },
          complete: () =>
            Effect.suspend(() => {
              attempts++
              return Effect.fail(ChatModel.error("test", reason))
            })
        })
      const auth = yield* Effect.flip(
        failing(new ModelError.Authentication({ message: "bad key" })).complete(request)
      )
      assert.strictEqual(auth.reason._tag, "Authentication")
      assert.isFalse(auth.isRetryable)
      assert.strictEqual(attempts, 1)
      attempts = 0
      const fiber = yield* Effect.forkChild(
        Effect.flip(failing(new ModelError.Unavailable({ message: "503", status: 503 })).complete(request))
      )
      yield* TestClock.adjust("1 second")
      const unavailable = yield* Fiber.join(fiber)
      assert.strictEqual(unavailable.reason._tag, "Unavailable")
      assert.strictEqual(attempts, 2)
      assert.strictEqual(unavailable.message, "test: 503")
    })
  )

  it.effect("retries a stream only before its first chunk", () =>
    Effect.gen(function* () {
      let attempts = 0
      const network = () => ChatModel.error("test", new ModelError.Network({ message: "reset" }))
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        retry: { maxAttempts: 5, baseDelay: "1 millis" },
        stream: () =>
          Stream.suspend(() => {
            attempts++
            if (attempts === 1) return Stream.fail(network())
            return Stream.concat(
              Stream.make({ type: "text-delta" as const, delta: "partial" }),
              Stream.fail(network())
            )
          })
      })
      const fiber = yield* Effect.forkChild(Effect.flip(Stream.runDrain(model.stream(request))))
      yield* TestClock.adjust("1 second")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason._tag, "Network")
      assert.strictEqual(attempts, 2, "retried the empty failure, not the one after text")
    })
  )

  it.effect("retries a stream more than once, waiting the retry-after before each attempt", () =>
    Effect.gen(function* () {
      let attempts = 0
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        retry: { maxAttempts: 3, baseDelay: "10 millis" },
        stream: () =>
          Stream.suspend(() => {
            attempts++
            return attempts < 3
              ? Stream.fail(
                  ChatModel.error(
                    "test",
                    new ModelError.RateLimited({ message: "slow down", retryAfterMillis: 5_000 })
                  )
                )
              : Stream.make({ type: "text-delta" as const, delta: "ok" })
          })
      })
      const fiber = yield* Effect.forkChild(ChatModel.collect(model.stream(request)))
      yield* TestClock.adjust("4 seconds")
      assert.strictEqual(attempts, 1, "waits at least the retry-after")
      yield* TestClock.adjust("2 seconds")
      assert.strictEqual(attempts, 2)
      yield* TestClock.adjust("3 seconds")
      assert.strictEqual(attempts, 2, "waits again before the third attempt")
      yield* TestClock.adjust("2 seconds")
      const response = yield* Fiber.join(fiber)
      assert.strictEqual(response.text, "ok")
      assert.strictEqual(attempts, 3)
    })
  )

  it("adds usage", () => {
    assert.deepStrictEqual(
      ChatModel.addUsage(
        { inputTokens: 1, outputTokens: 2, totalTokens: 3, cachedInputTokens: 1 },
        { inputTokens: 10, outputTokens: 20, totalTokens: 30 }
      ),
      { inputTokens: 11, outputTokens: 22, totalTokens: 33, cachedInputTokens: 1 }
    )
    assert.isUndefined(ChatModel.addUsage(undefined, undefined))
  })
})
