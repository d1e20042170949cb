/**
 * ModelError: why a call to a model provider failed.
 *
 * Providers differ in how they fail; callers should not have to care. Every
 * adapter maps its SDK's failures onto one of these reasons, and each reason
 * says whether trying again can help (`isRetryable`) and, for rate limits, how
 * long the provider asked us to wait. `ChatModelError` and `EmbedderError`
 * carry a reason from this union.
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

export class InvalidRequest extends Schema.TaggedClass<InvalidRequest>()("InvalidRequest", {
  message: Schema.String,
  parameter: Schema.optionalKey(Schema.String)
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

/** The connection failed, timed out or dropped before a complete answer. */
export class Network extends Schema.TaggedClass<Network>()("Network", {
  message: Schema.String
}) {
  get isRetryable(): boolean {
    return true
  }
}

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
  InvalidRequest,
  ContentFiltered,
  Unavailable,
  Network,
  InvalidOutput,
  Unknown
])
export type Reason = typeof Reason.Type
export type ReasonTag = Reason["_tag"]

/** The fields every model-call error carries: who failed, on which model, and why. */
export const fields = {
  provider: Schema.String,
  model: Schema.optionalKey(Schema.String),
  reason: Reason
}

/** `provider (model): reason`, the one-line message of a model-call error. */
export const describe = (error: {
  readonly provider: string
  readonly model?: string
  readonly reason: Reason
}): string =>
  `${error.provider}${error.model === undefined ? "" : ` (${error.model})`}: ${error.reason.message}`
