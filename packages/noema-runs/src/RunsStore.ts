/**
 * RunsStore: threads, runs and their append-only timeline.
 *
 * Writes are events: `createRun` records `RunQueued`, `append` records what
 * happens next. A store folds each batch with `Run.applyAll` before it keeps
 * it, so an illegal event is refused and nothing of its batch is written; the
 * read models (the run view, its stages and attempts, its artifacts) are
 * updated in the same transaction and can be rebuilt from the log (`rebuild`).
 * A thread's runs are serialised here: a run starts (`RunStarted`) only when no
 * other run of its thread is running or waiting for approval and no older one
 * is queued, whichever process or machine asks.
 *
 * Claims say which process carries a run on: `claim` takes a run for an owner
 * until a deadline (epoch milliseconds, the claimer's clock) and renews it for
 * the same owner; another owner gets it only once that deadline has passed, or
 * by naming the holder it knows to be dead (`takeOver`). A run created with
 * `claim` is claimed in the same transaction, so no worker can pick it up
 * between its creation and its files.
 */
import { DatabaseError } from "@noema/sql"
import { Context, Effect, Schema, Semaphore } from "effect"
import {
  applyAll,
  type Event,
  type EventData,
  IllegalTransition,
  InvalidInput,
  isActive,
  newEventId,
  newRunId,
  newThreadId,
  type PlannedStage,
  type QueuePolicy,
  RunNotFound,
  type RunView,
  stageKeyPattern,
  type Thread,
  ThreadBusy,
  ThreadClosed,
  ThreadNotFound
} from "./Run.js"

export class RunsStoreError extends Schema.TaggedError<RunsStoreError>()("RunsStoreError", {
  location: Schema.String,
  detail: Schema.String,
  /** When the database failed: why (@noema/sql's reason, which says whether to retry). */
  reason: Schema.optionalKey(DatabaseError.Reason)
}) {
  /** A database failure as the store's error: the same reason, said once. */
  static fromDatabaseError(location: string, error: DatabaseError.DatabaseError): RunsStoreError {
    return new RunsStoreError({ location, detail: error.reason.detail, reason: error.reason })
  }
  get isRetryable(): boolean {
    return this.reason?.isRetryable ?? false
  }
  override get message() {
    // A reason's message names the database itself.
    return this.reason === undefined
      ? `Runs store ${this.location}: ${this.detail}`
      : `Runs store: ${this.reason.message}`
  }
}

export type CreateRunError = ThreadNotFound | ThreadClosed | ThreadBusy | InvalidInput | RunsStoreError
export type AppendError = RunNotFound | IllegalTransition | RunsStoreError

/** Who carries a run on, until when. */
export interface Claim {
  readonly runId: string
  readonly owner: string
  /** Epoch milliseconds. */
  readonly expiresAt: number
  readonly claimedAt: string
}

export interface ClaimRequest {
  readonly owner: string
  readonly ttlMs: number
  /** The owner of a claim known to be stale (its process is gone), taken over at once. */
  readonly takeOver?: string
}

export type ClaimResult = { readonly claimed: true } | { readonly claimed: false; readonly holder: Claim }

export interface CreateRun {
  readonly threadId: string
  readonly request: string
  readonly pipeline: string
  readonly stages: ReadonlyArray<PlannedStage>
  /** Default: a new one. */
  readonly runId?: string
  /** Claims the new run in the same transaction. */
  readonly claim?: ClaimRequest
  /** The sha256 of the run's `run.json`, recorded in its `RunQueued` (see `RunFiles.readRunFile`). */
  readonly runFileSha256?: string
}

/** A workflow execution as the journal keeps it (see `WorkflowJournal`). */
export interface ExecutionRecord {
  readonly executionId: string
  readonly workflow: string
  /** The payload, encoded as JSON. */
  readonly payload: string
  /** The final result (`Workflow.Result` encoded as JSON), once the execution completed. */
  readonly result?: string
  /** An interrupt was asked for: a replay completes it as interrupted. */
  readonly interrupted: boolean
}

