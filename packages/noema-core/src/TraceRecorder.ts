/**
 * TraceRecorder: an Effect tracer that keeps each turn's spans in memory and
 * hands them over, all at once, when the turn ends.
 *
 * A trace is recorded only when its root span is a turn (`noema.turn`): the
 * spans opened under it (model calls, tool calls, the commit, the database's
 * own) are collected as they end, and the turn's end hands the finished trace
 * to `onTrace` in one call, so whoever keeps them (a store) writes once per
 * turn, never per span, and never while the model is answering. Spans of
 * anything else (a listing, the store's own writes) are not kept at all.
 *
 * Memory is bounded: at most `maxSpansPerTrace` spans of one trace are kept
 * (the rest are counted in `droppedSpans`), and a trace whose root never ends
 * is forgotten after `maxOpenTraces` newer ones began.
 */
import { Exit, Option, Tracer } from "effect"
import { SpanNames } from "./Tracing.js"

/** A span event (a retry, the first token): when, and what it carries. */
export interface FinishedEvent {
  readonly name: string
  /** Epoch milliseconds (fractional). */
  readonly at: number
  readonly attributes: Readonly<Record<string, unknown>>
}

/** A span once it ended, as plain data. Times are epoch milliseconds with sub-millisecond fractions. */
export interface FinishedSpan {
  readonly spanId: string
  /** The span it ran under, `undefined` for the trace's root. */
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: Tracer.SpanKind
  readonly start: number
  readonly duration: number
  /** `error` when the span's effect failed or died (not when it was interrupted). */
  readonly status: "ok" | "error" | "interrupted"
  /** The failure's message, for a span whose status is `error`. */
  readonly error: string | undefined
  readonly attributes: Readonly<Record<string, unknown>>
  readonly events: ReadonlyArray<FinishedEvent>
}

/** A turn's spans, root first and then in the order they began. */
export interface FinishedTrace {
  readonly traceId: string
  readonly spans: ReadonlyArray<FinishedSpan>
  /** Spans not kept because the trace reached `maxSpansPerTrace`. */
  readonly droppedSpans: number
}

export interface Options {
  /** Told of each finished turn, synchronously on the fiber that ended it: it should only enqueue. */
  readonly onTrace: (trace: FinishedTrace) => void
  /** Default 2000. */
  readonly maxSpansPerTrace?: number
  /** Default 64. */
  readonly maxOpenTraces?: number
}

const millis = (nanos: bigint): number => Number(nanos / 1000n) / 1000

const failureOf = (exit: Exit.Exit<unknown, unknown>): Pick<FinishedSpan, "status" | "error"> => {
  if (Exit.isSuccess(exit)) return { status: "ok", error: undefined }
  if (exit.cause.reasons.every((reason) => reason._tag === "Interrupt"))
    return { status: "interrupted", error: undefined }
  const reason = exit.cause.reasons.find((reason) => reason._tag !== "Interrupt")
  const error = reason === undefined ? undefined : reason._tag === "Fail" ? reason.error : reason.defect
  return { status: "error", error: error instanceof Error ? error.message : String(error) }
}

/** A trace being collected. */
interface Open {
  readonly spans: Array<FinishedSpan>
  readonly max: number
  dropped: number
}

class RecordingSpan extends Tracer.NativeSpan {
  constructor(
    options: ConstructorParameters<typeof Tracer.NativeSpan>[0],
    private readonly open: Open | undefined,
    private readonly done: ((span: RecordingSpan) => void) | undefined
  ) {
    super(options)
  }

  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (this.status._tag === "Ended") return
    super.end(endTime, exit)
    const open = this.open
    if (open === undefined) return
    // The root (the one with `done`) is always kept: it ends the trace.
    if (open.spans.length >= open.max && this.done === undefined) open.dropped++
    else open.spans.push(this.finished(endTime, exit))
    this.done?.(this)
  }

  private finished(endTime: bigint, exit: Exit.Exit<unknown, unknown>): FinishedSpan {
    const parent = Option.getOrUndefined(this.parent)
    return {
      spanId: this.spanId,
      // The root's parent, if any, is the application's and not in the trace.
      parentSpanId: this.done === undefined ? parent?.spanId : undefined,
      name: this.name,
      kind: this.kind,
      start: millis(this.startTime),
      duration: millis(endTime - this.startTime),
      ...failureOf(exit),
      attributes: Object.fromEntries(this._attributes ?? []),
      events: (this._events ?? []).map(([name, at, attributes]) => ({ name, at: millis(at), attributes }))
    }
  }
}

/** The tracer: spans of turns are kept and handed to `onTrace`; any other span is Effect's plain one. */
export const make = (options: Options): Tracer.Tracer => {
  const maxSpansPerTrace = options.maxSpansPerTrace ?? 2000
  const maxOpenTraces = options.maxOpenTraces ?? 64
  const open = new Map<string, Open>()
  const finish = (root: RecordingSpan) => {
    const trace = open.get(root.traceId)
    if (trace === undefined) return
    open.delete(root.traceId)
    // Spans are pushed as they end, so the root is last: it goes first, then the others by start.
    const rootSpan = trace.spans.pop() as FinishedSpan
    const others = trace.spans.sort((a, b) => a.start - b.start)
    options.onTrace({ traceId: root.traceId, spans: [rootSpan, ...others], droppedSpans: trace.dropped })
  }
  return Tracer.make({
    span: (spanOptions) => {
      const parent = spanOptions.root ? undefined : Option.getOrUndefined(spanOptions.parent)
      const within = parent === undefined ? undefined : open.get(parent.traceId)
      if (within !== undefined) return new RecordingSpan(spanOptions, within, undefined)
      // A turn begins a trace, also under a span of the application's own (it keeps that trace id).
      if (spanOptions.name !== SpanNames.turn) return new Tracer.NativeSpan(spanOptions)
      const trace: Open = { spans: [], max: maxSpansPerTrace, dropped: 0 }
      const span = new RecordingSpan(spanOptions, trace, finish)
      open.set(span.traceId, trace)
      // A turn whose span never ends (its fiber was lost) must not hold memory for ever.
      if (open.size > maxOpenTraces) open.delete(open.keys().next().value as string)
      return span
    }
  })
}
