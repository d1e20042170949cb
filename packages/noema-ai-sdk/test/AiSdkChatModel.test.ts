/**
 * The bridge over the AI SDK's own mock language model: core's conformance
 * suite, then the mapping of stream parts, generate results, prompts, tools,
 * structured output, abort signals and errors.
 */
import type { LanguageModelV3StreamPart, SharedV3ProviderMetadata } from "@ai-sdk/provider"
import { assert, describe, it } from "@effect/vitest"
import { ChatModel, Message, StructuredOutput } from "@noema/core"
import { ChatModelConformance } from "@noema/core/testing"
import { MockLanguageModelV3, MockLanguageModelV4 } from "ai/test"
import { Effect, Fiber, Schema, Stream } from "effect"
import { TestClock } from "effect/testing"
import { AiSdkChatModel } from "../src/index.js"
import { apiCallError, mockModel, readable, textAnswer, toolCallsAnswer, usage } from "./support/scripted.js"

const request: ChatModel.ChatRequest = { messages: [Message.user("Hi")] }
const noRetries = { retry: { maxAttempts: 1 } }

// ---------------------------------------------------------------------------
// Conformance
// ---------------------------------------------------------------------------

const failureOf = (failure: ChatModelConformance.FailureKind, retryAfterSeconds: number | undefined) => {
  switch (failure) {
    case "rate-limited":
      return apiCallError(
        429,
        retryAfterSeconds === undefined ? {} : { "retry-after": String(retryAfterSeconds) }
      )
    case "authentication":
      return apiCallError(401, {}, "invalid x-api-key")
    case "invalid-request":
      return apiCallError(400, {}, "messages: field required")
    case "unavailable":
      return apiCallError(503, {}, "Service Unavailable")
  }
}

/** A model that never answers, and says when it was called and when the call was aborted. */
const hangingModel = () => {
  let received!: () => void
  let cancelled!: () => void
  const requestReceived = new Promise<void>((resolve) => {
    received = resolve
  })
  const requestCancelled = new Promise<void>((resolve) => {
    cancelled = resolve
  })
  const hang = (signal: AbortSignal | undefined) => {
    received()
    return new Promise<never>((_, reject) => {
      signal?.addEventListener("abort", () => {
        cancelled()
        reject(Object.assign(new Error("This operation was aborted"), { name: "AbortError" }))
      })
    })
  }
  const model = new MockLanguageModelV3({
    doStream: (options) => hang(options.abortSignal),
    doGenerate: (options) => hang(options.abortSignal)
  })
  return { model, requestReceived, requestCancelled }
}

const harness: ChatModelConformance.Harness = {
  refusal: "finish-reason",
  prepare: (scenario) =>
    Effect.sync(() => {
      const done = {
        model: undefined as unknown,
        requestReceived: Effect.void,
        requestCancelled: Effect.never
      }
      switch (scenario.kind) {
        case "hang": {
          const hanging = hangingModel()
          return {
            model: AiSdkChatModel.make(hanging.model, noRetries),
            requestReceived: Effect.promise(() => hanging.requestReceived),
            requestCancelled: Effect.promise(() => hanging.requestCancelled)
          }
        }
        case "text":
          return {
            ...done,
            model: AiSdkChatModel.make(
              mockModel(
                textAnswer(scenario.text, usage(scenario.usage.inputTokens, scenario.usage.outputTokens))
              ),
              noRetries
            )
          }
        case "tool-calls":
          return {
            ...done,
            model: AiSdkChatModel.make(mockModel(toolCallsAnswer(scenario.calls)), noRetries)
          }
        case "refusal":
          return {
            ...done,
            model: AiSdkChatModel.make(
              mockModel({
                parts: [
                  {
                    type: "finish",
                    finishReason: { unified: "content-filter", raw: "refusal" },
                    usage: usage(3, 0)
                  }
                ],
                content: [],
                finishReason: { unified: "content-filter", raw: "refusal" },
                usage: usage(3, 0)
              }),
              noRetries
            )
          }
        case "failure":
          return {
            ...done,
            model: AiSdkChatModel.make(
              mockModel({ failure: failureOf(scenario.failure, scenario.retryAfterSeconds) }),
              noRetries
            )
          }
        case "drop-mid-stream": {
          // What fetch does to a body whose connection drops: the stream errors with "terminated".
          const parts: Array<LanguageModelV3StreamPart> = [
            { type: "text-start", id: "t" },
            { type: "text-delta", id: "t", delta: scenario.text.slice(0, 8) }
          ]
          const model = new MockLanguageModelV3({
            doStream: async () => ({ stream: readable(parts, new TypeError("terminated")) })
          })
          return { ...done, model: AiSdkChatModel.make(model, noRetries) }
        }
      }
    })
}

