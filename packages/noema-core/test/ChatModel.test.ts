import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Stream } from "effect"
import { TestClock } from "effect/testing"
import { ChatModel, Embedder, Message, ModelError, Retry } from "../src/index.js"

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
        Message.assistant("hello", {
          toolCalls: response.toolCalls,
          finishReason: "tool-calls",
          usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }
        })
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

describe("ChatModel responses", () => {
  it.effect("gives every tool call of a response its own id, whatever the provider sent", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "tool-call-delta", index: 0, id: "", name: "a", argumentsDelta: "{}" },
        { type: "tool-call-delta", index: 1, id: "dup", name: "b", argumentsDelta: "{}" },
        { type: "tool-call-delta", index: 2, id: "dup", name: "c", argumentsDelta: "{}" },
        { type: "tool-call-delta", index: 3, name: "d", argumentsDelta: "{}" },
        { type: "tool-call-delta", index: 4, id: "call_0", name: "e", argumentsDelta: "{}" },
        { type: "finish", finishReason: "tool-calls" }
      ])
      const response = yield* model.complete(request)
      const ids = response.toolCalls.map((call) => call.id)
      assert.deepStrictEqual(ids, ["call_0", "dup", "dup_2", "call_3", "call_0_2"])
      // Normalising again (an already normalised stream) neither renames nor duplicates.
      const again = yield* ChatModel.collect(model.stream(request))
      assert.deepStrictEqual(
        again.toolCalls.map((call) => call.id),
        ids
      )
    })
  )

  it.effect("makes the ids of a complete (non-streamed) response unique too", () =>
    Effect.gen(function* () {
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        complete: () =>
          Effect.succeed({
            text: "",
            toolCalls: [
              { id: "", name: "a", arguments: "{}" },
              { id: "same", name: "b", arguments: "{}" },
              { id: "same", name: "c", arguments: "{}" }
            ],
            finishReason: "tool-calls" as const
          })
      })
      const response = yield* model.complete(request)
      assert.deepStrictEqual(
        response.toolCalls.map((call) => call.id),
        ["call_0", "same", "same_2"]
      )
    })
  )

  it.effect("keeps two complete calls that share an id, under different ids", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "tool-call", toolCall: { id: "x", name: "a", arguments: "{}" } },
        { type: "tool-call", toolCall: { id: "x", name: "b", arguments: "{}" } },
        { type: "finish", finishReason: "tool-calls" }
      ])
      const response = yield* model.complete(request)
      assert.deepStrictEqual(response.toolCalls, [
        { id: "x", name: "a", arguments: "{}" },
        { id: "x_2", name: "b", arguments: "{}" }
      ])
    })
  )

  it.effect("takes id and model from the first chunk where each is non-empty", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "response-metadata", id: "", model: "" },
        { type: "response-metadata", id: "chatcmpl-1" },
        { type: "response-metadata", id: "chatcmpl-2", model: "gpt-4o" },
        { type: "response-metadata", model: "other" },
        { type: "text-delta", delta: "hi" },
        { type: "finish", finishReason: "stop" }
      ])
      const response = yield* model.complete(request)
      assert.strictEqual(response.id, "chatcmpl-1")
      assert.strictEqual(response.model, "gpt-4o")
    })
  )

  it.effect("builds reasoning into a part before the text, and keeps finish reasons and usage", () =>
    Effect.gen(function* () {
      const usage = { inputTokens: 4, outputTokens: 6, totalTokens: 10, reasoningTokens: 3 }
      const model = fromChunks([
        { type: "reasoning-delta", delta: "The user " },
        { type: "reasoning-delta", delta: "says hi." },
        { type: "text-delta", delta: "Hello" },
        { type: "finish", finishReason: "length", rawFinishReason: "MAX_TOKENS" },
        { type: "usage", usage }
      ])
      const response = yield* model.complete(request)
      assert.strictEqual(response.text, "Hello")
      assert.strictEqual(response.reasoning, "The user says hi.")
      assert.strictEqual(response.rawFinishReason, "MAX_TOKENS")
      const message = ChatModel.toMessage(response)
      assert.deepStrictEqual(message, {
        role: "assistant",
        content: [
          { type: "reasoning", text: "The user says hi." },
          { type: "text", text: "Hello" }
        ],
        finishReason: "length",
        rawFinishReason: "MAX_TOKENS",
        usage
      })
      assert.strictEqual(Message.text(message), "Hello")
      // A response replayed as a stream keeps all of it.
      const replayed = yield* ChatModel.collect(ChatModel.responseToStream(response))
      assert.deepStrictEqual(replayed, response)
    })
  )
})

