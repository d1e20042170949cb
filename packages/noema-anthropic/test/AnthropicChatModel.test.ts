/**
 * AnthropicChatModel against the local Anthropic wire-format server: core's
 * conformance suite, recorded real streams replayed byte for byte, then what
 * is specific to Anthropic (request translation, thinking round trips, stop
 * reasons, cache usage, prompt caching, structured output, headers, errors
 * and retries).
 */
import { assert, describe, it } from "@effect/vitest"
import { ChatModel, Message, StructuredOutput } from "@noema/core"
import { ChatModelConformance } from "@noema/core/testing"
import { ConfigProvider, Effect, Redacted, Schema, Stream } from "effect"
import { afterAll, afterEach, beforeAll } from "vitest"
import { AnthropicChatModel } from "../src/index.js"
import { AnthropicTestServer } from "../src/testing.js"
import * as Recorded from "./fixtures/recorded.js"

let server: AnthropicTestServer.TestServer

beforeAll(async () => {
  server = await AnthropicTestServer.start()
})
afterAll(() => server.close())
afterEach(() => server.reset())

const apiKey = "sk-ant-test-0123456789abcdefghij"

/** No environment at all, so nothing on the machine leaks into a test. */
const noEnvironment = ConfigProvider.fromEnv({ env: {} })

const makeModel = (options: Partial<AnthropicChatModel.Options> = {}) =>
  AnthropicChatModel.make({
    model: "claude-test",
    apiKey: Redacted.make(apiKey),
    baseURL: server.url,
    maxAttempts: 1,
    ...options
  }).pipe(Effect.provideService(ConfigProvider.ConfigProvider, noEnvironment), Effect.orDie)

const request: ChatModel.ChatRequest = { messages: [Message.user("Hi")] }

const bodyOf = (index: number): Record<string, unknown> => {
  const body = server.requests[index]?.body
  assert.ok(typeof body === "object" && body !== null, `request #${index} has a JSON body`)
  return body as Record<string, unknown>
}

const expectReason = (error: ChatModel.ChatModelError, tag: string) => {
  assert.strictEqual(error.reason._tag, tag, error.message)
  assert.ok(!error.message.includes("\n"), "one line")
  assert.ok(!error.message.includes(apiKey), "no API key")
}

// ---------------------------------------------------------------------------
// Conformance
// ---------------------------------------------------------------------------

const failureReply = (
  failure: ChatModelConformance.FailureKind,
  retryAfterSeconds: number | undefined
): AnthropicTestServer.Reply => {
  switch (failure) {
    case "rate-limited":
      return {
        type: "error",
        status: 429,
        ...(retryAfterSeconds !== undefined && { headers: { "retry-after": String(retryAfterSeconds) } })
      }
    case "authentication":
      return { type: "error", status: 401, message: "invalid x-api-key" }
    case "invalid-request":
      return { type: "error", status: 400, message: "messages: field required" }
    case "unavailable":
      return { type: "error", status: 529, message: "Overloaded" }
  }
}

const replyFor = (scenario: ChatModelConformance.Scenario): AnthropicTestServer.Reply => {
  switch (scenario.kind) {
    case "text":
      return {
        type: "text",
        text: scenario.text,
        usage: { inputTokens: scenario.usage.inputTokens, outputTokens: scenario.usage.outputTokens }
      }
    case "tool-calls":
      return { type: "tool-calls", calls: scenario.calls.map((call) => ({ ...call })) }
    case "refusal":
      return { type: "refusal", explanation: scenario.refusal }
    case "failure":
      return failureReply(scenario.failure, scenario.retryAfterSeconds)
    case "drop-mid-stream":
      return { type: "drop", afterChunks: 3, text: scenario.text }
    case "hang":
      return { type: "hang" }
  }
}

