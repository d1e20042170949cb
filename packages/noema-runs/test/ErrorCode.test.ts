/**
 * A stage's failure is named by its class, and says whether a retry can help: transient model
 * failures and interruptions can; a person's rejection, a pipeline that does not fit, a refused
 * file and a model server refusing the request itself cannot.
 */
import { Agent, ChatModel, ModelError } from "@noema/core"
import { describe, expect, it } from "vitest"
import * as ErrorCode from "../src/internal/ErrorCode.js"
import { PipelineError } from "../src/Pipeline.js"
import { FileError } from "../src/RunFiles.js"

const modelFailure = (reason: ModelError.Reason) =>
  Agent.modelFailed("stage-draft", ChatModel.error("openai", reason, "gpt"))

describe("ErrorCode: a stage's failure as error_code, error_message, retryable", () => {
  it("a model failure is model_error, retryable as its provider reason says", () => {
    const cases: ReadonlyArray<readonly [ModelError.Reason, boolean]> = [
      [new ModelError.RateLimited({ message: "slow down" }), true],
      [new ModelError.Unavailable({ message: "down", status: 500 }), true],
      [new ModelError.Network({ message: "connection refused" }), true],
      [new ModelError.InvalidOutput({ message: "garbled" }), true],
      [new ModelError.Authentication({ message: "bad key" }), false],
      [new ModelError.QuotaExceeded({ message: "no credit" }), false],
      [new ModelError.InvalidRequest({ message: "no such model", status: 404 }), false],
      [new ModelError.ContextLengthExceeded({ message: "too long" }), false]
    ]
    for (const [reason, retryable] of cases) {
      const error = ErrorCode.fromFailure(modelFailure(reason))
      expect([error.error_code, error.retryable]).toEqual(["model_error", retryable])
      expect(error.error_message).toContain(reason.message)
    }
  })

  it("an agent out of steps or failing on its own, a pipeline that does not fit: never retryable", () => {
    const outOfSteps = new Agent.AgentError({
      agent: "stage-draft",
      reason: new Agent.MaxStepsExceeded({ maxSteps: 10 }),
      messages: []
    })
    const failed = new Agent.AgentError({
      agent: "stage-draft",
      reason: new Agent.Failed({ message: "a hook failed" }),
      messages: []
    })
    const pipeline = new PipelineError({ source: "the run's pipeline", problems: ["stages[0].tools[0]: …"] })
    expect(
      [outOfSteps, failed, pipeline].map(ErrorCode.fromFailure).map((e) => [e.error_code, e.retryable])
    ).toEqual([
      ["max_steps_exceeded", false],
      ["agent_error", false],
      ["pipeline_error", false]
    ])
  })

  it("a refused file (confinement, integrity) is not retryable; a full disk or an I/O error is", () => {
    const code = (error: FileError) => {
      const stageError = ErrorCode.fromFailure(error)
      return [stageError.error_code, stageError.retryable]
    }
    expect(code(new FileError({ path: "../x", detail: "the path leaves the artifacts directory" }))).toEqual([
      "file_error",
      false
    ])
    expect(code(new FileError({ path: "a.md", detail: "exists", systemError: "EEXIST" }))).toEqual([
      "file_error",
      false
    ])
    expect(code(new FileError({ path: "a.md", detail: "no space", systemError: "ENOSPC" }))).toEqual([
      "file_error",
      true
    ])
    expect(code(new FileError({ path: "a.md", detail: "i/o", systemError: "EIO" }))).toEqual([
      "file_error",
      true
    ])
  })

  it("interrupted is retryable, a rejection is not; every code that can fail for good says why", () => {
    expect(ErrorCode.interrupted).toMatchObject({ error_code: "interrupted", retryable: true })
    expect(ErrorCode.approvalRejected("not now")).toEqual({
      error_code: "approval_rejected",
      error_message: "not now",
      retryable: false
    })
    expect(Object.keys(ErrorCode.notRetryable).sort()).toEqual(
      ErrorCode.codes.filter((code) => code !== "interrupted").sort()
    )
    expect(ErrorCode.whyNotRetryable("approval_rejected")).toMatch(/^a person rejected the stage/)
    expect(ErrorCode.whyNotRetryable("model_failed")).toBe("it was recorded as not retryable (model_failed)")
  })
})
