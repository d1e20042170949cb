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
import { Context } from "effect"

/** Whether spans record content (messages, tool arguments and results); off unless set. */
export const RecordContent = Context.Reference<boolean>("@noema/core/Tracing/RecordContent", {
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
  messageCount: "noema.session.message_count"
} as const
