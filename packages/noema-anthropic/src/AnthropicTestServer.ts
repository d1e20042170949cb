/**
 * AnthropicTestServer: a local HTTP server that speaks Anthropic's Messages
 * API wire format (`POST /v1/messages`, JSON and SSE) and answers from a
 * script, so adapter tests, CLI end-to-end tests and benchmarks run against
 * the real `@anthropic-ai/sdk` (or any client of the wire format, such as
 * `@ai-sdk/anthropic`) without touching the network.
 *
 * Tests enqueue replies (text with or without thinking, tool calls, refusals,
 * errors, recorded event streams replayed as given, dropped or hanging
 * connections); each request takes the next one. Every request is recorded
 * with its headers and parsed body, and whether the client hung up early, so
 * interruption can be asserted on the server side. The recording, queueing
 * and socket handling are core's `ScriptedHttpServer`; this module is the wire
 * format. Plain Promises, so code that does not use Effect can use it;
 * `scoped` wraps it as an Effect resource.
 */
import { ScriptedHttpServer } from "@noema/core/testing"
import type { Effect, Scope } from "effect"
import {
  dropEvents,
  errorJson,
  frame,
  type MessageMeta,
  messageEvents,
  messageJson
} from "./internal/testServerWire.js"

export type StartOptions = ScriptedHttpServer.StartOptions

export interface Usage {
  /** Input tokens read neither from nor into the cache (Anthropic's `input_tokens`). */
  readonly inputTokens: number
  readonly outputTokens: number
  readonly cacheReadTokens?: number
  readonly cacheWriteTokens?: number
}

interface Delayed {
  /** Wait this long before sending anything (not even headers): a slow server. */
  readonly delayMs?: number
}

interface Streamed extends Delayed {
  /** Pause between consecutive stream events. */
  readonly chunkDelayMs?: number
  /** Pause between the headers and the first stream event (time to first token). */
  readonly firstChunkDelayMs?: number
  /** Defaults to the request's `model`. */
  readonly model?: string
  readonly usage?: Usage
}

/** A thinking block, streamed before the answer, ending with its signature. */
export interface Thinking {
  readonly text: string
  readonly signature: string
}

export interface TextReply extends Streamed {
  readonly type: "text"
  readonly text: string
  readonly thinking?: Thinking
  /** Default `end_turn`. */
  readonly stopReason?: string
  /** How the text is cut into streamed deltas; by default a word or so each. */
  readonly chunks?: ReadonlyArray<string>
}

export interface ToolCall {
  /** Defaults to `toolu_test<n>`, n counting calls across the server's life (reset by `reset()`). */
  readonly id?: string
  readonly name: string
  /** The JSON input, as text. */
  readonly arguments: string
}

export interface ToolCallsReply extends Streamed {
  readonly type: "tool-calls"
  readonly calls: ReadonlyArray<ToolCall>
  /** Text the model writes before the calls. */
  readonly text?: string
  readonly thinking?: Thinking
}

/** Stop reason `refusal`, with Anthropic's explanation in `stop_details` when given. */
export interface RefusalReply extends Streamed {
  readonly type: "refusal"
  readonly explanation?: string
}

export type MessageReply = TextReply | ToolCallsReply | RefusalReply