describe("AiSdkChatModel conformance (the AI SDK's mock model)", () => {
  for (const testCase of ChatModelConformance.cases) {
    it.live(testCase.name, () => testCase.run(harness))
  }
})

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

const signed = { anthropic: { signature: "sig-1" } }

const richParts: ReadonlyArray<LanguageModelV3StreamPart> = [
  { type: "stream-start", warnings: [] },
  { type: "response-metadata", id: "resp_9", modelId: "claude-x" },
  { type: "reasoning-start", id: "r" },
  { type: "reasoning-delta", id: "r", delta: "Think " },
  { type: "reasoning-delta", id: "r", delta: "first." },
  { type: "reasoning-delta", id: "r", delta: "", providerMetadata: signed },
  { type: "reasoning-end", id: "r" },
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta: "Calling." },
  { type: "text-end", id: "t" },
  { type: "tool-input-start", id: "call_a", toolName: "weather" },
  { type: "tool-input-delta", id: "call_a", delta: '{"city":' },
  { type: "tool-input-start", id: "call_b", toolName: "time" },
  { type: "tool-input-delta", id: "call_b", delta: "{}" },
  { type: "tool-input-delta", id: "call_a", delta: '"Oslo"}' },
  { type: "tool-call", toolCallId: "call_a", toolName: "weather", input: '{"city":"Oslo"}' },
  { type: "tool-call", toolCallId: "call_b", toolName: "time", input: "{}" },
  // A call the provider ran itself (a server-side tool) is not noema's to run.
  { type: "tool-call", toolCallId: "srv_1", toolName: "web_search", input: "{}", providerExecuted: true },
  // A call given whole, without input deltas (as Google's provider does).
  { type: "tool-call", toolCallId: "call_c", toolName: "lookup", input: '{"q":1}' },
  {
    type: "finish",
    finishReason: { unified: "tool-calls", raw: "tool_use" },
    usage: {
      inputTokens: { total: 110, noCache: 10, cacheRead: 80, cacheWrite: 20 },
      outputTokens: { total: 30, text: 12, reasoning: 18 }
    },
    // Providers leave `undefined` in their metadata; a message keeps plain JSON.
    providerMetadata: {
      anthropic: { stopSequence: null, container: undefined, iterations: [1, undefined] }
    } as unknown as SharedV3ProviderMetadata
  }
]

