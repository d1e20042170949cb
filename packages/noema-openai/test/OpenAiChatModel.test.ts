/**
 * OpenAiChatModel against the local OpenAI wire-format server: core's conformance
 * suite, then what is specific to OpenAI (request translation, SSE details,
 * finish reasons, error mapping, retries, timeouts, configuration).
 */
import { assert, describe, it } from "@effect/vitest"
import { ChatModel, ConversationContext, Message, StructuredOutput } from "@noema/core"
import { ChatModelConformance } from "@noema/core/testing"
import { ConfigProvider, Effect, Exit, Fiber, Layer, Redacted, Schema, Stream } from "effect"
import { TestClock } from "effect/testing"
import OpenAI from "openai"
import { afterAll, afterEach, beforeAll } from "vitest"
import { OpenAiChatModel, OpenAiClient } from "../src/index.js"
import { OpenAiTestServer } from "../src/testing.js"
import * as ProviderStreams from "./fixtures/providerStreams.js"

let server: OpenAiTestServer.TestServer

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => server.reset())

const apiKey = "sk-test-0123456789abcdefghij"

/** No environment at all, so nothing on the machine leaks into a test. */
const noEnvironment = ConfigProvider.fromEnv({ env: {} })

const makeModel = (options: Partial<OpenAiChatModel.Options> = {}) =>
  OpenAiChatModel.make({
    model: "gpt-test",
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

const waitForRequests = (count: number) => Effect.promise(() => server.waitForRequests(count))

const expectReason = (error: ChatModel.ChatModelError, tag: string) => {
  assert.equal(error.reason._tag, tag, error.message)
  assert.ok(!error.message.includes("\n"), "one line")
  assert.ok(!error.message.includes(apiKey), "no API key")
}

const networkKind = (error: ChatModel.ChatModelError) =>
  error.reason._tag === "Network" ? error.reason.kind : undefined

const failureReply = (
  failure: ChatModelConformance.FailureKind,
  retryAfterSeconds: number | undefined
): OpenAiTestServer.Reply => {
  switch (failure) {
    case "rate-limited":
      return {
        type: "error",
        status: 429,
        ...(retryAfterSeconds !== undefined && { headers: { "retry-after": String(retryAfterSeconds) } })
      }
    case "authentication":
      return { type: "error", status: 401 }
    case "invalid-request":
      return { type: "error", status: 400, message: "Unknown parameter: 'foo'." }
    case "unavailable":
      return { type: "error", status: 503 }
  }
}

const replyFor = (scenario: ChatModelConformance.Scenario): OpenAiTestServer.Reply => {
  switch (scenario.kind) {
    case "text":
      return {
        type: "text",
        text: scenario.text,
        usage: { promptTokens: scenario.usage.inputTokens, completionTokens: scenario.usage.outputTokens }
      }
    case "tool-calls":
      return { type: "tool-calls", calls: scenario.calls.map((call) => ({ ...call })) }
    case "refusal":
      return { type: "refusal", refusal: scenario.refusal }
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
        requestReceived: waitForRequests(index + 1),
        // Resolves only when the server saw the client close the connection early.
        requestCancelled: Effect.promise(() => server.waitForClose(index))
      }
    })
}

describe("OpenAiChatModel conformance", () => {
  for (const testCase of ChatModelConformance.cases) {
    it.live(testCase.name, () => testCase.run(harness))
  }
})