const harness: ChatModelConformance.Harness = {
  prepare: (scenario) =>
    Effect.gen(function* () {
      const index = server.requests.length
      server.enqueue(replyFor(scenario))
      const model = yield* makeModel()
      return {
        model,
        requestReceived: Effect.promise(() => server.waitForRequests(index + 1)),
        // Resolves only when the server saw the client close the connection early.
        requestCancelled: Effect.promise(() => server.waitForClose(index))
      }
    })
}

describe("AnthropicChatModel conformance", () => {
  for (const testCase of ChatModelConformance.cases) {
    it.live(testCase.name, () => testCase.run(harness))
  }
})

// ---------------------------------------------------------------------------
// Recorded streams
// ---------------------------------------------------------------------------

const replay = (events: ReadonlyArray<string>, options: Partial<AnthropicChatModel.Options> = {}) =>
  Effect.gen(function* () {
    server.enqueue({ type: "events", events })
    const model = yield* makeModel(options)
    return yield* Stream.runCollect(model.stream(request))
  })

describe("AnthropicChatModel recorded streams", () => {
  it.live("text: deltas, id and model, stop reason and usage", () =>
    Effect.gen(function* () {
      const chunks = yield* replay(Recorded.text)
      const response = yield* ChatModel.collect(Stream.fromArray(chunks))
      assert.strictEqual(
        response.text,
        "Hello! I'm doing well, thank you for asking. How are you doing today? Is there anything I can help you with?"
      )
      assert.strictEqual(response.id, "msg_01QC4g3HwBThD4BaNtBckFDJ")
      assert.strictEqual(response.model, "claude-sonnet-4-5-20250929")
      assert.strictEqual(response.finishReason, "stop")
      assert.strictEqual(response.rawFinishReason, "end_turn")
      assert.deepStrictEqual(response.usage, {
        inputTokens: 12,
        outputTokens: 30,
        totalTokens: 42,
        cachedInputTokens: 0,
        cacheWriteInputTokens: 0
      })
    })
  )

  it.live("thinking: reasoning deltas, then the part ends with its signature, then the answer", () =>
    Effect.gen(function* () {
      const chunks = yield* replay(Recorded.thinking)
      const end = chunks.find((chunk) => chunk.type === "reasoning-end")
      assert.ok(end?.type === "reasoning-end")
      const signature = (end.providerMetadata?.anthropic as { signature?: string } | undefined)?.signature
      assert.ok(
        signature?.startsWith(
          "EvQBCkYICxgCKkAxhD4NUKFzudtZ6NzbZdEiBACIScTzqjPViM596iWLZIk4EFKYYBj3B6Ptl3b0dcQv"
        )
      )
      const message = ChatModel.toMessage(yield* ChatModel.collect(Stream.fromArray(chunks)))
      assert.strictEqual(
        Message.reasoning(message),
        "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185"
      )
      assert.strictEqual(Message.text(message), "925 ÷ 5 = 185")
      assert.deepStrictEqual(Message.parts(message)[0], {
        type: "reasoning",
        text: "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185",
        providerMetadata: { anthropic: { signature: signature as string } }
      })
    })
  )

  it.live("tool use: text, then a call whose input arrives in argument deltas", () =>
    Effect.gen(function* () {
      const chunks = yield* replay(Recorded.textThenTool)
      assert.ok(chunks.filter((chunk) => chunk.type === "tool-call-delta").length >= 2, "argument deltas")
      const response = yield* ChatModel.collect(Stream.fromArray(chunks))
      assert.strictEqual(response.text, "I'll invoke the JSON response tool.")
      assert.strictEqual(response.finishReason, "tool-calls")
      assert.strictEqual(response.rawFinishReason, "tool_use")
      assert.deepStrictEqual(response.toolCalls, [
        {
          id: "toolu_01KFbKqPYSuAKujiL6mTfzYA",
          name: "json",
          arguments: '{"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]}'
        }
      ])
    })
  )

  it.live("a call without arguments has the empty object as its arguments", () =>
    Effect.gen(function* () {
      const response = yield* ChatModel.collect(
        Stream.fromArray(yield* replay(Recorded.toolWithoutArguments))
      )
      assert.deepStrictEqual(response.toolCalls, [
        { id: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", name: "updateIssueList", arguments: "{}" }
      ])
    })
  )

  it.live("refusal: the explanation is the refusal, the finish reason content-filter, the raw one kept", () =>
    Effect.gen(function* () {
      const response = yield* ChatModel.collect(Stream.fromArray(yield* replay(Recorded.refusal)))
      assert.strictEqual(response.text, "")
      assert.include(response.refusal ?? "", "violative cyber content")
      assert.strictEqual(response.finishReason, "content-filter")
      assert.strictEqual(response.rawFinishReason, "refusal")
    })
  )

  it.live(
    "an overloaded_error event mid-stream is a retryable Unavailable with the request id, after the text so far",
    () =>
      Effect.gen(function* () {
        server.enqueue({ type: "events", events: Recorded.overloadedMidStream })
        const model = yield* makeModel()
        const seen: Array<ChatModel.StreamChunk> = []
        const error = yield* Effect.flip(
          Stream.runForEach(model.stream(request), (chunk) => Effect.sync(() => seen.push(chunk)))
        )
        expectReason(error, "Unavailable")
        assert.isTrue(error.isRetryable)
        assert.strictEqual(error.requestId, "req_test0")
        assert.strictEqual(
          seen.map((chunk) => (chunk.type === "text-delta" ? chunk.delta : "")).join(""),
          "Hello! I"
        )
      })
  )

  it.live("an overloaded stream is retried by core's policy while nothing was emitted", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "events", events: [Recorded.overloadedMidStream.at(-1) as string] },
        { type: "events", events: Recorded.text }
      )
      const model = yield* makeModel({ maxAttempts: 2, retryBaseDelay: "1 millis" })
      const response = yield* ChatModel.collect(model.stream(request))
      assert.include(response.text, "Hello!")
      assert.strictEqual(server.requests.length, 2)
    })
  )
})

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

