/**
 * How an AI SDK provider's failures become core's `ModelError` reasons.
 *
 * Providers throw (or, mid-stream, emit as `error` parts) the AI SDK's own
 * errors: `APICallError` with the HTTP status, headers and `isRetryable`, and
 * a stream error with the provider's `type`, status and `isRetryable`. The
 * status decides where it is one core knows (429 with `retry-after`, 401,
 * 5xx, ...); otherwise the provider's `isRetryable` chooses between
 * `Unavailable` and `Unknown`. Errors are recognised by the AI SDK's own
 * `isInstance` checks (markers that work across copies of the package), and
 * every message is one line.
 */
import {
  APICallError,
  EmptyResponseBodyError,
  InvalidArgumentError,
  InvalidPromptError,
  InvalidResponseDataError,
  JSONParseError,
  LoadAPIKeyError,
  NoContentGeneratedError,
  TypeValidationError,
  UnsupportedFunctionalityError
} from "@ai-sdk/provider"
import { ModelError, ProviderFailure, ProviderStream, Retry } from "@noema/core"

const { oneLine } = ProviderFailure

/** Headers that carry a provider's id for a request (Anthropic's, OpenAI's and most others', Google's). */
const requestIdHeaders = ["request-id", "x-request-id", "x-goog-request-id"]

/** The request id among response headers (lower-case names, as the AI SDK keeps them). */
export const requestIdFrom = (
  headers: Readonly<Record<string, string | undefined>> | undefined
): string | undefined => {
  if (headers === undefined) return undefined
  for (const name of requestIdHeaders) {
    const id = headers[name]
    if (typeof id === "string" && id.length > 0) return id
  }
  return undefined
}

/** The request id a failure carries (an `APICallError`'s response headers), else the stream's. */
export const requestIdOf = (error: unknown, fallback: string | undefined): string | undefined =>
  (APICallError.isInstance(error) ? requestIdFrom(error.responseHeaders) : undefined) ?? fallback

const contextLengthMessage =
  /prompt is too long|maximum context length|context length|context window|input token count|too many tokens/i

/** What an HTTP failure is, by status; the provider's `isRetryable` for statuses core does not know. */
const fromHttp = (failure: {
  readonly status: number
  readonly message: string
  readonly isRetryable: boolean
  readonly retryAfterMillis: number | undefined
}): ModelError.Reason => {
  const { status, message, isRetryable, retryAfterMillis } = failure
  const detail = `(${status}): ${message}`
  if (status === 429) {
    return retryAfterMillis === undefined
      ? new ModelError.RateLimited({ message: `rate limited ${detail}` })
      : new ModelError.RateLimited({ message: `rate limited ${detail}`, retryAfterMillis })
  }
  if (status === 401 || status === 403)
    return new ModelError.Authentication({ message: `authentication failed ${detail}` })
  if (status === 402) return new ModelError.QuotaExceeded({ message: `quota exceeded ${detail}` })
  if (status === 408) return ModelError.network("timeout", detail)
  if (status === 400 || status === 404 || status === 409 || status === 413 || status === 422) {
    return contextLengthMessage.test(message)
      ? new ModelError.ContextLengthExceeded({ message: `context length exceeded ${detail}` })
      : new ModelError.InvalidRequest({ message: `invalid request ${detail}`, status })
  }
  if (status >= 500) return new ModelError.Unavailable({ message: `server error ${detail}`, status })
  return isRetryable
    ? new ModelError.Unavailable({ message: `retryable failure ${detail}`, status })
    : new ModelError.Unknown({ message: `unexpected status ${detail}` })
}

/** An AI SDK stream error (`createProviderStreamError`): a plain object with what the provider knew. */
interface StreamError {
  readonly message: string
  readonly type?: string
  readonly statusCode?: number
  readonly isRetryable?: boolean
}

const isStreamError = (error: unknown): error is StreamError =>
  typeof error === "object" &&
  error !== null &&
  !(error instanceof Error) &&
  typeof (error as { message?: unknown }).message === "string"

/** A stream error without a status: by the words of its type (Anthropic's `overloaded_error`, ...). */
const fromStreamError = (error: StreamError): ModelError.Reason => {
  const message = oneLine(error.message)
  if (typeof error.statusCode === "number") {
    return fromHttp({
      status: error.statusCode,
      message,
      isRetryable: error.isRetryable === true,
      retryAfterMillis: undefined
    })
  }
  const kind = error.type ?? ""
  if (/rate_limit/.test(kind)) return new ModelError.RateLimited({ message: `rate limited: ${message}` })
  if (/overloaded|server|api_error|unavailable/.test(kind) || error.isRetryable === true) {
    return new ModelError.Unavailable({ message: `error in stream: ${message}` })
  }
  if (/auth|permission/.test(kind))
    return new ModelError.Authentication({ message: `authentication failed: ${message}` })
  if (/invalid_request/.test(kind)) {
    return contextLengthMessage.test(message)
      ? new ModelError.ContextLengthExceeded({ message: `context length exceeded: ${message}` })
      : new ModelError.InvalidRequest({ message: `invalid request: ${message}` })
  }
  return new ModelError.Unknown({ message: `error in stream: ${message}` })
}

const describe = ProviderFailure.describe

const isAbort = (error: unknown): boolean =>
  error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError")

/** Maps anything an AI SDK model can throw or emit as an error to a reason; `now` reads a `retry-after` date. */
export const toReason = (error: unknown, now: number, phase: ProviderStream.Phase): ModelError.Reason => {
  if (APICallError.isInstance(error)) {
    const headers = error.responseHeaders
    if (error.statusCode === undefined) {
      return ProviderFailure.transport(phase, describe(error))
    }
    return fromHttp({
      status: error.statusCode,
      message: describe(error),
      isRetryable: error.isRetryable,
      retryAfterMillis:
        headers === undefined ? undefined : Retry.retryAfterMillis((name) => headers[name], now)
    })
  }
  if (LoadAPIKeyError.isInstance(error)) return new ModelError.Authentication({ message: describe(error) })
  if (
    InvalidPromptError.isInstance(error) ||
    InvalidArgumentError.isInstance(error) ||
    UnsupportedFunctionalityError.isInstance(error)
  ) {
    return new ModelError.InvalidRequest({ message: `invalid request: ${describe(error)}` })
  }
  if (
    JSONParseError.isInstance(error) ||
    InvalidResponseDataError.isInstance(error) ||
    TypeValidationError.isInstance(error) ||
    EmptyResponseBodyError.isInstance(error) ||
    NoContentGeneratedError.isInstance(error)
  ) {
    return new ModelError.InvalidOutput({ message: `malformed response: ${describe(error)}` })
  }
  if (error instanceof ProviderStream.Incomplete || isAbort(error)) {
    return ModelError.network("cut-short", describe(error))
  }
  if (ProviderFailure.isTransportFailure(error)) {
    return ProviderFailure.transport(phase, describe(error))
  }
  if (isStreamError(error)) return fromStreamError(error)
  return new ModelError.Unknown({ message: `unexpected failure: ${describe(error)}` })
}
