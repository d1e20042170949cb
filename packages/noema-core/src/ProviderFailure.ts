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
import type * as ModelError from "./ModelError.js"
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
