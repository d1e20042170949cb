/**
 * Run: the model of run-centric execution.
 *
 * A thread (open or closed, with a queue policy) holds runs; each request makes
 * a run with a new `run_id`, split into stages. A run moves through six states
 * along the legal transitions only (`transitions`); everything that happens to
 * it is an event of the append-only timeline, and the run's read model
 * (`RunView`: status, stages, attempts, artifacts) is a fold of its events
 * (`project`), so it can always be rebuilt from the log.
 */
import { Printable } from "@noema/core"
import { Schema } from "effect"
import * as ErrorCode from "./internal/ErrorCode.js"

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

export type ThreadStatus = "open" | "closed"

/** What a request in a thread with an active run does: `reject` refuses it, `enqueue` queues it (FIFO). */
export type QueuePolicy = "reject" | "enqueue"

export interface Thread {
  readonly id: string
  readonly title: string
  readonly status: ThreadStatus
  readonly queuePolicy: QueuePolicy
  readonly createdAt: string
}

// ---------------------------------------------------------------------------
// Run states and their transitions
// ---------------------------------------------------------------------------

export type RunStatus = "queued" | "running" | "waiting_approval" | "completed" | "failed" | "canceled"

export const runStatuses: ReadonlyArray<RunStatus> = [
  "queued",
  "running",
  "waiting_approval",
  "completed",
  "failed",
  "canceled"
]

/**
 * The legal transitions, and nothing else. `failed -> running` is a retry (the
 * failed stage gets a new attempt); `waiting_approval -> failed` is a rejection.
 * `completed` and `canceled` are final.
 */
export const transitions: Readonly<Record<RunStatus, ReadonlyArray<RunStatus>>> = {
  queued: ["running", "canceled"],
  running: ["waiting_approval", "completed", "failed", "canceled"],
  waiting_approval: ["running", "failed", "canceled"],
  completed: [],
  failed: ["running", "canceled"],
  canceled: []
}

export const canTransition = (from: RunStatus, to: RunStatus): boolean => transitions[from].includes(to)

/** The statuses of a run that holds its thread: only one at a time unless the thread enqueues. */
export const activeStatuses: ReadonlyArray<RunStatus> = ["queued", "running", "waiting_approval"]

/** A run that holds its thread: only one at a time unless the thread enqueues. */
export const isActive = (status: RunStatus): boolean => activeStatuses.includes(status)

export const isFinal = (status: RunStatus): boolean => transitions[status].length === 0

export type StageStatus = "pending" | "waiting_approval" | "running" | "completed" | "failed" | "canceled"

// ---------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------

/** A new id: a prefix, the UTC time to the millisecond and 48 random bits (`run_20261124T080000123_9f3a...`). */
export const newId = (prefix: string, now: Date = new Date()): string => {
  // Sliced rather than rewritten with patterns: every event gets one.
  const at = now.toISOString() // 2026-11-24T08:00:00.123Z (24 characters for years 0 to 9999)
  const time =
    at.length === 24
      ? `${at.slice(0, 4)}${at.slice(5, 7)}${at.slice(8, 10)}T${at.slice(11, 13)}${at.slice(14, 16)}${at.slice(17, 19)}${at.slice(20, 23)}`
      : at.replace(/[-:.Z]/g, "")
  const random = crypto.randomUUID() // its first 12 hex digits: 8, a dash, 4
  return `${prefix}_${time}_${random.slice(0, 8)}${random.slice(9, 13)}`
}

export const newRunId = (): string => newId("run")
export const newThreadId = (): string => newId("thr")
export const newEventId = (): string => newId("evt")

/** A stage key: lowercase letters, digits, `-` and `_`, starting with a letter; it names a directory. */
export const stageKeyPattern = /^[a-z][a-z0-9_-]{0,47}$/

/** The stage's directory name: the zero-padded position and the key (`01-draft`). */
export const stageDirectory = (position: number, key: string): string =>
  `${String(position).padStart(2, "0")}-${key}`

// ---------------------------------------------------------------------------
// The model a run is carried on with
// ---------------------------------------------------------------------------

/**
 * Which model a run was started with (`run.json`) and an attempt ran on (its manifest): the
 * provider, the model's name and, for a model server, its base URL and API (`chat` or
 * `responses`). Never a credential: the base URL is kept as `Printable.redactUrl` shows it
 * (see `modelIdentity`), so it names the server and nothing that opens it.
 */
