/**
 * ApiError: what the runs API answers when it does not answer with data,
 * `{ "error": { "code", "message" } }` with an HTTP status.
 *
 * The body is read by whoever made the request, so it says what went wrong
 * with the request (a run id, a field, a refused transition) and never how the
 * server is laid out: a failure the caller cannot act on (a store or file
 * system error, a defect) is a 500 whose body says only that, while the
 * details, which name files and databases, go to the server's own log. Every
 * message is also stripped of the workspace's absolute path, in case a
 * message meant for the caller quotes one.
 */
import { Pipeline, Run, RunFiles, RunLease } from "@noema/runs"
import { ArtifactFileError } from "./ArtifactFile.js"

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** Extra response headers (`Retry-After`, `WWW-Authenticate`). */
    readonly headers: Readonly<Record<string, string>> = {}
  ) {
    super(message)
  }
}

/** The JSON body of `error`. */
export const body = (error: ApiError) => ({ error: { code: error.code, message: error.message } })

/** The status of a refusal the caller can act on, by the error's class. */
const statusOf = (error: unknown): number | undefined => {
  if (error instanceof Run.ThreadNotFound || error instanceof Run.RunNotFound) return 404
  if (
    error instanceof Run.ThreadClosed ||
    error instanceof Run.ThreadBusy ||
    error instanceof Run.IllegalTransition ||
    error instanceof RunLease.RunBusy ||
    error instanceof RunFiles.RunFileChanged
  )
    return 409
  if (error instanceof Run.InvalidInput || error instanceof Pipeline.PipelineError) return 400
  return undefined
}

const artifactStatus: Record<ArtifactFileError["reason"], number> = {
  NotFound: 404,
  Refused: 403,
  TooLarge: 422,
  Unreadable: 500
}

/** Removes every occurrence of the `hidden` paths from `text`. */
export const redact = (text: string, hidden: ReadonlyArray<string>): string =>
  // The longest first: one path may hold another (a resolved /private/tmp/w and the given /tmp/w).
  [...hidden]
    .filter((path) => path.length > 1)
    .sort((a, b) => b.length - a.length)
    .reduce((out, path) => out.split(path).join("<workspace>"), text)

/**
 * The ApiError a failure becomes. `log` is told the whole failure when the
 * caller is only told that something failed; `hidden` are the paths no
 * message may show.
 */
export const fromFailure = (
  error: unknown,
  hidden: ReadonlyArray<string>,
  log: (line: string) => void
): ApiError => {
  if (error instanceof ApiError)
    return new ApiError(error.status, error.code, redact(error.message, hidden), error.headers)
  const status = error instanceof ArtifactFileError ? artifactStatus[error.reason] : statusOf(error)
  if (status !== undefined && status < 500) {
    const known = error as { readonly _tag: string; readonly message: string }
    return new ApiError(status, known._tag, redact(known.message, hidden))
  }
  const detail =
    error instanceof Error
      ? `${error.name}: ${error.message}${error.stack ? `\n${error.stack}` : ""}`
      : String(error)
  log(`noema runs server: a request failed: ${detail}\n`)
  return new ApiError(500, "InternalError", "the server failed to answer this request (its log says why)")
}