describe("AiSdkChatModel stream parts", () => {
  it.effect(
    "map to chunks: reasoning with its metadata, text, tool-call deltas, finish with the raw reason, usage",
    () =>
      Effect.gen(function* () {
        const model = AiSdkChatModel.make(
          new MockLanguageModelV3({ doStream: async () => ({ stream: readable(richParts) }) }),
          noRetries
        )
        const chunks = yield* Stream.runCollect(model.stream(request))
        assert.ok(
          chunks.some((chunk) => chunk.type === "tool-call-delta" && chunk.argumentsDelta === '"Oslo"}')
        )
        const response = yield* ChatModel.collect(Stream.fromArray(chunks))
        assert.strictEqual(response.id, "resp_9")
        assert.strictEqual(response.model, "claude-x")
        assert.strictEqual(response.text, "Calling.")
        assert.deepStrictEqual(response.reasoningParts, [
          { type: "reasoning", text: "Think first.", providerMetadata: signed }
        ])
        assert.deepStrictEqual(response.toolCalls, [
          { id: "call_a", name: "weather", arguments: '{"city":"Oslo"}' },
          { id: "call_b", name: "time", arguments: "{}" },
          { id: "call_c", name: "lookup", arguments: '{"q":1}' }
        ])
        assert.strictEqual(response.finishReason, "tool-calls")
        assert.strictEqual(response.rawFinishReason, "tool_use")
        assert.deepStrictEqual(response.usage, {
          inputTokens: 110,
          outputTokens: 30,
          totalTokens: 140,
          cachedInputTokens: 80,
          cacheWriteInputTokens: 20,
          reasoningTokens: 18
        })
        assert.deepStrictEqual(response.providerMetadata, {
          anthropic: { stopSequence: null, iterations: [1, null] }
        })
        assert.notProperty(response.providerMetadata?.anthropic, "container")
      })
  )

  it.effect("complete reads doGenerate's content the same way", () =>
    Effect.gen(function* () {
      const model = AiSdkChatModel.make(
        new MockLanguageModelV3({
          doGenerate: async () => ({
            content: [
              { type: "reasoning", text: "Think first.", providerMetadata: signed },
              { type: "text", text: "Calling." },
              { type: "tool-call", toolCallId: "call_a", toolName: "weather", input: '{"city":"Oslo"}' }
            ],
            finishReason: { unified: "tool-calls", raw: "tool_use" },
            usage: usage(5, 7),
            response: { id: "resp_2", modelId: "claude-x", headers: { "request-id": "req_42" } },
            warnings: []
          })
        }),
        noRetries
      )
      const response = yield* model.complete(request)
      assert.deepStrictEqual(ChatModel.toMessage(response), {
        role: "assistant",
        content: [
          { type: "reasoning", text: "Think first.", providerMetadata: signed },
          { type: "text", text: "Calling." }
        ],
        toolCalls: [{ id: "call_a", name: "weather", arguments: '{"city":"Oslo"}' }],
        finishReason: "tool-calls",
        rawFinishReason: "tool_use",
        usage: { inputTokens: 5, outputTokens: 7, totalTokens: 12 },
        model: "claude-x"
      })
    })
  )

  it.effect(
    "provider metadata is kept as JSON would keep it: dates as text, instances as objects, holes as null",
    () =>
      Effect.gen(function* () {
        class Box {
          readonly inside = 1
        }
        const plain = { anthropic: { stopSequence: null, usage: { input_tokens: 3 }, ids: ["a", "b"] } }
        const holey = new Array<number>(3)
        holey[0] = 1
        holey[2] = 3
        // One at a time: any one of them alone must make the copy.
        const unusual: ReadonlyArray<unknown> = [
          new Date(0),
          new Box(),
          Number.NaN,
          { list: [1, () => 2] },
          holey,
          { gone: undefined }
        ]
        const answerWith = (providerMetadata: SharedV3ProviderMetadata) =>
          AiSdkChatModel.make(
            new MockLanguageModelV3({
              doGenerate: async () => ({
                content: [{ type: "text", text: "Hi." }],
                finishReason: { unified: "stop", raw: "end_turn" },
                usage: usage(1, 1),
                providerMetadata,
                warnings: []
              })
            }),
            noRetries
          ).complete(request)
        assert.deepStrictEqual((yield* answerWith(plain)).providerMetadata, plain)
        for (const value of unusual) {
          const metadata = { google: { value, kept: "yes" } } as unknown as SharedV3ProviderMetadata
          assert.deepStrictEqual(
            (yield* answerWith(metadata)).providerMetadata,
            JSON.parse(JSON.stringify(metadata)) as Message.ProviderMetadata
          )
        }
      })
  )

  it.effect("a consumer that stops early cancels the model's stream, which runs its cleanup", () =>
    Effect.gen(function* () {
      let cancelled = false
      let signal: AbortSignal | undefined
      const model = AiSdkChatModel.make(
        new MockLanguageModelV3({
          doStream: async (options) => {
            signal = options.abortSignal
            const parts = textAnswer("one two three four").parts
            let next = 0
            const stream = new ReadableStream<LanguageModelV3StreamPart>({
              pull: (controller) => {
                if (next < parts.length) controller.enqueue(parts[next++] as LanguageModelV3StreamPart)
              },
              cancel: () => {
                cancelled = true
              }
            })
            return { stream }
          }
        }),
        noRetries
      )
      const first = yield* Stream.runCollect(
        Stream.take(
          Stream.filter(model.stream(request), (chunk) => chunk.type === "text-delta"),
          1
        )
      )
      assert.deepStrictEqual(first, [{ type: "text-delta", delta: "one " }])
      assert.isTrue(signal?.aborted)
      // The cancel runs once the aborted read settles (a microtask or two later).
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 0)))
      assert.isTrue(cancelled)
    })
  )

  it.effect("an error part is a typed failure, by the provider's status and retryability", () =>
    Effect.gen(function* () {
      const model = AiSdkChatModel.make(
        new MockLanguageModelV3({
          doStream: async () => ({
            stream: readable<LanguageModelV3StreamPart>([
              { type: "text-delta", id: "t", delta: "Hel" },
              {
                type: "error",
                error: { message: "Overloaded", type: "overloaded_error", statusCode: 529, isRetryable: true }
              }
            ]),
            response: { headers: { "request-id": "req_7" } }
          })
        }),
        noRetries
      )
      const error = yield* Effect.flip(Stream.runDrain(model.stream(request)))
      assert.strictEqual(error.reason._tag, "Unavailable")
      assert.isTrue(error.isRetryable)
      assert.strictEqual(error.requestId, "req_7")
      assert.strictEqual(error.provider, "mock-provider")
    })
  )
})