describe("OpenAiChatModel request translation", () => {
  it.live("sends messages, tool calls and results, tools and every option", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "done" })
      const model = yield* makeModel()
      const history = ConversationContext.fromArray([
        Message.system("Be brief."),
        Message.user("Weather in Lisbon?", { id: "m1", metadata: { source: "test" } }),
        Message.assistant("", {
          toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Lisbon"}' }]
        }),
        Message.toolResult({ toolCallId: "call_1", name: "get_weather", content: "21°C" }),
        Message.assistant("Nope.", { refusal: "I won't." }),
        Message.toolResult({ toolCallId: "call_2", name: "broken", content: "boom", isError: true })
      ])
      yield* model.complete({
        messages: history,
        tools: [
          {
            name: "get_weather",
            description: "Weather for a city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
            strict: true
          },
          { name: "get_time", description: "Current time", parameters: { type: "object", properties: {} } }
        ],
        toolChoice: { tool: "get_weather" },
        parallelToolCalls: false,
        temperature: 0.2,
        topP: 0.9,
        maxTokens: 256,
        stop: ["END"],
        seed: 7,
        responseFormat: {
          type: "json-schema",
          name: "answer",
          schema: { type: "object", properties: { text: { type: "string" } } },
          description: "The answer",
          strict: true
        },
        providerOptions: { openai: { user: "user-42", temperature: 0.5 }, anthropic: { ignored: true } }
      })
      const body = bodyOf(0)
      assert.equal(body.model, "gpt-test")
      assert.deepStrictEqual(body.messages, [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Weather in Lisbon?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "call_1",
              type: "function",
              function: { name: "get_weather", arguments: '{"city":"Lisbon"}' }
            }
          ]
        },
        { role: "tool", tool_call_id: "call_1", content: "21°C" },
        { role: "assistant", content: "Nope.", refusal: "I won't." },
        { role: "tool", tool_call_id: "call_2", content: "boom" }
      ])
      assert.deepStrictEqual(body.tools, [
        {
          type: "function",
          function: {
            name: "get_weather",
            description: "Weather for a city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
            strict: true
          }
        },
        {
          type: "function",
          function: {
            name: "get_time",
            description: "Current time",
            parameters: { type: "object", properties: {} }
          }
        }
      ])
      assert.deepStrictEqual(body.tool_choice, { type: "function", function: { name: "get_weather" } })
      assert.equal(body.parallel_tool_calls, false)
      assert.equal(body.top_p, 0.9)
      assert.equal(body.max_completion_tokens, 256)
      assert.equal(body.max_tokens, undefined)
      assert.deepStrictEqual(body.stop, ["END"])
      assert.equal(body.seed, 7)
      assert.deepStrictEqual(body.response_format, {
        type: "json_schema",
        json_schema: {
          name: "answer",
          schema: { type: "object", properties: { text: { type: "string" } } },
          description: "The answer",
          strict: true
        }
      })
      // Provider options are merged last: they add fields and override normalised ones.
      assert.equal(body.user, "user-42")
      assert.equal(body.temperature, 0.5)
      assert.equal(body.ignored, undefined)
      assert.equal(body.stream, undefined)
    })
  )

  it.live(
    "maps the simple response formats and tool choices, and leaves out tool options without tools",
    () =>
      Effect.gen(function* () {
        server.setFallback({ type: "text", text: "ok" })
        const model = yield* makeModel()
        const tool = { name: "t", description: "d", parameters: { type: "object" } }
        yield* model.complete({ ...request, responseFormat: { type: "json" } })
        yield* model.complete({
          ...request,
          responseFormat: { type: "text" },
          tools: [tool],
          toolChoice: "required"
        })
        yield* model.complete({ ...request, tools: [tool], toolChoice: "none" })
        yield* model.complete({ ...request, toolChoice: "auto", parallelToolCalls: true, stop: [] })
        assert.deepStrictEqual(bodyOf(0).response_format, { type: "json_object" })
        assert.deepStrictEqual(bodyOf(1).response_format, { type: "text" })
        assert.equal(bodyOf(1).tool_choice, "required")
        assert.equal(bodyOf(2).tool_choice, "none")
        const bare = bodyOf(3)
        assert.ok(!("tools" in bare) && !("tool_choice" in bare) && !("parallel_tool_calls" in bare))
        assert.ok(!("stop" in bare), "an empty stop list is not sent")
      })
  )

  it.live("streams with stream: true and usage included, and a provider named after the server", () =>
    Effect.gen(function* () {
      server.setFallback({ type: "text", text: "ok" })
      const model = yield* makeModel({ provider: "ollama" })
      assert.equal(model.provider, "ollama")
      yield* Stream.runDrain(
        model.stream({ ...request, providerOptions: { ollama: { keep_alive: "5m" }, openai: { user: "u" } } })
      )
      const body = bodyOf(0)
      assert.equal(body.stream, true)
      assert.deepStrictEqual(body.stream_options, { include_usage: true })
      assert.equal(body.keep_alive, "5m")
      assert.equal(body.user, "u")
    })
  )

  it.live("sends the API key, organization, project and extra headers", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "ok" })
      const model = yield* makeModel({
        organization: "org-1",
        project: "proj-1",
        headers: { "x-trace": "abc" }
      })
      yield* model.complete(request)
      const headers = server.requests[0]?.headers ?? {}
      assert.equal(headers.authorization, `Bearer ${apiKey}`)
      assert.equal(headers["openai-organization"], "org-1")
      assert.equal(headers["openai-project"], "proj-1")
      assert.equal(headers["x-trace"], "abc")
    })
  )
})

describe("OpenAiChatModel responses", () => {
  it.live("streams interleaved parallel tool calls as indexed deltas and reassembles them", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "tool-calls",
        text: "Checking.",
        calls: [
          { id: "call_a", name: "get_weather", arguments: '{"city":"Lisbon","unit":"celsius"}' },
          { id: "call_b", name: "get_time", arguments: '{"timezone":"Europe/Lisbon"}' }
        ]
      })
      const model = yield* makeModel()
      const chunks = yield* Stream.runCollect(model.stream(request))
      const deltas = chunks.flatMap((chunk) => (chunk.type === "tool-call-delta" ? [chunk] : []))
      const order = deltas.map((delta) => delta.index)
      assert.ok(order.indexOf(1) < order.lastIndexOf(0), `deltas interleave: ${order.join(",")}`)
      assert.deepStrictEqual(
        deltas.filter((delta) => delta.id !== undefined).map(({ index, id, name }) => ({ index, id, name })),
        [
          { index: 0, id: "call_a", name: "get_weather" },
          { index: 1, id: "call_b", name: "get_time" }
        ]
      )
      const response = yield* ChatModel.collect(Stream.fromArray(chunks))
      assert.equal(response.text, "Checking.")
      assert.deepStrictEqual(response.toolCalls, [
        { id: "call_a", name: "get_weather", arguments: '{"city":"Lisbon","unit":"celsius"}' },
        { id: "call_b", name: "get_time", arguments: '{"timezone":"Europe/Lisbon"}' }
      ])
      assert.equal(response.finishReason, "tool-calls")
    })
  )

  it.live("reads the usage-only final chunk, with cached and reasoning tokens, after finish", () =>
    Effect.gen(function* () {
      const usage = { promptTokens: 40, completionTokens: 12, cachedTokens: 32, reasoningTokens: 8 }
      server.enqueue({ type: "text", text: "Hello there friend", usage }, { type: "text", text: "Hi", usage })
      const model = yield* makeModel()
      const chunks = yield* Stream.runCollect(model.stream(request))
      const kinds = chunks.map((chunk) => chunk.type)
      assert.deepStrictEqual(kinds.slice(-2), ["finish", "usage"])
      assert.equal(kinds[0], "response-metadata")
      const expected = {
        inputTokens: 40,
        outputTokens: 12,
        totalTokens: 52,
        cachedInputTokens: 32,
        reasoningTokens: 8
      }
      assert.deepStrictEqual(chunks.at(-1), { type: "usage", usage: expected })
      const response = yield* model.complete(request)
      assert.deepStrictEqual(response.usage, expected)
      assert.equal(response.model, "gpt-test")
      assert.match(response.id ?? "", /^chatcmpl-/)
    })
  )

  it.live("streams without usage when the server sends none", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "no usage here" })
      const model = yield* makeModel()
      const response = yield* ChatModel.collect(
        model.stream({ ...request, providerOptions: { openai: { stream_options: null } } })
      )
      assert.equal(bodyOf(0).stream_options, null)
      assert.equal(response.text, "no usage here")
      assert.equal(response.usage, undefined)
    })
  )

  it.live("keeps refusal deltas apart from text deltas", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "refusal", refusal: "I cannot help with that request." })
      const model = yield* makeModel()
      const chunks = yield* Stream.runCollect(model.stream(request))
      assert.ok(chunks.filter((chunk) => chunk.type === "refusal-delta").length > 1)
      assert.ok(!chunks.some((chunk) => chunk.type === "text-delta"))
      const message = ChatModel.toMessage(yield* ChatModel.collect(Stream.fromArray(chunks)))
      assert.deepStrictEqual(message, {
        role: "assistant",
        content: "",
        refusal: "I cannot help with that request.",
        finishReason: "stop",
        rawFinishReason: "stop",
        usage: message.usage as ChatModel.Usage,
        // The server answers with the model it was asked for.
        model: "gpt-test"
      })
    })
  )

  it.live("maps finish reasons: length and content_filter, streamed and not", () =>
    Effect.gen(function* () {
      const model = yield* makeModel()
      for (const [wire, expected] of [
        ["length", "length"],
        ["content_filter", "content-filter"],
        ["stop", "stop"]
      ] as const) {
        server.enqueue({ type: "text", text: "partial answer", finishReason: wire })
        server.enqueue({ type: "text", text: "partial answer", finishReason: wire })
        assert.equal((yield* model.complete(request)).finishReason, expected)
        const streamed = yield* ChatModel.collect(model.stream(request))
        assert.equal(streamed.finishReason, expected)
        assert.equal(streamed.text, "partial answer")
      }
    })
  )

  it.live("reports tool calls as such when a compatible server says stop, and unknown reasons as other", () =>
    Effect.gen(function* () {
      const completion = (finishReason: string, toolCalls?: ReadonlyArray<unknown>) =>
        JSON.stringify({
          id: "chatcmpl-x",
          object: "chat.completion",
          model: "llama3.2",
          choices: [
            {
              index: 0,
              message: { role: "assistant", content: "", ...(toolCalls && { tool_calls: toolCalls }) },
              finish_reason: finishReason
            }
          ]
        })
      server.enqueue(
        {
          type: "raw",
          body: completion("stop", [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }])
        },
        { type: "raw", body: completion("eos") }
      )
      const model = yield* makeModel()
      const withCalls = yield* model.complete(request)
      assert.equal(withCalls.finishReason, "tool-calls")
      assert.deepStrictEqual(withCalls.toolCalls, [{ id: "c1", name: "f", arguments: "{}" }])
      assert.equal(withCalls.usage, undefined, "a server without usage is not an error")
      assert.equal((yield* model.complete(request)).finishReason, "other")
    })
  )
})

