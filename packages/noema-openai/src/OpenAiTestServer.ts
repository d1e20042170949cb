/**
 * OpenAiTestServer: a local HTTP server that speaks OpenAI's wire format
 * (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/models`) and answers from a
 * script, so adapter tests, CLI end-to-end tests and benchmarks can run against
 * the real `openai` SDK without touching the network.
 *
 * Tests enqueue replies (text, tool calls, refusals, errors, raw bodies, dropped
 * or hanging connections, embeddings); each chat/embeddings request takes the
 * next one. Every request is recorded with its parsed body, and whether the
 * client hung up early, so interruption can be asserted on the server side.
 *
 * The recording, queueing and socket handling are core's `ScriptedHttpServer`;
 * this module is the wire format. Plain Promises, so non-Effect code can use
 * it; `scoped` wraps it as an Effect resource.
 */
import { ScriptedHttpServer } from "@noema/core/testing"
import type { Effect, Scope } from "effect"
import {
  chatCompletionEvents,
  chatCompletionJson,
  dropEvents,
  deterministicEmbedding as embed,
  embeddingsJson,
  errorJson,
  modelsJson,
  type StreamMeta,
  sseEvents
} from "./internal/testServerWire.js"

export type StartOptions = ScriptedHttpServer.StartOptions

export interface Usage {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly cachedTokens?: number
  readonly reasoningTokens?: number
}

interface Delayed {
  /** Wait this long before sending anything (not even headers): a slow server. */
  readonly delayMs?: number
}

export interface TextReply extends Delayed {
  readonly type: "text"
  readonly text: string
  /** Reasoning sent before the text as `reasoning_content`, the way DeepSeek and Qwen send it. */
  readonly reasoning?: string
  readonly finishReason?: "stop" | "length" | "content_filter"
  readonly usage?: Usage
  /** How the text is cut into streamed deltas; by default a few characters/words each. */
  readonly chunks?: ReadonlyArray<string>
  /** Pause between consecutive stream events. */
  readonly chunkDelayMs?: number
  /** Pause between the headers and the first stream event (time to first token). */
  readonly firstChunkDelayMs?: number
  /** Defaults to the request's `model`. */
  readonly model?: string
}

export interface ToolCall {
  /** Defaults to `call_<n>`, n counting calls across the server's life (reset by `reset()`). */
  readonly id?: string
  readonly name: string
  /** The JSON arguments, verbatim (need not be valid JSON, for malformed-arguments tests). */
  readonly arguments: string
}

export interface ToolCallsReply extends Delayed {
  readonly type: "tool-calls"
  readonly calls: ReadonlyArray<ToolCall>
  /** Content the model emits before the calls. */
  readonly text?: string
  readonly usage?: Usage
  readonly chunkDelayMs?: number
  readonly firstChunkDelayMs?: number
  readonly model?: string
}

export interface RefusalReply extends Delayed {
  readonly type: "refusal"
  readonly refusal: string
  readonly usage?: Usage
  readonly chunkDelayMs?: number
  readonly firstChunkDelayMs?: number
  readonly model?: string
}

export interface ErrorReply extends Delayed {
  readonly type: "error"
  readonly status: number
  readonly message?: string
  /** `error.type`; defaults by status (e.g. `invalid_request_error`, `server_error`). */
  readonly errorType?: string
  /** `error.code`; defaults to `invalid_api_key` for 401, `rate_limit_exceeded` for 429, else null. */
  readonly code?: string
  /** E.g. `{ "retry-after": "2", "retry-after-ms": "2000" }` for 429s. */
  readonly headers?: Readonly<Record<string, string>>
}

