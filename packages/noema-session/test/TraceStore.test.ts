/**
 * TraceStore: a real turn (a tool call, a model call that failed once and was
 * retried) recorded by core's TraceRecorder and kept in the database, on
 * SQLite and PostgreSQL: the spans nest as they ran, carry tokens, the tool's arguments and result (with RecordContent), the
 * retry as an event; the trace names its session and turn; retention holds.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { ChatModel, ModelError, Tool, type TraceRecorder, Tracing } from "@noema/core"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Schema, Stream } from "effect"
import type { SqlClient } from "effect/sql"
import * as Session from "../src/Session.js"
import { SessionStore } from "../src/SessionStore.js"
import * as SqlStore from "../src/SqlStore.js"
import * as TraceStore from "../src/TraceStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-traces-"))
let database: TestDatabase.TestDatabase | undefined
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_traces" })
}, 120_000)
afterAll(async () => {
  await database?.drop()
  fs.rmSync(directory, { recursive: true, force: true })
})

const hostile = `<img src=x onerror="alert(1)">`
const lookup = Tool.make({
  name: "lookup",
  description: "Look a word up",
  parameters: Schema.Struct({ word: Schema.String }),
  handler: ({ word }) => Effect.succeed(`found ${word}`)
})

/** The model: the first call fails (retried), then calls the tool, then answers. */
const scriptedModel = () => {
  let call = 0
  const chunks = (index: number): ReadonlyArray<ChatModel.StreamChunk> =>
    index === 1
      ? [
          {
            type: "tool-call",
            toolCall: { id: "call_1", name: "lookup", arguments: JSON.stringify({ word: hostile }) }
          },
          { type: "usage", usage: { inputTokens: 11, outputTokens: 3, totalTokens: 14 } },
          { type: "finish", finishReason: "tool-calls" }
        ]
      : [
          { type: "text-delta", delta: "It means " },
          { type: "text-delta", delta: "a picture." },
          { type: "usage", usage: { inputTokens: 20, outputTokens: 4, totalTokens: 24 } },
          { type: "finish", finishReason: "stop" }
        ]
  return ChatModel.make({
    provider: "scripted",
    model: "tea-model",
    retry: { maxAttempts: 3, baseDelay: "1 millis" },
    stream: () =>
      Stream.suspend(() => {
        call++
        return call === 1
          ? Stream.fail(
              ChatModel.error(
                "scripted",
                new ModelError.Unavailable({ message: "overloaded", status: 503 }),
                "tea-model"
              )
            )
          : Stream.fromIterable(chunks(call - 1))
      })
  })
}

const agent = ToolAgent.make({ tools: [lookup] })

/** One turn of a new session with the traces recorded into `traces`; the session's id. */
const recordedTurn = (traces: TraceStore.Service) =>
  Effect.scoped(
    Effect.gen(function* () {
      const tracer = yield* TraceStore.recording(traces)
      const session = yield* Session.create()
      yield* session
        .turn(agent, scriptedModel(), "What is an img?")
        .pipe(Effect.provideService(Tracing.RecordContent, true), Effect.withTracer(tracer))
      return session.id
    })
  )

