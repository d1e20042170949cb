/**
 * ModelError: why a call to a model provider failed.
 *
 * Providers differ in how they fail; callers should not have to care. Every
 * adapter maps its SDK's failures onto one of these reasons, and each reason
 * says whether trying again can help (`isRetryable`) and, for rate limits, how
 * long the provider asked us to wait. `ChatModelError` and `EmbedderError`
 * carry a reason from this union, and the provider's request id when it sent
 * one (what its support asks for). The retry policy over these reasons lives
 * in `Retry`.
 */
import { Schema } from "effect"

export class RateLimited extends Schema.TaggedClass<RateLimited>()("RateLimited", {
  message: Schema.String,
  /** What the provider asked for (`retry-after`), in milliseconds. */
  retryAfterMillis: Schema.optionalKey(Schema.Number)
}) {
  get isRetryable(): boolean {
    return true
  }
}

export class Authentication extends Schema.TaggedClass<Authentication>()("Authentication", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * The account is out of credit or over its spending quota (OpenAI's
 * `insufficient_quota`): waiting will not help, paying or another key will.
 */
export class QuotaExceeded extends Schema.TaggedClass<QuotaExceeded>()("QuotaExceeded", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/**
 * The request (history plus tools plus the room asked for the answer) does not
 * fit the model's context window. Retrying the same request fails again; the
 * caller can compact the history and try again.
 */
export class ContextLengthExceeded extends Schema.TaggedClass<ContextLengthExceeded>()(
  "ContextLengthExceeded",
  { message: Schema.String }
) {
  get isRetryable(): boolean {
    return false
  }
}

export class InvalidRequest extends Schema.TaggedClass<InvalidRequest>()("InvalidRequest", {
  message: Schema.String,
  parameter: Schema.optionalKey(Schema.String),
  /** The HTTP status, when the provider answered with one (a 404 may mean a wrong address, not a wrong model). */
  status: Schema.optionalKey(Schema.Number)
}) {
  get isRetryable(): boolean {
    return false
  }
}

export class ContentFiltered extends Schema.TaggedClass<ContentFiltered>()("ContentFiltered", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

/** The provider is down, overloaded or answered 5xx. */
export class Unavailable extends Schema.TaggedClass<Unavailable>()("Unavailable", {
  message: Schema.String,
  status: Schema.optionalKey(Schema.Number)
}) {
  get isRetryable(): boolean {
    return true
  }
}

/**
 * How a connection failed: none was made (`connect`), no answer came in time
 * (`timeout`), or the answer was cut short (`cut-short`). Callers that tell
 * users what to do read this, not the message.
 */
export const NetworkKind = Schema.Literals(["connect", "timeout", "cut-short"])
export type NetworkKind = typeof NetworkKind.Type

/** The connection failed, timed out or dropped before a complete answer. */
export class Network extends Schema.TaggedClass<Network>()("Network", {
  message: Schema.String,
  /** Absent on failures recorded before it existed: read as `cut-short`, the most general. */
  kind: Schema.optionalKey(NetworkKind)
}) {
  get isRetryable(): boolean {
    return true
  }
}

const networkHeadings: Record<NetworkKind, string> = {
  connect: "connection failed",
  timeout: "request timed out",
  "cut-short": "connection lost mid-stream"
}

/** A `Network` failure of `kind`, its message headed the same way for every adapter. */
export const network = (kind: NetworkKind, detail: string): Network =>
  new Network({ kind, message: `${networkHeadings[kind]}: ${detail}` })

/** The provider answered with something that is not a valid response. */
export class InvalidOutput extends Schema.TaggedClass<InvalidOutput>()("InvalidOutput", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return true
  }
}

export class Unknown extends Schema.TaggedClass<Unknown>()("Unknown", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return false
  }
}

export const Reason = Schema.Union([
  RateLimited,
  Authentication,
  QuotaExceeded,
  InvalidRequest,
  ContextLengthExceeded,
  ContentFiltered,
  Unavailable,
  Network,
  InvalidOutput,
  Unknown
])
export type Reason = typeof Reason.Type
export type ReasonTag = Reason["_tag"]

/** The fields every model-call error carries: who failed, on which model, why, and the provider's request id. */
export const fields = {
  provider: Schema.String,
  model: Schema.optionalKey(Schema.String),
  reason: Reason,
  /** The provider's id for the failed request (OpenAI's `x-request-id`), when it sent one. */
  requestId: Schema.optionalKey(Schema.String)
}

/** Any model-call failure: a `ChatModelError`, an `EmbedderError`, or a user's own error with these fields. */
export interface ModelFailure {
  readonly provider: string
  readonly model?: string
  readonly reason: Reason
  readonly requestId?: string
}

/** Whether trying the failed call again can help. */
export const isRetryable = (error: { readonly reason: Reason }): boolean => error.reason.isRetryable

/** `provider (model): reason [request id]`, the one-line message of a model-call error. */
export const describe = (error: ModelFailure): string =>
  `${error.provider}${error.model === undefined ? "" : ` (${error.model})`}: ${error.reason.message}${
    error.requestId === undefined ? "" : ` [request ${error.requestId}]`
  }`
