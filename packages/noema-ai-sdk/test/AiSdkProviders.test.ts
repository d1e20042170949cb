/**
 * The bridge over real AI SDK provider packages pointed at local servers that
 * speak their wire formats: `@ai-sdk/anthropic` at noema's Anthropic test
 * server (core's conformance suite, recorded streams, thinking round trips,
 * cache usage) and `@ai-sdk/google` at a server replaying recorded Gemini
 * responses.
 */
import { readFileSync } from "node:fs"
import { createAnthropic } from "@ai-sdk/anthropic"
import { createGoogleGenerativeAI } from "@ai-sdk/google"
import { assert, describe, it } from "@effect/vitest"
import { AnthropicChatModel } from "@noema/anthropic"
import { AnthropicTestServer } from "@noema/anthropic/testing"
import { ChatModel, Message } from "@noema/core"
import { ChatModelConformance } from "@noema/core/testing"
import { ConfigProvider, Effect, Redacted, Stream } from "effect"
import { afterAll, afterEach, beforeAll } from "vitest"
import { AiSdkChatModel } from "../src/index.js"
import * as GoogleServer from "./support/googleServer.js"

const lines = (url: URL): ReadonlyArray<string> =>
  readFileSync(url, "utf8")
    .split("\n")
    .filter((line) => line.length > 0)

/** Recorded Anthropic streams, kept (with their source and licence) beside the native adapter's tests. */
const anthropicFixture = (name: string) =>
  lines(new URL(`../../noema-anthropic/test/fixtures/${name}`, import.meta.url))

const googleFixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url)

const noRetries = { retry: { maxAttempts: 1 } }

/** The content of message `message` of the body of request `index` the Anthropic server received. */
const sentContent = (index: number, message: number): ReadonlyArray<unknown> | undefined => {
  const body = anthropic.requests[index]?.body as
    | { readonly messages: ReadonlyArray<{ readonly content: ReadonlyArray<unknown> }> }
    | undefined
  return body?.messages[message]?.content
}
const request: ChatModel.ChatRequest = { messages: [Message.user("Hi")] }

// ---------------------------------------------------------------------------
// @ai-sdk/anthropic
// ---------------------------------------------------------------------------

let anthropic: AnthropicTestServer.TestServer
let google: GoogleServer.GoogleServer

beforeAll(async () => {
  anthropic = await AnthropicTestServer.start()
  google = await GoogleServer.start()
})
afterAll(async () => {
  await anthropic.close()
  await google.close()
})
afterEach(() => anthropic.reset())

const claude = () =>
  AiSdkChatModel.make(
    createAnthropic({ baseURL: `${anthropic.url}/v1`, apiKey: "test-key" })("claude-test"),
    noRetries
  )

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
      switch (scenario.failure) {
        case "rate-limited":
          return {
            type: "error",
            status: 429,
            ...(scenario.retryAfterSeconds !== undefined && {
              headers: { "retry-after": String(scenario.retryAfterSeconds) }
            })
          }
        case "authentication":
          return { type: "error", status: 401 }
        case "invalid-request":
          return { type: "error", status: 400, message: "messages: field required" }
        case "unavailable":
          return { type: "error", status: 529, message: "Overloaded" }
      }
      break
    case "drop-mid-stream":
      return { type: "drop", afterChunks: 3, text: scenario.text }
    case "hang":
      return { type: "hang" }
  }
}

const harness: ChatModelConformance.Harness = {
  // `@ai-sdk/anthropic` reports a refusal as `content-filter`; its explanation stays in provider metadata.
  refusal: "finish-reason",
  prepare: (scenario) =>
    Effect.sync(() => {
      const index = anthropic.requests.length
      anthropic.enqueue(replyFor(scenario))
      return {
        model: claude(),
        requestReceived: Effect.promise(() => anthropic.waitForRequests(index + 1)),
        requestCancelled: Effect.promise(() => anthropic.waitForClose(index))
      }
    })
}

describe("the bridge over @ai-sdk/anthropic: conformance", () => {
  for (const testCase of ChatModelConformance.cases) {
    it.live(testCase.name, () => testCase.run(harness))
  }
})