// ---------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------

describe("AiSdkChatModel calls", () => {
  it.effect("send the prompt, tools, options and provider options in the spec's shape", () =>
    Effect.gen(function* () {
      const mock = mockModel(textAnswer("ok"))
      const model = AiSdkChatModel.make(mock, noRetries)
      yield* model.complete({
        messages: [
          Message.system("Be brief."),
          Message.user([
            Message.textPart("Look:"),
            Message.filePart({ uri: "https://example.com/a.png", mediaType: "image/png", name: "a.png" }),
            Message.filePart({ uri: "data:application/pdf;base64,JVBERi0=", mediaType: "application/pdf" }),
            Message.filePart({ uri: "file:///notes.txt", mediaType: "text/plain" })
          ]),
          Message.assistant([Message.reasoningPart("Hmm.", signed), Message.textPart("Checking.")], {
            toolCalls: [
              { id: "c1", name: "weather", arguments: '{"city":"Oslo"}' },
              { id: "c2", name: "time", arguments: "" }
            ]
          }),
          Message.toolResult({ toolCallId: "c1", name: "weather", content: "3°C" }),
          Message.toolResult({ toolCallId: "c2", name: "time", content: "no clock", isError: true })
        ],
        tools: [{ name: "weather", description: "Weather", parameters: { type: "object" }, strict: true }],
        toolChoice: { tool: "weather" },
        temperature: 0.1,
        topP: 0.5,
        maxTokens: 100,
        stop: ["END"],
        seed: 7,
        providerOptions: { anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } }
      })
      const call = mock.doGenerateCalls[0]
      assert.ok(call !== undefined)
      assert.deepStrictEqual(call.prompt, [
        { role: "system", content: "Be brief." },
        {
          role: "user",
          content: [
            { type: "text", text: "Look:" },
            {
              type: "file",
              mediaType: "image/png",
              data: new URL("https://example.com/a.png"),
              filename: "a.png"
            },
            { type: "file", mediaType: "application/pdf", data: "JVBERi0=" },
            { type: "text", text: "[file (text/plain): file:///notes.txt]" }
          ]
        },
        {
          role: "assistant",
          content: [
            { type: "reasoning", text: "Hmm.", providerOptions: signed },
            { type: "text", text: "Checking." },
            { type: "tool-call", toolCallId: "c1", toolName: "weather", input: { city: "Oslo" } },
            { type: "tool-call", toolCallId: "c2", toolName: "time", input: {} }
          ]
        },
        {
          role: "tool",
          content: [
            {
              type: "tool-result",
              toolCallId: "c1",
              toolName: "weather",
              output: { type: "text", value: "3°C" }
            },
            {
              type: "tool-result",
              toolCallId: "c2",
              toolName: "time",
              output: { type: "error-text", value: "no clock" }
            }
          ]
        }
      ])
      assert.deepStrictEqual(call.tools, [
        {
          type: "function",
          name: "weather",
          description: "Weather",
          inputSchema: { type: "object" },
          strict: true
        }
      ])
      assert.deepStrictEqual(call.toolChoice, { type: "tool", toolName: "weather" })
      assert.strictEqual(call.temperature, 0.1)
      assert.strictEqual(call.topP, 0.5)
      assert.strictEqual(call.maxOutputTokens, 100)
      assert.deepStrictEqual(call.stopSequences, ["END"])
      assert.strictEqual(call.seed, 7)
      assert.deepStrictEqual(call.providerOptions, {
        anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } }
      })
    })
  )

  it.effect("a v4 model gets file data in the v4 shape", () =>
    Effect.gen(function* () {
      const mock = new MockLanguageModelV4({
        doGenerate: async () => ({
          content: [{ type: "text", text: "ok" }],
          finishReason: { unified: "stop", raw: "stop" },
          usage: usage(1, 1),
          warnings: []
        })
      })
      const response = yield* AiSdkChatModel.make(mock, noRetries).complete({
        messages: [
          Message.user([Message.filePart({ uri: "https://example.com/a.png", mediaType: "image/png" })])
        ]
      })
      assert.strictEqual(response.text, "ok")
      const prompt = mock.doGenerateCalls[0]?.prompt
      assert.deepStrictEqual(prompt?.[0]?.content, [
        {
          type: "file",
          mediaType: "image/png",
          data: { type: "url", url: new URL("https://example.com/a.png") }
        }
      ])
    })
  )

  it.effect("structured output passes the JSON schema through as the response format", () =>
    Effect.gen(function* () {
      const mock = mockModel(textAnswer('{"name":"Oslo"}'))
      const result = yield* StructuredOutput.run(AiSdkChatModel.make(mock, noRetries), {
        schema: Schema.Struct({ name: Schema.String }),
        name: "city",
        mode: "json-schema",
        messages: [Message.user("A city?")]
      })
      assert.deepStrictEqual(result.value, { name: "Oslo" })
      const format = mock.doGenerateCalls[0]?.responseFormat ?? mock.doStreamCalls[0]?.responseFormat
      assert.ok(format?.type === "json")
      assert.strictEqual(format.name, "city")
      assert.strictEqual((format.schema as { type?: string } | undefined)?.type, "object")
    })
  )

  it.live("interrupting a call aborts it through the call's abort signal", () =>
    Effect.gen(function* () {
      const hanging = hangingModel()
      const fiber = yield* Effect.forkChild(AiSdkChatModel.make(hanging.model, noRetries).complete(request))
      yield* Effect.promise(() => hanging.requestReceived)
      yield* Fiber.interrupt(fiber)
      yield* Effect.promise(() => hanging.requestCancelled)
    })
  )
})

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

