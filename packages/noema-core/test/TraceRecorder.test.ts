/**
 * TraceRecorder: a turn's spans handed over once, when the turn ends; a
 * streamed model call's time to its first token; spans outside any turn not
 * kept; a trace's spans capped.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as ChatModel from "../src/ChatModel.js"
import * as TraceRecorder from "../src/TraceRecorder.js"
import { Attributes, SpanNames } from "../src/Tracing.js"

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
