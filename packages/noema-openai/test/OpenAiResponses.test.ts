/**
 * OpenAiChatModel with `api: "responses"` against the local wire-format server:
 * requests are checked field by field, and recorded Responses API streams
 * (text, a reasoning summary then parallel function calls, an incomplete and a
 * failed response) are replayed through it.
 */
import { assert, describe, it } from "@effect/vitest"
import { ChatModel, Message, StructuredOutput } from "@noema/core"
import { ConfigProvider, Effect, Exit, Fiber, Redacted, Schema, Stream } from "effect"
import { afterAll, afterEach, beforeAll } from "vitest"
import { OpenAiChatModel } from "../src/index.js"
import { OpenAiTestServer, ResponsesStreams as Streams } from "../src/testing.js"

let server: OpenAiTestServer.TestServer
beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => server.reset())

const makeModel = () =>
  OpenAiChatModel.make({
    model: "gpt-4.1",
    api: "responses",
    apiKey: Redacted.make("sk-test-0123456789abcdefghij"),
    baseURL: server.url,
    maxAttempts: 1
  }).pipe(
    Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} })),
    Effect.orDie
  )

const bodyOf = (index: number) => server.requests[index]?.body as Record<string, unknown>

const replay = (
  events: ReadonlyArray<unknown>,
  request: ChatModel.ChatRequest = { messages: [Message.user("Hi")] }
) =>
  Effect.gen(function* () {
    server.enqueue({ type: "sse", events })
    const model = yield* makeModel()
    const chunks = yield* Stream.runCollect(model.stream(request))
    return yield* ChatModel.collect(Stream.fromArray(chunks))
  })