/**
 * The durable part of the workflow engine (`StoreWorkflowEngine`): executions, and
 * per execution the entries a replay reads back instead of doing the work again
 * (an activity's exit, a durable deferred's result, a durable clock's wake time).
 * Entries are written once: the first write stands and is what every later read
 * and write gets back, so two writers agree on one value.
 */
export interface WorkflowJournal {
  /** Records the execution unless it is there; returns the record that stands. */
  readonly start: (execution: ExecutionStart) => Effect.Effect<ExecutionRecord, RunsStoreError>
  readonly execution: (executionId: string) => Effect.Effect<ExecutionRecord | undefined, RunsStoreError>
  readonly complete: (executionId: string, result: string) => Effect.Effect<void, RunsStoreError>
  readonly interrupt: (executionId: string) => Effect.Effect<void, RunsStoreError>
  readonly entry: (executionId: string, key: string) => Effect.Effect<string | undefined, RunsStoreError>
  /** Writes the entry unless one is there; returns the value that stands. */
  readonly record: (executionId: string, key: string, value: string) => Effect.Effect<string, RunsStoreError>
  /** The execution's entries, in the order they were recorded. */
  readonly entries: (
    executionId: string
  ) => Effect.Effect<ReadonlyArray<{ readonly key: string; readonly value: string }>, RunsStoreError>
}

/** A new workflow execution, as `WorkflowJournal.start` records it. */
export interface ExecutionStart {
  readonly executionId: string
  readonly workflow: string
  /** The payload, encoded as JSON. */
  readonly payload: string
}

/** One entry of a workflow execution's journal (see `WorkflowJournal.record`). */
export interface JournalEntry {
  readonly executionId: string
  readonly key: string
  readonly value: string
}

export interface AppendOptions {
  /**
   * Written in the batch's transaction, unless an entry stands there already: the workflow
   * activity whose last act the batch is, recorded as completed in the same commit
   * (`StoreWorkflowEngine.CompletedActivity`), where it would take a commit of its own.
   */
  readonly journal?: JournalEntry | undefined
  /**
   * Recorded in the batch's transaction, unless it is there (`WorkflowJournal.start`): the
   * workflow execution the batch starts (a run's `RunStarted`), so a run never stands started
   * without its execution, and the two take one commit.
   */
  readonly execution?: ExecutionStart | undefined
  /**
   * Recorded in the batch's transaction, unless one is there (`WorkflowJournal.complete`): the
   * result of the workflow execution the batch ends (a run's last step, completing or failing
   * it, after which the execution returns that result), so the two take one commit.
   */
  readonly result?: ExecutionResult | undefined
}

/** A workflow execution's result (`Workflow.Result`, encoded as JSON), as `WorkflowJournal.complete` records it. */
export interface ExecutionResult {
  readonly executionId: string
  readonly result: string
}

