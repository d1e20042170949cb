/**
 * RunsJson: the bodies of the runs API as Schemas, sent and taken in the runs'
 * one JSON style (snake_case keys, `Shown`).
 *
 * The models keep TypeScript's camelCase (`runId`, `needsApproval`); every
 * schema here is a struct of the model's own fields whose keys are renamed on
 * the wire by `Shown.snakeCase`, so the rule is written once and a request is
 * decoded back into the model's names. Each schema is checked against the
 * model it carries (`same`): a field added to a model and not here fails to
 * compile, rather than being dropped from the API without a word. The
 * OpenAPI document is generated from these schemas.
 */
import { type Executor, Run, type RunFiles, type Shown, Shown as ShownModule } from "@noema/runs"
import { Schema } from "effect"

// ---------------------------------------------------------------------------
// The style
// ---------------------------------------------------------------------------

/** `runFileSha256` -> `run_file_sha256`, as a type (`Shown.snakeCase` is the function). */
type SnakeCase<Key extends string> = Key extends `${infer Head}${infer Tail}`
  ? `${Head extends Lowercase<Head> ? Head : `_${Lowercase<Head>}`}${SnakeCase<Tail>}`
  : Key

/** A struct of `fields` whose keys are snake_case on the wire (`Shown.snakeCase`). */
export const snake = <const Fields extends Schema.Struct.Fields>(fields: Fields) => {
  const mapping = Object.fromEntries(Object.keys(fields).map((key) => [key, ShownModule.snakeCase(key)])) as {
    readonly [Key in keyof Fields]: Key extends string ? SnakeCase<Key> : Key
  }
  return Schema.Struct(fields).pipe(Schema.encodeKeys(mapping))
}

type SnakeStruct<Fields extends Schema.Struct.Fields> = ReturnType<typeof snake<Fields>>

/** A snake_case struct (`snake`) of each of `all`, as a tuple (a union's members). */
const snakeEach = <const All extends ReadonlyArray<Schema.Struct.Fields>>(all: All) =>
  all.map((fields) => snake(fields)) as unknown as { readonly [I in keyof All]: SnakeStruct<All[I]> }

/** Compiles only when `A` and `B` are the same type: a schema and the model it carries. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
const same = <A, B>(_proof: Same<A, B>) => undefined

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const optional = Schema.optionalKey

// ---------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------

export const QueuePolicy = Schema.Literals(["reject", "enqueue"]).annotate({
  description: "What a request in a thread with an active run does: reject refuses it, enqueue queues it"
})

const runStatus = ["queued", "running", "waiting_approval", "completed", "failed", "canceled"] as const

/** A run's status as shown: `interrupted` when no live process carries a running run on. */
export const ShownRunStatus = Schema.Literals([...runStatus, "interrupted"])

export const Thread = snake({
  id: Schema.String,
  title: Schema.String,
  status: Schema.Literals(["open", "closed"]),
  queuePolicy: QueuePolicy,
  createdAt: Schema.String,
  activeRun: Schema.NullOr(snake({ runId: Schema.String, status: ShownRunStatus })).annotate({
    description: "The run holding the thread (running or waiting for approval), or null"
  }),
  queuedRuns: Count
}).annotate({ identifier: "Thread" })
same<typeof Thread.Type, Shown.ShownThread>(true)

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

export const StageError = snake({
  error_code: Schema.String,
  error_message: Schema.String,
  retryable: Schema.Boolean
}).annotate({ identifier: "StageError" })
same<typeof StageError.Type, Run.StageError>(true)

export const ArtifactEntry = snake({
  path: Schema.String,
  kind: Schema.String,
  sha256: Schema.String,
  size: Count
}).annotate({ identifier: "ArtifactEntry" })
same<typeof ArtifactEntry.Type, Run.ArtifactEntry>(true)

const Attempt = snake({
  attempt: Schema.Int,
  status: Schema.Literals(["running", "completed", "failed", "canceled", "interrupted"]),
  startedAt: Schema.String,
  startedEventId: optional(Schema.String),
  finishedAt: optional(Schema.String),
  error: optional(StageError),
  artifacts: Schema.Array(ArtifactEntry)
})

const Stage = snake({
  key: Schema.String,
  position: Schema.Int,
  needsApproval: Schema.Boolean,
  approved: Schema.Boolean,
  status: Schema.Literals([
    "pending",
    "waiting_approval",
    "running",
    "completed",
    "failed",
    "canceled",
    "interrupted"
  ]),
  attempts: Schema.Array(Attempt)
})

/** The model a run was started with (run.json's `model`): its server without credentials. */
export const ModelIdentity = Run.ModelIdentity.annotate({ identifier: "ModelIdentity" })

/** A run that waits for its model: the one it needs, the one the last process had, since when. */
const WaitingForModel = snake({ model: ModelIdentity, available: ModelIdentity, since: Schema.String })