const sse = (...events: ReadonlyArray<unknown>): OpenAiTestServer.Reply => ({
  type: "raw",
  headers: { "content-type": "text/event-stream" },
  body: events
    .map((event) => `data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`)
    .join("")
})

const contentChunk = (content: string) => ({
  id: "chatcmpl-raw",
  object: "chat.completion.chunk",
  model: "gpt-test",
  choices: [{ index: 0, delta: { content }, finish_reason: null }]
})

describe("OpenAiChatModel failures", () => {
  it.live("maps HTTP errors to reasons, with the parameter, status and a one-line message", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 400, message: "Invalid value for 'temperature'.\nSee docs." },
        { type: "error", status: 404, message: "The model `nope` does not exist." },
        { type: "error", status: 422, message: "Unprocessable." },
        { type: "error", status: 403, message: "Forbidden." },
        { type: "error", status: 500 },
        { type: "error", status: 400, code: "content_policy_violation", message: "Flagged." },
        { type: "error", status: 418, message: "I'm a teapot." }
      )
      const model = yield* makeModel()
      const next = Effect.flip(model.complete(request))
      // The SDK parses `param` from the error body; the test server always sends null, so
      // the parameter shows up only where the server names one.
      const invalid = yield* next
      expectReason(invalid, "InvalidRequest")
      assert.include(invalid.message, "Invalid value for 'temperature'. See docs.")
      assert.include(invalid.message, "gpt-test")
      assert.ok(!invalid.isRetryable)
      expectReason(yield* next, "InvalidRequest")
      expectReason(yield* next, "InvalidRequest")
      expectReason(yield* next, "Authentication")
      const unavailable = yield* next
      expectReason(unavailable, "Unavailable")
      assert.equal(unavailable.reason._tag === "Unavailable" && unavailable.reason.status, 500)
      assert.ok(unavailable.isRetryable)
      expectReason(yield* next, "ContentFiltered")
      expectReason(yield* next, "Unknown")
    })
  )

  it.live("reads the parameter from an error body that names one", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "raw",
        status: 400,
        body: JSON.stringify({
          error: { message: "Bad seed.", type: "invalid_request_error", param: "seed", code: null }
        })
      })
      const model = yield* makeModel()
      const error = yield* Effect.flip(model.complete(request))
      assert.deepStrictEqual(
        error.reason._tag === "InvalidRequest" ? error.reason.parameter : undefined,
        "seed"
      )
    })
  )

  it.live("reads retry-after-ms, retry-after seconds and retry-after as an HTTP date", () =>
    Effect.gen(function* () {
      const inTwoMinutes = new Date(Date.now() + 120_000).toUTCString()
      server.enqueue(
        { type: "error", status: 429, headers: { "retry-after-ms": "1500", "retry-after": "2" } },
        { type: "error", status: 429, headers: { "retry-after": "2.5" } },
        { type: "error", status: 429, headers: { "retry-after": inTwoMinutes } },
        { type: "error", status: 429 },
        { type: "error", status: 429, code: "insufficient_quota", message: "You exceeded your quota." }
      )
      const model = yield* makeModel()
      const retryAfter = Effect.map(Effect.flip(model.complete(request)), (error) =>
        error.reason._tag === "RateLimited" ? error.reason.retryAfterMillis : error.reason._tag
      )
      assert.equal(yield* retryAfter, 1500)
      assert.equal(yield* retryAfter, 2500)
      const fromDate = yield* retryAfter
      assert.ok(typeof fromDate === "number" && fromDate > 100_000 && fromDate <= 120_000, String(fromDate))
      assert.equal(yield* retryAfter, undefined)
      // Out of credit: waiting will not help, so it is not a retryable rate limit.
      assert.equal(yield* retryAfter, "QuotaExceeded")
    })
  )

  it.live("malformed JSON, a wrong shape or a non-JSON body are InvalidOutput", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "raw", body: "{ this is not json" },
        { type: "raw", body: JSON.stringify({ object: "list", data: [] }) },
        { type: "raw", body: JSON.stringify({ choices: [] }) },
        { type: "raw", headers: { "content-type": "text/plain" }, body: "Service ready" }
      )
      const model = yield* makeModel()
      for (let i = 0; i < 4; i++) expectReason(yield* Effect.flip(model.complete(request)), "InvalidOutput")
    })
  )

  it.live("malformed SSE data fails the stream with InvalidOutput after what came before", () =>
    Effect.gen(function* () {
      server.enqueue(sse(contentChunk("Hello"), "{ broken"), sse(contentChunk("Hi"), { choices: "nope" }))
      const model = yield* makeModel()
      for (let i = 0; i < 2; i++) {
        const seen: Array<ChatModel.StreamChunk> = []
        const error = yield* Effect.flip(
          Stream.runForEach(model.stream(request), (chunk) => Effect.sync(() => seen.push(chunk)))
        )
        expectReason(error, "InvalidOutput")
        assert.ok(seen.some((chunk) => chunk.type === "text-delta"))
      }
    })
  )

  it.live("a field of the wrong type anywhere noema reads is InvalidOutput, not a crash", () =>
    Effect.gen(function* () {
      const bodies: ReadonlyArray<unknown> = [
        [],
        null,
        { id: 7, choices: [] },
        { choices: {} },
        { choices: [{ index: 0 }] },
        { choices: [{ index: "0", message: { content: "x" } }] },
        { choices: [{ message: { content: 42 } }] },
        { choices: [{ message: { content: "x", refusal: false } }] },
        { choices: [{ message: { content: "x" }, finish_reason: 3 }] },
        { choices: [{ message: { content: "x", tool_calls: {} } }] },
        { choices: [{ message: { content: "", tool_calls: [{ id: 1, function: { name: "f" } }] } }] },
        { choices: [{ message: { content: "", tool_calls: [{ function: { name: "f", arguments: {} } }] } }] },
        { choices: [{ message: { content: "x" } }], usage: { prompt_tokens: "12" } },
        { choices: [{ message: { content: "x" } }], usage: { prompt_tokens_details: { cached_tokens: "1" } } }
      ]
      server.enqueue(
        ...bodies.map((body): OpenAiTestServer.Reply => ({ type: "raw", body: JSON.stringify(body) }))
      )
      const model = yield* makeModel()
      for (const body of bodies) {
        const error = yield* Effect.flip(model.complete(request))
        expectReason(error, "InvalidOutput")
        assert.ok(error.message.length > 0, JSON.stringify(body))
      }
    })
  )

  it.live("null and absent fields are tolerated, as compatible servers send them", () =>
    Effect.gen(function* () {
      server.enqueue(
        {
          type: "raw",
          body: JSON.stringify({
            id: null,
            model: null,
            choices: [
              {
                index: null,
                message: { content: null, refusal: null, tool_calls: null },
                finish_reason: null,
                logprobs: { anything: "ignored" }
              }
            ],
            usage: {
              prompt_tokens: 3,
              completion_tokens: null,
              total_tokens: null,
              prompt_tokens_details: null,
              completion_tokens_details: { reasoning_tokens: null }
            }
          })
        },
        sse(
          {
            id: null,
            model: null,
            choices: [{ index: null, delta: null, finish_reason: null }],
            usage: null
          },
          { choices: [{ delta: { content: "Hi", refusal: null, tool_calls: null } }] },
          { choices: null },
          {
            choices: [
              { delta: { tool_calls: [{ id: null, type: null, function: null }] }, finish_reason: "stop" }
            ]
          },
          "[DONE]"
        )
      )
      const model = yield* makeModel()
      assert.deepStrictEqual(yield* model.complete(request), {
        text: "",
        toolCalls: [],
        finishReason: "stop",
        usage: { inputTokens: 3, outputTokens: 0, totalTokens: 3 }
      })
      const streamed = yield* ChatModel.collect(model.stream(request))
      assert.equal(streamed.text, "Hi")
      assert.deepStrictEqual(streamed.toolCalls, [{ id: "call_0", name: "", arguments: "" }])
    })
  )

  it.live(
    "a streamed chunk of the wrong shape fails the stream with InvalidOutput after what came before",
    () =>
      Effect.gen(function* () {
        const chunks: ReadonlyArray<unknown> = [
          [],
          { choices: [{ delta: { content: 5 } }] },
          { choices: [{ delta: "text" }] },
          { choices: [{ delta: { tool_calls: [{ index: "0" }] } }] },
          { choices: [{ delta: { tool_calls: [{ function: { arguments: 1 } }] } }] },
          { choices: [{ delta: null, finish_reason: 7 }] },
          { choices: [], usage: { completion_tokens: [] } }
        ]
        server.enqueue(...chunks.map((chunk) => sse(contentChunk("Hello"), chunk)))
        const model = yield* makeModel()
        for (const chunk of chunks) {
          const seen: Array<ChatModel.StreamChunk> = []
          const error = yield* Effect.flip(
            Stream.runForEach(model.stream(request), (streamed) => Effect.sync(() => seen.push(streamed)))
          )
          expectReason(error, "InvalidOutput")
          assert.ok(
            seen.some((streamed) => streamed.type === "text-delta"),
            `the chunk before ${JSON.stringify(chunk)}`
          )
        }
      })
  )

  it.live("an error event inside the stream is mapped by its type", () =>
    Effect.gen(function* () {
      server.enqueue(
        sse(contentChunk("Hel"), { error: { message: "The server is overloaded.", type: "server_error" } })
      )
      const model = yield* makeModel()
      expectReason(yield* Effect.flip(Stream.runDrain(model.stream(request))), "Unavailable")
    })
  )

  it.live("a stream that ends before its finish reason is a Network failure, not a short answer", () =>
    Effect.gen(function* () {
      server.enqueue(sse(contentChunk("Half an ans")))
      const model = yield* makeModel()
      const error = yield* Effect.flip(ChatModel.collect(model.stream(request)))
      expectReason(error, "Network")
      assert.strictEqual(networkKind(error), "cut-short")
      assert.ok(error.isRetryable)
    })
  )

  it.live("a connection refused is a retryable Network failure", () =>
    Effect.gen(function* () {
      const closed = yield* Effect.promise(() => OpenAiTestServer.start())
      const url = closed.url
      yield* Effect.promise(() => closed.close())
      const model = yield* makeModel({ baseURL: url })
      const error = yield* Effect.flip(model.complete(request))
      expectReason(error, "Network")
      assert.strictEqual(networkKind(error), "connect")
      assert.ok(error.isRetryable)
      const streamed = yield* Effect.flip(Stream.runDrain(model.stream(request)))
      expectReason(streamed, "Network")
      assert.strictEqual(networkKind(streamed), "connect", "no answer began: a failed connection")
    })
  )

  it.live("a base URL with credentials: the failure quotes it without them", () =>
    Effect.gen(function* () {
      const url = new URL(server.url)
      const model = yield* makeModel({
        baseURL: `http://user:hunter2secret@${url.host}${url.pathname}?api_key=tok3nvalue`
      })
      const error = yield* Effect.flip(model.complete(request))
      expectReason(error, "Network")
      assert.include(error.message, `http://user:***@${url.host}`)
      assert.notInclude(error.message, "hunter2secret")
      assert.notInclude(error.message, "tok3nvalue")
    })
  )

  it.live("a timeout is a Network failure and closes the connection", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "hang" }, { type: "hang" })
      const model = yield* makeModel({ timeout: "150 millis" })
      const error = yield* Effect.flip(model.complete(request))
      expectReason(error, "Network")
      assert.strictEqual(networkKind(error), "timeout")
      assert.include(error.message, "timed out")
      yield* Effect.promise(() => server.waitForClose(0))
      expectReason(yield* Effect.flip(Stream.runDrain(model.stream(request))), "Network")
      yield* Effect.promise(() => server.waitForClose(1))
    })
  )
})