describe("OpenAiChatModel, Responses API", () => {
  it.live("streams text with the response's id, model and usage; posts to /v1/responses", () =>
    Effect.gen(function* () {
      const response = yield* replay(Streams.text, {
        messages: [Message.system("Be brief."), Message.user("Hi")],
        maxTokens: 50,
        temperature: 0.2
      })
      assert.strictEqual(response.text, "Hello there!")
      assert.strictEqual(response.id, "resp_text01")
      assert.strictEqual(response.model, "gpt-4.1-2025-04-14")
      assert.strictEqual(response.finishReason, "stop")
      assert.deepStrictEqual(response.usage, {
        inputTokens: 37,
        outputTokens: 11,
        totalTokens: 48,
        cachedInputTokens: 12,
        reasoningTokens: 0
      })
      assert.strictEqual(server.requests[0]?.path, "/v1/responses")
      assert.deepInclude(bodyOf(0), {
        model: "gpt-4.1",
        instructions: "Be brief.",
        input: [{ role: "user", content: "Hi" }],
        stream: true,
        store: false,
        max_output_tokens: 50,
        temperature: 0.2
      })
    })
  )

  it.live("a reasoning summary, then parallel function calls whose arguments stream in fragments", () =>
    Effect.gen(function* () {
      const response = yield* replay(Streams.reasoningThenCalls)
      assert.strictEqual(response.reasoning, "Two cities, two lookups.")
      assert.deepStrictEqual(response.toolCalls, [
        { id: "call_Pa1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { id: "call_Ro2", name: "get_weather", arguments: '{"city":"Rome"}' }
      ])
      assert.strictEqual(response.finishReason, "tool-calls")
      assert.strictEqual(response.usage?.reasoningTokens, 64)
    })
  )

  it.live(
    "sends history as items: tool calls as function_call, results as function_call_output; tools flat",
    () =>
      Effect.gen(function* () {
        yield* replay(Streams.text, {
          messages: [
            Message.system("Be brief."),
            Message.user("Weather in Paris?"),
            Message.assistant("", {
              toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' }]
            }),
            Message.toolResult({ toolCallId: "call_1", name: "get_weather", content: "Sunny" }),
            Message.assistant("Sunny in Paris."),
            Message.system("Answer in French from now on."),
            Message.user("And Rome?")
          ],
          tools: [{ name: "get_weather", description: "Weather", parameters: { type: "object" } }],
          toolChoice: { tool: "get_weather" }
        })
        const body = bodyOf(0)
        assert.strictEqual(body.instructions, "Be brief.")
        assert.deepStrictEqual(body.input, [
          { role: "user", content: "Weather in Paris?" },
          { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "function_call_output", call_id: "call_1", output: "Sunny" },
          { role: "assistant", content: "Sunny in Paris." },
          { role: "system", content: "Answer in French from now on." },
          { role: "user", content: "And Rome?" }
        ])
        assert.deepStrictEqual(body.tools, [
          {
            type: "function",
            name: "get_weather",
            description: "Weather",
            parameters: { type: "object" },
            strict: false
          }
        ])
        assert.deepStrictEqual(body.tool_choice, { type: "function", name: "get_weather" })
      })
  )

  it.live("structured output goes as text.format; the answer is decoded", () =>
    Effect.gen(function* () {
      server.enqueue({
        type: "raw",
        body: JSON.stringify({
          ...Streams.refusalBody,
          id: "resp_json06",
          output: [
            {
              id: "msg_06",
              type: "message",
              status: "completed",
              role: "assistant",
              content: [{ type: "output_text", text: '{"city":"Paris"}', annotations: [] }]
            }
          ]
        })
      })
      const model = yield* makeModel()
      const value = yield* StructuredOutput.generate(model, {
        schema: Schema.Struct({ city: Schema.String }),
        name: "place",
        messages: [Message.user("Where?")]
      })
      assert.deepStrictEqual(value, { city: "Paris" })
      const format = (bodyOf(0).text as { format: Record<string, unknown> }).format
      assert.strictEqual(format.type, "json_schema")
      assert.strictEqual(format.name, "place")
      assert.deepInclude(format.schema as object, { type: "object" })
      assert.isUndefined(bodyOf(0).stream)
    })
  )

  it.live(
    "a non-streamed refusal; an incomplete response ends as length; a failed one is a typed error",
    () =>
      Effect.gen(function* () {
        server.enqueue({ type: "raw", body: JSON.stringify(Streams.refusalBody) })
        const model = yield* makeModel()
        const refused = yield* model.complete({ messages: [Message.user("Do the bad thing")] })
        assert.strictEqual(refused.refusal, "I can't help with that.")
        assert.strictEqual(refused.text, "")

        const cut = yield* replay(Streams.incomplete)
        assert.strictEqual(cut.text, "It was a dark and")
        assert.strictEqual(cut.finishReason, "length")
        assert.strictEqual(cut.rawFinishReason, "max_output_tokens")

        server.enqueue({ type: "sse", events: Streams.failed })
        const exit = yield* Effect.exit(Stream.runDrain(model.stream({ messages: [Message.user("Hi")] })))
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit))
          assert.include(String(exit.cause), "The model failed to generate a response.")
      })
  )

  it.live("interrupting a stream aborts the HTTP request", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "hang" })
      const model = yield* makeModel()
      const fiber = yield* Effect.forkChild(Stream.runDrain(model.stream({ messages: [Message.user("Hi")] })))
      yield* Effect.promise(() => server.waitForRequests(1))
      yield* Fiber.interrupt(fiber)
      yield* Effect.promise(() => server.waitForClose(0))
      assert.isTrue(server.requests[0]?.clientClosedEarly)
    })
  )
  it.live("a non-streamed response with function calls: calls, reasoning, finish reason and usage", () =>
    Effect.gen(function* () {
      // The body `response.completed` carries is what a non-streamed request answers with.
      const completed = Streams.reasoningThenCalls.at(-1) as { readonly response: unknown }
      server.enqueue({ type: "raw", body: JSON.stringify(completed.response) })
      const model = yield* makeModel()
      const response = yield* model.complete({ messages: [Message.user("Weather in Paris and Rome?")] })
      assert.isFalse(bodyOf(0).stream === true)
      assert.deepStrictEqual(response.toolCalls, [
        { id: "call_Pa1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { id: "call_Ro2", name: "get_weather", arguments: '{"city":"Rome"}' }
      ])
      assert.equal(response.reasoning, "Two cities, two lookups.")
      assert.equal(response.finishReason, "tool-calls")
      assert.equal(response.usage?.inputTokens, 37)
      assert.equal(response.usage?.outputTokens, 11)
    })
  )

  it.live("HTTP errors map to the same typed reasons as in chat mode, when completing and streaming", () =>
    Effect.gen(function* () {
      server.enqueue(
        { type: "error", status: 429, headers: { "retry-after-ms": "1500" } },
        { type: "error", status: 401 },
        {
          type: "error",
          status: 400,
          code: "context_length_exceeded",
          message: "Your input exceeds the context window of this model."
        }
      )
      const model = yield* makeModel()
      const limited = yield* Effect.flip(model.complete({ messages: [Message.user("Hi")] }))
      assert.equal(limited.reason._tag, "RateLimited")
      assert.equal(limited.reason._tag === "RateLimited" && limited.reason.retryAfterMillis, 1500)
      const refused = yield* Effect.flip(model.complete({ messages: [Message.user("Hi")] }))
      assert.equal(refused.reason._tag, "Authentication")
      const tooLong = yield* Effect.flip(Stream.runDrain(model.stream({ messages: [Message.user("Hi")] })))
      assert.equal(tooLong.reason._tag, "ContextLengthExceeded")
      assert.equal(server.requests.length, 3)
      assert.ok(server.requests.every((request) => request.path === "/v1/responses"))
    })
  )
})
