/**
 * How the `openai` SDK's failures (and the raw exceptions that slip past it:
 * fetch's `TypeError: terminated`, `JSON.parse`'s `SyntaxError`) become one
 * of core's `ModelError` reasons. Nothing the SDK throws leaves the adapter
 * any other way, and every message is one line with secrets scrubbed.
 */
import { ModelError, ProviderFailure, ProviderStream, Retry } from "@noema/core"
import {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
  OpenAIError
} from "openai"

const { MalformedResponse, oneLine } = ProviderFailure

type Context = ProviderFailure.Context

/** What OpenAI's error envelope says, without the SDK's `"<status> "` prefix. */
const providerMessage = (error: APIError): string | undefined => {
  const body = error.error
  if (typeof body === "object" && body !== null && "message" in body) {
    const message = (body as { readonly message: unknown }).message
    if (typeof message === "string" && message.length > 0) return message
  }
  return undefined
}

/**
 * The provider's id for the request: the SDK reads OpenAI's `x-request-id`
 * header into `APIError.requestID`; `fallback` is the id of a streamed
 * response's headers, for failures met while reading its body.
 */
export const requestIdOf = (error: unknown, fallback: string | undefined): string | undefined => {
  const id = error instanceof APIError ? error.requestID : undefined
  return typeof id === "string" && id.length > 0 ? id : fallback
}

const contentFilterCodes = new Set(["content_filter", "content_policy_violation"])

/**
 * How servers say the request does not fit the context window: OpenAI and
 * Azure by code, llama.cpp's server by type, vLLM, DeepSeek and others only
 * in the message.
 */
const contextLengthCodes = new Set(["context_length_exceeded", "exceed_context_size_error"])
const contextLengthMessage =
  /maximum context length|context length exceeded|context window|exceeds? the (available )?context size|prompt is too long|too many tokens in (the )?(prompt|request)/i

const isContextLength = (error: APIError, detail: string): boolean =>
  (error.code !== null && error.code !== undefined && contextLengthCodes.has(error.code)) ||
  (error.type !== undefined && contextLengthCodes.has(error.type)) ||
  contextLengthMessage.test(detail)

const isQuota = (error: APIError): boolean =>
  error.code === "insufficient_quota" || error.type === "insufficient_quota"

const isContentFilter = (error: APIError): boolean =>
  (error.code !== null && error.code !== undefined && contentFilterCodes.has(error.code)) ||
  (error.type !== undefined && contentFilterCodes.has(error.type))

/**
 * What an HTML page is, in one line: a web server, proxy or login page
 * answered instead of the API (often a base URL without its `/v1`).
 */
export const htmlSummary = (text: string, scrub: (text: string) => string): string | undefined => {
  if (!/<(!doctype\s+html|html|head|body)[\s>]/i.test(text)) return undefined
  const title = /<title[^>]*>([^<]*)<\/title>/i.exec(text)?.[1]?.trim()
  return `an HTML page${title === undefined || title === "" ? "" : ` titled "${oneLine(title, scrub)}"`}, not an API response`
}