export interface Service {
  readonly location: string
  readonly createThread: (options?: {
    readonly title?: string
    readonly queuePolicy?: QueuePolicy
  }) => Effect.Effect<Thread, RunsStoreError>
  readonly getThread: (threadId: string) => Effect.Effect<Thread, ThreadNotFound | RunsStoreError>
  readonly listThreads: () => Effect.Effect<ReadonlyArray<Thread>, RunsStoreError>
  readonly closeThread: (threadId: string) => Effect.Effect<Thread, ThreadNotFound | RunsStoreError>
  /** What a request does while another run of the thread is active, from now on (runs made before stay). */
  readonly setQueuePolicy: (
    threadId: string,
    queuePolicy: QueuePolicy
  ) => Effect.Effect<Thread, ThreadNotFound | RunsStoreError>
  /** A new run, `queued`; refused before anything is written when the thread cannot take it. */
  readonly createRun: (options: CreateRun) => Effect.Effect<RunView, CreateRunError>
  /** Appends a batch of events to a run's timeline, all or nothing (with `options.journal`'s entry). */
  readonly append: (
    runId: string,
    events: ReadonlyArray<EventData>,
    options?: AppendOptions
  ) => Effect.Effect<RunView, AppendError>
  readonly getRun: (runId: string) => Effect.Effect<RunView, RunNotFound | RunsStoreError>
  /**
   * In creation order (the order of their `RunQueued` events). `active`: only the runs not
   * finished (`Run.activeStatuses`), what a worker looks at on every poll; a store reads
   * them without reading the finished ones, however many there are.
   */
  readonly listRuns: (filter?: {
    readonly threadId?: string
    readonly active?: boolean
  }) => Effect.Effect<ReadonlyArray<RunView>, RunsStoreError>
  /** A run's timeline, in order. */
  readonly events: (runId: string) => Effect.Effect<ReadonlyArray<Event>, RunsStoreError>
  /**
   * Every run's events after `cursor` (0: from the start), oldest first, at most `limit`
   * (default 500), each with its cursor: what a live view follows. On PostgreSQL a
   * transaction that commits late can put an event behind a cursor already read, so a
   * view refreshes what it shows rather than trusting the feed to be complete.
   */
  readonly feed: (
    cursor: number,
    limit?: number
  ) => Effect.Effect<ReadonlyArray<{ readonly cursor: number; readonly event: Event }>, RunsStoreError>
  /** Rebuilds every read model from the log; the number of runs rebuilt. */
  readonly rebuild: () => Effect.Effect<number, RunsStoreError>
  /** Takes or renews the run's claim (see the module's comment). */
  readonly claim: (runId: string, request: ClaimRequest) => Effect.Effect<ClaimResult, RunsStoreError>
  /** Gives the claim up, if `owner` still holds it. */
  readonly release: (runId: string, owner: string) => Effect.Effect<void, RunsStoreError>
  /** Every claim held, expired ones included. */
  readonly claims: () => Effect.Effect<ReadonlyArray<Claim>, RunsStoreError>
  /** What the workflow engine keeps of the runs' executions. */
  readonly journal: WorkflowJournal
}

export class RunsStore extends Context.Service<RunsStore, Service>()("@noema/runs/RunsStore") {}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

/** The stages a run is created with: positions 1..n, keys valid and distinct. */
export const checkStages = (stages: ReadonlyArray<PlannedStage>): InvalidInput | undefined => {
  if (stages.length === 0) return new InvalidInput({ detail: "a run needs at least one stage" })
  const keys = new Set<string>()
  for (const [index, stage] of stages.entries()) {
    if (stage.position !== index + 1)
      return new InvalidInput({ detail: `stage ${index + 1} has position ${stage.position}` })
    if (!stageKeyPattern.test(stage.key))
      return new InvalidInput({
        detail: `stage key "${stage.key}" must be lowercase letters, digits, '-' or '_', starting with a letter`
      })
    if (keys.has(stage.key)) return new InvalidInput({ detail: `stage key "${stage.key}" appears twice` })
    keys.add(stage.key)
  }
  return undefined
}

/** The longest request a run takes, in characters (it is sent to the model, kept in run.json and the timeline). */
export const maxRequestLength = 100_000

export const checkRequest = (request: string): InvalidInput | undefined =>
  request.trim().length === 0
    ? new InvalidInput({ detail: "the request is empty" })
    : request.length > maxRequestLength
      ? new InvalidInput({
          detail: `the request has ${request.length} characters, more than the ${maxRequestLength} a run takes`
        })
      : undefined

/** The run that holds its thread now: the one running or waiting for approval (a thread has at most one). */
export const holderOf = (threadRuns: ReadonlyArray<RunView>): RunView | undefined =>
  threadRuns.find((run) => run.status === "running" || run.status === "waiting_approval")

