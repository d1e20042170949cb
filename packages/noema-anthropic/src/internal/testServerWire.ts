/**
 * The Anthropic-shaped payloads the test server sends: `message` objects, the
 * SSE event streams of streamed messages (each frame `event: <type>` then
 * `data: <json>`, as Anthropic sends them and the SDK requires), and error
 * bodies. Pure functions of the scripted reply and the request, kept apart
 * from the socket handling.
 */
import { ScriptedHttpServer } from "@noema/core/testing"
import type { DropReply, MessageReply, Usage } from "../AnthropicTestServer.js"

export interface MessageMeta {
  readonly id: string
  /** The request's model, unless the reply names another. */
  readonly model: string
  /** Estimate used when the reply gives no usage. */
  readonly inputTokens: number
}

/** Roughly four characters a token; only needs to be deterministic. */
const tokensOf = (chars: number): number => Math.max(1, Math.ceil(chars / 4))

/** One SSE frame: the event's type as `event:`, the JSON (or a recorded line, verbatim) as `data:`. */
export const frame = (event: unknown): string => {
  const data = typeof event === "string" ? event : JSON.stringify(event)
  const parsed: unknown = typeof event === "string" ? safeParse(event) : event
  const type =
    typeof parsed === "object" && parsed !== null && typeof (parsed as { type?: unknown }).type === "string"
      ? (parsed as { type: string }).type
      : "message"
  return `event: ${type}\ndata: ${data}\n\n`
}

const safeParse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const stopReasonOf = (reply: MessageReply): string => {
  if (reply.type === "refusal") return "refusal"
  if (reply.type === "tool-calls") return "tool_use"
  return reply.stopReason ?? "end_turn"
}

const outputChars = (reply: MessageReply): number =>
  reply.type === "refusal"
    ? 0
    : (reply.text?.length ?? 0) +
      (reply.thinking?.text.length ?? 0) +
      (reply.type === "tool-calls" ? reply.calls.reduce((sum, call) => sum + call.arguments.length, 0) : 0)

const usageJson = (reply: MessageReply, meta: MessageMeta) => {
  const usage: Usage = reply.usage ?? {
    inputTokens: meta.inputTokens,
    outputTokens: tokensOf(outputChars(reply))
  }
  return {
    input_tokens: usage.inputTokens,
    cache_creation_input_tokens: usage.cacheWriteTokens ?? 0,
    cache_read_input_tokens: usage.cacheReadTokens ?? 0,
    output_tokens: usage.outputTokens
  }
}

const stopDetails = (reply: MessageReply) =>
  reply.type === "refusal" && reply.explanation !== undefined
    ? { type: "refusal", category: null, explanation: reply.explanation }
    : null

/** A non-streamed `message`. */
export const messageJson = (reply: MessageReply, meta: MessageMeta, ids: ReadonlyArray<string>) => {
  const content: Array<unknown> = []
  if (reply.type !== "refusal") {
    if (reply.thinking !== undefined) {
      content.push({ type: "thinking", thinking: reply.thinking.text, signature: reply.thinking.signature })
    }
    if (reply.text !== undefined && reply.text.length > 0) content.push({ type: "text", text: reply.text })
  }
  if (reply.type === "tool-calls") {
    reply.calls.forEach((call, index) => {
      content.push({ type: "tool_use", id: ids[index], name: call.name, input: JSON.parse(call.arguments) })
    })
  }
  return {
    id: meta.id,
    type: "message",
    role: "assistant",
    model: reply.model ?? meta.model,
    content,
    stop_reason: stopReasonOf(reply),
    stop_sequence: null,
    stop_details: stopDetails(reply),
    usage: usageJson(reply, meta)
  }
}

const messageStart = (reply: MessageReply | DropReply, meta: MessageMeta) => ({
  type: "message_start",
  message: {
    id: meta.id,
    type: "message",
    role: "assistant",
    model: ("model" in reply ? reply.model : undefined) ?? meta.model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: {
      input_tokens: meta.inputTokens,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: 1
    }
  }
})

/** The events of a streamed message, in Anthropic's order: start, blocks, delta with the stop reason, stop. */
export const messageEvents = (
  reply: MessageReply,
  meta: MessageMeta,
  ids: ReadonlyArray<string>
): Array<string> => {
  const events: Array<unknown> = [messageStart(reply, meta), { type: "ping" }]
  let index = 0
  if (reply.type !== "refusal" && reply.thinking !== undefined) {
    events.push({
      type: "content_block_start",
      index,
      content_block: { type: "thinking", thinking: "", signature: "" }
    })
    for (const piece of ScriptedHttpServer.splitText(reply.thinking.text)) {
      events.push({ type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: piece } })
    }
    events.push({
      type: "content_block_delta",
      index,
      delta: { type: "signature_delta", signature: reply.thinking.signature }
    })
    events.push({ type: "content_block_stop", index })
    index++
  }
  const text = reply.type === "refusal" ? undefined : reply.text
  if (text !== undefined && text.length > 0) {
    events.push({ type: "content_block_start", index, content_block: { type: "text", text: "" } })
    const pieces =
      reply.type === "text" && reply.chunks !== undefined ? reply.chunks : ScriptedHttpServer.splitText(text)
    for (const piece of pieces) {
      events.push({ type: "content_block_delta", index, delta: { type: "text_delta", text: piece } })
    }
    events.push({ type: "content_block_stop", index })
    index++
  }
  if (reply.type === "tool-calls") {
    reply.calls.forEach((call, position) => {
      events.push({
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: ids[position], name: call.name, input: {} }
      })
      for (const piece of ScriptedHttpServer.splitArguments(call.arguments)) {
        events.push({
          type: "content_block_delta",
          index,
          delta: { type: "input_json_delta", partial_json: piece }
        })
      }
      events.push({ type: "content_block_stop", index })
      index++
    })
  }
  const usage = usageJson(reply, meta)
  events.push(
    {
      type: "message_delta",
      delta: { stop_reason: stopReasonOf(reply), stop_sequence: null, stop_details: stopDetails(reply) },
      usage: {
        input_tokens: usage.input_tokens,
        cache_creation_input_tokens: usage.cache_creation_input_tokens,
        cache_read_input_tokens: usage.cache_read_input_tokens,
        output_tokens: usage.output_tokens
      }
    },
    { type: "message_stop" }
  )
  return events.map(frame)
}

/** The first events of a text answer, cut after `afterChunks` deltas (the connection then drops). */
export const dropEvents = (reply: DropReply, meta: MessageMeta): Array<string> => {
  const events: Array<unknown> = [
    messageStart(reply, meta),
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }
  ]
  for (const piece of ScriptedHttpServer.splitText(
    reply.text ?? "This answer is cut off before it ends"
  ).slice(0, reply.afterChunks)) {
    events.push({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: piece } })
  }
  return events.map(frame)
}

const defaultErrorType = (status: number): string => {
  switch (status) {
    case 400:
      return "invalid_request_error"
    case 401:
      return "authentication_error"
    case 402:
      return "billing_error"
    case 403:
      return "permission_error"
    case 404:
      return "not_found_error"
    case 413:
      return "request_too_large"
    case 429:
      return "rate_limit_error"
    case 529:
      return "overloaded_error"
    default:
      return "api_error"
  }
}

/** Anthropic's error envelope. */
export const errorJson = (status: number, message?: string, errorType?: string) => ({
  type: "error",
  error: { type: errorType ?? defaultErrorType(status), message: message ?? `scripted error ${status}` }
})