const weather: ChatModel.ToolDefinition = {
  name: "get_weather",
  description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
}

describe("AnthropicChatModel requests", () => {
  it.live("sends system, messages, tool calls, grouped tool results, tools and options", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "done" })
      const model = yield* makeModel({ maxTokens: 512 })
      yield* model.complete({
        messages: [
          Message.system("Be brief."),
          Message.user([
            Message.textPart("Weather here?"),
            Message.filePart({ uri: "https://example.com/sky.png", mediaType: "image/png" }),
            Message.filePart({ uri: "file:///notes.txt", mediaType: "text/plain", name: "notes.txt" })
          ]),
          Message.assistant("Checking both.", {
            toolCalls: [
              { id: "toolu_1", name: "get_weather", arguments: '{"city":"Lisbon"}' },
              { id: "toolu_2", name: "get_weather", arguments: '{"city":"Porto"}' }
            ]
          }),
          Message.toolResult({ toolCallId: "toolu_1", name: "get_weather", content: "21°C" }),
          Message.toolResult({ toolCallId: "toolu_2", name: "get_weather", content: "boom", isError: true }),
          Message.system("Answer in Portuguese.")
        ],
        tools: [weather],
        toolChoice: "required",
        parallelToolCalls: false,
        temperature: 0.2,
        topP: 0.9,
        stop: ["END"]
      })
      const body = bodyOf(0)
      assert.deepStrictEqual(body.system, [{ type: "text", text: "Be brief." }])
      assert.deepStrictEqual(body.messages, [
        {
          role: "user",
          content: [
            { type: "text", text: "Weather here?" },
            { type: "image", source: { type: "url", url: "https://example.com/sky.png" } },
            { type: "text", text: '[file "notes.txt" (text/plain): file:///notes.txt]' }
          ]
        },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Checking both." },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Lisbon" } },
            { type: "tool_use", id: "toolu_2", name: "get_weather", input: { city: "Porto" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: "21°C" },
            { type: "tool_result", tool_use_id: "toolu_2", content: "boom", is_error: true }
          ]
        },
        { role: "system", content: "Answer in Portuguese." }
      ])
      assert.deepStrictEqual(body.tools, [
        {
          name: "get_weather",
          description: "Weather for a city",
          input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
        }
      ])
      assert.deepStrictEqual(body.tool_choice, { type: "any", disable_parallel_tool_use: true })
      assert.strictEqual(body.max_tokens, 512)
      assert.strictEqual(body.temperature, 0.2)
      assert.strictEqual(body.top_p, 0.9)
      assert.deepStrictEqual(body.stop_sequences, ["END"])
      assert.isUndefined(body.stream)
    })
  )

  it.live("sends the anthropic-version, beta and extra headers, and the key", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "ok" }, { type: "text", text: "ok" })
      const pinned = yield* makeModel({
        version: "2023-06-01",
        betas: ["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"],
        headers: { "x-gateway": "eu" }
      })
      yield* pinned.complete(request)
      const headers = server.requests[0]?.headers ?? {}
      assert.strictEqual(headers["anthropic-version"], "2023-06-01")
      assert.strictEqual(headers["anthropic-beta"], "interleaved-thinking-2025-05-14,context-1m-2025-08-07")
      assert.strictEqual(headers["x-gateway"], "eu")
      // This SDK version sends the API key as a bearer token.
      assert.strictEqual(headers.authorization, `Bearer ${apiKey}`)
      const plain = yield* makeModel()
      yield* plain.complete(request)
      // The SDK's own version is sent when none is asked for; no beta header then.
      assert.match(server.requests[1]?.headers["anthropic-version"] ?? "", /^\d{4}-\d{2}-\d{2}$/)
      assert.isUndefined(server.requests[1]?.headers["anthropic-beta"])
    })
  )

  it.live(
    "prompt caching, when asked for, marks the system prompt and the last tool as cache breakpoints",
    () =>
      Effect.gen(function* () {
        server.enqueue(
          { type: "text", text: "ok" },
          { type: "text", text: "ok" },
          { type: "text", text: "ok" }
        )
        const cached = yield* makeModel({ promptCaching: true })
        const withTools: ChatModel.ChatRequest = {
          messages: [Message.system("A long, stable prompt."), Message.user("Hi")],
          tools: [weather, { ...weather, name: "get_time" }]
        }
        yield* cached.complete(withTools)
        const body = bodyOf(0)
        assert.deepStrictEqual(body.system, [
          { type: "text", text: "A long, stable prompt.", cache_control: { type: "ephemeral" } }
        ])
        const tools = body.tools as ReadonlyArray<Record<string, unknown>>
        assert.isUndefined(tools[0]?.cache_control)
        assert.deepStrictEqual(tools[1]?.cache_control, { type: "ephemeral" })
        // Off by default, and a request can turn it on (or off) for itself.
        const plain = yield* makeModel()
        yield* plain.complete(withTools)
        assert.notInclude(JSON.stringify(bodyOf(1)), "cache_control")
        yield* plain.complete({
          ...withTools,
          providerOptions: { anthropic: { promptCaching: true, top_k: 5 } }
        })
        assert.include(JSON.stringify(bodyOf(2).system), "ephemeral")
        assert.strictEqual(bodyOf(2).top_k, 5, "provider options are merged into the body")
        assert.isUndefined(bodyOf(2).promptCaching)
      })
  )

  it.live("usage counts cache reads and writes into the input, and keeps them apart", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "text",
        text: "cached",
        usage: { inputTokens: 10, outputTokens: 4, cacheReadTokens: 1000, cacheWriteTokens: 200 }
      })
      const model = yield* makeModel()
      const response = yield* ChatModel.collect(model.stream(request))
      assert.deepStrictEqual(response.usage, {
        inputTokens: 1210,
        outputTokens: 4,
        totalTokens: 1214,
        cachedInputTokens: 1000,
        cacheWriteInputTokens: 200
      })
    })
  )

  it.live("a matched stop sequence is kept in the response's provider metadata", () =>
    Effect.gen(function* () {
      const stopped = Recorded.text.map((line) =>
        line.includes('"stop_reason":"end_turn"')
          ? line.replace(
              '"stop_reason":"end_turn","stop_sequence":null',
              '"stop_reason":"stop_sequence","stop_sequence":"END"'
            )
          : line
      )
      const response = yield* ChatModel.collect(Stream.fromArray(yield* replay(stopped)))
      assert.strictEqual(response.finishReason, "stop")
      assert.strictEqual(response.rawFinishReason, "stop_sequence")
      assert.deepStrictEqual(response.providerMetadata, { anthropic: { stopSequence: "END" } })
    })
  )

  it.live("stop reasons map to core's, the raw one kept", () =>
    Effect.gen(function* () {
      const model = yield* makeModel()
      const cases = [
        ["end_turn", "stop"],
        ["stop_sequence", "stop"],
        ["max_tokens", "length"],
        ["model_context_window_exceeded", "length"],
        ["pause_turn", "other"]
      ] as const
      for (const [raw, expected] of cases) {
        server.enqueue(
          { type: "text", text: "x", stopReason: raw },
          { type: "text", text: "x", stopReason: raw }
        )
        const completed = yield* model.complete(request)
        const streamed = yield* ChatModel.collect(model.stream(request))
        for (const response of [completed, streamed]) {
          assert.strictEqual(response.finishReason, expected, raw)
          assert.strictEqual(response.rawFinishReason, raw)
        }
      }
    })
  )
})