describe("OpenAiChatModel cancellation", () => {
  /** A model whose SDK records the signal of every request it sends. */
  const recordingModel = () => {
    const signals: Array<AbortSignal> = []
    const sdk = new OpenAI({
      apiKey,
      baseURL: server.url,
      maxRetries: 0,
      fetch: (input, init) => {
        if (init?.signal !== undefined && init.signal !== null) signals.push(init.signal)
        return fetch(input, init)
      }
    })
    const client: OpenAiClient.Client = {
      sdk,
      provider: "openai",
      baseURL: server.url,
      retry: { maxAttempts: 1 },
      scrub: (text) => text
    }
    return { model: OpenAiChatModel.fromClient(client, { model: "gpt-test" }), signals }
  }

  it.live("a response read to the end is not aborted, streamed or not", () =>
    Effect.gen(function* () {
      server.setFallback({ type: "text", text: "All of it, to the end." })
      const { model, signals } = recordingModel()
      const streamed = yield* ChatModel.collect(model.stream(request))
      assert.equal(streamed.text, "All of it, to the end.")
      yield* model.complete(request)
      assert.equal(signals.length, 2)
      assert.deepStrictEqual(
        signals.map((signal) => signal.aborted),
        [false, false]
      )
      assert.deepStrictEqual(
        server.requests.map((recorded) => recorded.clientClosedEarly),
        [false, false]
      )
    })
  )

  it.live("a consumer that stops reading early aborts the request", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "one two three four five six seven eight", chunkDelayMs: 40 })
      const { model, signals } = recordingModel()
      const first = yield* Stream.runCollect(Stream.take(model.stream(request), 1))
      assert.equal(first.length, 1)
      yield* Effect.promise(() => server.waitForClose(0))
      assert.ok(signals[0]?.aborted, "the request's signal is aborted")
    })
  )
})