/**
 * Whether `run` may start now: the runs of its thread (every one, in creation order)
 * hold no other running or waiting run, and no older queued one.
 */
export const startRefusal = (run: RunView, threadRuns: ReadonlyArray<RunView>): string | undefined => {
  const busy = holderOf(threadRuns.filter((other) => other.runId !== run.runId))
  if (busy !== undefined) return `run ${busy.runId} of the thread is ${busy.status}`
  if (run.status === "queued") {
    const index = threadRuns.findIndex((other) => other.runId === run.runId)
    const older = threadRuns.slice(0, index).find((other) => other.status === "queued")
    if (older !== undefined) return `run ${older.runId} is ahead of it in the thread's queue`
  }
  return undefined
}

/** Envelopes for a batch, numbered after `seq`. */
export const envelopes = (
  run: { readonly runId: string; readonly threadId: string; readonly seq: number },
  batch: ReadonlyArray<EventData>,
  at: string
): ReadonlyArray<Event> =>
  batch.map((data, index) => ({
    event_id: newEventId(),
    run_id: run.runId,
    thread_id: run.threadId,
    seq: run.seq + index + 1,
    at,
    data
  }))

/**
 * Whether folding `batch` looks at the thread's runs: only a start does (`startRefusal`), and
 * only at its active ones (`isActive`); a store reads them for nothing else.
 */
export const needsThreadRuns = (batch: ReadonlyArray<EventData>): boolean =>
  batch.some((event) => event.type === "RunStarted")

/**
 * The batch folded onto `run`, with the thread's serialisation checked for a start.
 * `threadRuns`: the thread's active runs in creation order (`needsThreadRuns`; the
 * finished ones change nothing, so a store may leave them out).
 */
export const fold = (
  run: RunView,
  events: ReadonlyArray<Event>,
  threadRuns: ReadonlyArray<RunView>
): RunView | IllegalTransition => {
  if (needsThreadRuns(events.map((event) => event.data)) && run.status !== "waiting_approval") {
    const refusal = startRefusal(run, threadRuns)
    if (refusal !== undefined)
      return new IllegalTransition({ runId: run.runId, event: "RunStarted", detail: refusal })
  }
  return applyAll(run, events)
}

/** A new open thread, as both stores create it. */
export const newThread = (options: Parameters<Service["createThread"]>[0]): Thread => ({
  id: newThreadId(),
  title: options?.title ?? "",
  status: "open",
  queuePolicy: options?.queuePolicy ?? "reject",
  createdAt: new Date().toISOString()
})

/** Events about to be written, stamped, and the run's view once they are. */
export interface Written {
  readonly events: ReadonlyArray<Event>
  readonly view: RunView
}

/** A new run's first event (`RunQueued`) and its view, as both stores write them; or why the request is invalid. */
export const queuedRun = (runId: string, thread: Thread, options: CreateRun): Written | InvalidInput => {
  const events = envelopes(
    { runId, threadId: thread.id, seq: 0 },
    [queuedEvent(options)],
    new Date().toISOString()
  )
  const view = applyAll(undefined, events)
  return view instanceof IllegalTransition ? new InvalidInput({ detail: view.detail }) : { events, view }
}

/** `batch` stamped and folded onto `run`, as both stores append it; or the transition it breaks. */
export const appended = (
  run: RunView,
  batch: ReadonlyArray<EventData>,
  threadRuns: ReadonlyArray<RunView>
): Written | IllegalTransition => {
  const events = envelopes(run, batch, new Date().toISOString())
  const view = fold(run, events, threadRuns)
  return view instanceof IllegalTransition ? view : { events, view }
}

