/**
 * ProviderFailure: how an adapter turns whatever its SDK throws into core's
 * typed `ChatModelError`, said once for every adapter.
 *
 * An adapter supplies only what is its own (how its SDK's errors map to a
 * `ModelError` reason, where its SDK keeps the request id); the rest is here:
 * the clock read for a `retry-after` given as a date, the error carrying the
 * provider, model and request id, messages kept to one bounded line without
 * secrets, and `MalformedResponse` for an answer of the wrong shape.
 */
import { Clock, Effect } from "effect"
import * as ChatModel from "./ChatModel.js"
import * as ModelError from "./ModelError.js"
import type { Phase } from "./ProviderStream.js"

/** Thrown (inside SSE iteration) or returned when the server's answer has the wrong shape. */
export class MalformedResponse extends Error {
  override readonly name = "MalformedResponse"
}

/** What an adapter's mapping of its SDK's errors reads besides the error. */
export interface Context {
  /** Removes secrets (the API key) from text that may be shown to users. */
  readonly scrub: (text: string) => string
  /** Epoch milliseconds, to turn a `retry-after` HTTP date into a delay. */
  readonly now: number
  readonly phase: Phase
}

const maximumMessageLength = 400

/** One line, bounded, without secrets: provider messages can be long and multi-line. */
export const oneLine = (text: string, scrub: (text: string) => string = (text) => text): string => {
  const flat = scrub(text).replace(/\s+/g, " ").trim()
  return flat.length > maximumMessageLength ? `${flat.slice(0, maximumMessageLength - 1)}…` : flat
}

/** What was thrown, in one bounded line: its message, and its cause's when that says more. */
export const describe = (error: unknown, scrub?: (text: string) => string): string => {
  const message = error instanceof Error ? error.message : String(error)
  const cause = causeOf(error)
  const causeMessage = cause instanceof Error && cause.message !== message ? ` (${cause.message})` : ""
  return oneLine(`${message}${causeMessage}`, scrub)
}

/**
 * The request id that the official OpenAI and Anthropic SDKs attach to a parsed
 * body (as `_request_id`, not enumerable, so never part of the data).
 */
export const bodyRequestId = (body: unknown): string | undefined => {
  if (typeof body !== "object" || body === null) return undefined
  const id = (body as { readonly _request_id?: unknown })._request_id
  return typeof id === "string" && id.length > 0 ? id : undefined
}

/** The typed failure for anything thrown; `requestId` is one the adapter already knows (a streamed response's). */
export type Fail = (
  cause: unknown,
  phase: Phase,
  requestId?: string
) => Effect.Effect<never, ChatModel.ChatModelError>

export interface Options {
  readonly provider: string
  readonly model: string
  /** The adapter's mapping of what its SDK throws. */
  readonly toReason: (cause: unknown, now: number, phase: Phase) => ModelError.Reason
  /** The request id a failure carries, else `fallback`. */
  readonly requestIdOf: (cause: unknown, fallback: string | undefined) => string | undefined
}

/** An adapter's `Fail`: its mapping, with the time read from the clock and the request id attached. */
export const make =
  (options: Options): Fail =>
  (cause, phase, requestId) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.fail(
        ChatModel.error(
          options.provider,
          options.toReason(cause, now, phase),
          options.model,
          options.requestIdOf(cause, requestId)
        )
      )
    )

/** The SDK's own abort (its timeout or a caller's signal) before the answer was complete. */
export const aborted = (): ModelError.Network =>
  new ModelError.Network({ kind: "cut-short", message: "request aborted before the response was complete" })

/**
 * A transport failure (the connection refused, reset or closed): before the answer began it is
 * a failed connection, during the stream an answer cut short.
 */
export const transport = (phase: Phase, detail: string): ModelError.Network =>
  ModelError.network(phase === "stream" ? "cut-short" : "connect", detail)

/** Network failures that fetch (undici) and Node report without wrapping them in an SDK error. */
const networkCodes = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
  "UND_ERR_ABORTED",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT"
])

const codeOf = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null || !("code" in value)) return undefined
  const code = (value as { readonly code: unknown }).code
  return typeof code === "string" ? code : undefined
}

const causeOf = (value: unknown): unknown =>
  typeof value === "object" && value !== null && "cause" in value
    ? (value as { readonly cause: unknown }).cause
    : undefined

/** Whether `error` (or a cause a few levels down) is a transport failure: refused, reset, closed, timed out. */
export const isTransportFailure = (error: unknown): boolean => {
  let current: unknown = error
  for (let depth = 0; depth < 4 && current !== undefined; depth++) {
    const code = codeOf(current)
    if (code !== undefined && networkCodes.has(code)) return true
    if (current instanceof Error && (current.name === "AbortError" || current.name === "TimeoutError")) {
      return true
    }
    if (current instanceof TypeError && /^(terminated|fetch failed|network error)/i.test(current.message)) {
      return true
    }
    current = causeOf(current)
  }
  return false
}