// ---------------------------------------------------------------------------
// Extended thinking
// ---------------------------------------------------------------------------

describe("AnthropicChatModel extended thinking", () => {
  it.live("a tool loop with thinking sends the signed thinking back unchanged, before the tool call", () =>
    Effect.gen(function* () {
      const thinking = { text: "I should look up Lisbon.", signature: "EqQBCkgIARABGAIiQL2" }
      server.enqueue(
        {
          type: "tool-calls",
          thinking,
          calls: [{ id: "toolu_9", name: "get_weather", arguments: '{"city":"Lisbon"}' }]
        },
        { type: "text", text: "21°C in Lisbon." }
      )
      const model = yield* makeModel({ thinking: { budgetTokens: 2048 }, maxTokens: 8192 })
      const first = yield* ChatModel.collect(
        model.stream({ messages: [Message.user("Weather?")], tools: [weather] })
      )
      const assistant = ChatModel.toMessage(first)
      // The message survives a store: JSON out and back.
      const stored = yield* Message.fromJson(Message.toJson(assistant))
      yield* model.complete({
        messages: [
          Message.user("Weather?"),
          stored,
          Message.toolResult({ toolCallId: "toolu_9", name: "get_weather", content: "21°C" })
        ],
        tools: [weather]
      })
      assert.deepStrictEqual(bodyOf(0).thinking, { type: "enabled", budget_tokens: 2048 })
      server.enqueue({ type: "text", text: "ok" })
      const adaptive = yield* makeModel({ thinking: "adaptive" })
      yield* adaptive.complete(request)
      assert.deepStrictEqual(bodyOf(2).thinking, { type: "adaptive" })
      const sent = (bodyOf(1).messages as ReadonlyArray<{ role: string; content: unknown }>)[1]
      assert.deepStrictEqual(sent, {
        role: "assistant",
        content: [
          { type: "thinking", thinking: thinking.text, signature: thinking.signature },
          { type: "tool_use", id: "toolu_9", name: "get_weather", input: { city: "Lisbon" } }
        ]
      })
    })
  )

  it.live(
    "redacted thinking round-trips as its data; unsigned reasoning from other providers is left out",
    () =>
      Effect.gen(function* () {
        server.enqueue({
          type: "events",
          events: [
            Recorded.text[0] as string,
            {
              type: "content_block_start",
              index: 0,
              content_block: { type: "redacted_thinking", data: "EmwKAhgBEgy3" }
            },
            { type: "content_block_stop", index: 0 },
            ...Recorded.text.slice(1)
          ].map((event) => (typeof event === "string" ? event : JSON.stringify(event)))
        })
        server.enqueue({ type: "text", text: "ok" })
        const model = yield* makeModel()
        const message = ChatModel.toMessage(yield* ChatModel.collect(model.stream(request)))
        assert.deepStrictEqual(Message.parts(message)[0], {
          type: "reasoning",
          text: "",
          providerMetadata: { anthropic: { redactedData: "EmwKAhgBEgy3" } }
        })
        yield* model.complete({
          messages: [
            Message.user("Hi"),
            message,
            Message.user("And?"),
            Message.assistant([
              Message.reasoningPart("DeepSeek thought this."),
              Message.textPart("Earlier answer.")
            ]),
            Message.user("Go on.")
          ]
        })
        const sent = bodyOf(1).messages as ReadonlyArray<{ role: string; content: ReadonlyArray<unknown> }>
        assert.deepStrictEqual(sent[1]?.content[0], { type: "redacted_thinking", data: "EmwKAhgBEgy3" })
        assert.deepStrictEqual(sent[3]?.content, [{ type: "text", text: "Earlier answer." }])
      })
  )
})