export interface ErrorReply extends Delayed {
  readonly type: "error"
  readonly status: number
  readonly message?: string
  /** `error.type`; defaults by status (e.g. `rate_limit_error` for 429, `overloaded_error` for 529). */
  readonly errorType?: string
  /** E.g. `{ "retry-after": "2" }` for 429s. */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * Events replayed as given, each as one SSE frame (`event:` its type, `data:`
 * the object as JSON, or a string verbatim: a recorded line byte for byte).
 * Answers streamed requests only.
 */
export interface EventsReply extends Delayed {
  readonly type: "events"
  readonly events: ReadonlyArray<unknown>
  readonly chunkDelayMs?: number
}

export interface RawReply extends Delayed {
  readonly type: "raw"
  /** Defaults to 200. */
  readonly status?: number
  /** Defaults to `content-type: application/json`. */
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string
}

/** A text answer whose connection is destroyed after `afterChunks` text deltas (streaming only). */
export interface DropReply extends Delayed {
  readonly type: "drop"
  readonly afterChunks: number
  readonly text?: string
  readonly model?: string
}

/** The request is accepted and never answered. */
export interface HangReply extends Delayed {
  readonly type: "hang"
}

export type ScriptedReply =
  | TextReply
  | ToolCallsReply
  | RefusalReply
  | ErrorReply
  | EventsReply
  | RawReply
  | DropReply
  | HangReply

/** A scripted reply, or a function choosing one from the request. */
export type Reply = ScriptedHttpServer.Reply<ScriptedReply>

export type RecordedRequest = ScriptedHttpServer.RecordedRequest

/** `url` is the base URL, e.g. `http://127.0.0.1:41234` (the SDK adds `/v1/messages`). */
export type TestServer = ScriptedHttpServer.Server<ScriptedReply>

type Exchange = ScriptedHttpServer.Exchange<ScriptedReply>

const name = "AnthropicTestServer"

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Anthropic's wire: one per server, as the generated tool-call ids count over the server's life. */
const makeWire = (): ScriptedHttpServer.Wire<ScriptedReply> => {
  let toolCallIds = 0
  const toolCallId = (call: ToolCall): string => call.id ?? `toolu_test${toolCallIds++}`
  return {
    name,
    basePath: "",
    requestIdHeader: "request-id",
    scriptFailure: (message) => ({ type: "error", status: 500, message }),
    reset: () => {
      toolCallIds = 0
    },
    answer: (exchange) => {
      const { method, path } = exchange.request
      if (method === "POST" && path === "/v1/messages") return respond(exchange, exchange.next(), toolCallId)
      exchange.sendJson(404, errorJson(404, `Not found (${method} ${path})`))
    }
  }
}

const respond = async (
  exchange: Exchange,
  reply: ScriptedReply,
  toolCallId: (call: ToolCall) => string
): Promise<void> => {
  if (reply.delayMs !== undefined && !(await exchange.pause(reply.delayMs))) return
  switch (reply.type) {
    case "hang":
      return
    case "error":
      return exchange.sendJson(
        reply.status,
        errorJson(reply.status, reply.message, reply.errorType),
        reply.headers
      )
    case "raw":
      return exchange.sendRaw(reply.status ?? 200, reply.body, reply.headers)
    case "events":
      if (!exchange.request.stream) {
        return exchange.sendJson(
          500,
          errorJson(500, `${name}: an events reply answers only streamed requests`)
        )
      }
      return exchange.stream(reply.events.map(frame), { chunkDelayMs: reply.chunkDelayMs ?? 0 })
    case "drop":
      if (!exchange.request.stream) return exchange.destroy()
      return exchange.stream(dropEvents(reply, meta(exchange)), { thenDrop: true })
    default: {
      const ids = reply.type === "tool-calls" ? reply.calls.map(toolCallId) : []
      if (!exchange.request.stream) return exchange.sendJson(200, messageJson(reply, meta(exchange), ids))
      return exchange.stream(messageEvents(reply, meta(exchange), ids), {
        firstDelayMs: reply.firstChunkDelayMs ?? 0,
        chunkDelayMs: reply.chunkDelayMs ?? 0
      })
    }
  }
}

const meta = (exchange: Exchange): MessageMeta => {
  const body = exchange.request.body
  return {
    id: `msg_test${exchange.serial}`,
    model: isRecord(body) && typeof body.model === "string" ? body.model : "claude-test",
    inputTokens: Math.max(1, Math.ceil(exchange.rawBodyLength / 4))
  }
}

export const start = (options: StartOptions = {}): Promise<TestServer> =>
  ScriptedHttpServer.start(makeWire(), options)

export const scoped = (options?: StartOptions): Effect.Effect<TestServer, never, Scope.Scope> =>
  ScriptedHttpServer.scoped(start, options)
