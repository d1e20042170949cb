/**
 * TracesJson: the bodies of the traces API as Schemas (snake_case, as the
 * panel's other bodies), and how a stored trace becomes them.
 *
 * A trace's spans come in tree order with their depth, each with its start as
 * an offset from the trace's start (what a waterfall positions bars by), its
 * line in the CLI's own words (`TraceStore.describeSpan`, so the page and
 * `noema traces show` never disagree), and its attributes and events as text:
 * tool arguments and results are shown as the text they are.
 */
import { TraceStore } from "@noema/session"
import { Schema } from "effect"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const Status = Schema.Literals(["ok", "error", "interrupted"])

export const TraceSummary = Schema.Struct({
  trace_id: Schema.String,
  session_id: Schema.NullOr(Schema.String),
  /** The seq of the turn's first message in its session (the Sessions view's turn links here). */
  message_seq: Schema.NullOr(Count),
  name: Schema.String,
  started_at: Schema.String,
  duration_ms: Schema.Number,
  status: Status,
  span_count: Count,
  dropped_spans: Count
}).annotate({ identifier: "TraceSummary" })
export type TraceSummary = typeof TraceSummary.Type

export const TracePage = Schema.Struct({
  total: Count,
  offset: Count,
  limit: Count,
  traces: Schema.Array(TraceSummary)
}).annotate({ identifier: "TracePage" })

const Attribute = Schema.Struct({ key: Schema.String, value: Schema.String })

export const Span = Schema.Struct({
  span_id: Schema.String,
  parent_span_id: Schema.NullOr(Schema.String),
  depth: Count,
  name: Schema.String,
  kind: Schema.String,
  /** Milliseconds from the trace's start. */
  offset_ms: Schema.Number,
  duration_ms: Schema.Number,
  status: Status,
  error: Schema.NullOr(Schema.String),
  /** `TraceStore.describeSpan`: what `noema traces show` prints for it. */
  line: Schema.String,
  attributes: Schema.Array(Attribute),
  events: Schema.Array(
    Schema.Struct({ name: Schema.String, offset_ms: Schema.Number, attributes: Schema.Array(Attribute) })
  )
}).annotate({ identifier: "TraceSpan" })

export const TraceDetail = Schema.Struct({
  trace: TraceSummary,
  spans: Schema.Array(Span)
}).annotate({ identifier: "TraceDetail" })
export type TraceDetail = typeof TraceDetail.Type

const textOf = (value: unknown): string => (typeof value === "string" ? value : JSON.stringify(value))

const attributesOf = (attributes: Readonly<Record<string, unknown>>) =>
  Object.entries(attributes).map(([key, value]) => ({ key, value: textOf(value) }))

export const summaryOf = (trace: TraceStore.TraceSummary): TraceSummary => ({
  trace_id: trace.traceId,
  session_id: trace.sessionId ?? null,
  message_seq: trace.messageSeq ?? null,
  name: trace.name,
  started_at: new Date(trace.start).toISOString(),
  duration_ms: trace.duration,
  status: trace.status,
  span_count: trace.spanCount,
  dropped_spans: trace.droppedSpans
})

export const detailOf = (trace: TraceStore.StoredTrace): TraceDetail => {
  const depths = TraceStore.depths(trace.spans)
  return {
    trace: summaryOf(trace),
    spans: TraceStore.treeOrder(trace.spans).map((span) => ({
      span_id: span.spanId,
      parent_span_id: span.parentSpanId ?? null,
      depth: depths.get(span.spanId) ?? 0,
      name: span.name,
      kind: span.kind,
      offset_ms: span.start - trace.start,
      duration_ms: span.duration,
      status: span.status,
      error: span.error ?? null,
      line: TraceStore.describeSpan(span),
      attributes: attributesOf(span.attributes),
      events: span.events.map((event) => ({
        name: event.name,
        offset_ms: event.at - trace.start,
        attributes: attributesOf(event.attributes)
      }))
    }))
  }
}
