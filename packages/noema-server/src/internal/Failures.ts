/**
 * Failures: which failure of a request is answered with which `ApiError`, the
 * one mapping, decided from the error classes.
 *
 * The body is read by whoever made the request, so it says what went wrong
 * with the request (a run id, a field, a refused transition) and never how the
 * server is laid out: a failure the caller cannot act on (a store or file
 * system error, a defect) is a 500 whose body says only that, while the
 * details, which name files and databases, go to the server's own log. Every
 * message is also stripped of the workspace's absolute path, in case a
 * message meant for the caller quotes one.
 */
import { ResourceIndex, ResourceStore } from "@noema/resources"
import { Pipeline, Run, RunFiles, RunLease } from "@noema/runs"
import { Cause, SchemaIssue } from "effect"
import { HttpServerError } from "effect/http"
import { HttpApiError } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import { ArtifactFileError } from "./ArtifactFile.js"

export interface Failures {
  /** The refusal a failure of a request is answered with; undefined for a failure of the server. */
  readonly refusal: (error: unknown) => ApiError.ApiError | undefined
  /** What a request that failed with `cause` is answered with: its refusal, or a 500 (logged). */
  readonly fromCause: (cause: Cause.Cause<unknown>) => ApiError.ApiError
}

export interface Options {
  /** The paths no message may show: the workspace, as given and as resolved. */
  readonly hidden: ReadonlyArray<string>
  /** Told the whole failure when the caller is only told that something failed. */
  readonly log: (line: string) => void
  /** The largest body taken, to say so in a 413. */
  readonly maxBodyBytes: number
}

/** The refusals of the runs and resources libraries, by the error's class. */
const domain: ReadonlyArray<readonly [new (...args: never) => Error, ApiError.Class]> = [
  [Run.ThreadNotFound, ApiError.NotFound],
  [Run.RunNotFound, ApiError.NotFound],
  [Run.ThreadClosed, ApiError.Conflict],
  [Run.ThreadBusy, ApiError.Conflict],
  [Run.IllegalTransition, ApiError.Conflict],
  [Run.NotRetryable, ApiError.Conflict],
  [RunLease.RunBusy, ApiError.Conflict],
  [RunFiles.RunFileChanged, ApiError.Conflict],
  [Run.InvalidInput, ApiError.BadRequest],
  [Pipeline.PipelineError, ApiError.BadRequest],
  [ResourceIndex.AccessDeniedError, ApiError.Forbidden],
  [ResourceStore.ResourceNotFoundError, ApiError.NotFound]
]

/** An artifact that cannot be served, by why; `Unreadable` is the server's failure. */
const artifactRefusal: Record<ArtifactFileError["reason"], ApiError.Class | undefined> = {
  NotFound: ApiError.NotFound,
  Refused: ApiError.Forbidden,
  TooLarge: ApiError.Unprocessable,
  Unreadable: undefined
}

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/**
 * What is wrong with a request's params, query, headers or body. The request schemas' own
 * messages name their field (`title must have at most 200 characters`); any other is said
 * with where it is.
 */
const schemaProblem = (error: HttpApiError.HttpApiSchemaError): string => {
  const cause = error.cause as { readonly issue?: SchemaIssue.Issue }
  const issue = cause.issue === undefined ? undefined : formatter(cause.issue).issues[0]
  if (issue === undefined) return `the request's ${error.kind.toLowerCase()} is not valid`
  const where = (issue.path ?? []).map((segment) =>
    String(typeof segment === "object" ? segment.key : segment)
  )
  return where.length === 0 || issue.message.startsWith(where[0] ?? "")
    ? issue.message
    : `${where.join(".")}: ${issue.message}`
}

/** The refusal of a request the HTTP layer could not take (no route, a body too large or unreadable). */
const httpRefusal = (error: HttpServerError.HttpServerError, maxBodyBytes: number) => {
  const reason = error.reason
  if (reason._tag === "RouteNotFound") {
    const url = reason.request.url.split("?")[0]
    return ApiError.make(ApiError.NotFound, "NotFound", `no route ${reason.request.method} ${url}`)
  }
  if (reason._tag === "RequestParseError")
    return reason.reason === "BodyTooLarge"
      ? ApiError.make(
          ApiError.PayloadTooLarge,
          "PayloadTooLarge",
          `the body is larger than ${maxBodyBytes} bytes`
        )
      : ApiError.make(ApiError.BadRequest, "BadRequest", "the request could not be read")
  return undefined
}

/** The refusal of `error`, its message not yet stripped of paths. */
const refusalOf = (error: unknown, maxBodyBytes: number): ApiError.ApiError | undefined => {
  if (ApiError.isApiError(error)) return error
  if (error instanceof ArtifactFileError) {
    const Class = artifactRefusal[error.reason]
    return Class === undefined ? undefined : ApiError.make(Class, error._tag, error.message)
  }
  if (HttpApiError.HttpApiSchemaError.is(error))
    // A response the server failed to encode is its own failure, not the caller's.
    return error.kind === "Body" || error.kind === "ResponseHeaders"
      ? undefined
      : ApiError.make(ApiError.BadRequest, "InvalidInput", schemaProblem(error))
  if (HttpServerError.isHttpServerError(error)) return httpRefusal(error, maxBodyBytes)
  const known = domain.find(([Class]) => error instanceof Class)
  if (known === undefined) return undefined
  const named = error as Error & { readonly _tag: string }
  return ApiError.make(known[1], named._tag, named.message)
}

/** Removes every occurrence of the `hidden` paths from `text`. */
export const redact = (text: string, hidden: ReadonlyArray<string>): string =>
  // The longest first: one path may hold another (a resolved /private/tmp/w and the given /tmp/w).
  [...hidden]
    .filter((path) => path.length > 1)
    .sort((a, b) => b.length - a.length)
    .reduce((out, path) => out.split(path).join("<workspace>"), text)

/** The failure a cause is about: its first failure, else its first defect. */
const squash = (cause: Cause.Cause<unknown>): unknown => {
  const failure = cause.reasons.find(Cause.isFailReason)
  if (failure !== undefined) return failure.error
  return cause.reasons.find(Cause.isDieReason)?.defect
}

export const make = (options: Options): Failures => {
  const refusal = (error: unknown) => {
    const refused = refusalOf(error, options.maxBodyBytes)
    if (refused === undefined) return undefined
    const message = redact(refused.error.message, options.hidden)
    if (message === refused.error.message) return refused
    // The same class (the same status), its message without the paths.
    return ApiError.make(refused.constructor as ApiError.Class, refused.error.code, message)
  }
  return {
    refusal,
    fromCause: (cause) => {
      const known = refusal(squash(cause))
      if (known !== undefined) return known
      options.log(`noema server: a request failed: ${Cause.pretty(cause)}\n`)
      return ApiError.make(
        ApiError.InternalError,
        "InternalError",
        "the server failed to answer this request (its log says why)"
      )
    }
  }
}
