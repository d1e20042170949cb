/**
 * TraceRecorder: a turn's spans handed over once, when the turn ends; a
 * streamed model call's time to its first token; spans outside any turn not
 * kept; a trace's spans capped.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Schema, Stream, Tracer } from "effect"
import * as ChatModel from "../src/ChatModel.js"
import * as Tool from "../src/Tool.js"
import * as TraceRecorder from "../src/TraceRecorder.js"
import { Attributes, RecordToolContent, SpanNames } from "../src/Tracing.js"

const model = ChatModel.make({
  provider: "scripted",
  model: "m",
  stream: () =>
    Stream.fromIterable<ChatModel.StreamChunk>([
      { type: "text-delta", delta: "hi" },
      { type: "finish", finishReason: "stop" }
    ])
})

const recorded = () => {
  const traces: Array<TraceRecorder.FinishedTrace> = []
  return {
    traces,
    tracer: TraceRecorder.make({ onTrace: (trace) => traces.push(trace), maxSpansPerTrace: 3 })
  }
}

describe("TraceRecorder", () => {
  it.live("hands a turn's spans over once, root first, with a streamed call's time to first token", () =>
    Effect.gen(function* () {
      const { traces, tracer } = recorded()
      yield* Stream.runDrain(model.stream({ messages: [] })).pipe(
        Effect.withSpan(SpanNames.turn),
        Effect.withSpan("outside"),
        Effect.withTracer(tracer)
      )
      expect(traces).toHaveLength(1)
      const [root, call] = traces[0]?.spans ?? []
      expect(root?.name).toBe(SpanNames.turn)
      expect(root?.parentSpanId).toBeUndefined()
      expect(call?.name).toBe("chat m")
      expect(call?.parentSpanId).toBe(root?.spanId)
      expect(call?.attributes[Attributes.timeToFirstToken]).toBeGreaterThanOrEqual(0)
      expect(call?.attributes[Attributes.timeToFirstToken]).toBeLessThanOrEqual(call?.duration as number)
    })
  )

  it.live(
    "records a completion's span with the request's model and the answer's finish reason and usage",
    () =>
      Effect.gen(function* () {
        const { traces, tracer } = recorded()
        const completing = ChatModel.make({
          provider: "scripted",
          model: "m",
          complete: () =>
            Effect.succeed({
              text: "hi",
              toolCalls: [],
              finishReason: "stop" as const,
              usage: { inputTokens: 3, outputTokens: 1, totalTokens: 4 }
            })
        })
        const response = yield* completing
          .complete({ messages: [], temperature: 0.5 })
          .pipe(Effect.withSpan(SpanNames.turn), Effect.withTracer(tracer))
        expect(response.text).toBe("hi")
        const call = traces[0]?.spans[1]
        expect(call?.name).toBe("chat m")
        expect(call?.attributes[Attributes.requestModel]).toBe("m")
        expect(call?.attributes[Attributes.requestTemperature]).toBe(0.5)
        expect(call?.attributes[Attributes.responseFinishReasons]).toEqual(["stop"])
        expect(call?.attributes[Attributes.usageInputTokens]).toBe(3)
      })
  )

  it.live("keeps nothing outside a turn, and at most maxSpansPerTrace spans of one (the root always)", () =>
    Effect.gen(function* () {
      const { traces, tracer } = recorded()
      yield* Effect.void.pipe(Effect.withSpan("listing"), Effect.withTracer(tracer))
      expect(traces).toHaveLength(0)
      const child = Effect.void.pipe(Effect.withSpan("child"))
      yield* Effect.all([child, child, child, child, child]).pipe(
        Effect.withSpan(SpanNames.turn),
        Effect.withTracer(tracer)
      )
      expect(traces).toHaveLength(1)
      expect(traces[0]?.spans.map((span) => span.name)).toEqual([SpanNames.turn, "child", "child", "child"])
      expect(traces[0]?.droppedSpans).toBe(2)
    })
  )

  it.live("gives each turn a trace of its own, also under one span of the application's (linked to it)", () =>
    Effect.gen(function* () {
      const { traces, tracer } = recorded()
      const turn = Effect.void.pipe(Effect.withSpan("child"), Effect.withSpan(SpanNames.turn))
      const request = yield* Effect.andThen(turn, turn).pipe(
        Effect.andThen(Effect.currentSpan),
        Effect.withSpan("http.server POST"),
        Effect.withTracer(tracer)
      )
      expect(traces).toHaveLength(2)
      const [first, second] = traces
      expect(first?.traceId).not.toBe(second?.traceId)
      expect(first?.traceId).not.toBe(request.traceId)
      for (const trace of traces)
        expect(trace.spans.map((span) => span.name)).toEqual([SpanNames.turn, "child"])
    })
  )

  it.live("records a failed span's error", () =>
    Effect.gen(function* () {
      const { traces, tracer } = recorded()
      yield* Effect.fail(new Error("model down")).pipe(
        Effect.withSpan("chat m"),
        Effect.withSpan(SpanNames.turn),
        Effect.withTracer(tracer),
        Effect.ignore
      )
      expect(traces[0]?.spans.map((span) => [span.status, span.error])).toEqual([
        ["error", "model down"],
        ["error", "model down"]
      ])
    })
  )
})

/** A tracer standing for an exporter's: the spans it made, as it saw them. */
const exporter = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    }
  })
  return { spans, tracer }
}

