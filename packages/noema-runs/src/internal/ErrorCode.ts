/**
 * ErrorCode: why a stage failed, as the files' contract says it: `error_code`,
 * `error_message` and `retryable` (in `output.json`, the failed attempt's `manifest.json`
 * and the timeline's `StageFailed` and `RunFailed`).
 *
 * The one place a failure becomes its code: from the failure's class (a closed union, so
 * the compiler sees every case) and the reason it carries, never from its message. The
 * codes are a closed set (`codes`), and each one that can fail for good says why it is not
 * retried unless forced (`notRetryable`): what `runs retry` answers. Runs recorded by an
 * earlier noema may hold other codes (`model_failed`, `agent_failed`); they are shown as
 * they were recorded, and their recorded `retryable` still decides.
 */
import type { Agent } from "@noema/core"
import type { PipelineError } from "../Pipeline.js"
import type { StageError } from "../Run.js"
import type { FileError } from "../RunFiles.js"

export const codes = [
  "model_error",
  "max_steps_exceeded",
  "agent_error",
  "file_error",
  "pipeline_error",
  "interrupted",
  "approval_rejected"
] as const

export type ErrorCode = (typeof codes)[number]

/**
 * Why a failure with the code fails again when retried as it is: the reason a retry needs
 * forcing (an interrupted attempt is always retryable).
 */
export const notRetryable: Readonly<Record<Exclude<ErrorCode, "interrupted">, string>> = {
  model_error:
    "the model server refused the request itself (authentication, quota, an invalid or too long request, a content filter), and refuses it again until that changes",
  max_steps_exceeded:
    "the agent used all its model calls still calling tools (a tool's arguments it kept getting wrong, say); the same instructions most likely do the same",
  agent_error: "the stage's agent failed on its own terms, which a retry does not change",
  file_error:
    "a file the stage needs was refused (outside its directory, through a link, already there, or changed since it was published), and is refused again",
  pipeline_error:
    "the stage's pipeline does not fit the process that ran it (a tool it names is not offered there); it fails the same way until the pipeline or the process changes",
  approval_rejected: "a person rejected the stage, and a retry would ask them again"
}

/**
 * The system's error codes of a file system refusal that can pass: a full disk or quota, an
 * I/O error, too many open files, a busy or stale (network) file.
 */
const transientSystemErrors: ReadonlySet<string> = new Set([
  "ENOSPC",
  "EDQUOT",
  "EIO",
  "EAGAIN",
  "EBUSY",
  "EINTR",
  "EMFILE",
  "ENFILE",
  "ETIMEDOUT",
  "ESTALE"
])

/** What can fail a stage attempt. */
export type StageFailure = Agent.AgentError | FileError | PipelineError

const stageError = (error_code: ErrorCode, error_message: string, retryable: boolean): StageError => ({
  error_code,
  error_message,
  retryable
})

const fromAgentError = (error: Agent.AgentError): StageError => {
  switch (error.reason._tag) {
    // Transient (a rate limit, 5xx, the network, a broken answer) or not, as the provider's reason says.
    case "ModelFailed":
      return stageError("model_error", error.message, error.reason.error.isRetryable)
    case "MaxStepsExceeded":
      return stageError("max_steps_exceeded", error.message, false)
    case "Failed":
      return stageError("agent_error", error.message, false)
  }
}

/** The failure's code, message and whether a retry may succeed. */
export const fromFailure = (error: StageFailure): StageError => {
  switch (error._tag) {
    case "AgentError":
      return fromAgentError(error)
    case "FileError":
      // Confinement and integrity refusals carry no system error: they are refused again.
      return stageError(
        "file_error",
        error.message,
        error.systemError !== undefined && transientSystemErrors.has(error.systemError)
      )
    case "PipelineError":
      return stageError("pipeline_error", error.message, false)
  }
}

/** An attempt whose process stopped before it finished: a new attempt does the work again. */
export const interrupted: StageError = stageError(
  "interrupted",
  "the process running this attempt stopped before it finished",
  true
)

/** A person rejected the stage waiting for approval, for `reason`. */
export const approvalRejected = (reason: string): StageError => stageError("approval_rejected", reason, false)

/** Why a failure with `code` is not retried unless forced (a code this noema does not make: its own words). */
export const whyNotRetryable = (code: string): string =>
  Object.hasOwn(notRetryable, code)
    ? notRetryable[code as keyof typeof notRetryable]
    : `it was recorded as not retryable (${code})`