describe("ChatModel reasoning parts", () => {
  const signed = { anthropic: { signature: "sig-1" } }
  const redacted = { anthropic: { redactedData: "opaque" } }

  it.effect("keeps each ended reasoning part with its provider metadata, in order, into the message", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "reasoning-delta", delta: "First " },
        { type: "reasoning-delta", delta: "thought." },
        { type: "reasoning-end", providerMetadata: signed },
        { type: "reasoning-end", providerMetadata: redacted },
        // A part with neither text nor metadata says nothing: it is not kept.
        { type: "reasoning-end" },
        { type: "reasoning-delta", delta: "Unsigned tail." },
        { type: "text-delta", delta: "Answer" },
        { type: "finish", finishReason: "stop" }
      ])
      const response = yield* model.complete(request)
      assert.strictEqual(response.reasoning, "First thought.Unsigned tail.")
      assert.deepStrictEqual(response.reasoningParts, [
        { type: "reasoning", text: "First thought.", providerMetadata: signed },
        { type: "reasoning", text: "", providerMetadata: redacted },
        { type: "reasoning", text: "Unsigned tail." }
      ])
      const message = ChatModel.toMessage(response)
      assert.deepStrictEqual(message.content, [
        ...(response.reasoningParts ?? []),
        Message.textPart("Answer")
      ])
      assert.strictEqual(Message.reasoning(message), "First thought.Unsigned tail.")
      // The message is still plain, JSON-safe data, and a replayed response is the same response.
      assert.isTrue(Message.isPlain(message))
      const replayed = yield* ChatModel.collect(ChatModel.responseToStream(response))
      assert.deepStrictEqual(replayed, response)
    })
  )

  it.effect("merges provider metadata of the response and keeps it through a replay", () =>
    Effect.gen(function* () {
      const model = fromChunks([
        { type: "response-metadata", id: "r1", providerMetadata: { google: { grounding: [1] } } },
        { type: "text-delta", delta: "x" },
        { type: "response-metadata", providerMetadata: { anthropic: { stopSequence: "END" } } },
        { type: "finish", finishReason: "stop" }
      ])
      const response = yield* model.complete(request)
      assert.deepStrictEqual(response.providerMetadata, {
        google: { grounding: [1] },
        anthropic: { stopSequence: "END" }
      })
      const replayed = yield* ChatModel.collect(ChatModel.responseToStream(response))
      assert.deepStrictEqual(replayed, response)
    })
  )

  it("adds cache writes like the other counts", () => {
    assert.deepStrictEqual(
      ChatModel.addUsage(
        { inputTokens: 10, outputTokens: 1, totalTokens: 11, cacheWriteInputTokens: 8 },
        { inputTokens: 10, outputTokens: 1, totalTokens: 11, cachedInputTokens: 8, cacheWriteInputTokens: 1 }
      ),
      {
        inputTokens: 20,
        outputTokens: 2,
        totalTokens: 22,
        cachedInputTokens: 8,
        cacheWriteInputTokens: 9
      }
    )
  })
})

describe("Retry.retryAfterMillis", () => {
  const headers = (values: Record<string, string>) => (name: string) => values[name]
  it("reads milliseconds first, then seconds or an HTTP date, and nothing else", () => {
    const now = Date.parse("2026-01-01T00:00:00Z")
    assert.strictEqual(
      Retry.retryAfterMillis(headers({ "retry-after-ms": "1500", "retry-after": "9" }), now),
      1500
    )
    assert.strictEqual(Retry.retryAfterMillis(headers({ "retry-after": "2.5" }), now), 2500)
    assert.strictEqual(
      Retry.retryAfterMillis(headers({ "retry-after": "Thu, 01 Jan 2026 00:00:30 GMT" }), now),
      30_000
    )
    assert.isUndefined(Retry.retryAfterMillis(headers({ "retry-after": "soon" }), now))
    assert.isUndefined(Retry.retryAfterMillis(headers({}), now))
  })
})

describe("ModelError", () => {
  it("has quota and context-length reasons that are not retryable", () => {
    assert.isFalse(new ModelError.QuotaExceeded({ message: "out of credit" }).isRetryable)
    assert.isFalse(new ModelError.ContextLengthExceeded({ message: "too long" }).isRetryable)
  })

  it("carries the provider's request id into the message", () => {
    const error = ChatModel.error("openai", new ModelError.Network({ message: "dropped" }), "gpt-4o", "req_1")
    assert.strictEqual(error.requestId, "req_1")
    assert.strictEqual(error.message, "openai (gpt-4o): dropped [request req_1]")
  })
})