describe("AiSdkChatModel errors", () => {
  it.effect(
    "APICallError maps by status, keeping retry-after and the request id; isRetryable decides the rest",
    () =>
      Effect.gen(function* () {
        const cases = [
          [apiCallError(429, { "retry-after": "3", "x-request-id": "req_1" }), "RateLimited", true],
          [
            apiCallError(400, {}, "prompt is too long: 300000 tokens > 200000 maximum"),
            "ContextLengthExceeded",
            false
          ],
          [apiCallError(402), "QuotaExceeded", false],
          [apiCallError(404), "InvalidRequest", false],
          [apiCallError(529), "Unavailable", true],
          [Object.assign(apiCallError(499), { isRetryable: true }), "Unavailable", true],
          [apiCallError(418), "Unknown", false]
        ] as const
        for (const [failure, tag, retryable] of cases) {
          const model = AiSdkChatModel.make(mockModel({ failure }), noRetries)
          const error = yield* Effect.flip(model.complete(request))
          assert.strictEqual(error.reason._tag, tag, error.message)
          assert.strictEqual(error.isRetryable, retryable)
          assert.notInclude(error.message, "\n")
        }
        const limited = yield* Effect.flip(
          AiSdkChatModel.make(mockModel({ failure: cases[0][0] }), noRetries).complete(request)
        )
        assert.ok(limited.reason._tag === "RateLimited")
        assert.strictEqual(limited.reason.retryAfterMillis, 3000)
        assert.strictEqual(limited.requestId, "req_1")
      })
  )

  it.effect("retryable failures are retried by core's policy", () =>
    Effect.gen(function* () {
      let calls = 0
      const mock = new MockLanguageModelV3({
        doGenerate: async () => {
          calls++
          if (calls === 1) throw apiCallError(503)
          return {
            content: [{ type: "text", text: "second" }],
            finishReason: { unified: "stop", raw: "stop" },
            usage: usage(1, 1),
            warnings: []
          }
        }
      })
      const model = AiSdkChatModel.make(mock, { retry: { maxAttempts: 2, baseDelay: "1 millis" } })
      const fiber = yield* Effect.forkChild(model.complete(request))
      yield* TestClock.adjust("1 second")
      const response = yield* Fiber.join(fiber)
      assert.strictEqual(response.text, "second")
      assert.strictEqual(calls, 2)
    })
  )
})
