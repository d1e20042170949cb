/**
 * How the `@anthropic-ai/sdk`'s failures (and what slips past it: fetch's
 * network errors, `JSON.parse`'s `SyntaxError`, a cut-off stream) become one
 * of core's `ModelError` reasons. Anthropic says what went wrong by HTTP
 * status and by `error.type` (the same types arrive as `error` events inside a
 * 200 stream, without a status); nothing the SDK throws leaves the adapter any
 * other way, and every message is one line with the key scrubbed.
 */

import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from "@anthropic-ai/sdk"
import { ModelError, ProviderFailure, ProviderStream, Retry } from "@noema/core"

const { MalformedResponse, oneLine } = ProviderFailure

type Context = ProviderFailure.Context

/** Anthropic's `request-id` header, which the SDK reads into `APIError.requestID`; else the stream's. */
export const requestIdOf = (error: unknown, fallback: string | undefined): string | undefined => {
  const id = error instanceof APIError ? error.requestID : undefined
  return typeof id === "string" && id.length > 0 ? id : fallback
}

/** Anthropic answers 400 `invalid_request_error` "prompt is too long: 210000 tokens > 200000 maximum". */
const contextLengthMessage = /prompt is too long|context window|context length|too many tokens/i

/** What the error body says, without the SDK's `"<status> {json}"` rendering. */
const detailOf = (error: APIError, scrub: (text: string) => string): string =>
  oneLine(error.apiMessage ?? error.message, scrub)

/** The reason an error type names, status or not (a streamed `error` event has none). */
const fromType = (
  type: string | null,
  detail: string,
  status: number | undefined,
  retryAfterMillis: number | undefined
): ModelError.Reason | undefined => {
  const code = status === undefined ? "" : ` (${status})`
  switch (type) {
    case "overloaded_error":
      return new ModelError.Unavailable({
        message: `overloaded${code}: ${detail}`,
        ...(status !== undefined && { status })
      })
    case "api_error":
    case "timeout_error":
      return new ModelError.Unavailable({
        message: `server error${code}: ${detail}`,
        ...(status !== undefined && { status })
      })
    case "rate_limit_error":
      return retryAfterMillis === undefined
        ? new ModelError.RateLimited({ message: `rate limited${code}: ${detail}` })
        : new ModelError.RateLimited({
            message: `rate limited${code}, retry after ${retryAfterMillis} ms: ${detail}`,
            retryAfterMillis
          })
    case "authentication_error":
    case "permission_error":
      return new ModelError.Authentication({ message: `authentication failed${code}: ${detail}` })
    case "billing_error":
      return new ModelError.QuotaExceeded({ message: `billing${code}: ${detail}` })
    case "invalid_request_error":
    case "not_found_error":
    case "request_too_large":
      return contextLengthMessage.test(detail)
        ? new ModelError.ContextLengthExceeded({ message: `context length exceeded${code}: ${detail}` })
        : new ModelError.InvalidRequest({
            message: `invalid request${code}: ${detail}`,
            ...(status !== undefined && { status })
          })
    default:
      return undefined
  }
}

/** By status when the body named no type Anthropic documents (a proxy's answer, a gateway's). */
const fromStatus = (
  status: number,
  detail: string,
  retryAfterMillis: number | undefined
): ModelError.Reason => {
  if (status === 429)
    return fromType("rate_limit_error", detail, status, retryAfterMillis) as ModelError.Reason
  if (status === 401 || status === 403) {
    return new ModelError.Authentication({ message: `authentication failed (${status}): ${detail}` })
  }
  if (status === 402) return new ModelError.QuotaExceeded({ message: `billing (${status}): ${detail}` })
  if (status === 408) return ModelError.network("timeout", `(408) ${detail}`)
  if (status >= 400 && status < 500) {
    return fromType("invalid_request_error", detail, status, undefined) as ModelError.Reason
  }
  if (status >= 500)
    return new ModelError.Unavailable({ message: `server error (${status}): ${detail}`, status })
  return new ModelError.Unknown({ message: `unexpected status ${status}: ${detail}` })
}

const fromApiError = (error: APIError, context: Context): ModelError.Reason => {
  const detail = detailOf(error, context.scrub)
  const headers = error.headers
  const retryAfter =
    headers === undefined ? undefined : Retry.retryAfterMillis((name) => headers.get(name), context.now)
  // 529 is Anthropic's "overloaded" whatever the body says; a 4xx type never overrides a 5xx status.
  if (error.status === 529) return fromType("overloaded_error", detail, 529, undefined) as ModelError.Reason
  if (error.status !== undefined && error.status >= 500) return fromStatus(error.status, detail, retryAfter)
  return (
    fromType(error.type, detail, error.status, retryAfter) ??
    (error.status === undefined
      ? new ModelError.Unknown({ message: `error in stream: ${detail}` })
      : fromStatus(error.status, detail, retryAfter))
  )
}

const describe = ProviderFailure.describe

/** Maps anything the SDK (or fetch underneath it) can throw to a reason. */
export const toReason = (error: unknown, context: Context): ModelError.Reason => {
  if (error instanceof APIConnectionTimeoutError) {
    return ModelError.network("timeout", describe(error, context.scrub))
  }
  if (error instanceof APIUserAbortError) {
    return ProviderFailure.aborted()
  }
  if (error instanceof APIConnectionError) {
    return ProviderFailure.transport(context.phase, describe(error, context.scrub))
  }
  if (error instanceof APIError) return fromApiError(error, context)
  if (error instanceof MalformedResponse || error instanceof SyntaxError) {
    return new ModelError.InvalidOutput({ message: `malformed response: ${describe(error, context.scrub)}` })
  }
  if (error instanceof ProviderStream.Incomplete) {
    return ModelError.network("cut-short", describe(error, context.scrub))
  }
  // fetch and Node report some failures unwrapped (a body cut off mid-read is a bare TypeError).
  if (ProviderFailure.isTransportFailure(error)) {
    return ProviderFailure.transport(context.phase, describe(error, context.scrub))
  }
  return new ModelError.Unknown({ message: `unexpected failure: ${describe(error, context.scrub)}` })
}