describe("OpenAiChatModel retries", () => {
  const fast = { maxAttempts: 3, retryBaseDelay: "1 millis" } as const

  it.effect("waits for retry-after on a 429, then succeeds on the second request", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 429, headers: { "retry-after": "5" } },
        { type: "text", text: "ok" }
      )
      const model = yield* makeModel(fast)
      const fiber = yield* Effect.forkChild(model.complete(request))
      yield* waitForRequests(1)
      // Advance the test clock a second at a time, letting the real HTTP exchange catch up,
      // until the retry arrives; it must not arrive before the five seconds asked for.
      let advanced = 0
      while (server.requests.length < 2 && advanced < 30) {
        yield* TestClock.adjust("1 second")
        advanced += 1
        yield* TestClock.withLive(Effect.sleep("20 millis"))
      }
      assert.equal(server.requests.length, 2)
      assert.ok(advanced >= 5, `retried after ${advanced}s of the 5s asked for`)
      const response = yield* Fiber.join(fiber)
      assert.equal(response.text, "ok")
    })
  )

  it.live("retries 5xx twice, then succeeds", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 500 },
        { type: "error", status: 502 },
        { type: "text", text: "ok" }
      )
      const model = yield* makeModel(fast)
      assert.equal((yield* model.complete(request)).text, "ok")
      assert.equal(server.requests.length, 3)
    })
  )

  it.live("does not retry a 401", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "error", status: 401 }, { type: "text", text: "never" })
      const model = yield* makeModel(fast)
      expectReason(yield* Effect.flip(model.complete(request)), "Authentication")
      assert.equal(server.requests.length, 1)
    })
  )

  it.live("stops after maxAttempts", () =>
    Effect.gen(function* () {
      server.setFallback({ type: "error", status: 503 })
      const model = yield* makeModel({ ...fast, maxAttempts: 2 })
      expectReason(yield* Effect.flip(model.complete(request)), "Unavailable")
      assert.equal(server.requests.length, 2)
      expectReason(yield* Effect.flip(Stream.runDrain(model.stream(request))), "Unavailable")
      assert.equal(server.requests.length, 4)
    })
  )

  it.live("retries a stream that failed before producing anything", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "error", status: 503 }, { type: "text", text: "second time lucky" })
      const model = yield* makeModel(fast)
      const response = yield* ChatModel.collect(model.stream(request))
      assert.equal(response.text, "second time lucky")
      assert.equal(server.requests.length, 2)
    })
  )

  it.live("does not retry a stream dropped after deltas were emitted", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "drop", afterChunks: 2, text: "This will be cut" }, { type: "text", text: "no" })
      const model = yield* makeModel(fast)
      const seen: Array<ChatModel.StreamChunk> = []
      const error = yield* Effect.flip(
        Stream.runForEach(model.stream(request), (chunk) => Effect.sync(() => seen.push(chunk)))
      )
      expectReason(error, "Network")
      assert.include(error.message, "mid-stream")
      assert.ok(seen.some((chunk) => chunk.type === "text-delta"))
      assert.equal(server.requests.length, 1)
    })
  )
})