export const ModelIdentity = Schema.Struct({
  provider: Schema.String,
  name: Schema.String,
  base_url: Schema.optionalKey(Schema.String),
  api: Schema.optionalKey(Schema.String)
})
export type ModelIdentity = typeof ModelIdentity.Type

/**
 * A model's identity as runs record it: the base URL without its credentials (a password, a
 * token as user part, secret-named query parameters become `***`) and without a slash
 * ending its path, so the same server is named the same however it was configured.
 */
export const modelIdentity = (model: {
  readonly provider: string
  readonly name: string
  readonly baseUrl?: string | undefined
  readonly api?: string | undefined
}): ModelIdentity => ({
  provider: model.provider,
  name: model.name,
  ...(model.baseUrl !== undefined && {
    base_url: Printable.redactUrl(model.baseUrl).replace(/\/+(?=[?#]|$)/, "")
  }),
  ...(model.api !== undefined && { api: model.api })
})

/** Whether two identities name the same model: provider, name, server and API alike. */
export const sameModel = (a: ModelIdentity, b: ModelIdentity): boolean =>
  a.provider === b.provider && a.name === b.name && a.base_url === b.base_url && a.api === b.api

/** `gpt-4o-mini at https://api.openai.com/v1 (chat API)`, `noema-offline (offline)`: for messages. */
export const describeModel = (model: ModelIdentity): string =>
  `${model.name}${model.base_url === undefined ? ` (${model.provider})` : ` at ${model.base_url}`}${model.api === undefined ? "" : ` (${model.api} API)`}`

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export class ThreadNotFound extends Schema.TaggedError<ThreadNotFound>()("ThreadNotFound", {
  threadId: Schema.String
}) {
  override get message() {
    return `No thread ${this.threadId}`
  }
}

export class ThreadClosed extends Schema.TaggedError<ThreadClosed>()("ThreadClosed", {
  threadId: Schema.String
}) {
  override get message() {
    return `Thread ${this.threadId} is closed: it takes no new runs`
  }
}

export class ThreadBusy extends Schema.TaggedError<ThreadBusy>()("ThreadBusy", {
  threadId: Schema.String,
  activeRunId: Schema.String,
  /** The active run is running but no process carries it on (see `RunLease.explainBusy`): waiting would not free the thread. */
  interrupted: Schema.optionalKey(Schema.Boolean)
}) {
  override get message() {
    return this.interrupted === true
      ? `Thread ${this.threadId} is held by run ${this.activeRunId}, which was interrupted (no process carries it on): carry it on with noema runs resume ${this.activeRunId} (or a worker: noema worker, noema serve), or cancel it`
      : `Thread ${this.threadId} already has an active run (${this.activeRunId}); wait for it, cancel it, or let the thread queue runs (noema threads set-queue ${this.threadId} enqueue)`
  }
}

export class RunNotFound extends Schema.TaggedError<RunNotFound>()("RunNotFound", {
  runId: Schema.String
}) {
  override get message() {
    return `No run ${this.runId}`
  }
}

export class IllegalTransition extends Schema.TaggedError<IllegalTransition>()("IllegalTransition", {
  runId: Schema.String,
  event: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `Run ${this.runId}: ${this.event} refused: ${this.detail}`
  }
}

/** A retry of a run whose failure is not retryable, not forced: nothing is recorded. */
export class NotRetryable extends Schema.TaggedError<NotRetryable>()("NotRetryable", {
  runId: Schema.String,
  errorCode: Schema.String,
  errorMessage: Schema.String,
  /** Why a retry would fail again (`ErrorCode.notRetryable`). */
  why: Schema.String
}) {
  override get message() {
    const said = this.errorMessage.replace(/\s+/g, " ").trim()
    return `Run ${this.runId} failed with ${this.errorCode} (${said.length > 200 ? `${said.slice(0, 199)}…` : said}), which is not retryable: ${this.why}`
  }
}

export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", {
  detail: Schema.String
}) {
  override get message() {
    return `Invalid stage input: ${this.detail}`
  }
}

// ---------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------

export interface PlannedStage {
  readonly key: string
  readonly position: number
  readonly needsApproval: boolean
}

export interface StageError {
  readonly error_code: string
  readonly error_message: string
  readonly retryable: boolean
}

export interface ArtifactEntry {
  /** Relative to the attempt's `artifacts/` directory, `/`-separated. */
  readonly path: string
  readonly kind: string
  readonly sha256: string
  readonly size: number
}

/** What happened; the store adds the envelope (`Event`). */
export type EventData =
  | {
      readonly type: "RunQueued"
      readonly request: string
      readonly pipeline: string
      readonly stages: ReadonlyArray<PlannedStage>
      /** The sha256 of the run's `run.json` as it was written; absent for runs made before it was recorded. */
      readonly run_file_sha256?: string
    }
  | { readonly type: "RunStarted" }
  | { readonly type: "ApprovalRequested"; readonly position: number }
  | { readonly type: "ApprovalGranted"; readonly position: number; readonly by?: string }
  | { readonly type: "ApprovalRejected"; readonly position: number; readonly reason: string }
  | { readonly type: "StageStarted"; readonly position: number; readonly attempt: number }
  | ({
      readonly type: "ArtifactPublished"
      readonly position: number
      readonly attempt: number
    } & ArtifactEntry)
  | { readonly type: "StageCompleted"; readonly position: number; readonly attempt: number }
  | ({ readonly type: "StageFailed"; readonly position: number; readonly attempt: number } & StageError)
  | { readonly type: "RunCompleted" }
  | ({ readonly type: "RunFailed" } & StageError)
  | { readonly type: "RunCanceled"; readonly reason: string }
  /**
   * A process could not carry the run on: the model the run was started with (`model`) is
   * not one it has (`available` is the one it has). Nothing else changes: the run waits for
   * a process that has the model, or for one told to use another (`--model`).
   */
  | { readonly type: "ModelUnavailable"; readonly model: ModelIdentity; readonly available: ModelIdentity }

export type EventType = EventData["type"]

export interface Event {
  readonly event_id: string
  readonly run_id: string
  readonly thread_id: string
  /** 1, 2, ... within the run. */
  readonly seq: number
  readonly at: string
  readonly data: EventData
}

// ---------------------------------------------------------------------------
// The read model: a fold of the events
// ---------------------------------------------------------------------------

export interface AttemptView {
  readonly attempt: number
  readonly status: "running" | "completed" | "failed" | "canceled"
  readonly startedAt: string
  /**
   * The `event_id` of the attempt's `StageStarted` (its manifest names it): kept here so an
   * attempt needs no read of the run's timeline to find it. Absent in views stored before.
   */
  readonly startedEventId?: string
  readonly finishedAt?: string
  readonly error?: StageError
  readonly artifacts: ReadonlyArray<ArtifactEntry>
}

export interface StageView {
  readonly key: string
  readonly position: number
  readonly needsApproval: boolean
  readonly approved: boolean
  readonly status: StageStatus
  readonly attempts: ReadonlyArray<AttemptView>
}

export interface RunView {
  readonly runId: string
  readonly threadId: string
  readonly request: string
  readonly pipeline: string
  readonly status: RunStatus
  readonly createdAt: string
  readonly startedAt?: string
  readonly finishedAt?: string
  readonly error?: StageError
  readonly stages: ReadonlyArray<StageView>
  /**
   * The sha256 of `run.json` recorded when the run was created (its `RunQueued`): whoever
   * carries the run on checks the file against it. Absent for runs made before it was recorded.
   */
  readonly runFileSha256?: string
  /**
   * The run waits for the model it was started with: the last process that tried to carry
   * it on has another (`ModelUnavailable`). Cleared by the next event.
   */
  readonly waitingForModel?: {
    readonly model: ModelIdentity
    readonly available: ModelIdentity
    readonly since: string
  }
  /** The seq of the last event folded in. */
  readonly seq: number
}

/** The stage a run works on next: the first one not completed. */
export const currentStage = (run: RunView): StageView | undefined =>
  run.stages.find((stage) => stage.status !== "completed")

/**
 * Why a retry of `run` is refused unless forced: its failure is not retryable. Undefined when
 * it may be retried (or is not failed, which the timeline refuses on its own).
 */
export const retryRefusal = (run: RunView): NotRetryable | undefined =>
  run.status === "failed" && run.error !== undefined && !run.error.retryable
    ? new NotRetryable({
        runId: run.runId,
        errorCode: run.error.error_code,
        errorMessage: run.error.error_message,
        why: ErrorCode.whyNotRetryable(run.error.error_code)
      })
    : undefined

const setStage = (run: RunView, position: number, f: (stage: StageView) => StageView): RunView => ({
  ...run,
  stages: run.stages.map((stage) => (stage.position === position ? f(stage) : stage))
})

const setAttempt = (stage: StageView, attempt: number, f: (a: AttemptView) => AttemptView): StageView => ({
  ...stage,
  attempts: stage.attempts.map((a) => (a.attempt === attempt ? f(a) : a))
})

/**
 * The run after one more event, or the reason the event is illegal here. The
 * one place the rules live: stores refuse an append whose events do not fold.
 * A run waits for its model only until something else happens to it.
 */
export const apply = (run: RunView | undefined, event: Event): RunView | IllegalTransition => {
  const next = applyOne(run, event)
  if (next instanceof IllegalTransition || next.waitingForModel === undefined) return next
  if (event.data.type === "ModelUnavailable") return next
  const { waitingForModel: _carriedOn, ...rest } = next
  return rest
}

const applyOne = (run: RunView | undefined, event: Event): RunView | IllegalTransition => {
  const data = event.data
  const refuse = (detail: string) => new IllegalTransition({ runId: event.run_id, event: data.type, detail })
  if (data.type === "RunQueued") {
    if (run !== undefined) return refuse("the run already exists")
    if (event.seq !== 1) return refuse("a run starts at seq 1")
    return {
      runId: event.run_id,
      threadId: event.thread_id,
      request: data.request,
      pipeline: data.pipeline,
      status: "queued",
      createdAt: event.at,
      stages: data.stages.map((stage) => ({
        key: stage.key,
        position: stage.position,
        needsApproval: stage.needsApproval,
        approved: false,
        status: "pending",
        attempts: []
      })),
      ...(data.run_file_sha256 !== undefined && { runFileSha256: data.run_file_sha256 }),
      seq: 1
    }
  }
  if (run === undefined) return refuse("no such run")
  if (event.seq !== run.seq + 1) return refuse(`expected seq ${run.seq + 1}, got ${event.seq}`)
  const move = (to: RunStatus, f: (run: RunView) => RunView = (r) => r): RunView | IllegalTransition =>
    canTransition(run.status, to)
      ? f({ ...run, status: to, seq: event.seq })
      : refuse(`the run is ${run.status}, it cannot become ${to}`)
  const stageAt = (position: number) => run.stages.find((stage) => stage.position === position)
  const lastAttempt = (stage: StageView) => stage.attempts[stage.attempts.length - 1]
  const same = (f: (run: RunView) => RunView | IllegalTransition) => {
    const next = f(run)
    return next instanceof IllegalTransition ? next : { ...next, seq: event.seq }
  }
  switch (data.type) {
    case "RunStarted":
      // From `failed` this is a retry: the error is cleared, the failed stage is pending again
      // and keeps its attempts (its next one is a new attempt).
      return move("running", ({ error: _error, finishedAt: _finishedAt, ...r }) => ({
        ...r,
        startedAt: r.startedAt ?? event.at,
        stages: r.stages.map((s) => (s.status === "failed" ? { ...s, status: "pending" } : s))
      }))
    case "ApprovalRequested": {
      const stage = stageAt(data.position)
      if (stage === undefined || stage !== currentStage(run))
        return refuse(`stage ${data.position} is not next`)
      return move("waiting_approval", (r) =>
        setStage(r, data.position, (s) => ({ ...s, status: "waiting_approval" }))
      )
    }
    case "ApprovalGranted": {
      const stage = stageAt(data.position)
      if (stage?.status !== "waiting_approval") return refuse(`stage ${data.position} awaits no approval`)
      return move("running", (r) =>
        setStage(r, data.position, (s) => ({ ...s, status: "pending", approved: true }))
      )
    }
    case "ApprovalRejected": {
      const stage = stageAt(data.position)
      if (stage?.status !== "waiting_approval") return refuse(`stage ${data.position} awaits no approval`)
      const error = ErrorCode.approvalRejected(data.reason)
      return move("failed", (r) => ({
        ...setStage(r, data.position, (s) => ({ ...s, status: "failed" })),
        error,
        finishedAt: event.at
      }))
    }
    case "StageStarted": {
      if (run.status !== "running") return refuse(`the run is ${run.status}, not running`)
      const stage = stageAt(data.position)
      if (stage === undefined || stage !== currentStage(run))
        return refuse(`stage ${data.position} is not next`)
      if (stage.status === "running") return refuse(`stage ${data.position} is already running`)
      if (stage.needsApproval && !stage.approved) return refuse(`stage ${data.position} needs approval first`)
      if (data.attempt !== stage.attempts.length + 1)
        return refuse(`stage ${data.position} expects attempt ${stage.attempts.length + 1}`)
      return same((r) =>
        setStage(r, data.position, (s) => ({
          ...s,
          status: "running",
          attempts: [
            ...s.attempts,
            {
              attempt: data.attempt,
              status: "running",
              startedAt: event.at,
              startedEventId: event.event_id,
              artifacts: []
            }
          ]
        }))
      )
    }
    case "ArtifactPublished":
    case "StageCompleted":
    case "StageFailed": {
      const stage = stageAt(data.position)
      const attempt = stage === undefined ? undefined : lastAttempt(stage)
      if (
        stage === undefined ||
        attempt === undefined ||
        attempt.attempt !== data.attempt ||
        attempt.status !== "running"
      )
        return refuse(`stage ${data.position} attempt ${data.attempt} is not running`)
      if (data.type === "ArtifactPublished") {
        if (attempt.artifacts.some((a) => a.path === data.path))
          return refuse(`artifact ${data.path} was already published`)
        const entry: ArtifactEntry = {
          path: data.path,
          kind: data.kind,
          sha256: data.sha256,
          size: data.size
        }
        return same((r) =>
          setStage(r, data.position, (s) =>
            setAttempt(s, data.attempt, (a) => ({ ...a, artifacts: [...a.artifacts, entry] }))
          )
        )
      }
      if (data.type === "StageCompleted") {
        return same((r) =>
          setStage(r, data.position, (s) => ({
            ...setAttempt(s, data.attempt, (a) => ({ ...a, status: "completed", finishedAt: event.at })),
            status: "completed"
          }))
        )
      }
      const error: StageError = {
        error_code: data.error_code,
        error_message: data.error_message,
        retryable: data.retryable
      }
      return same((r) =>
        setStage(r, data.position, (s) => ({
          ...setAttempt(s, data.attempt, (a) => ({ ...a, status: "failed", finishedAt: event.at, error })),
          status: "failed"
        }))
      )
    }
    case "RunCompleted":
      if (run.stages.some((stage) => stage.status !== "completed")) return refuse("not every stage completed")
      return move("completed", (r) => ({ ...r, finishedAt: event.at }))
    case "RunFailed": {
      const error: StageError = {
        error_code: data.error_code,
        error_message: data.error_message,
        retryable: data.retryable
      }
      if (run.stages.some((stage) => stage.status === "running"))
        return refuse("a stage is still running: record its failure first")
      return move("failed", (r) => ({ ...r, error, finishedAt: event.at }))
    }
    case "ModelUnavailable":
      if (run.status !== "queued" && run.status !== "running")
        return refuse(`the run is ${run.status}: only a run about to be carried on waits for its model`)
      if (run.stages.some((stage) => stage.status === "running")) return refuse("a stage is running")
      return same((r) => ({
        ...r,
        waitingForModel: { model: data.model, available: data.available, since: event.at }
      }))
    case "RunCanceled":
      return move("canceled", (r) => ({
        ...r,
        finishedAt: event.at,
        stages: r.stages.map((s) =>
          s.status === "completed"
            ? s
            : {
                ...s,
                status: s.status === "failed" ? "failed" : "canceled",
                attempts: s.attempts.map((a) =>
                  a.status === "running" ? { ...a, status: "canceled", finishedAt: event.at } : a
                )
              }
        )
      }))
  }
}

/** The run after a batch of events, or the first refusal. */
export const applyAll = (
  run: RunView | undefined,
  events: ReadonlyArray<Event>
): RunView | IllegalTransition => {
  let current = run
  for (const event of events) {
    const next = apply(current, event)
    if (next instanceof IllegalTransition) return next
    current = next
  }
  if (current === undefined) return new IllegalTransition({ runId: "", event: "none", detail: "no events" })
  return current
}

/** The run rebuilt from its whole timeline. */
export const project = (events: ReadonlyArray<Event>): RunView | IllegalTransition =>
  applyAll(undefined, events)