// ---------------------------------------------------------------------------
// Structured output
// ---------------------------------------------------------------------------

describe("AnthropicChatModel structured output", () => {
  const City = Schema.Struct({ name: Schema.String, population: Schema.Number })

  it.live("a JSON Schema response format is a forced tool whose input is the answer", () =>
    Effect.gen(function* () {
      const answer = '{"name":"Lisbon","population":545000}'
      server.enqueue(
        { type: "tool-calls", calls: [{ name: "city", arguments: answer }] },
        { type: "tool-calls", calls: [{ name: "city", arguments: answer }] }
      )
      const model = yield* makeModel()
      const streamed = yield* StructuredOutput.run(model, {
        schema: City,
        name: "city",
        mode: "json-schema",
        messages: [Message.user("Biggest city of Portugal?")]
      })
      assert.deepStrictEqual(streamed.value, { name: "Lisbon", population: 545000 })
      const body = bodyOf(0)
      assert.deepStrictEqual(body.tool_choice, { type: "tool", name: "city" })
      const tools = body.tools as ReadonlyArray<{ name: string; input_schema: { type: string } }>
      assert.strictEqual(tools[0]?.name, "city")
      assert.strictEqual(tools[0]?.input_schema.type, "object")
      const completed = yield* model.complete({
        messages: [Message.user("Biggest city?")],
        responseFormat: { type: "json-schema", name: "city", schema: { type: "object" } }
      })
      assert.strictEqual(completed.text, answer)
      assert.deepStrictEqual(completed.toolCalls, [])
      assert.strictEqual(completed.finishReason, "stop")
      assert.strictEqual(completed.rawFinishReason, "tool_use")
      // With thinking on, Anthropic refuses a forced tool: the output tool is offered instead.
      server.enqueue({ type: "tool-calls", calls: [{ name: "city", arguments: answer }] })
      const thinking = yield* makeModel({ thinking: { budgetTokens: 1024 }, maxTokens: 4096 })
      const thought = yield* thinking.complete({
        messages: [Message.user("Biggest city?")],
        responseFormat: { type: "json-schema", name: "city", schema: { type: "object" } }
      })
      assert.strictEqual(thought.text, answer)
      assert.deepStrictEqual(bodyOf(2).tool_choice, { type: "auto" })
    })
  )
})

