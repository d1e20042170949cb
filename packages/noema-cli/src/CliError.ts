/**
 * CliError: every failure the CLI can meet, as one line a person can act on.
 *
 * The CLI never shows a stack trace: errors are caught at the top (the frame,
 * `internal/Frame`) and turned into `noema: <what happened>` plus, where it
 * helps, what to do about it. The typed errors of the other packages are
 * recognised by their classes; the frame loads this module only when there is
 * an error to report. Every line is fit to print: control and
 * bidirectional characters escaped, and the credentials of any URL in it (the
 * model server's above all) redacted, with core's `Printable`.
 * `NOEMA_DEBUG=1` adds the full cause below the line. A model's failure is
 * told the same way in every command, however deep it was wrapped (a
 * planner's, an agent's error): `modelFailure` finds it.
 */
import { inspect } from "node:util"
import { Agent, ChatModel, ModelError, Printable } from "@noema/core"
import { SessionStore } from "@noema/session"
import { Config, Predicate } from "effect"

import { debugEnabled } from "./internal/Output.js"

export { debugEnabled }

export interface Context {
  /** The model server, to name it in connection errors. */
  readonly baseUrl?: string | undefined
  /** Inside `noema chat`: hints name slash commands, not shell commands. */
  readonly inChat?: boolean
  /** The cap on retry waits, in seconds, to name it when a server asked for more. */
  readonly maxRetryWait?: number | undefined
}

/** A failure's own message (errors and tagged classes have one), else the value as text. */
const messageOf = (value: unknown): string =>
  Predicate.hasProperty(value, "message") && Predicate.isString(value.message) && value.message.length > 0
    ? value.message
    : String(value)

/** One line, fit to print: whitespace collapsed, URLs redacted, control characters escaped. */
export const oneLine = (text: string): string =>
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

const describeModelError = (error: ChatModel.ChatModelError, context: Context): string => {
  const reason = error.reason
  const provider = error.provider
  const detail = messageOf(reason)
  const server = Printable.redactUrl(context.baseUrl ?? "https://api.openai.com/v1")
  if (reason instanceof ModelError.Authentication)
    return `${provider} rejected the credentials (${detail}); check --api-key or ${provider === "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY"}`
  if (reason instanceof ModelError.Network) {
    switch (reason.kind) {
      case "connect":
        return `cannot reach the model server at ${server} (${detail}); is it running? (--base-url / NOEMA_BASE_URL)`
      case "timeout":
        return `the model server at ${server} did not answer in time (${detail}); try again`
      default:
        return `the model server at ${server} stopped before the answer was complete (${detail}); try again`
    }
  }
  if (reason instanceof ModelError.RateLimited) {
    const asked =
      reason.retryAfterMillis === undefined ? undefined : Math.ceil(reason.retryAfterMillis / 1000)
    if (asked !== undefined && context.maxRetryWait !== undefined && asked > context.maxRetryWait) {
      return `${provider} is rate limiting requests and asked to wait ${asked} s before retrying, more than noema waits (${context.maxRetryWait} s); try again later, or allow longer waits with --max-retry-wait / NOEMA_MAX_RETRY_WAIT`
    }
    return `${provider} is rate limiting requests and retrying did not help (${detail}); wait a moment and try again`
  }
  if (reason instanceof ModelError.Unavailable)
    return `the model server at ${server} is unavailable (${detail}); try again later`
  if (reason instanceof ModelError.InvalidRequest)
    return `${provider} refused the request (${detail})${
      notFoundHint(reason.status, context.baseUrl) ??
      (context.inChat === true
        ? "; check the model name (/model NAME switches it)"
        : "; check the model name (--model / NOEMA_MODEL)")
    }`
  if (reason instanceof ModelError.InvalidOutput)
    return `${provider} sent an answer noema could not read (${detail})${notFoundHint(404, context.baseUrl) ?? ""}`
  if (reason instanceof ModelError.ContentFiltered) return `${provider} filtered the content (${detail})`
  return `${provider}: ${detail}`
}

/**
 * The model's failure that `error` is, or that caused it a few wrappers down (an agent's
 * `ModelFailed`, a planner's or a routine's error with a `cause`), if any.
 */
const modelFailure = (error: unknown): ChatModel.ChatModelError | undefined => {
  let value: unknown = error
  for (let depth = 0; depth < 6 && Predicate.isObject(value); depth++) {
    if (value instanceof ChatModel.ChatModelError) return value
    if (value instanceof Agent.AgentError && value.reason instanceof Agent.ModelFailed)
      return value.reason.error
    value = Predicate.hasProperty(value, "cause") ? value.cause : undefined
  }
  return undefined
}

/** A turn lost the race to another noema on the same session, in the user's terms. */
export const conflictMessage =
  "another noema added to this session while this answer was being written; the answer was not saved. " +
  "Run the question again to answer on the updated conversation"

/** One line (without the `noema: ` prefix) describing `error`, by its class. */
export const describe = (error: unknown, context: Context = {}): string => {
  const model = modelFailure(error)
  if (model !== undefined) return oneLine(describeModelError(model, context))
  if (error instanceof Agent.AgentError) return oneLine(messageOf(error.reason))
  if (error instanceof SessionStore.SessionNotFoundError)
    return `${oneLine(messageOf(error))} (${context.inChat === true ? "/sessions lists them" : "see noema sessions list"})`
  if (error instanceof SessionStore.SessionConflictError) return conflictMessage
  if (error instanceof Config.ConfigError) return `configuration: ${oneLine(messageOf(error))}`
  if (error instanceof Error && "code" in error) {
    const code = String(error.code)
    if (code === "EACCES" || code === "EPERM" || code === "EROFS" || code === "ENOSPC") {
      return `${oneLine(error.message)} (check the permissions of NOEMA_HOME)`
    }
  }
  return oneLine(messageOf(error))
}

/** The full cause, for NOEMA_DEBUG. */
export const detail = (error: unknown): string =>
  error instanceof Error && error.stack !== undefined
    ? `${error.stack}${Predicate.hasProperty(error, "_tag") ? `\n${inspect(error, { depth: 6 })}` : ""}`
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
