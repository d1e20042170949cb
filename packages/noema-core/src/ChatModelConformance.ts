/**
 * ChatModelConformance: the behaviour every ChatModel adapter must show.
 *
 * One suite, every provider: an adapter's test supplies a harness that can
 * make its provider answer a scenario (a text, parallel tool calls, a refusal,
 * a failure, a stream cut off, a request that never answers), and runs each
 * case. The cases check the normalised results, the typed failures and their
 * retryability, and that interruption reaches the provider. They do not depend
 * on a test runner:
 *
 * ```ts
 * for (const testCase of ChatModelConformance.cases) {
 *   it.effect(testCase.name, () => testCase.run(harness))
 * }
 * ```
 */
import assert from "node:assert/strict"
import { Effect, Fiber, type Scope, Stream } from "effect"
import * as ChatModel from "./ChatModel.js"
import type { ToolCall } from "./Message.js"
import * as Messages from "./Message.js"

export type FailureKind = "rate-limited" | "authentication" | "invalid-request" | "unavailable"

export type Scenario =
  | {
      readonly kind: "text"
      readonly text: string
      readonly usage: { readonly inputTokens: number; readonly outputTokens: number }
    }
  | { readonly kind: "tool-calls"; readonly calls: ReadonlyArray<ToolCall> }
  | { readonly kind: "refusal"; readonly refusal: string }
  | { readonly kind: "failure"; readonly failure: FailureKind; readonly retryAfterSeconds?: number }
  /** A streamed answer cut off after some text (connection lost). */
  | { readonly kind: "drop-mid-stream"; readonly text: string }
  /** The provider accepts the request and never answers. */
  | { readonly kind: "hang" }

export interface Prepared {
  /** A model (without retries) whose next request is answered as the scenario says. */
  readonly model: ChatModel.Service
  /** Completes once the provider has received the request. */
  readonly requestReceived: Effect.Effect<void>
  /** Completes once the provider saw the request cancelled by the client. */
  readonly requestCancelled: Effect.Effect<void>
}

export interface Harness {
  readonly prepare: (scenario: Scenario) => Effect.Effect<Prepared, never, Scope.Scope>
  /**
   * How the provider reports a refusal: with its text (`"text"`, the default:
   * OpenAI's `refusal`, Anthropic's stop details), or only as a finish reason
   * (`"finish-reason"`: the AI SDK's spec has no refusal text, so a bridge
   * over it ends a refusal with `content-filter` and nothing else to say).
   */
  readonly refusal?: "text" | "finish-reason"
}

export interface Case {
  readonly name: string
  readonly run: (harness: Harness) => Effect.Effect<void, unknown>
}

const request: ChatModel.ChatRequest = {
  messages: [Messages.system("You are terse."), Messages.user("Say hello.")]
}

const streamed = (model: ChatModel.Service) => Stream.runCollect(model.stream(request))

const textOf = (chunks: ReadonlyArray<ChatModel.StreamChunk>): string =>
  chunks.map((chunk) => (chunk.type === "text-delta" ? chunk.delta : "")).join("")

const reasonTag: Record<FailureKind, string> = {
  "rate-limited": "RateLimited",
  authentication: "Authentication",
  "invalid-request": "InvalidRequest",
  unavailable: "Unavailable"
}

const expectFailure = (error: unknown, failure: FailureKind, retryAfterSeconds: number | undefined) => {
  assert.ok(error instanceof ChatModel.ChatModelError, `expected a ChatModelError, got ${String(error)}`)
  assert.equal(error.reason._tag, reasonTag[failure])
  assert.equal(error.isRetryable, failure === "rate-limited" || failure === "unavailable")
  if (retryAfterSeconds !== undefined && error.reason._tag === "RateLimited") {
    assert.equal(error.reason.retryAfterMillis, retryAfterSeconds * 1000)
  }
  assert.ok(error.message.length > 0, "a failure explains itself")
}

const scoped = (run: (harness: Harness) => Effect.Effect<void, unknown, Scope.Scope>) => (harness: Harness) =>
  Effect.scoped(run(harness))

const toolCalls: ReadonlyArray<ToolCall> = [
  { id: "call_weather", name: "get_weather", arguments: JSON.stringify({ city: "Lisbon", unit: "celsius" }) },
  { id: "call_time", name: "get_time", arguments: JSON.stringify({ timezone: "Europe/Lisbon" }) }
]

const failureCases: ReadonlyArray<Case> = (
  [
    ["rate-limited", 7],
    ["authentication", undefined],
    ["invalid-request", undefined],
    ["unavailable", undefined]
  ] as const
).flatMap(([failure, retryAfterSeconds]): Array<Case> => {
  const scenario: Scenario =
    retryAfterSeconds === undefined
      ? { kind: "failure", failure }
      : { kind: "failure", failure, retryAfterSeconds }
  return [
    {
      name: `complete: ${failure} is a typed failure`,
      run: scoped((harness) =>
        Effect.gen(function* () {
          const { model } = yield* harness.prepare(scenario)
          const error = yield* Effect.flip(model.complete(request))
          expectFailure(error, failure, retryAfterSeconds)
        })
      )
    },
    {
      name: `stream: ${failure} is a typed failure`,
      run: scoped((harness) =>
        Effect.gen(function* () {
          const { model } = yield* harness.prepare(scenario)
          const error = yield* Effect.flip(streamed(model))
          expectFailure(error, failure, retryAfterSeconds)
        })
      )
    }
  ]
})