// ---------------------------------------------------------------------------
// Errors and retries
// ---------------------------------------------------------------------------

describe("AnthropicChatModel errors", () => {
  it.live("maps statuses and error types to reasons, with Anthropic's request id", () =>
    Effect.gen(function* () {
      const model = yield* makeModel()
      const cases: ReadonlyArray<readonly [AnthropicTestServer.ErrorReply, string]> = [
        [
          {
            type: "error",
            status: 400,
            message: "prompt is too long: 210000 tokens > 200000 maximum"
          },
          "ContextLengthExceeded"
        ],
        [{ type: "error", status: 402, message: "Your credit balance is too low" }, "QuotaExceeded"],
        [{ type: "error", status: 403, message: "not allowed" }, "Authentication"],
        [{ type: "error", status: 404, message: "model: claude-nope" }, "InvalidRequest"],
        [{ type: "error", status: 413, message: "Request exceeds the maximum size" }, "InvalidRequest"],
        [{ type: "error", status: 500, message: "Internal server error" }, "Unavailable"],
        [{ type: "error", status: 529, message: "Overloaded" }, "Unavailable"]
      ]
      for (const [reply, tag] of cases) {
        server.enqueue(reply, reply)
        const index = server.requests.length
        const completed = yield* Effect.flip(model.complete(request))
        const streamed = yield* Effect.flip(Stream.runDrain(model.stream(request)))
        for (const [offset, error] of [completed, streamed].entries()) {
          expectReason(error, tag)
          assert.strictEqual(error.requestId, `req_test${index + offset}`)
          assert.strictEqual(error.provider, "anthropic")
          assert.strictEqual(error.model, "claude-test")
        }
      }
    })
  )

  it.live("429 with retry-after and 529 are retried by core's policy; the wait honours retry-after", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 529 },
        { type: "error", status: 429, headers: { "retry-after": "0" } },
        { type: "text", text: "third time" }
      )
      const model = yield* makeModel({ maxAttempts: 3, retryBaseDelay: "1 millis" })
      const response = yield* model.complete(request)
      assert.strictEqual(response.text, "third time")
      assert.strictEqual(server.requests.length, 3)
      // The 429's retry-after reaches the policy as the reason's wait.
      server.enqueue({ type: "error", status: 429, headers: { "retry-after": "7" } })
      const once = yield* makeModel()
      const limited = yield* Effect.flip(once.complete(request))
      assert.ok(limited.reason._tag === "RateLimited")
      assert.strictEqual(limited.reason.retryAfterMillis, 7000)
    })
  )

  it.live("a malformed body is InvalidOutput; an unreachable server is a retryable Network failure", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "raw", body: '{"type":"message","content":"not a list"}' })
      const model = yield* makeModel()
      const malformed = yield* Effect.flip(model.complete(request))
      expectReason(malformed, "InvalidOutput")
      assert.strictEqual(malformed.requestId, "req_test0", "the id of the response that was malformed")
      const unreachable = yield* makeModel({ baseURL: "http://127.0.0.1:9" })
      const error = yield* Effect.flip(unreachable.complete(request))
      expectReason(error, "Network")
      assert.strictEqual(error.reason._tag === "Network" ? error.reason.kind : undefined, "connect")
      assert.isTrue(error.isRetryable)
    })
  )

  it.effect("without a key for Anthropic itself, building fails naming ANTHROPIC_API_KEY", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(
        AnthropicChatModel.make({ model: "claude-test" }).pipe(
          Effect.provideService(ConfigProvider.ConfigProvider, noEnvironment)
        )
      )
      assert.include(String(failure), "ANTHROPIC_API_KEY")
      const fromEnvironment = yield* AnthropicChatModel.make({ model: "claude-test" }).pipe(
        Effect.provideService(
          ConfigProvider.ConfigProvider,
          ConfigProvider.fromEnv({ env: { ANTHROPIC_API_KEY: apiKey } })
        )
      )
      assert.strictEqual(fromEnvironment.provider, "anthropic")
    })
  )
})