describe("Retry", () => {
  it.effect("retries any failure with a ModelError reason, not only chat-model errors", () =>
    Effect.gen(function* () {
      let attempts = 0
      const call = Effect.suspend(() => {
        attempts++
        return attempts < 3
          ? Effect.fail(
              new Embedder.EmbedderError({
                provider: "p",
                reason: new ModelError.RateLimited({ message: "slow down", retryAfterMillis: 1000 })
              })
            )
          : Effect.succeed("ok")
      })
      const fiber = yield* Effect.forkChild(Retry.effect(call, { maxAttempts: 3, baseDelay: "1 milli" }))
      yield* TestClock.adjust("999 millis")
      assert.strictEqual(attempts, 1)
      yield* TestClock.adjust("1 milli")
      assert.strictEqual(attempts, 2)
      yield* TestClock.adjust("1 second")
      assert.strictEqual(yield* Fiber.join(fiber), "ok")
      assert.strictEqual(attempts, 3)
    })
  )

  const rateLimited = (retryAfterMillis: number) =>
    ChatModel.error("test", new ModelError.RateLimited({ message: "slow down", retryAfterMillis }))

  it.effect("tells onRetry of each retry before its wait, with the reason, the attempt and the delay", () =>
    Effect.gen(function* () {
      let attempts = 0
      const told: Array<{ reason: string; attempt: number; maxAttempts: number; millis: number }> = []
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        retry: {
          maxAttempts: 3,
          baseDelay: "1 milli",
          onRetry: (info) =>
            Effect.sync(() => {
              told.push({
                reason: info.error.reason._tag,
                attempt: info.attempt,
                maxAttempts: info.maxAttempts,
                millis: Duration.toMillis(info.delay)
              })
            })
        },
        stream: () =>
          Stream.suspend(() => {
            attempts++
            return attempts < 3
              ? Stream.fail(rateLimited(5_000))
              : Stream.fromArray<ChatModel.StreamChunk>([
                  { type: "text-delta", delta: "ok" },
                  { type: "finish", finishReason: "stop" }
                ])
          })
      })
      const fiber = yield* Effect.forkChild(ChatModel.collect(model.stream(request)))
      yield* TestClock.adjust("1 milli")
      // Told before the wait: the second attempt has not been made yet.
      assert.deepStrictEqual(told, [{ reason: "RateLimited", attempt: 2, maxAttempts: 3, millis: 5_000 }])
      assert.strictEqual(attempts, 1)
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual(attempts, 2)
      assert.strictEqual(told.length, 2)
      assert.strictEqual(told[1]?.attempt, 3)
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "ok")
    })
  )

  it.effect("fails at once when a retry-after is beyond maxTotalDelay, without waiting or retrying", () =>
    Effect.gen(function* () {
      let attempts = 0
      let told = 0
      const model = ChatModel.make({
        provider: "test",
        model: "m",
        retry: { maxAttempts: 3, maxTotalDelay: "60 seconds", onRetry: () => Effect.sync(() => told++) },
        complete: () =>
          Effect.suspend(() => {
            attempts++
            return Effect.fail(rateLimited(120_000))
          })
      })
      const fiber = yield* Effect.forkChild(model.complete(request))
      yield* TestClock.adjust("1 milli")
      const exit = fiber.pollUnsafe()
      assert.isDefined(exit, "the call ended without waiting")
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error.reason._tag, "RateLimited")
      if (error.reason._tag === "RateLimited") assert.strictEqual(error.reason.retryAfterMillis, 120_000)
      assert.strictEqual(attempts, 1)
      assert.strictEqual(told, 0)
    })
  )

  it.effect("maxTotalDelay bounds the waits together: a wait that would pass it is not made", () =>
    Effect.gen(function* () {
      let attempts = 0
      const call = Effect.suspend(() => {
        attempts++
        return Effect.fail(rateLimited(40_000))
      })
      const fiber = yield* Effect.forkChild(
        Retry.effect(call, { maxAttempts: 5, maxTotalDelay: "60 seconds" })
      )
      yield* TestClock.adjust("39 seconds")
      assert.strictEqual(attempts, 1)
      yield* TestClock.adjust("1 second")
      // The second failure asks for 40 s more: 80 s in all, beyond the 60 s cap.
      assert.strictEqual(attempts, 2)
      assert.isDefined(fiber.pollUnsafe())
      assert.strictEqual((yield* Effect.flip(Fiber.join(fiber))).reason._tag, "RateLimited")
    })
  )

  it.effect("does not retry a reason that says it would not help", () =>
    Effect.gen(function* () {
      let attempts = 0
      const call = Effect.suspend(() => {
        attempts++
        return Effect.fail(
          new Embedder.EmbedderError({
            provider: "p",
            reason: new ModelError.QuotaExceeded({ message: "pay" })
          })
        )
      })
      const error = yield* Effect.flip(Retry.effect(call, { maxAttempts: 5 }))
      assert.strictEqual(error.reason._tag, "QuotaExceeded")
      assert.strictEqual(attempts, 1)
    })
  )
})
