/**
 * The spans a turn produces when a tracer is installed (through
 * `@effect/opentelemetry` into an in-memory exporter): turn > chat >
 * execute_tool > commit with the GenAI attributes, no content unless
 * `Tracing.RecordContent` asks for it, and no span without a tracer.
 */

import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { assert, describe, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { Tool, Tracing } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Schema, Stream } from "effect"

const secretQuestion = "What is 2 + 3, said the user secretly?"
const secretArguments = '{"a":2,"b":3}'

const seen: Array<boolean> = []
const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) =>
    Effect.map(Effect.option(Effect.currentSpan), (span) => {
      seen.push(span._tag === "Some")
      return a + b
    })
})

const agent = ToolAgent.make({ name: "calculator", tools: [add] })

const model = () =>
  ScriptedChatModel.make({
    replies: [
      {
        toolCalls: [{ id: "call-1", name: "add", arguments: secretArguments }],
        usage: { inputTokens: 11, outputTokens: 7, totalTokens: 18 }
      },
      { text: "It is 5.", usage: { inputTokens: 20, outputTokens: 4, totalTokens: 24 } }
    ]
  })

const traced = <A, E>(body: Effect.Effect<A, E, SessionStore.SessionStore>, exporter: InMemorySpanExporter) =>
  Effect.flatMap(MemoryStore.make(), (store) =>
    Effect.provideService(body, SessionStore.SessionStore, store)
  ).pipe(
    Effect.provide(
      NodeSdk.layer(() => ({
        spanProcessor: new SimpleSpanProcessor(exporter),
        resource: { serviceName: "noema-test" }
      }))
    )
  )

const named = (spans: ReadonlyArray<ReadableSpan>, name: string): Array<ReadableSpan> =>
  spans.filter((span) => span.name === name)

const one = (spans: ReadonlyArray<ReadableSpan>, name: string): ReadableSpan => {
  const found = named(spans, name)
  assert.strictEqual(
    found.length,
    1,
    `one span named ${name}, got ${spans.map((span) => span.name).join(", ")}`
  )
  return found[0] as ReadableSpan
}

const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId

const checkTree = (spans: ReadonlyArray<ReadableSpan>, sessionId: string) => {
  const turn = one(spans, "noema.turn")
  assert.strictEqual(turn.attributes["noema.session.id"], sessionId)
  const chats = named(spans, "chat scripted-model")
  assert.strictEqual(chats.length, 2)
  for (const chat of chats) {
    assert.strictEqual(parentOf(chat), turn.spanContext().spanId)
    assert.strictEqual(chat.attributes["gen_ai.operation.name"], "chat")
    assert.strictEqual(chat.attributes["gen_ai.provider.name"], "scripted")
    assert.strictEqual(chat.attributes["gen_ai.request.model"], "scripted-model")
  }
  const [first, second] = [...chats].sort((left, right) =>
    Number(left.attributes["gen_ai.usage.input_tokens"]) <
    Number(right.attributes["gen_ai.usage.input_tokens"])
      ? -1
      : 1
  ) as [ReadableSpan, ReadableSpan]
  assert.strictEqual(first.attributes["gen_ai.usage.input_tokens"], 11)
  assert.strictEqual(first.attributes["gen_ai.usage.output_tokens"], 7)
  assert.deepStrictEqual(first.attributes["gen_ai.response.finish_reasons"], ["tool-calls"])
  assert.strictEqual(second.attributes["gen_ai.usage.input_tokens"], 20)
  assert.deepStrictEqual(second.attributes["gen_ai.response.finish_reasons"], ["stop"])
  const tool = one(spans, "execute_tool add")
  assert.strictEqual(parentOf(tool), turn.spanContext().spanId)
  assert.strictEqual(tool.attributes["gen_ai.tool.name"], "add")
  assert.strictEqual(tool.attributes["gen_ai.tool.call.id"], "call-1")
  assert.strictEqual(tool.attributes["error.type"], undefined)
  const commit = one(spans, "noema.session.commit")
  assert.strictEqual(parentOf(commit), turn.spanContext().spanId)
  assert.strictEqual(commit.attributes["noema.session.message_count"], 4)
}

const allAttributeText = (spans: ReadonlyArray<ReadableSpan>): string =>
  spans.map((span) => JSON.stringify(span.attributes)).join("\n")

describe("tracing", () => {
  it.effect("a turn is a span tree with the GenAI attributes and no content", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function* () {
      const session = yield* Session.create()
      yield* session.turn(agent, model(), secretQuestion)
      const spans = exporter.getFinishedSpans()
      checkTree(spans, session.id)
      const text = allAttributeText(spans)
      assert.notInclude(text, "secretly")
      assert.notInclude(text, '\\"a\\":2')
      assert.notInclude(text, "It is 5")
    }).pipe((body) => traced(body, exporter))
  })

  it.effect("a streamed turn has the same spans, the model call's span covering its whole stream", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function* () {
      const session = yield* Session.create()
      yield* Stream.runDrain(session.turnStream(agent, model(), secretQuestion))
      const spans = exporter.getFinishedSpans()
      checkTree(spans, session.id)
      assert.notInclude(allAttributeText(spans), "secretly")
    }).pipe((body) => traced(body, exporter))
  })

  it.effect("content is recorded when Tracing.RecordContent asks for it", () => {
    const exporter = new InMemorySpanExporter()
    return Effect.gen(function* () {
      const session = yield* Session.create()
      yield* session.turn(agent, model(), secretQuestion)
      const spans = exporter.getFinishedSpans()
      const chat = named(spans, "chat scripted-model")
      assert.isTrue(
        chat.some((span) => String(span.attributes["gen_ai.input.messages"]).includes("secretly"))
      )
      const tool = one(spans, "execute_tool add")
      assert.strictEqual(tool.attributes["gen_ai.tool.call.arguments"], secretArguments)
      assert.strictEqual(tool.attributes["gen_ai.tool.call.result"], "5")
    }).pipe(Effect.provideService(Tracing.RecordContent, true), (body) => traced(body, exporter))
  })

  it.effect("a failed tool call says so with error.type", () => {
    const exporter = new InMemorySpanExporter()
    const failing = ScriptedChatModel.make({
      replies: [{ toolCalls: [{ id: "call-9", name: "missing", arguments: "{}" }] }, "Sorry."]
    })
    return Effect.gen(function* () {
      const session = yield* Session.create()
      yield* session.turn(agent, failing, "hello")
      const tool = one(exporter.getFinishedSpans(), "execute_tool missing")
      assert.strictEqual(tool.attributes["error.type"], "tool_error")
    }).pipe((body) => traced(body, exporter))
  })

  it.effect("without a tracer no span is opened", () =>
    Effect.gen(function* () {
      seen.length = 0
      const store = yield* MemoryStore.make()
      yield* Effect.provideService(
        Effect.flatMap(Session.create(), (session) => session.turn(agent, model(), secretQuestion)),
        SessionStore.SessionStore,
        store
      )
      assert.deepStrictEqual(seen, [false])
    })
  )
})
