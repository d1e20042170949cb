/**
 * Tracing: the spans noema opens, and what they may record.
 *
 * noema opens its spans with Effect's own tracer, once each, where the work
 * happens: a model call (`chat {model}`, in `ChatModel.make`), a tool call
 * (`execute_tool {name}`, in `Tool.callIn`), a session's turn and commit (in
 * `@noema/session`). Their attributes follow OpenTelemetry's GenAI semantic
 * conventions. With no tracer installed they cost little; an application
 * exports them by providing a tracer (e.g. `@effect/opentelemetry`'s, which
 * the CLI does when the standard `OTEL_*` variables ask for it).
 *
 * Spans never carry message content, tool arguments or tool results unless
 * `RecordContent` is set to `true`; they never carry keys.
 */
import { Context, Effect, type Fiber, Stream, Tracer } from "effect"

/** Whether spans record content (messages, tool arguments and results); off unless set. */
export const RecordContent = Context.Reference<boolean>("@noema/core/Tracing/RecordContent", {
  defaultValue: () => false
})

/**
 * Whether `execute_tool` spans record the tool call's arguments and result, even without
 * `RecordContent`: a local trace store (whose database already holds the session's
 * messages) sets it, so its traces show what a tool was asked and answered without
 * recording every model call's messages, whose size grows with the history.
 */
export const RecordToolContent = Context.Reference<boolean>("@noema/core/Tracing/RecordToolContent", {
  defaultValue: () => false
})

/** Span names. A model call is `chat {model}` and a tool call `execute_tool {name}`, as the conventions say. */
export const SpanNames = {
  turn: "noema.turn",
  commit: "noema.session.commit"
} as const

/** The attribute keys noema sets (GenAI semantic conventions, plus noema's own under `noema.`). */
export const Attributes = {
  operationName: "gen_ai.operation.name",
  providerName: "gen_ai.provider.name",
  /** The older name of `gen_ai.provider.name`, still read by many backends. */
  system: "gen_ai.system",
  requestModel: "gen_ai.request.model",
  requestTemperature: "gen_ai.request.temperature",
  requestTopP: "gen_ai.request.top_p",
  requestMaxTokens: "gen_ai.request.max_tokens",
  requestSeed: "gen_ai.request.seed",
  responseModel: "gen_ai.response.model",
  responseId: "gen_ai.response.id",
  responseFinishReasons: "gen_ai.response.finish_reasons",
  usageInputTokens: "gen_ai.usage.input_tokens",
  usageOutputTokens: "gen_ai.usage.output_tokens",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  errorType: "error.type",
  /** Content, only with `RecordContent`. */
  inputMessages: "gen_ai.input.messages",
  outputMessages: "gen_ai.output.messages",
  toolCallArguments: "gen_ai.tool.call.arguments",
  toolCallResult: "gen_ai.tool.call.result",
  sessionId: "noema.session.id",
  messageCount: "noema.session.message_count",
  /** On a turn: how many messages the session held before it (the seq of the turn's first message). */
  messageSeq: "noema.session.message_seq",
  /** On a streamed model call: milliseconds from the call's start to its first text or tool-call chunk. */
  timeToFirstToken: "noema.chat.time_to_first_token_ms",
  /** On a retry event: the attempt about to be made (2 for the first retry), and the wait before it. */
  retryAttempt: "noema.retry.attempt",
  retryDelay: "noema.retry.delay_ms"
} as const

/** The attributes that carry content (see `RecordContent`): a tracer forwarding spans elsewhere may leave them out. */
export const contentAttributes: ReadonlySet<string> = new Set([
  Attributes.inputMessages,
  Attributes.outputMessages,
  Attributes.toolCallArguments,
  Attributes.toolCallResult
])

/** Span event names: a model call's failed attempt that is retried. */
export const EventNames = {
  retry: "noema.retry"
} as const

// ---------------------------------------------------------------------------
// Spans
// ---------------------------------------------------------------------------

/**
 * A tracer other than Effect's default one is installed. Without one a span
 * would go nowhere, so noema opens none and spends nothing on it (a span on
 * Effect's default tracer costs microseconds per model call).
 */
export const isTracing = (fiber: Fiber.Fiber<unknown, unknown>): boolean =>
  fiber.getRef(Tracer.Tracer) !== Tracer.nativeTracer

export interface SpanOptions {
  readonly attributes?: Record<string, unknown>
  readonly kind?: Tracer.SpanKind
}

/**
 * A span's options, or a function making them: called only when a span is opened, so a
 * call that is not traced does not build attributes it would throw away.
 */
export type SpanOptionsInput = SpanOptions | (() => SpanOptions)

const toSpanOptions = (input: SpanOptionsInput | undefined): Tracer.SpanOptions => {
  const options = typeof input === "function" ? input() : input
  return {
    ...(options?.attributes !== undefined && { attributes: options.attributes }),
    ...(options?.kind !== undefined && { kind: options.kind }),
    // A stack trace per call costs more than the span itself.
    captureStackTrace: false
  }
}

/**
 * `effect` in a span named `name` when a tracer is installed; otherwise
 * `effect` unchanged. `traced` (default: `effect`) is what runs inside the
 * span: `effect` plus whatever annotates the span.
 */
export const withSpan = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  name: string,
  options?: SpanOptionsInput,
  traced?: () => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    isTracing(fiber)
      ? Effect.withSpan(traced === undefined ? effect : traced(), name, toSpanOptions(options))
      : effect
  )

/** `withSpan` for a stream: one span over the whole stream, when a tracer is installed. */
export const withSpanStream = <A, E, R>(
  stream: Stream.Stream<A, E, R>,
  name: string,
  options?: SpanOptionsInput,
  traced?: () => Stream.Stream<A, E, R>
): Stream.Stream<A, E, R> =>
  Stream.unwrap(
    Effect.withFiber((fiber) =>
      Effect.succeed(
        isTracing(fiber)
          ? Stream.withSpan(traced === undefined ? stream : traced(), name, toSpanOptions(options))
          : stream
      )
    )
  )