export interface RawReply extends Delayed {
  readonly type: "raw"
  /** Defaults to 200. */
  readonly status?: number
  /** Defaults to `content-type: application/json`; pass `text/event-stream` for hand-written SSE. */
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * A stream replayed as given: each event is one `data:` frame (objects as JSON,
 * strings verbatim), for chunks shaped like a particular provider's. Answers
 * streamed requests only.
 */
export interface SseReply extends Delayed {
  readonly type: "sse"
  readonly events: ReadonlyArray<unknown>
  /** End with `data: [DONE]`. Default true. */
  readonly done?: boolean
  readonly chunkDelayMs?: number
}

export interface DropReply extends Delayed {
  readonly type: "drop"
  /** Streaming: content deltas sent before the socket is destroyed. Ignored when not streaming. */
  readonly afterChunks: number
  readonly text?: string
  readonly chunkDelayMs?: number
}

export interface HangReply extends Delayed {
  readonly type: "hang"
}

export interface EmbeddingsUsage {
  readonly promptTokens: number
  /** Defaults to `promptTokens`. */
  readonly totalTokens?: number
}

export interface EmbeddingsReply extends Delayed {
  readonly type: "embeddings"
  /** Sent as given (through float32 when the client asks for base64). Default: `deterministicEmbedding` of each input. */
  readonly vectors?: ReadonlyArray<ReadonlyArray<number>>
  /** Length of generated vectors; defaults to the request's `dimensions`, else 8. */
  readonly dimensions?: number
  readonly usage?: EmbeddingsUsage
  readonly model?: string
}

export type ScriptedReply =
  | TextReply
  | ToolCallsReply
  | RefusalReply
  | ErrorReply
  | RawReply
  | SseReply
  | DropReply
  | HangReply
  | EmbeddingsReply

/** A scripted reply, or a function choosing one from the request (e.g. to echo or branch on it). */
export type Reply = ScriptedHttpServer.Reply<ScriptedReply>

export type RecordedRequest = ScriptedHttpServer.RecordedRequest

/** `url` is the base URL including `/v1`, e.g. `http://127.0.0.1:41234/v1`: the SDK's `baseURL`. */
export type TestServer = ScriptedHttpServer.Server<ScriptedReply>

/**
 * The vector the server returns for `text` when an embeddings reply has no `vectors`:
 * seeded by a hash of the text, unit length, and exactly representable as float32 so
 * the float and base64 encodings decode to the same numbers.
 */
export const deterministicEmbedding: (text: string, dimensions?: number) => ReadonlyArray<number> = embed

type Exchange = ScriptedHttpServer.Exchange<ScriptedReply>

type Route = "chat" | "responses" | "embeddings"

const routes: Readonly<Record<string, Route>> = {
  "/v1/chat/completions": "chat",
  // The Responses API: answered by `sse` (recorded event streams), `raw`, `error`, `hang` and `drop` replies.
  "/v1/responses": "responses",
  "/v1/embeddings": "embeddings"
}

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

const name = "OpenAiTestServer"

/** OpenAI's wire: one per server, as the generated tool-call ids count over the server's life. */
const makeWire = (): ScriptedHttpServer.Wire<ScriptedReply> => {
  let toolCallIds = 0
  const toolCallId = (call: ToolCall): string => call.id ?? `call_${toolCallIds++}`
  return {
    name,
    basePath: "/v1",
    requestIdHeader: "x-request-id",
    scriptFailure: (message) => ({ type: "error", status: 500, message }),
    reset: () => {
      toolCallIds = 0
    },
    answer: (exchange) => {
      const { method, path } = exchange.request
      const route = method === "POST" ? routes[path] : undefined
      if (route !== undefined) return respond(exchange, exchange.next(), route, toolCallId)
      if (method === "GET" && path === "/v1/models") return exchange.sendJson(200, modelsJson())
      exchange.sendJson(404, errorJson(404, `Invalid URL (${method} ${path})`))
    }
  }
}

const respond = async (
  exchange: Exchange,
  reply: ScriptedReply,
  route: Route,
  toolCallId: (call: ToolCall) => string
): Promise<void> => {
  const { request } = exchange
  if (reply.delayMs !== undefined && !(await exchange.pause(reply.delayMs))) return
  switch (reply.type) {
    case "hang":
      return
    case "error":
      return exchange.sendJson(
        reply.status,
        errorJson(reply.status, reply.message, reply.errorType, reply.code),
        reply.headers
      )
    case "raw":
      return exchange.sendRaw(reply.status ?? 200, reply.body, reply.headers)
    case "sse":
      if (route === "embeddings") return mismatch(exchange, reply.type)
      if (!request.stream) {
        return exchange.sendJson(500, errorJson(500, `${name}: an sse reply answers only streamed requests`))
      }
      return exchange.stream(sseEvents(reply), { chunkDelayMs: reply.chunkDelayMs ?? 0 })
    case "drop":
      if (!request.stream) return exchange.destroy()
      return exchange.stream(dropEvents(reply, streamMeta(exchange)), {
        chunkDelayMs: reply.chunkDelayMs ?? 0,
        thenDrop: true
      })
    case "embeddings":
      if (route !== "embeddings") return mismatch(exchange, reply.type)
      return exchange.sendJson(200, embeddingsJson(reply, request.body))
    default: {
      if (route !== "chat") return mismatch(exchange, reply.type)
      const meta = streamMeta(exchange)
      const ids = reply.type === "tool-calls" ? reply.calls.map(toolCallId) : []
      if (!request.stream) return exchange.sendJson(200, chatCompletionJson(reply, meta, ids))
      return exchange.stream(chatCompletionEvents(reply, meta, ids), {
        firstDelayMs: reply.firstChunkDelayMs ?? 0,
        chunkDelayMs: reply.chunkDelayMs ?? 0
      })
    }
  }
}

const streamMeta = (exchange: Exchange): StreamMeta => {
  const body = exchange.request.body
  const model = isRecord(body) && typeof body.model === "string" ? body.model : "gpt-4o-mini"
  const options = isRecord(body) ? body.stream_options : undefined
  return {
    id: `chatcmpl-test${exchange.serial}`,
    created: Math.floor(Date.now() / 1000),
    model,
    includeUsage: isRecord(options) && options.include_usage === true,
    promptTokens: Math.max(1, Math.ceil(exchange.rawBodyLength / 4))
  }
}

const mismatch = (exchange: Exchange, type: string): void =>
  exchange.sendJson(500, errorJson(500, `${name}: a "${type}" reply cannot answer ${exchange.request.path}`))

export const start = (options: StartOptions = {}): Promise<TestServer> =>
  ScriptedHttpServer.start(makeWire(), options)

export const scoped = (options?: StartOptions): Effect.Effect<TestServer, never, Scope.Scope> =>
  ScriptedHttpServer.scoped(start, options)