/** A run as shown (also what an action answers: a run just changed is carried on, never interrupted). */
export const ShownRun = snake({
  runId: Schema.String,
  threadId: Schema.String,
  request: Schema.String,
  pipeline: Schema.String,
  status: ShownRunStatus,
  createdAt: Schema.String,
  startedAt: optional(Schema.String),
  finishedAt: optional(Schema.String),
  error: optional(StageError),
  stages: Schema.Array(Stage),
  runFileSha256: optional(Schema.String),
  waitingForModel: optional(WaitingForModel),
  seq: Schema.Int
}).annotate({ identifier: "Run" })
same<typeof ShownRun.Type, Shown.ShownRun>(true)

// ---------------------------------------------------------------------------
// The timeline
// ---------------------------------------------------------------------------

const PlannedStage = snake({ key: Schema.String, position: Schema.Int, needsApproval: Schema.Boolean })

const stageError = { error_code: Schema.String, error_message: Schema.String, retryable: Schema.Boolean }
const at = { position: Schema.Int, attempt: Schema.Int }

/** The fields of each kind of event, by its `type`. */
const eventFields = [
  {
    type: Schema.Literal("RunQueued"),
    request: Schema.String,
    pipeline: Schema.String,
    stages: Schema.Array(PlannedStage),
    run_file_sha256: optional(Schema.String)
  },
  { type: Schema.Literal("RunStarted") },
  { type: Schema.Literal("ApprovalRequested"), position: Schema.Int },
  { type: Schema.Literal("ApprovalGranted"), position: Schema.Int, by: optional(Schema.String) },
  { type: Schema.Literal("ApprovalRejected"), position: Schema.Int, reason: Schema.String },
  { type: Schema.Literal("StageStarted"), ...at },
  {
    type: Schema.Literal("ArtifactPublished"),
    ...at,
    path: Schema.String,
    kind: Schema.String,
    sha256: Schema.String,
    size: Count
  },
  { type: Schema.Literal("StageCompleted"), ...at },
  { type: Schema.Literal("StageFailed"), ...at, ...stageError },
  { type: Schema.Literal("RunCompleted") },
  { type: Schema.Literal("RunFailed"), ...stageError },
  { type: Schema.Literal("RunCanceled"), reason: Schema.String },
  { type: Schema.Literal("ModelUnavailable"), model: ModelIdentity, available: ModelIdentity }
] as const

export const EventData = Schema.Union(snakeEach(eventFields)).annotate({
  identifier: "EventData"
})
same<typeof EventData.Type, Run.EventData>(true)

const envelope = {
  event_id: Schema.String,
  run_id: Schema.String,
  thread_id: Schema.String,
  seq: Schema.Int,
  at: Schema.String
}

export const Event = snake({ ...envelope, data: EventData }).annotate({ identifier: "Event" })
same<typeof Event.Type, Run.Event>(true)

export const Workflow = snake({
  executionId: Schema.String,
  completed: Schema.Boolean,
  interrupted: Schema.Boolean,
  activities: Schema.Array(Schema.String),
  deferreds: Schema.Array(Schema.String)
}).annotate({ identifier: "Workflow" })
same<typeof Workflow.Type, Executor.WorkflowView>(true)

export const RunDetail = snake({
  run: ShownRun,
  events: Schema.Array(Event),
  workflow: Schema.NullOr(Workflow)
}).annotate({ identifier: "RunDetail" })

export const VerifyReport = snake({
  runId: Schema.String,
  ok: Schema.Boolean,
  runFile: Schema.Literals(["matches", "changed", "not recorded"]),
  checked: Schema.Array(Schema.String),
  artifacts: Count,
  problems: Schema.Array(snake({ stage: Schema.String, path: Schema.String, problem: Schema.String }))
}).annotate({ identifier: "VerifyReport" })
same<typeof VerifyReport.Type, RunFiles.VerifyReport>(true)

// ---------------------------------------------------------------------------
// The live feed
// ---------------------------------------------------------------------------

/** One event of the feed, as a frame carries it: its cursor, its envelope and its data, side by side. */
const frameEnvelope = { cursor: Schema.Int, ...envelope }

/** Each of `all` with the frame's envelope before its own fields. */
const framed = <const All extends ReadonlyArray<Schema.Struct.Fields>>(all: All) =>
  all.map((fields) => ({ ...frameEnvelope, ...fields })) as unknown as {
    readonly [I in keyof All]: typeof frameEnvelope & All[I]
  }

export const FeedFrame = Schema.Union(snakeEach(framed(eventFields))).annotate({ identifier: "FeedFrame" })
export type FeedFrame = typeof FeedFrame.Type
same<FeedFrame, { readonly cursor: number } & Omit<Run.Event, "data"> & Run.EventData>(true)

/** The frame of a feed item (see `FeedFrame`). */
export const frameOf = (cursor: number, event: Run.Event): FeedFrame =>
  ({
    cursor,
    event_id: event.event_id,
    run_id: event.run_id,
    thread_id: event.thread_id,
    seq: event.seq,
    at: event.at,
    ...event.data
  }) as FeedFrame