export const cases: ReadonlyArray<Case> = [
  {
    name: "complete: text answer with finish reason and usage",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const { model } = yield* harness.prepare({
          kind: "text",
          text: "Hello, wörld! 👋",
          usage: { inputTokens: 11, outputTokens: 5 }
        })
        const response = yield* model.complete(request)
        assert.equal(response.text, "Hello, wörld! 👋")
        assert.deepEqual(response.toolCalls, [])
        assert.equal(response.finishReason, "stop")
        assert.equal(response.usage?.inputTokens, 11)
        assert.equal(response.usage?.outputTokens, 5)
        assert.equal(response.usage?.totalTokens, 16)
      })
    )
  },
  {
    name: "stream: text deltas add up to the answer, then finish and usage",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const text = "Streaming works, one piece at a time."
        const { model } = yield* harness.prepare({
          kind: "text",
          text,
          usage: { inputTokens: 3, outputTokens: 9 }
        })
        const chunks = yield* streamed(model)
        assert.equal(textOf(chunks), text)
        assert.ok(
          chunks.filter((chunk) => chunk.type === "text-delta").length > 1,
          "text arrives in several deltas"
        )
        const finishes = chunks.filter((chunk) => chunk.type === "finish")
        // Providers may add their raw finish reason; the normalised one is the contract.
        assert.deepEqual(
          finishes.map((chunk) => chunk.type === "finish" && chunk.finishReason),
          ["stop"]
        )
        const usage = chunks.find((chunk) => chunk.type === "usage")
        assert.ok(usage?.type === "usage", "a usage chunk is emitted")
        assert.equal(usage.usage.outputTokens, 9)
        const response = yield* ChatModel.collect(Stream.fromArray(chunks))
        assert.equal(response.text, text)
      })
    )
  },
  {
    name: "complete: parallel tool calls keep ids, names, arguments and order",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const { model } = yield* harness.prepare({ kind: "tool-calls", calls: toolCalls })
        const response = yield* model.complete(request)
        assert.equal(response.finishReason, "tool-calls")
        assert.deepEqual(
          response.toolCalls.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) })),
          toolCalls.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) }))
        )
      })
    )
  },
  {
    name: "stream: tool-call deltas are reassembled into complete calls before finish",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const { model } = yield* harness.prepare({ kind: "tool-calls", calls: toolCalls })
        const chunks = yield* streamed(model)
        const complete = chunks.flatMap((chunk) => (chunk.type === "tool-call" ? [chunk.toolCall] : []))
        assert.deepEqual(
          complete.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) })),
          toolCalls.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) }))
        )
        const finishIndex = chunks.findIndex((chunk) => chunk.type === "finish")
        const lastCallIndex = chunks.findLastIndex((chunk) => chunk.type === "tool-call")
        assert.ok(lastCallIndex < finishIndex, "complete calls come before finish")
        const finish = chunks[finishIndex]
        assert.equal(finish?.type === "finish" && finish.finishReason, "tool-calls")
      })
    )
  },
  {
    name: "refusal is reported apart from text",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const refusal = "I can't help with that."
        const first = yield* harness.prepare({ kind: "refusal", refusal })
        const response = yield* first.model.complete(request)
        const second = yield* harness.prepare({ kind: "refusal", refusal })
        const streamedResponse = yield* ChatModel.collect(second.model.stream(request))
        for (const answer of [response, streamedResponse]) {
          assert.equal(answer.text, "", "a refusal is not an answer")
          if (harness.refusal === "finish-reason") assert.equal(answer.finishReason, "content-filter")
          else assert.equal(answer.refusal, refusal)
        }
      })
    )
  },
  ...failureCases,
  {
    name: "stream: a connection lost mid-answer fails with a retryable error after the first deltas",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const { model } = yield* harness.prepare({
          kind: "drop-mid-stream",
          text: "This answer will be cut off"
        })
        const seen: Array<ChatModel.StreamChunk> = []
        const error = yield* Effect.flip(
          Stream.runForEach(model.stream(request), (chunk) => Effect.sync(() => seen.push(chunk)))
        )
        assert.ok(
          error instanceof ChatModel.ChatModelError,
          `expected a ChatModelError, got ${String(error)}`
        )
        assert.ok(error.isRetryable, `a dropped connection is retryable (${error.reason._tag})`)
        assert.ok(textOf(seen).length > 0, "deltas before the drop were delivered")
        assert.ok(!seen.some((chunk) => chunk.type === "finish"), "no finish after a drop")
      })
    )
  },
  {
    name: "complete: interrupting the effect cancels the request",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const prepared = yield* harness.prepare({ kind: "hang" })
        const fiber = yield* Effect.forkChild(prepared.model.complete(request))
        yield* prepared.requestReceived
        yield* Fiber.interrupt(fiber)
        yield* prepared.requestCancelled
      })
    )
  },
  {
    name: "stream: interrupting the stream cancels the request",
    run: scoped((harness) =>
      Effect.gen(function* () {
        const prepared = yield* harness.prepare({ kind: "hang" })
        const fiber = yield* Effect.forkChild(Stream.runDrain(prepared.model.stream(request)))
        yield* prepared.requestReceived
        yield* Fiber.interrupt(fiber)
        yield* prepared.requestCancelled
      })
    )
  }
]