const fromStatus = (error: APIError, status: number, context: Context): ModelError.Reason => {
  const raw = providerMessage(error) ?? error.message
  const detail = htmlSummary(raw, context.scrub) ?? oneLine(raw, context.scrub)
  const parameter = error.param ?? undefined
  if (isContentFilter(error)) {
    return new ModelError.ContentFiltered({ message: `content filtered (${status}): ${detail}` })
  }
  // OpenAI answers 429 also when the account is out of credit; waiting will not help then.
  if (isQuota(error))
    return new ModelError.QuotaExceeded({ message: `quota exceeded (${status}): ${detail}` })
  if ((status === 400 || status === 413 || status === 422) && isContextLength(error, detail)) {
    return new ModelError.ContextLengthExceeded({ message: `context length exceeded (${status}): ${detail}` })
  }
  if (status === 429) {
    const headers = error.headers
    const after =
      headers === undefined ? undefined : Retry.retryAfterMillis((name) => headers.get(name), context.now)
    return after === undefined
      ? new ModelError.RateLimited({ message: `rate limited (429): ${detail}` })
      : new ModelError.RateLimited({
          message: `rate limited (429), retry after ${after} ms: ${detail}`,
          retryAfterMillis: after
        })
  }
  if (status === 401 || status === 403) {
    return new ModelError.Authentication({ message: `authentication failed (${status}): ${detail}` })
  }
  if (status === 400 || status === 404 || status === 409 || status === 413 || status === 422) {
    return parameter === undefined
      ? new ModelError.InvalidRequest({ message: `invalid request (${status}): ${detail}`, status })
      : new ModelError.InvalidRequest({
          message: `invalid request (${status}, ${oneLine(parameter, context.scrub)}): ${detail}`,
          parameter,
          status
        })
  }
  if (status === 408) return ModelError.network("timeout", `(408) ${detail}`)
  if (status >= 500) {
    return new ModelError.Unavailable({ message: `server error (${status}): ${detail}`, status })
  }
  return new ModelError.Unknown({ message: `unexpected status ${status}: ${detail}` })
}

/** An error event inside an SSE stream has a body but no status: classify it by `type`/`code`. */
const fromStreamedError = (error: APIError, context: Context): ModelError.Reason => {
  const detail = oneLine(providerMessage(error) ?? error.message, context.scrub)
  const kind = `${error.type ?? ""} ${error.code ?? ""}`
  if (isContentFilter(error))
    return new ModelError.ContentFiltered({ message: `content filtered: ${detail}` })
  if (isQuota(error)) return new ModelError.QuotaExceeded({ message: `quota exceeded: ${detail}` })
  if (isContextLength(error, detail)) {
    return new ModelError.ContextLengthExceeded({ message: `context length exceeded: ${detail}` })
  }
  if (kind.includes("rate_limit")) return new ModelError.RateLimited({ message: `rate limited: ${detail}` })
  if (kind.includes("server_error") || kind.includes("overloaded")) {
    return new ModelError.Unavailable({ message: `server error: ${detail}` })
  }
  // Before invalid_request: OpenAI sends a bad key as type invalid_request_error, code invalid_api_key.
  if (kind.includes("authentication") || kind.includes("api_key")) {
    return new ModelError.Authentication({ message: `authentication failed: ${detail}` })
  }
  if (kind.includes("invalid_request"))
    return new ModelError.InvalidRequest({ message: `invalid request: ${detail}` })
  return new ModelError.Unknown({ message: `error in stream: ${detail}` })
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
    return ModelError.network("connect", describe(error, context.scrub))
  }
  if (error instanceof APIError) {
    return error.status === undefined
      ? fromStreamedError(error, context)
      : fromStatus(error, error.status, context)
  }
  if (error instanceof MalformedResponse) {
    return new ModelError.InvalidOutput({
      message: `malformed response: ${oneLine(error.message, context.scrub)}`
    })
  }
  if (error instanceof ProviderStream.Incomplete) {
    return ModelError.network("cut-short", oneLine(error.message, context.scrub))
  }
  if (error instanceof SyntaxError) {
    return new ModelError.InvalidOutput({ message: `malformed response: ${describe(error, context.scrub)}` })
  }
  if (ProviderFailure.isTransportFailure(error)) {
    return ProviderFailure.transport(context.phase, describe(error, context.scrub))
  }
  // The SDK throws a plain TypeError/RangeError when a body has the wrong shape (e.g. embeddings `data`).
  if (error instanceof TypeError || error instanceof RangeError) {
    return new ModelError.InvalidOutput({ message: `unexpected response: ${describe(error, context.scrub)}` })
  }
  if (error instanceof OpenAIError) {
    return new ModelError.Unknown({ message: `client error: ${describe(error, context.scrub)}` })
  }
  return new ModelError.Unknown({ message: `unexpected failure: ${describe(error, context.scrub)}` })
}
