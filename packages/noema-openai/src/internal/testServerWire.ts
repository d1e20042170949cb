/**
 * The OpenAI-shaped payloads the test server sends: chat.completion objects, SSE
 * chunk streams, embeddings lists, model lists and error bodies. Pure functions of
 * the scripted reply and the request, kept apart from the socket handling.
 */
import { Buffer } from "node:buffer"
import { createHash } from "node:crypto"
import { ScriptedHttpServer } from "@noema/core/testing"
import type {
  DropReply,
  EmbeddingsReply,
  RefusalReply,
  SseReply,
  TextReply,
  ToolCallsReply,
  Usage
} from "../OpenAiTestServer.js"

export interface StreamMeta {
  readonly id: string
  readonly created: number
  /** The request's model, unless the reply overrides it. */
  readonly model: string
  /** The request asked for `stream_options.include_usage`. */
  readonly includeUsage: boolean
  /** Estimate used when the reply has no usage. */
  readonly promptTokens: number
}

type ChatReply = TextReply | ToolCallsReply | RefusalReply

const FINGERPRINT = "fp_noema_test"

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/** Roughly four characters a token, like OpenAI's rule of thumb; only needs to be deterministic. */
const tokensOf = (chars: number): number => Math.ceil(chars / 4)

const usageJson = (usage: Usage) => ({
  prompt_tokens: usage.promptTokens,
  completion_tokens: usage.completionTokens,
  total_tokens: usage.promptTokens + usage.completionTokens,
  prompt_tokens_details: { cached_tokens: usage.cachedTokens ?? 0, audio_tokens: 0 },
  completion_tokens_details: {
    reasoning_tokens: usage.reasoningTokens ?? 0,
    audio_tokens: 0,
    accepted_prediction_tokens: 0,
    rejected_prediction_tokens: 0
  }
})

const usageOf = (reply: ChatReply, meta: StreamMeta): Usage => {
  if (reply.usage !== undefined) return reply.usage
  let chars: number
  switch (reply.type) {
    case "text":
      chars = reply.text.length + (reply.reasoning?.length ?? 0)
      break
    case "refusal":
      chars = reply.refusal.length
      break
    case "tool-calls":
      chars = reply.text?.length ?? 0
      for (const c of reply.calls) chars += c.name.length + c.arguments.length
      break
  }
  return { promptTokens: meta.promptTokens, completionTokens: tokensOf(chars) }
}

const finishReasonOf = (reply: ChatReply): string =>
  reply.type === "tool-calls" ? "tool_calls" : reply.type === "text" ? (reply.finishReason ?? "stop") : "stop"

/** A non-streamed `chat.completion`. `ids` are the tool call ids, already defaulted. */
export const chatCompletionJson = (reply: ChatReply, meta: StreamMeta, ids: ReadonlyArray<string>) => {
  const message =
    reply.type === "text"
      ? {
          role: "assistant",
          content: reply.text,
          ...(reply.reasoning !== undefined && { reasoning_content: reply.reasoning }),
          refusal: null,
          annotations: []
        }
      : reply.type === "refusal"
        ? { role: "assistant", content: null, refusal: reply.refusal, annotations: [] }
        : {
            role: "assistant",
            content: reply.text ?? null,
            refusal: null,
            annotations: [],
            tool_calls: reply.calls.map((c, i) => ({
              id: ids[i],
              type: "function",
              function: { name: c.name, arguments: c.arguments }
            }))
          }
  return {
    id: meta.id,
    object: "chat.completion",
    created: meta.created,
    model: reply.model ?? meta.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReasonOf(reply) }],
    usage: usageJson(usageOf(reply, meta)),
    service_tier: "default",
    system_fingerprint: FINGERPRINT
  }
}

const chunkWriter = (meta: StreamMeta, model: string) => {
  const frame = (value: unknown) => `data: ${JSON.stringify(value)}\n\n`
  // Real streams repeat `usage: null` on every chunk once include_usage is on.
  const usageField = meta.includeUsage ? { usage: null } : {}
  const header = {
    id: meta.id,
    object: "chat.completion.chunk",
    created: meta.created,
    model,
    service_tier: "default",
    system_fingerprint: FINGERPRINT
  }
  return {
    delta: (delta: unknown, finishReason: string | null = null) =>
      frame({
        ...header,
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
        ...usageField
      }),
    usage: (usage: Usage) => frame({ ...header, choices: [], usage: usageJson(usage) })
  }
}

const DONE = "data: [DONE]\n\n"

/** The SSE events of a streamed reply, each one complete `data: ...\n\n` frame. */
export const chatCompletionEvents = (
  reply: ChatReply,
  meta: StreamMeta,
  ids: ReadonlyArray<string>
): Array<string> => {
  const w = chunkWriter(meta, reply.model ?? meta.model)
  const events: Array<string> = []
  switch (reply.type) {
    case "text":
      events.push(w.delta({ role: "assistant", content: "", refusal: null }))
      for (const piece of ScriptedHttpServer.splitText(reply.reasoning ?? "")) {
        events.push(w.delta({ content: null, reasoning_content: piece }))
      }
      for (const piece of reply.chunks ?? ScriptedHttpServer.splitText(reply.text))
        events.push(w.delta({ content: piece }))
      break
    case "refusal":
      events.push(w.delta({ role: "assistant", content: null, refusal: "" }))
      for (const piece of ScriptedHttpServer.splitText(reply.refusal))
        events.push(w.delta({ refusal: piece }))
      break
    case "tool-calls": {
      const text = reply.text ?? ""
      events.push(w.delta({ role: "assistant", content: text.length > 0 ? "" : null, refusal: null }))
      for (const piece of ScriptedHttpServer.splitText(text)) events.push(w.delta({ content: piece }))
      const perCall = reply.calls.map((c, index) => [
        { index, id: ids[index], type: "function", function: { name: c.name, arguments: "" } },
        ...ScriptedHttpServer.splitArguments(c.arguments).map((fragment) => ({
          index,
          function: { arguments: fragment }
        }))
      ])
      // Round-robin across calls: parallel tool calls really do arrive interleaved.
      const rounds = Math.max(0, ...perCall.map((deltas) => deltas.length))
      for (let r = 0; r < rounds; r++) {
        for (const deltas of perCall) {
          const d = deltas[r]
          if (d !== undefined) events.push(w.delta({ tool_calls: [d] }))
        }
      }
      break
    }
  }
  events.push(w.delta({}, finishReasonOf(reply)))
  if (meta.includeUsage) events.push(w.usage(usageOf(reply, meta)))
  events.push(DONE)
  return events
}