describe("OpenAiChatModel configuration", () => {
  const withEnvironment = (env: Record<string, string>) =>
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env }))

  const secret = "sk-proj-SECRETsecretSECRET0123456789"

  it.live("the layer reads OPENAI_API_KEY and OPENAI_BASE_URL, and never prints the key", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "text", text: "ok" },
        {
          type: "error",
          status: 401,
          message: `Incorrect API key provided: ${secret}. You can find your API key at https://platform.openai.com.`
        }
      )
      const model = yield* Effect.service(ChatModel.ChatModel).pipe(
        Effect.provide(OpenAiChatModel.layer({ model: "gpt-test", maxAttempts: 1 })),
        withEnvironment({ OPENAI_API_KEY: secret, OPENAI_BASE_URL: server.url })
      )
      yield* model.complete(request)
      assert.equal(server.requests[0]?.headers.authorization, `Bearer ${secret}`)
      const error = yield* Effect.flip(model.complete(request))
      expectReason(error, "Authentication")
      for (const rendering of [
        error.message,
        String(error),
        JSON.stringify(error),
        JSON.stringify(error.reason)
      ]) {
        assert.ok(!rendering.includes(secret), rendering)
        assert.ok(!rendering.includes("SECRET"), rendering)
      }
      assert.include(error.message, "Incorrect API key provided")
    })
  )

  it.effect("building for OpenAI without an API key fails with a ConfigError naming the variable", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(
        Effect.service(ChatModel.ChatModel).pipe(
          Effect.provide(OpenAiChatModel.layer({ model: "gpt-test" })),
          withEnvironment({})
        )
      )
      assert.ok(Exit.isFailure(exit))
      const rendered = String(Exit.isFailure(exit) ? exit.cause : "")
      assert.include(rendered, "OPENAI_API_KEY")
    })
  )

  it.live("a local server needs no API key: a placeholder is sent", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "local" })
      const client = yield* Effect.service(OpenAiClient.OpenAiClient).pipe(
        Effect.provide(OpenAiClient.layer({ baseURL: server.url, provider: "llama.cpp" })),
        withEnvironment({})
      )
      const model = OpenAiChatModel.fromClient(client, { model: "qwen2.5" })
      assert.equal((yield* model.complete(request)).text, "local")
      assert.equal(server.requests[0]?.headers.authorization, `Bearer ${OpenAiClient.placeholderApiKey}`)
      assert.equal(bodyOf(0).model, "qwen2.5")
      assert.equal(model.provider, "llama.cpp")
    })
  )

  it.effect("the layer composes with other layers", () =>
    Effect.gen(function* () {
      const layer = Layer.provide(
        OpenAiChatModel.layer({ model: "gpt-test", baseURL: "http://127.0.0.1:9/v1" }),
        ConfigProvider.layer(ConfigProvider.fromEnv({ env: {} }))
      )
      const model = yield* Effect.service(ChatModel.ChatModel).pipe(Effect.provide(layer))
      assert.equal(model.model, "gpt-test")
      assert.equal(model.provider, "openai")
    })
  )
})

describe("OpenAiChatModel and loosely compatible servers", () => {
  it.live("numbers tool calls from a server that sends no index, one call per chunk", () =>
    Effect.gen(function* () {
      const callChunk = (call: Record<string, unknown>, finish: string | null = null) => ({
        choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: finish }]
      })
      server.enqueue(
        sse(
          callChunk({ id: "a", type: "function", function: { name: "f", arguments: '{"x":' } }),
          callChunk({ function: { arguments: "1}" } }),
          callChunk(
            { id: "b", type: "function", function: { name: "g", arguments: '{"y":2}' } },
            "tool_calls"
          ),
          "[DONE]"
        )
      )
      const model = yield* makeModel()
      const response = yield* ChatModel.collect(model.stream(request))
      assert.deepStrictEqual(response.toolCalls, [
        { id: "a", name: "f", arguments: '{"x":1}' },
        { id: "b", name: "g", arguments: '{"y":2}' }
      ])
    })
  )

  it.live("complete never asks for a stream, whatever the provider options say", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "plain" })
      const model = yield* makeModel()
      const response = yield* model.complete({ ...request, providerOptions: { openai: { stream: true } } })
      assert.equal(response.text, "plain")
      assert.isFalse("stream" in bodyOf(server.requests.length - 1))
    })
  )
})

