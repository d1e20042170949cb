/**
 * CliError: every failure the CLI can meet, as one line a person can act on.
 *
 * The CLI never shows a stack trace: errors are caught at the top and turned
 * into `noema: <what happened>` plus, where it helps, what to do about it. The
 * typed errors of the other packages are recognised by their `_tag`, so this
 * module imports none of them. Every line is fit to print: control and
 * bidirectional characters escaped, and the credentials of any URL in it (the
 * model server's above all) redacted, with core's `Printable`.
 * `NOEMA_DEBUG=1` adds the full cause below the line. A model's failure is
 * told the same way in every command, however deep it was wrapped (a
 * planner's, an agent's error): `modelFailure` finds it.
 */
import { inspect } from "node:util"
import { Printable } from "@noema/core"

export interface Context {
  /** The model server, to name it in connection errors. */
  readonly baseUrl?: string | undefined
  /** Inside `noema chat`: hints name slash commands, not shell commands. */
  readonly inChat?: boolean
  /** The cap on retry waits, in seconds, to name it when a server asked for more. */
  readonly maxRetryWait?: number | undefined
}

interface Tagged {
  readonly _tag: string
  readonly message?: string
  readonly [key: string]: unknown
}

const isTagged = (value: unknown): value is Tagged =>
  typeof value === "object" && value !== null && typeof (value as { _tag?: unknown })._tag === "string"

const messageOf = (value: unknown): string => {
  if (value instanceof Error || isTagged(value)) {
    const message = (value as { message?: unknown }).message
    if (typeof message === "string" && message.length > 0) return message
  }
  return String(value)
}

/** One line, fit to print: whitespace collapsed, URLs redacted, control characters escaped. */
const flatten = (text: string): string =>
  Printable.escapeControls(Printable.redactUrls(text.replace(/\s+/g, " ").trim()))

/** Whether `baseUrl`'s path ends in `/v1`, where OpenAI-compatible servers keep their API. */
const endsInV1 = (baseUrl: string): boolean => {
  try {
    return /\/v1$/.test(new URL(baseUrl).pathname.replace(/\/+$/, ""))
  } catch {
    return true
  }
}

/** The server's 404 names a path it does not have: for a base URL without `/v1`, that is the likely cause. */
const notFoundHint = (status: unknown, baseUrl: string | undefined): string | undefined =>
  status === 404 && baseUrl !== undefined && !endsInV1(baseUrl)
    ? `; the API is usually under /v1: try --base-url ${Printable.redactUrl(baseUrl.replace(/\/+$/, ""))}/v1`
    : undefined

const describeModelError = (error: Tagged, context: Context): string => {
  const reason = error.reason
  const provider = typeof error.provider === "string" ? error.provider : "the model provider"
  if (!isTagged(reason)) return messageOf(error)
  const detail = messageOf(reason)
  const server = Printable.redactUrl(context.baseUrl ?? "https://api.openai.com/v1")
  switch (reason._tag) {
    case "Authentication":
      return `${provider} rejected the credentials (${detail}); check --api-key or ${provider === "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY"}`
    case "Network":
      // The adapter's message says which: no connection at all, no answer in time, or an answer cut short.
      if (/^connection failed/.test(detail))
        return `cannot reach the model server at ${server} (${detail}); is it running? (--base-url / NOEMA_BASE_URL)`
      if (/timed out/.test(detail))
        return `the model server at ${server} did not answer in time (${detail}); try again`
      return `the model server at ${server} stopped before the answer was complete (${detail}); try again`
    case "RateLimited": {
      const asked =
        typeof reason.retryAfterMillis === "number" ? Math.ceil(reason.retryAfterMillis / 1000) : undefined
      if (asked !== undefined && context.maxRetryWait !== undefined && asked > context.maxRetryWait) {
        return `${provider} is rate limiting requests and asked to wait ${asked} s before retrying, more than noema waits (${context.maxRetryWait} s); try again later, or allow longer waits with --max-retry-wait / NOEMA_MAX_RETRY_WAIT`
      }
      return `${provider} is rate limiting requests and retrying did not help (${detail}); wait a moment and try again`
    }
    case "Unavailable":
      return `the model server at ${server} is unavailable (${detail}); try again later`
    case "InvalidRequest":
      return `${provider} refused the request (${detail})${
        notFoundHint(reason.status, context.baseUrl) ??
        (context.inChat === true
          ? "; check the model name (/model NAME switches it)"
          : "; check the model name (--model / NOEMA_MODEL)")
      }`
    case "InvalidOutput":
      return `${provider} sent an answer noema could not read (${detail})${notFoundHint(404, context.baseUrl) ?? ""}`
    case "ContentFiltered":
      return `${provider} filtered the content (${detail})`
    default:
      return `${provider}: ${detail}`
  }
}

/**
 * The model's failure that `error` is, or that caused it a few wrappers down (an agent's
 * `ModelFailed`, a planner's or a routine's error with a `cause`), if any.
 */
const modelFailure = (error: unknown): Tagged | undefined => {
  let value: unknown = error
  for (let depth = 0; depth < 6 && isTagged(value); depth++) {
    if (value._tag === "ChatModelError") return value
    const reason = value.reason
    if (
      value._tag === "AgentError" &&
      isTagged(reason) &&
      reason._tag === "ModelFailed" &&
      isTagged(reason.error)
    )
      return reason.error
    value = value.cause
  }
  return undefined
}

/** A turn lost the race to another noema on the same session, in the user's terms. */
export const conflictMessage =
  "another noema added to this session while this answer was being written; the answer was not saved. " +
  "Run the question again to answer on the updated conversation"

/** One line (without the `noema: ` prefix) describing `error`. */
export const describe = (error: unknown, context: Context = {}): string => {
  const model = modelFailure(error)
  if (model !== undefined) return flatten(describeModelError(model, context))
  if (isTagged(error)) {
    switch (error._tag) {
      case "AgentError":
        return flatten(messageOf(error.reason))
      case "SessionNotFoundError":
        return `${flatten(messageOf(error))} (${context.inChat === true ? "/sessions lists them" : "see noema sessions list"})`
      case "SessionConflictError":
        return conflictMessage
      case "StoreError":
        return flatten(messageOf(error))
      case "ConfigError":
        return `configuration: ${flatten(messageOf(error))}`
    }
  }
  if (error instanceof Error && "code" in error) {
    const code = String(error.code)
    if (code === "EACCES" || code === "EPERM" || code === "EROFS" || code === "ENOSPC") {
      return `${flatten(error.message)} (check the permissions of NOEMA_HOME)`
    }
  }
  return flatten(messageOf(error))
}

/** Whether NOEMA_DEBUG asks for full causes. */
export const debugEnabled = (env: Readonly<Record<string, string | undefined>>): boolean => {
  const value = env.NOEMA_DEBUG
  return value !== undefined && value !== "" && value !== "0" && value !== "false"
}

/** The full cause, for NOEMA_DEBUG. */
export const detail = (error: unknown): string =>
  error instanceof Error && error.stack !== undefined
    ? `${error.stack}${isTagged(error) ? `\n${inspect(error, { depth: 6 })}` : ""}`
    : inspect(error, { depth: 6 })

/** Reports a failure that ends a command: its line on `output`, and the full cause with NOEMA_DEBUG. */
export const report = (
  error: unknown,
  io: {
    readonly stderr: { write(text: string): unknown }
    readonly env: Readonly<Record<string, string | undefined>>
  },
  context: Context = {}
): void => {
  io.stderr.write(`noema: ${describe(error, context)}\n`)
  if (debugEnabled(io.env)) io.stderr.write(`${detail(error)}\n`)
}