const suite = (name: string, layer: () => Layer.Layer<SqlClient.SqlClient | Database.Database, unknown>) =>
  describe(`TraceStore on ${name}`, () => {
    const run = <A, E>(
      body: (traces: TraceStore.Service) => Effect.Effect<A, E, SessionStore>,
      keep?: number,
      maxAgeDays?: number
    ) =>
      Effect.gen(function* () {
        const sessions = yield* SqlStore.fromDatabase
        const traces = yield* TraceStore.make({
          location: name,
          ...(keep !== undefined && { keep }),
          ...(maxAgeDays !== undefined && { maxAgeDays })
        })
        return yield* Effect.provideService(body(traces), SessionStore, sessions)
      }).pipe(Effect.provide(layer()))

    it.live(
      "keeps a turn's spans nested as they ran, with tokens, tool content and the retry",
      () =>
        run((traces) =>
          Effect.gen(function* () {
            const sessionId = yield* recordedTurn(traces)
            const page = yield* traces.list({ sessionId })
            expect(page.total).toBe(1)
            const summary = page.traces[0] as TraceStore.TraceSummary
            expect(summary).toMatchObject({ sessionId, messageSeq: 0, name: "noema.turn", status: "ok" })
            const trace = yield* traces.get(summary.traceId)
            const [root, ...others] = trace.spans
            expect(root?.name).toBe("noema.turn")
            expect(root?.parentSpanId).toBeUndefined()
            const noema = others.filter((span) => !span.name.startsWith("sql"))
            const names = noema.map((span) => span.name)
            expect(names).toEqual([
              "chat tea-model",
              "execute_tool lookup",
              "chat tea-model",
              "noema.session.commit"
            ])
            // Every span of the turn hangs under the turn (the database's own under the commit).
            const ids = new Set(trace.spans.map((span) => span.spanId))
            for (const span of others) expect(ids.has(span.parentSpanId as string)).toBe(true)
            for (const span of noema) expect(span.parentSpanId).toBe(root?.spanId)
            const [first, tool, second] = noema
            expect(first?.attributes[Tracing.Attributes.usageInputTokens]).toBe(11)
            expect(first?.events.map((event) => event.name)).toEqual([Tracing.EventNames.retry])
            expect(first?.events[0]?.attributes).toMatchObject({
              [Tracing.Attributes.errorType]: "Unavailable",
              [Tracing.Attributes.retryAttempt]: 2
            })
            expect(second?.attributes[Tracing.Attributes.usageOutputTokens]).toBe(4)
            expect(second?.events).toEqual([])
            expect(tool?.attributes[Tracing.Attributes.toolCallArguments]).toBe(
              JSON.stringify({ word: hostile })
            )
            expect(tool?.attributes[Tracing.Attributes.toolCallResult]).toBe(`found ${hostile}`)
            // Spans sit inside their parent's time.
            for (const span of noema) {
              expect(span.start).toBeGreaterThanOrEqual(root?.start as number)
              expect(span.start + span.duration).toBeLessThanOrEqual(
                (root?.start as number) + (root?.duration as number) + 0.001
              )
            }
            // The second turn of the session begins after the first turn's four messages.
            const again = yield* Session.open(sessionId)
            const tracer = yield* TraceStore.recording(traces)
            yield* again.turn(agent, scriptedModel(), "Again?").pipe(Effect.withTracer(tracer))
          }).pipe(
            Effect.scoped,
            Effect.andThen(traces.list({ messageSeq: 4 })),
            Effect.map((page) => expect(page.total).toBe(1))
          )
        ),
      60_000
    )

    it.live(
      "keeps the newest `keep` turns only, and a missing trace is TraceNotFoundError",
      () =>
        run(
          (traces) =>
            Effect.gen(function* () {
              for (let turn = 0; turn < 5; turn++) yield* recordedTurn(traces)
              const page = yield* traces.list({ limit: 10 })
              expect(page.total).toBe(3)
              const spans = yield* Effect.forEach(page.traces, (trace) => traces.get(trace.traceId))
              expect(spans.every((trace) => trace.spans.length === trace.spanCount)).toBe(true)
              const missing = yield* Effect.flip(traces.get("nope"))
              expect(missing).toBeInstanceOf(TraceStore.TraceNotFoundError)
            }),
          3
        ),
      60_000
    )

    it.live(
      "with maxAgeDays, deletes the traces begun longer ago at the next write",
      () =>
        run(
          (traces) =>
            Effect.gen(function* () {
              const day = 24 * 60 * 60 * 1000
              const turnBegun = (traceId: string, start: number): TraceRecorder.FinishedTrace => ({
                traceId,
                droppedSpans: 0,
                spans: [
                  {
                    spanId: `${traceId}-root`,
                    parentSpanId: undefined,
                    name: Tracing.SpanNames.turn,
                    kind: "internal",
                    start,
                    duration: 5,
                    status: "ok",
                    error: undefined,
                    attributes: {},
                    events: []
                  }
                ]
              })
              yield* traces.record(turnBegun("ten-days-old", Date.now() - 10 * day))
              yield* traces.record(turnBegun("six-days-old", Date.now() - 6 * day))
              // The write of a new turn is when the old ones go.
              yield* traces.record(turnBegun("new", Date.now()))
              const page = yield* traces.list()
              expect(page.traces.map((trace) => trace.traceId)).toEqual(["new", "six-days-old"])
              expect(yield* Effect.flip(traces.get("ten-days-old"))).toBeInstanceOf(
                TraceStore.TraceNotFoundError
              )
            }),
          100,
          7
        ),
      60_000
    )
  })

suite("SQLite", () => {
  const filename = path.join(directory, `${Math.random().toString(36).slice(2)}.db`)
  return Database.layer({ kind: "sqlite", filename })
})

suite("PostgreSQL", () =>
  Layer.unwrap(
    Effect.map(
      Effect.promise(() => (database as TestDatabase.TestDatabase).schema("traces")),
      (url) => Database.layer({ kind: "postgres", url })
    )
  ))