describe("OpenAiChatModel and real providers' streams", () => {
  const replay = (events: ReadonlyArray<unknown>) =>
    Effect.gen(function* () {
      server.enqueue({ type: "sse", events })
      const model = yield* makeModel()
      const chunks = yield* Stream.runCollect(model.stream(request))
      const response = yield* ChatModel.collect(Stream.fromArray(chunks))
      return { chunks, response, message: ChatModel.toMessage(response) }
    })

  it.live(
    "OpenAI: parallel interleaved calls keep their ids; finish reason and usage reach the message",
    () =>
      Effect.gen(function* () {
        const { response, message } = yield* replay(ProviderStreams.openAiParallelCalls)
        assert.deepStrictEqual(response.toolCalls, [
          { id: "call_Wx1", name: "get_weather", arguments: '{"city":"Oslo"}' },
          { id: "call_Tm2", name: "get_time", arguments: '{"tz":"UTC"}' }
        ])
        assert.equal(response.id, "chatcmpl-BvOpenAi")
        assert.equal(response.model, "gpt-4o-2024-08-06")
        assert.equal(message.finishReason, "tool-calls")
        assert.equal(message.rawFinishReason, "tool_calls")
        assert.deepStrictEqual(message.usage, {
          inputTokens: 82,
          outputTokens: 44,
          totalTokens: 126,
          cachedInputTokens: 0,
          reasoningTokens: 0
        })
      })
  )

  it.live("Azure: the empty content-filter first chunk does not hide the id and model", () =>
    Effect.gen(function* () {
      const { response } = yield* replay(ProviderStreams.azureContentFilterFirst)
      assert.equal(response.text, "Hello from Azure.")
      assert.equal(response.id, "chatcmpl-AzR3")
      assert.equal(response.model, "gpt-4o-2024-11-20")
      assert.equal(response.usage?.totalTokens, 14)
    })
  )

  it.live("DeepSeek: reasoning_content becomes a reasoning part before the answer", () =>
    Effect.gen(function* () {
      const { chunks, message } = yield* replay(ProviderStreams.deepSeekReasoning)
      const reasoningDeltas = chunks.flatMap((chunk) =>
        chunk.type === "reasoning-delta" ? [chunk.delta] : []
      )
      assert.deepStrictEqual(reasoningDeltas, ["The user asks 9.11", " vs 9.8; 9.8 is larger."])
      assert.deepStrictEqual(message.content, [
        { type: "reasoning", text: "The user asks 9.11 vs 9.8; 9.8 is larger." },
        { type: "text", text: "9.8 is larger." }
      ])
      assert.equal(Message.text(message), "9.8 is larger.")
      assert.equal(message.usage?.reasoningTokens, 35)
      assert.equal(message.rawFinishReason, "stop")
    })
  )

  it.live("reasoning under either name: an empty reasoning_content beside reasoning loses nothing", () =>
    Effect.gen(function* () {
      const { response } = yield* replay([
        ProviderStreams.deepSeekDelta({
          role: "assistant",
          content: null,
          reasoning_content: "",
          reasoning: "Think "
        }),
        ProviderStreams.deepSeekDelta({ content: null, reasoning: "twice." }),
        ProviderStreams.deepSeekDelta({ content: "Done.", reasoning_content: null }, "stop")
      ])
      assert.equal(response.reasoning, "Think twice.")
      assert.equal(response.text, "Done.")
    })
  )

  it.live("Qwen: reasoning, then a call whose later fragments repeat an empty id and name", () =>
    Effect.gen(function* () {
      const { response, message } = yield* replay(ProviderStreams.qwenThinkingToolCall)
      assert.equal(response.reasoning, "Need the weather tool.")
      assert.deepStrictEqual(response.toolCalls, [
        { id: "call_8f08d2b0fc0c4d8fab7123", name: "get_weather", arguments: '{"city": "Hangzhou"}' }
      ])
      assert.equal(message.finishReason, "tool-calls")
    })
  )

  it.live(
    "Ollama: calls side by side without index are numbered apart; stop after calls means tool-calls",
    () =>
      Effect.gen(function* () {
        const { response } = yield* replay(ProviderStreams.ollamaUnindexedCalls)
        assert.deepStrictEqual(response.toolCalls, [
          { id: "call_j4k1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { id: "call_p9q2", name: "get_weather", arguments: '{"city":"Rome"}' }
        ])
        assert.equal(response.finishReason, "tool-calls")
        assert.equal(response.rawFinishReason, "stop")
      })
  )

  it.live("Ollama: thinking as `reasoning`, then text, and usage alone in the last chunk", () =>
    Effect.gen(function* () {
      const { response, message } = yield* replay(ProviderStreams.ollamaThinkingUsageLast)
      assert.equal(response.reasoning, "Greet back.")
      assert.equal(response.text, "Hello!")
      assert.deepStrictEqual(response.toolCalls, [])
      assert.equal(response.model, "qwen3:8b")
      assert.equal(message.finishReason, "stop")
      assert.deepStrictEqual(message.usage, { inputTokens: 14, outputTokens: 9, totalTokens: 23 })
      // The reasoning is kept as a reasoning part before the text, never as the answer.
      assert.deepStrictEqual(message.content, [
        { type: "reasoning", text: "Greet back." },
        { type: "text", text: "Hello!" }
      ])
    })
  )

  it.live("vLLM: reasoning_content, an indexed call, stop_reason, and usage alone in the last chunk", () =>
    Effect.gen(function* () {
      const { response, message } = yield* replay(ProviderStreams.vllmReasoningToolCall)
      assert.equal(response.reasoning, "The user wants the weather.")
      assert.equal(response.text, "")
      assert.deepStrictEqual(response.toolCalls, [
        { id: "chatcmpl-tool-5b6c", name: "get_weather", arguments: '{"city": "Lyon"}' }
      ])
      assert.equal(response.model, "Qwen/Qwen3-8B")
      assert.equal(message.finishReason, "tool-calls")
      assert.deepStrictEqual(message.usage, { inputTokens: 158, outputTokens: 43, totalTokens: 201 })
    })
  )

  it.live("Gemini: parallel calls without index and with empty ids get distinct ids", () =>
    Effect.gen(function* () {
      const { response } = yield* replay(ProviderStreams.geminiEmptyIds)
      assert.deepStrictEqual(
        response.toolCalls.map((call) => call.arguments),
        ['{"city":"Paris"}', '{"city":"Rome"}']
      )
      const ids = response.toolCalls.map((call) => call.id)
      assert.equal(new Set(ids).size, 2, `distinct ids: ${ids.join(", ")}`)
      assert.ok(ids.every((id) => id.length > 0))
    })
  )

  it.live("a non-streamed answer keeps reasoning and the raw finish reason too", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "Four.", reasoning: "2 + 2 = 4", finishReason: "length" })
      const model = yield* makeModel()
      const response = yield* model.complete(request)
      assert.equal(response.text, "Four.")
      assert.equal(response.reasoning, "2 + 2 = 4")
      assert.equal(response.finishReason, "length")
      assert.equal(response.rawFinishReason, "length")
    })
  )
})