/** Why a thread refuses a new run, checked before anything is written. */
export const createRefusal = (
  thread: Thread,
  threadRuns: ReadonlyArray<RunView>,
  options: CreateRun
): CreateRunError | undefined => {
  if (thread.status === "closed") return new ThreadClosed({ threadId: thread.id })
  const invalid = checkRequest(options.request) ?? checkStages(options.stages)
  if (invalid !== undefined) return invalid
  if (thread.queuePolicy === "reject") {
    const active = threadRuns.find((run) => isActive(run.status))
    if (active !== undefined) return new ThreadBusy({ threadId: thread.id, activeRunId: active.runId })
  }
  return undefined
}

/** Whether `current` (if any) lets `request` claim the run at `now`. */
export const mayClaim = (current: Claim | undefined, request: ClaimRequest, now: number): boolean =>
  current === undefined ||
  current.owner === request.owner ||
  current.expiresAt < now ||
  (request.takeOver !== undefined && current.owner === request.takeOver)

export const queuedEvent = (options: CreateRun): EventData => ({
  type: "RunQueued",
  request: options.request,
  pipeline: options.pipeline,
  stages: options.stages.map((stage) => ({ ...stage })),
  ...(options.runFileSha256 !== undefined && { run_file_sha256: options.runFileSha256 })
})

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

const memoryJournal = (): WorkflowJournal => {
  const executions = new Map<string, ExecutionRecord>()
  /** Insertion-ordered, so an execution's entries come back in the order recorded. */
  const entries = new Map<string, string>()
  const update = (executionId: string, f: (record: ExecutionRecord) => ExecutionRecord) =>
    Effect.sync(() => {
      const record = executions.get(executionId)
      if (record !== undefined) executions.set(executionId, f(record))
    })
  return {
    start: (execution) =>
      Effect.sync(() => {
        const existing = executions.get(execution.executionId)
        if (existing !== undefined) return existing
        const record: ExecutionRecord = { ...execution, interrupted: false }
        executions.set(execution.executionId, record)
        return record
      }),
    execution: (executionId) => Effect.sync(() => executions.get(executionId)),
    complete: (executionId, result) =>
      update(executionId, (record) => (record.result === undefined ? { ...record, result } : record)),
    interrupt: (executionId) => update(executionId, (record) => ({ ...record, interrupted: true })),
    entry: (executionId, key) => Effect.sync(() => entries.get(`${executionId}\u0000${key}`)),
    record: (executionId, key, value) =>
      Effect.sync(() => {
        const id = `${executionId}\u0000${key}`
        const existing = entries.get(id)
        if (existing !== undefined) return existing
        entries.set(id, value)
        return value
      }),
    entries: (executionId) =>
      Effect.sync(() =>
        [...entries]
          .filter(([id]) => id.startsWith(`${executionId}\u0000`))
          .map(([id, value]) => ({ key: id.slice(executionId.length + 1), value }))
      )
  }
}