/** The frames of an `sse` reply: its events as given, then `[DONE]` unless it says not to. */
export const sseEvents = (reply: SseReply): Array<string> => {
  const events = reply.events.map(
    (event) => `data: ${typeof event === "string" ? event : JSON.stringify(event)}\n\n`
  )
  if (reply.done !== false) events.push(DONE)
  return events
}

/** The events sent before a `drop` reply cuts the connection: the role chunk and `afterChunks` deltas. */
export const dropEvents = (reply: DropReply, meta: StreamMeta): Array<string> => {
  const w = chunkWriter(meta, meta.model)
  const text = reply.text ?? "This response is cut off before it is complete, as if the connection died."
  const pieces = ScriptedHttpServer.splitText(text).slice(0, Math.max(0, reply.afterChunks))
  return [
    w.delta({ role: "assistant", content: "", refusal: null }),
    ...pieces.map((p) => w.delta({ content: p }))
  ]
}

/**
 * A unit vector seeded by a SHA-256 of the text. Components are rounded to float32 so
 * that the base64 (float32) encoding decodes to exactly the same numbers.
 */
export const deterministicEmbedding = (text: string, dimensions = 8): ReadonlyArray<number> => {
  const raw: Array<number> = []
  for (let block = 0; raw.length < dimensions; block++) {
    const digest = createHash("sha256").update(`${block}\u0000${text}`).digest()
    for (let o = 0; o + 4 <= digest.length && raw.length < dimensions; o += 4) {
      raw.push((digest.readUInt32LE(o) / 0xffffffff) * 2 - 1)
    }
  }
  let norm = 0
  for (const x of raw) norm += x * x
  norm = Math.sqrt(norm) || 1
  return raw.map((x) => Math.fround(x / norm))
}

/** Each embeddings input as text: strings as is, token arrays joined so they still hash deterministically. */
const inputsOf = (input: unknown): Array<string> => {
  if (typeof input === "string") return [input]
  if (!Array.isArray(input)) return []
  if (input.every((x) => typeof x === "number")) return [input.join(",")]
  return input.map((x) => (typeof x === "string" ? x : Array.isArray(x) ? x.join(",") : JSON.stringify(x)))
}

const toBase64Float32 = (vector: ReadonlyArray<number>): string => {
  const buf = Buffer.allocUnsafe(vector.length * 4)
  for (let i = 0; i < vector.length; i++) buf.writeFloatLE(vector[i] ?? 0, i * 4)
  return buf.toString("base64")
}

export const embeddingsJson = (reply: EmbeddingsReply, body: unknown) => {
  const request = isRecord(body) ? body : {}
  const inputs = inputsOf(request.input)
  const dimensions =
    reply.dimensions ?? (typeof request.dimensions === "number" ? request.dimensions : undefined) ?? 8
  const vectors = reply.vectors ?? inputs.map((text) => deterministicEmbedding(text, dimensions))
  const base64 = request.encoding_format === "base64"
  const promptTokens =
    reply.usage?.promptTokens ?? inputs.reduce((sum, text) => sum + Math.max(1, tokensOf(text.length)), 0)
  return {
    object: "list",
    data: vectors.map((vector, index) => ({
      object: "embedding",
      index,
      embedding: base64 ? toBase64Float32(vector) : vector
    })),
    model: reply.model ?? (typeof request.model === "string" ? request.model : "text-embedding-3-small"),
    usage: { prompt_tokens: promptTokens, total_tokens: reply.usage?.totalTokens ?? promptTokens }
  }
}

export const modelsJson = () => ({
  object: "list",
  data: ["gpt-4o-mini", "gpt-4o", "text-embedding-3-small"].map((id) => ({
    id,
    object: "model",
    created: 1_700_000_000,
    owned_by: "openai"
  }))
})

const defaultErrorType = (status: number): string =>
  status === 429 ? "requests" : status >= 500 ? "server_error" : "invalid_request_error"

const defaultErrorMessage = (status: number): string => {
  switch (status) {
    case 400:
      return "Invalid request."
    case 401:
      return "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
    case 404:
      return "The model does not exist or you do not have access to it."
    case 429:
      return "Rate limit reached for requests. Please try again later."
    case 503:
      return "The server is overloaded or not ready yet."
    default:
      return status >= 500 ? "The server had an error while processing your request." : `Error ${status}.`
  }
}

const defaultErrorCode = (status: number): string | null =>
  status === 401 ? "invalid_api_key" : status === 429 ? "rate_limit_exceeded" : null

/** OpenAI's error envelope: `{ error: { message, type, param, code } }`. */
export const errorJson = (status: number, message?: string, type?: string, code?: string) => ({
  error: {
    message: message ?? defaultErrorMessage(status),
    type: type ?? defaultErrorType(status),
    param: null,
    code: code ?? defaultErrorCode(status)
  }
})