describe("OpenAiChatModel content parts", () => {
  it.live("sends images as image_url parts, other files as text references, and never the reasoning", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "ok" })
      const model = yield* makeModel()
      const pixel = "data:image/png;base64,iVBORw0KGgo="
      yield* model.complete({
        messages: [
          Message.user([
            Message.textPart("What is in these?"),
            Message.filePart({ uri: "https://example.com/cat.jpg", mediaType: "image/jpeg" }),
            Message.filePart({ uri: pixel, mediaType: "image/png", name: "pixel.png" }),
            Message.filePart({
              uri: "file:///tmp/report.pdf",
              mediaType: "application/pdf",
              name: "report.pdf"
            })
          ]),
          Message.assistant([Message.reasoningPart("secret thoughts"), Message.textPart("A cat.")]),
          Message.user([
            Message.textPart("And this?"),
            Message.filePart({ uri: "data:text/csv;base64,YSxi", mediaType: "text/csv", name: "t.csv" })
          ])
        ]
      })
      const messages = bodyOf(0).messages as ReadonlyArray<{ role: string; content: unknown }>
      assert.deepStrictEqual(messages[0]?.content, [
        { type: "text", text: "What is in these?" },
        { type: "image_url", image_url: { url: "https://example.com/cat.jpg" } },
        { type: "image_url", image_url: { url: pixel } },
        { type: "text", text: '[file "report.pdf" (application/pdf): file:///tmp/report.pdf]' }
      ])
      assert.deepStrictEqual(messages[1], { role: "assistant", content: "A cat." })
      assert.ok(!JSON.stringify(bodyOf(0)).includes("secret thoughts"))
      // Without an image, parts go as one string: compatible servers often take only strings.
      assert.equal(messages[2]?.content, 'And this?\n[file "t.csv" (text/csv): inline data, not sent]')
    })
  )
})

describe("OpenAiChatModel error reasons and request ids", () => {
  it.live(
    "a prompt too long for the context window is ContextLengthExceeded, however the server says it",
    () =>
      Effect.gen(function* () {
        server.enqueue(
          {
            type: "error",
            status: 400,
            code: "context_length_exceeded",
            message:
              "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."
          },
          {
            type: "error",
            status: 400,
            errorType: "exceed_context_size_error",
            message: "the request exceeds the available context size, try increasing it"
          },
          {
            type: "error",
            status: 400,
            errorType: "BadRequestError",
            message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
          }
        )
        const model = yield* makeModel({ maxAttempts: 3, retryBaseDelay: "1 milli" })
        for (let attempt = 0; attempt < 3; attempt++) {
          const error = yield* Effect.flip(model.complete(request))
          expectReason(error, "ContextLengthExceeded")
          assert.isFalse(error.isRetryable)
        }
        assert.equal(server.requests.length, 3, "none of them was retried")
      })
  )

  it.live("a failure carries the server's x-request-id, also when the stream breaks after the headers", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 503 },
        { type: "drop", afterChunks: 2 },
        { type: "raw", body: `{"choices":3}` }
      )
      const model = yield* makeModel()
      // The server numbers responses over its whole life: `req_test<n>`, one more each time.
      const httpError = yield* Effect.flip(model.complete(request))
      const first = Number(/^req_test(\d+)$/.exec(httpError.requestId ?? "")?.[1])
      assert.ok(Number.isInteger(first), String(httpError.requestId))
      assert.ok(httpError.message.endsWith(`[request req_test${first}]`), httpError.message)
      const streamError = yield* Effect.flip(Stream.runDrain(model.stream(request)))
      expectReason(streamError, "Network")
      assert.equal(streamError.requestId, `req_test${first + 1}`)
      const malformed = yield* Effect.flip(model.complete(request))
      expectReason(malformed, "InvalidOutput")
      assert.equal(malformed.requestId, `req_test${first + 2}`)
    })
  )
})

describe("structured output over the wire", () => {
  const City = Schema.Struct({ city: Schema.String, population: Schema.Number })

  it.live("json-schema mode sends response_format and decodes the streamed text", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: '{"city": "Oslo", "population": 700000}' })
      const model = yield* makeModel()
      const events = yield* Stream.runCollect(
        StructuredOutput.stream(model, {
          schema: City,
          messages: [Message.user("Capital of Norway?")],
          name: "city"
        })
      )
      const last = events.at(-1)
      assert.ok(last?.type === "value")
      assert.deepStrictEqual(last.value, { city: "Oslo", population: 700000 })
      assert.ok(events.some((event) => event.type === "partial"))
      const format = bodyOf(0).response_format as { type: string; json_schema: Record<string, unknown> }
      assert.equal(format.type, "json_schema")
      assert.equal(format.json_schema.name, "city")
      assert.equal(format.json_schema.strict, true)
      assert.deepStrictEqual((format.json_schema.schema as { required: unknown }).required, [
        "city",
        "population"
      ])
      assert.equal(bodyOf(0).tools, undefined)
    })
  )

  it.live("tool mode forces the tool with tool_choice and reads its arguments", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "tool-calls",
        calls: [{ name: "city", arguments: '{"city":"Oslo","population":7}' }]
      })
      const model = yield* makeModel({ capabilities: { jsonSchema: false } })
      const value = yield* StructuredOutput.generate(model, {
        schema: City,
        messages: [Message.user("Capital of Norway?")],
        name: "city"
      })
      assert.deepStrictEqual(value, { city: "Oslo", population: 7 })
      assert.deepStrictEqual(bodyOf(0).tool_choice, { type: "function", function: { name: "city" } })
      assert.equal(bodyOf(0).response_format, undefined)
      const tools = bodyOf(0).tools as ReadonlyArray<{ function: { name: string } }>
      assert.equal(tools[0]?.function.name, "city")
    })
  )
})