/** A store in memory: for tests and one-off runs. */
export const makeMemory = (): Effect.Effect<Service> =>
  Effect.sync(() => {
    const threads = new Map<string, Thread>()
    const runs = new Map<string, RunView>()
    const log = new Map<string, Array<Event>>()
    const claims = new Map<string, Claim>()
    const journal = memoryJournal()
    /** Every event, in the order appended: the feed's cursor is the index + 1. */
    const all: Array<Event> = []
    const takeClaim = (runId: string, request: ClaimRequest): ClaimResult => {
      const now = Date.now()
      const current = claims.get(runId)
      if (!mayClaim(current, request, now)) return { claimed: false, holder: current as Claim }
      claims.set(runId, {
        runId,
        owner: request.owner,
        expiresAt: now + request.ttlMs,
        claimedAt:
          current !== undefined && current.owner === request.owner
            ? current.claimedAt
            : new Date(now).toISOString()
      })
      return { claimed: true }
    }
    const lock = Semaphore.makeUnsafe(1)
    const threadRuns = (threadId: string) => [...runs.values()].filter((run) => run.threadId === threadId)
    const getThread = (threadId: string) =>
      Effect.suspend(() => {
        const thread = threads.get(threadId)
        return thread === undefined ? Effect.fail(new ThreadNotFound({ threadId })) : Effect.succeed(thread)
      })
    const service: Service = {
      location: "memory",
      createThread: (options) =>
        Effect.sync(() => {
          const thread = newThread(options)
          threads.set(thread.id, thread)
          return thread
        }),
      getThread,
      listThreads: () => Effect.sync(() => [...threads.values()]),
      closeThread: (threadId) =>
        lock.withPermit(
          Effect.map(getThread(threadId), (thread) => {
            const closed: Thread = { ...thread, status: "closed" }
            threads.set(threadId, closed)
            return closed
          })
        ),
      setQueuePolicy: (threadId, queuePolicy) =>
        lock.withPermit(
          Effect.map(getThread(threadId), (thread) => {
            const updated: Thread = { ...thread, queuePolicy }
            threads.set(threadId, updated)
            return updated
          })
        ),
      createRun: (options) =>
        lock.withPermit(
          Effect.gen(function* () {
            const thread = yield* getThread(options.threadId)
            const refused = createRefusal(thread, threadRuns(thread.id), options)
            if (refused !== undefined) return yield* Effect.fail(refused)
            const runId = options.runId ?? newRunId()
            if (runs.has(runId))
              return yield* Effect.fail(
                new RunsStoreError({ location: "memory", detail: `run ${runId} exists` })
              )
            const queued = queuedRun(runId, thread, options)
            if (queued instanceof InvalidInput) return yield* Effect.fail(queued)
            const { events, view } = queued
            runs.set(runId, view)
            log.set(runId, [...events])
            all.push(...events)
            if (options.claim !== undefined) takeClaim(runId, options.claim)
            return view
          })
        ),
      append: (runId, batch, appendOptions) =>
        lock.withPermit(
          Effect.gen(function* () {
            const run = runs.get(runId)
            if (run === undefined) return yield* Effect.fail(new RunNotFound({ runId }))
            const next = appended(run, batch, threadRuns(run.threadId))
            if (next instanceof IllegalTransition) return yield* Effect.fail(next)
            runs.set(runId, next.view)
            log.get(runId)?.push(...next.events)
            all.push(...next.events)
            if (appendOptions?.execution !== undefined) yield* journal.start(appendOptions.execution)
            const entry = appendOptions?.journal
            if (entry !== undefined) yield* journal.record(entry.executionId, entry.key, entry.value)
            const ended = appendOptions?.result
            if (ended !== undefined) yield* journal.complete(ended.executionId, ended.result)
            return next.view
          })
        ),
      getRun: (runId) =>
        Effect.suspend(() => {
          const run = runs.get(runId)
          return run === undefined ? Effect.fail(new RunNotFound({ runId })) : Effect.succeed(run)
        }),
      listRuns: (filter) =>
        Effect.sync(() =>
          [...runs.values()].filter(
            (run) =>
              (filter?.threadId === undefined || run.threadId === filter.threadId) &&
              (filter?.active !== true || isActive(run.status))
          )
        ),
      events: (runId) => Effect.sync(() => [...(log.get(runId) ?? [])]),
      feed: (cursor, limit = 500) =>
        Effect.sync(() =>
          all
            .slice(Math.max(0, cursor), Math.max(0, cursor) + limit)
            .map((event, index) => ({ cursor: Math.max(0, cursor) + index + 1, event }))
        ),
      rebuild: () =>
        lock.withPermit(
          Effect.sync(() => {
            for (const [runId, events] of log) {
              const view = applyAll(undefined, events)
              if (!(view instanceof IllegalTransition)) runs.set(runId, view)
            }
            return log.size
          })
        ),
      claim: (runId, request) => Effect.sync(() => takeClaim(runId, request)),
      release: (runId, owner) =>
        Effect.sync(() => {
          if (claims.get(runId)?.owner === owner) claims.delete(runId)
        }),
      claims: () => Effect.sync(() => [...claims.values()]),
      journal
    }
    return service
  })