const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(a + b)
})

const addCall = Tool.callIn([add], { id: "call-1", name: "add", arguments: '{"a":2,"b":3}' })

describe("TraceRecorder with forward", () => {
  it.live("passes every span on, with the same ids, and keeps the turn's", () =>
    Effect.gen(function* () {
      const { traces } = recorded()
      const other = exporter()
      const tracer = TraceRecorder.make({ onTrace: (trace) => traces.push(trace), forward: other.tracer })
      yield* Effect.void.pipe(Effect.withSpan("listing"), Effect.withTracer(tracer))
      yield* Effect.void.pipe(
        Effect.withSpan("chat m", { attributes: { [Attributes.usageInputTokens]: 3 } }),
        Effect.withSpan(SpanNames.turn),
        Effect.withTracer(tracer)
      )
      expect(other.spans.map((span) => span.name)).toEqual(["listing", SpanNames.turn, "chat m"])
      expect(other.spans.every((span) => span.status._tag === "Ended")).toBe(true)
      const kept = traces[0]?.spans ?? []
      expect(kept.map((span) => span.spanId)).toEqual(other.spans.slice(1).map((span) => span.spanId))
      // The exporter's child names the exporter's parent: one tree, whoever reads it.
      expect(Option.getOrUndefined(other.spans[2]!.parent)?.spanId).toBe(other.spans[1]?.spanId)
      expect(other.spans[2]?.traceId).toBe(other.spans[1]?.traceId)
      expect(other.spans[2]?.attributes.get(Attributes.usageInputTokens)).toBe(3)
    })
  )

  it.live(
    "keeps a tool call's arguments and result with RecordToolContent, and passes them on only with forwardContent",
    () =>
      Effect.gen(function* () {
        for (const forwardContent of [false, true]) {
          const { traces } = recorded()
          const other = exporter()
          const tracer = TraceRecorder.make({
            onTrace: (trace) => traces.push(trace),
            forward: other.tracer,
            forwardContent
          })
          yield* addCall.pipe(
            Effect.withSpan(SpanNames.turn),
            Effect.withTracer(tracer),
            Effect.provideService(RecordToolContent, true)
          )
          const kept = traces[0]?.spans[1]
          expect(kept?.attributes[Attributes.toolCallArguments]).toBe('{"a":2,"b":3}')
          expect(kept?.attributes[Attributes.toolCallResult]).toBe("5")
          const passed = other.spans[1]
          expect(passed?.attributes.get(Attributes.toolName)).toBe("add")
          expect(passed?.attributes.has(Attributes.toolCallArguments)).toBe(forwardContent)
          expect(passed?.attributes.has(Attributes.toolCallResult)).toBe(forwardContent)
        }
      })
  )

  it.live("records no tool content without RecordToolContent or RecordContent", () =>
    Effect.gen(function* () {
      const { traces, tracer } = recorded()
      yield* addCall.pipe(Effect.withSpan(SpanNames.turn), Effect.withTracer(tracer))
      expect(traces[0]?.spans[1]?.attributes[Attributes.toolName]).toBe("add")
      expect(traces[0]?.spans[1]?.attributes[Attributes.toolCallArguments]).toBeUndefined()
    })
  )
})
