/**
 * TraceRecorder: an Effect tracer that keeps each turn's spans in memory and
 * hands them over, all at once, when the turn ends.
 *
 * A trace is recorded only when its root span is a turn (`noema.turn`; a turn
 * under a span of the application's begins a trace of its own, linked to that
 * span, so a trace is always one turn): the
 * spans opened under it (model calls, tool calls, the commit, the database's
 * own) are collected as they end, and the turn's end hands the finished trace
 * to `onTrace` in one call, so whoever keeps them (a store) writes once per
 * turn, never per span, and never while the model is answering. Spans of
 * anything else (a listing, the store's own writes) are not kept at all.
 *
 * Memory is bounded: at most `maxSpansPerTrace` spans of one trace are kept
 * (the rest are counted in `droppedSpans`), and a trace whose root never ends
 * is forgotten after `maxOpenTraces` newer ones began.
 *
 * It can also pass every span on to another tracer (`forward`: an exporter's,
 * such as `@effect/opentelemetry`'s), so spans are both kept and exported: the
 * other tracer makes each span, which takes its ids (the same trace and span ids
 * locally and in the collector), and hears of every attribute, event and end.
 * Content attributes (`Tracing.contentAttributes`) are not passed on unless
 * `forwardContent`: what is kept locally may say more than what leaves the machine.
 */
import { Exit, Option, Tracer } from "effect"
import { contentAttributes, SpanNames } from "./Tracing.js"

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
  /** A tracer every span is also passed on to (an exporter's); it makes the spans' ids. */
  readonly forward?: Tracer.Tracer
  /** Whether content attributes are passed on to `forward` too. Default false. */
  readonly forwardContent?: boolean
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

/** Where a recorded span is passed on to, if anywhere: the other tracer's span, and whether it hears content. */
interface Forwarded {
  readonly span: Tracer.Span
  readonly content: boolean
}

class RecordingSpan extends Tracer.NativeSpan {
  constructor(
    options: ConstructorParameters<typeof Tracer.NativeSpan>[0],
    private readonly open: Open | undefined,
    private readonly done: ((span: RecordingSpan) => void) | undefined,
    private readonly forwarded: Forwarded | undefined
  ) {
    super(options)
    // One span, one identity: the exporter's ids are the ones kept.
    if (forwarded !== undefined) {
      this._traceId = forwarded.span.traceId
      this._spanId = forwarded.span.spanId
    }
  }

  override attribute(key: string, value: unknown): void {
    super.attribute(key, value)
    if (this.forwarded !== undefined && (this.forwarded.content || !contentAttributes.has(key)))
      this.forwarded.span.attribute(key, value)
  }

  override event(name: string, startTime: bigint, attributes?: Record<string, unknown>): void {
    super.event(name, startTime, attributes)
    this.forwarded?.span.event(name, startTime, attributes)
  }

  override addLinks(links: ReadonlyArray<Tracer.SpanLink>): void {
    super.addLinks(links)
    this.forwarded?.span.addLinks(links)
  }

  override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
    if (this.status._tag === "Ended") return
    super.end(endTime, exit)
    this.forwarded?.span.end(endTime, exit)
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

/**
 * The tracer: spans of turns are kept and handed to `onTrace`; any other span is Effect's
 * plain one, or `forward`'s own when there is one.
 */
export const make = (options: Options): Tracer.Tracer => {
  const maxSpansPerTrace = options.maxSpansPerTrace ?? 2000
  const maxOpenTraces = options.maxOpenTraces ?? 64
  const forward = options.forward
  const content = options.forwardContent === true
  const open = new Map<string, Open>()
  /** The span of `forward`, made before ours so that ours takes its ids. */
  const forwardedFor = (spanOptions: Parameters<Tracer.Tracer["span"]>[0]): Forwarded | undefined =>
    forward === undefined ? undefined : { span: forward.span(spanOptions), content }
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
      if (within !== undefined)
        return new RecordingSpan(spanOptions, within, undefined, forwardedFor(spanOptions))
      if (spanOptions.name !== SpanNames.turn)
        return forward === undefined ? new Tracer.NativeSpan(spanOptions) : forward.span(spanOptions)
      const turnOptions = ownTrace(spanOptions, parent)
      const trace: Open = { spans: [], max: maxSpansPerTrace, dropped: 0 }
      const span = new RecordingSpan(turnOptions, trace, finish, forwardedFor(turnOptions))
      open.set(span.traceId, trace)
      // A turn whose span never ends (its fiber was lost) must not hold memory for ever.
      if (open.size > maxOpenTraces) open.delete(open.keys().next().value as string)
      return span
    },
    // The other tracer's hook around each effect (OpenTelemetry's active context), as it is.
    ...(forward?.context !== undefined && { context: forward.context })
  })
}

/**
 * A turn begins a trace of its own, also under a span of the application's: that span
 * becomes a link. Without it, every turn of a long-lived runtime started under one request
 * (serve's Chat view) would share that request's trace id, and a trace is one turn.
 */
const ownTrace = (
  spanOptions: Parameters<Tracer.Tracer["span"]>[0],
  parent: Tracer.AnySpan | undefined
): Parameters<Tracer.Tracer["span"]>[0] =>
  parent === undefined
    ? spanOptions
    : {
        ...spanOptions,
        parent: Option.none(),
        root: true,
        links: [...spanOptions.links, { span: parent, attributes: {} }]
      }