describe("the bridge over @ai-sdk/anthropic", () => {
  it.live("a recorded thinking stream keeps its signature, and a tool loop sends it back unchanged", () =>
    Effect.gen(function* () {
      anthropic.enqueue({ type: "events", events: anthropicFixture("anthropic-clear-thinking.1.chunks.txt") })
      anthropic.enqueue({ type: "text", text: "ok" })
      const model = claude()
      const first = yield* ChatModel.collect(model.stream(request))
      assert.strictEqual(first.text, "925 ÷ 5 = 185")
      assert.strictEqual(first.rawFinishReason, "end_turn")
      const message = ChatModel.toMessage(first)
      const signature = (Message.parts(message)[0] as Message.ReasoningPart).providerMetadata?.anthropic
        ?.signature
      assert.ok(typeof signature === "string" && signature.startsWith("EvQBCkYICxgCKkAx"))
      yield* model
        .stream({ messages: [Message.user("Hi"), message, Message.user("And?")] })
        .pipe(Stream.runDrain)
      const sent = sentContent(1, 1)?.[0]
      assert.deepStrictEqual(sent, {
        type: "thinking",
        thinking: "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185",
        signature
      })
    })
  )

  it.live(
    "a message from the native adapter goes back through the bridge the same way (one key: anthropic)",
    () =>
      Effect.gen(function* () {
        const thinking = { text: "Native thought.", signature: "sig-native" }
        anthropic.enqueue({ type: "text", text: "Native answer.", thinking }, { type: "text", text: "ok" })
        const native = yield* AnthropicChatModel.make({
          model: "claude-test",
          baseURL: anthropic.url,
          apiKey: Redacted.make("test-key"),
          maxAttempts: 1
        }).pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env: {} })))
        const message = ChatModel.toMessage(yield* native.complete(request))
        yield* claude().complete({ messages: [Message.user("Hi"), message, Message.user("More?")] })
        const sent = sentContent(1, 1)
        assert.deepStrictEqual(sent?.[0], {
          type: "thinking",
          thinking: "Native thought.",
          signature: "sig-native"
        })
      })
  )

  it.live("usage counts cache reads and writes; an overloaded stream is a retryable failure", () =>
    Effect.gen(function* () {
      anthropic.enqueue({
        type: "text",
        text: "cached",
        usage: { inputTokens: 10, outputTokens: 4, cacheReadTokens: 1000, cacheWriteTokens: 200 }
      })
      const response = yield* ChatModel.collect(claude().stream(request))
      assert.strictEqual(response.usage?.inputTokens, 1210)
      assert.strictEqual(response.usage?.cachedInputTokens, 1000)
      assert.strictEqual(response.usage?.cacheWriteInputTokens, 200)
      anthropic.enqueue({
        type: "events",
        events: anthropicFixture("anthropic-overloaded-mid-stream.chunks.txt")
      })
      const error = yield* Effect.flip(Stream.runDrain(claude().stream(request)))
      assert.strictEqual(error.reason._tag, "Unavailable")
      assert.isTrue(error.isRetryable)
    })
  )
})

// ---------------------------------------------------------------------------
// @ai-sdk/google
// ---------------------------------------------------------------------------

const gemini = () =>
  AiSdkChatModel.make(
    createGoogleGenerativeAI({ baseURL: google.url, apiKey: "test-key" })("gemini-test"),
    noRetries
  )

describe("the bridge over @ai-sdk/google", () => {
  it.live(
    "a recorded text stream: deltas, finish with Gemini's raw reason, usage with reasoning tokens",
    () =>
      Effect.gen(function* () {
        google.enqueue({ type: "sse", lines: lines(googleFixture("google-text.chunks.txt")) })
        const chunks = yield* Stream.runCollect(gemini().stream(request))
        assert.ok(chunks.filter((chunk) => chunk.type === "text-delta").length > 1)
        const response = yield* ChatModel.collect(Stream.fromArray(chunks))
        assert.include(response.text, "strawberry")
        assert.strictEqual(response.finishReason, "stop")
        assert.strictEqual(response.rawFinishReason, "STOP")
        assert.ok((response.usage?.reasoningTokens ?? 0) > 0)
        const sent = google.requests.at(-1)
        assert.match(sent?.path ?? "", /models\/gemini-test:streamGenerateContent$/)
        assert.strictEqual(sent?.query, "alt=sse")
      })
  )

  it.live("a recorded tool call, streamed and not, becomes a complete call", () =>
    Effect.gen(function* () {
      google.enqueue(
        { type: "sse", lines: lines(googleFixture("google-tool-call.chunks.txt")) },
        { type: "json", body: readFileSync(googleFixture("google-tool-call.json"), "utf8") }
      )
      const tools: ChatModel.ChatRequest["tools"] = [
        {
          name: "weather",
          description: "Weather",
          parameters: { type: "object", properties: { location: { type: "string" } } }
        }
      ]
      const streamed = yield* ChatModel.collect(gemini().stream({ ...request, tools }))
      const completed = yield* gemini().complete({ ...request, tools })
      for (const response of [streamed, completed]) {
        assert.strictEqual(response.toolCalls.length, 1)
        assert.strictEqual(response.toolCalls[0]?.name, "weather")
        assert.deepStrictEqual(JSON.parse(response.toolCalls[0]?.arguments ?? ""), {
          location: "San Francisco"
        })
        assert.strictEqual(response.finishReason, "tool-calls")
      }
    })
  )

  it.live("Gemini's 429 is RateLimited with its retry-after", () =>
    Effect.gen(function* () {
      google.enqueue({
        type: "error",
        status: 429,
        headers: { "retry-after": "2" },
        body: { error: { code: 429, message: "Resource has been exhausted", status: "RESOURCE_EXHAUSTED" } }
      })
      const error = yield* Effect.flip(gemini().complete(request))
      assert.ok(error.reason._tag === "RateLimited")
      assert.strictEqual(error.reason.retryAfterMillis, 2000)
      assert.strictEqual(error.provider, "google.generative-ai")
    })
  )
})
