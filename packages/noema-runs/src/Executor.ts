/**
 * Executor: runs a run's stages in order, one agent per stage.
 *
 * Each step is small and idempotent in what it decides from the store: the
 * executor reads the run's view, finds the next stage, and does one of three
 * things: asks for approval (the run waits), runs one attempt of the stage
 * (`runAttempt`: files first, manifest last, then the event), or completes the
 * run. The run executes as an effect/workflow workflow (`RunWorkflow`) whose
 * steps are those activities: they take plain values (run id, stage position,
 * attempt) and leave everything they did in the files and the timeline, and
 * the engine's journal (`StoreWorkflowEngine`) keeps each one's result, so a
 * later process replays the run without doing a finished step again.
 *
 * What a stage runs is what the run was created (and approved) with: `create`
 * records run.json's sha256 in the run's `RunQueued`, and `approve`, `resume`
 * and the workflow read the pipeline back only through `RunFiles.readRunFile`,
 * which refuses a run.json changed since (`RunFileChanged`).
 *
 * A run is carried on with the model it was started with (run.json's `model`), resolved
 * among the models the executor has (`chooseModel`); where it has none of them, the run
 * waits (`ModelUnavailable`, recorded in the timeline) rather than running on another.
 *
 * An attempt: `StageStarted` (the attempt's number comes from the view), the
 * stage directory (an earlier attempt's is kept aside), `input.json` (what the
 * stage is given of the earlier stages: their answers, their artifacts whole or
 * listed; see `internal/HandOff.ts`), the agent (a ToolAgent with the stage's
 * instructions, `write_artifact`, `read_artifact` and the tools the pipeline
 * names), `output.json`, `manifest.json` last, then, in one commit, the artifacts
 * published and `StageCompleted`, or on failure `StageFailed` + `RunFailed` with `error_code`, `error_message`, `retryable`
 * (`internal/ErrorCode.ts`), which the failed attempt's manifest carries too. A next stage that
 * may start at once (no approval to ask for) gets its `StageStarted` in that same commit, and its
 * step carries that attempt on (`Begun`): one commit a stage, not two.
 *
 * The tools a pipeline names must be offered (`Pipeline.toolNames` of `tools`): `create`
 * refuses a pipeline naming another before anything is written, and so does `pipelineOf`
 * before a run is carried on by a process that does not offer them.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { ToolAgent } from "@noema/agents"
import { type ChatModel, ConversationContext, Message, TokenCounter, type Tool } from "@noema/core"
import { Cause, Context, Effect, Exit, Option, Schema, Scope } from "effect"
import { Activity, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import * as ErrorCode from "./internal/ErrorCode.js"
import * as HandOff from "./internal/HandOff.js"
import * as PipelineModule from "./Pipeline.js"
import { type Pipeline, PipelineError } from "./Pipeline.js"
import {
  currentStage,
  describeModel,
  type EventData,
  IllegalTransition,
  InvalidInput,
  ModelIdentity,
  modelIdentity,
  type NotRetryable,
  newRunId,
  RunNotFound,
  type RunView,
  retryRefusal,
  sameModel
} from "./Run.js"
import * as RunFiles from "./RunFiles.js"
import {
  type AppendError,
  type AppendOptions,
  type ClaimRequest,
  type CreateRunError,
  type ExecutionResult,
  type ExecutionStart,
  RunsStoreError,
  type Service as Store,
  type WorkflowJournal
} from "./RunsStore.js"
import * as StoreWorkflowEngine from "./StoreWorkflowEngine.js"

export interface Options {
  readonly store: Store
  readonly workspace: string
  readonly model: ChatModel.Service
  /**
   * What run.json and each attempt's manifest record of `model`: its name, server and API,
   * never a credential (`Run.modelIdentity`). Default: its provider and name.
   */
  readonly modelIdentity?: ModelIdentity
  /** Other models this process has (the CLI's built-in offline model): a run started on one is carried on with it. */
  readonly otherModels?: ReadonlyArray<AvailableModel>
  /**
   * `recorded` (the default): a run is carried on with the model it was started with, `model`
   * or one of `otherModels`; where this process has neither, the run waits
   * (`ModelUnavailable`). `this`: with `model`, whatever the run was started with (`noema runs
   * resume --model`); the attempts' manifests say so. A run made before models were recorded
   * runs on `model`.
   */
  readonly carryOnWith?: "recorded" | "this"
  /** Tools stages may name in the pipeline (`write_artifact` and `read_artifact` are always there). */
  readonly tools?: ReadonlyArray<Tool.Any>
  /** Told about every event appended, for live progress. */
  readonly onEvent?: (run: RunView, event: EventData) => Effect.Effect<void>
  readonly maxArtifactBytes?: number
  /** Model calls per stage attempt. Default 10. */
  readonly maxSteps?: number
  /**
   * Tokens the earlier stages' artifacts may take, together, in a stage's input; the others
   * are listed for `read_artifact`. Default 8,000 (`defaultArtifactBudget`).
   */
  readonly artifactBudget?: number
  /** Counts those tokens. Default core's `TokenCounter.estimate`. */
  readonly counter?: TokenCounter.TokenCounter
  /** The most characters `read_artifact` returns (it says where it cut). Default 50,000. */
  readonly maxReadCharacters?: number
  /**
   * The workflow engine the runs execute on. Default: `StoreWorkflowEngine` over the store's
   * journal, in this process (`storeEngine`); `ClusterEngine.make` runs them on effect/cluster.
   */
  readonly engine?: Engine
}

/**
 * What the executor needs of a workflow engine: the same `RunWorkflow` runs on either, only
 * where an execution runs, and what holds it there, differ.
 */
export interface Engine {
  readonly service: WorkflowEngine.WorkflowEngine["Service"]
  /** Executes the workflow (or joins its execution) and waits for its run to end: `Complete` or `Suspended`. */
  readonly run: (
    workflow: typeof RunWorkflow,
    options: { readonly executionId: string; readonly payload: { readonly runId: string } }
  ) => Effect.Effect<Workflow.Result<{ readonly status: string }, never>>
  /**
   * Gives the execution to whoever runs executions without waiting for it: nothing for the
   * store engine (a worker's claim takes the run), a message to its shard's runner on the cluster.
   */
  readonly handOver: (options: {
    readonly executionId: string
    readonly payload: { readonly runId: string }
    /** The run was started just now: its execution is new, with nothing suspended to resume. */
    readonly fresh?: boolean
  }) => Effect.Effect<void>
  /** What holds the run while the workflow's body runs here (the cluster's runner takes its lease). */
  readonly carry: <A, E, R>(runId: string, body: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /**
   * Where an execution runs. `caller` (the store engine): in the process that asks, under its
   * claim; `resume` settles an attempt a stopped process left running, and an execution
   * interrupted while suspended is replayed here to close it. `owner` (the cluster): on the
   * runner owning its shard, where it moves without a `resume` when a runner dies, so the
   * body settles such an attempt, and the owner closes an interrupted execution itself.
   */
  readonly placement: "caller" | "owner"
  /**
   * Tells `listener` each time a run's body ends in this process (finished, waiting, or
   * stopped), until the scope closes. On an engine that places executions itself, a worker
   * hands runs over without waiting for them, so this is how it learns that a thread here may
   * be free for its next run.
   */
  readonly onBodyEnded: (listener: (runId: string) => void) => Effect.Effect<void, never, Scope.Scope>
  /** What the engine's journal holds of an execution (`runs show`); none before it started. */
  readonly workflowOf: (executionId: string) => Effect.Effect<WorkflowView | undefined, RunsStoreError>
  /**
   * An engine whose journal is the runs store's: the record of a run's new execution, which the
   * store writes in the commit of the run's start (`RunsStore.AppendOptions.execution`).
   */
  readonly executionStart?: (
    executionId: string,
    payload: { readonly runId: string }
  ) => Effect.Effect<ExecutionStart>
}

/** A stage attempt whose `StageStarted` the step before it committed with its own events. */
interface Begun {
  readonly position: number
  readonly attempt: number
}

/** The default engine: `StoreWorkflowEngine` over the store's journal, in this process. */
export const storeEngine = (
  engine: StoreWorkflowEngine.StoreWorkflowEngine,
  journal: WorkflowJournal
): Engine => ({
  service: engine,
  run: (workflow, options) => engine.run(workflow, options),
  executionStart: (executionId, payload) =>
    StoreWorkflowEngine.executionStart(RunWorkflow, executionId, payload),
  handOver: () => Effect.void,
  carry: (_runId, body) => body,
  placement: "caller",
  // A worker carrying a run here is told by the run's own fiber ending.
  onBodyEnded: () => Effect.void,
  workflowOf: (executionId) =>
    Effect.gen(function* () {
      const record = yield* journal.execution(executionId)
      if (record === undefined) return undefined
      const entries = yield* journal.entries(executionId)
      const named = (prefix: string) =>
        entries.filter((entry) => entry.key.startsWith(prefix)).map((entry) => entry.key.slice(prefix.length))
      return {
        executionId,
        completed: record.result !== undefined,
        interrupted: record.interrupted,
        // `activity/<name>/<attempt>`: the name without effect's attempt counter.
        activities: named("activity/").map((key) => key.replace(/\/\d+$/, "")),
        deferreds: named("deferred/")
      }
    })
})

/** Tokens of earlier artifacts given whole to a stage when `artifactBudget` is not set. */
export const defaultArtifactBudget = HandOff.defaultBudget

/** A model this process can carry runs on with, and what runs record of it. */
export interface AvailableModel {
  readonly identity: ModelIdentity
  readonly model: ChatModel.Service
}

/**
 * The run was started with a model this process does not have. Nothing of it ran and
 * nothing failed: it waits for a process that has the model (or one told to use another).
 */
export class ModelUnavailable extends Schema.TaggedError<ModelUnavailable>()("ModelUnavailable", {
  runId: Schema.String,
  model: ModelIdentity,
  available: ModelIdentity
}) {
  override get message() {
    return `run ${this.runId} waits for the model it was started with, ${describeModel(this.model)}; this process has ${describeModel(this.available)}`
  }
}

/**
 * The model to carry a run on with, given what its run.json recorded: the recorded one among
 * those available (`this`: the first, whatever was recorded); undefined when none is it.
 */
export const chooseModel = (
  recorded: ModelIdentity | undefined,
  available: readonly [AvailableModel, ...ReadonlyArray<AvailableModel>],
  carryOnWith: "recorded" | "this" = "recorded"
): AvailableModel | undefined =>
  carryOnWith === "this" || recorded === undefined
    ? available[0]
    : available.find((candidate) => sameModel(candidate.identity, recorded))

export type ExecuteError = AppendError | RunFiles.FileError | RunFiles.RunFileChanged | ModelUnavailable

/** Why `execute` returned: the run is done (completed/failed/canceled), waits for approval, or waits in its thread's queue. */
export type Outcome =
  | { readonly _tag: "Finished"; readonly run: RunView }
  | { readonly _tag: "WaitingApproval"; readonly run: RunView; readonly position: number }
  | { readonly _tag: "Queued"; readonly run: RunView; readonly reason: string }

/** What `submit` did: handed the running run's execution over, or why not (`Outcome`). */
export type Submitted = Outcome | { readonly _tag: "HandedOver"; readonly run: RunView }

export interface Executor {
  /**
   * Checks the request, creates the run (refused before anything is written) and writes
   * run.json. With `claim`, the run is claimed as it is created (no worker takes it first).
   */
  readonly create: (options: {
    readonly threadId: string
    readonly request: string
    readonly pipeline: Pipeline
    readonly claim?: ClaimRequest
  }) => Effect.Effect<RunView, CreateRunError | RunFiles.FileError | PipelineModule.PipelineError>
  /**
   * The pipeline the run was created with (run.json keeps it), refused with `RunFileChanged`
   * when run.json is not the one the run's timeline recorded.
   */
  readonly pipelineOf: (runId: string) => Effect.Effect<Pipeline, ExecuteError | PipelineError>
  /** Carries the run on from where its view says it is, until it finishes or must wait. */
  readonly execute: (runId: string, pipeline: Pipeline) => Effect.Effect<Outcome, ExecuteError>
  /**
   * Carries on a run whose executor stopped (a process killed in the middle of a stage): the
   * attempt it left running is recorded failed (`interrupted`, retryable; its directory, which
   * has no manifest, is kept aside as an earlier attempt), then the run goes on as `execute`:
   * completed stages are not run again, the interrupted stage gets a new attempt. Only for a run
   * no live process is executing (see `RunLease`). The pipeline is the run's own (`pipelineOf`);
   * a run whose process stopped before its run.json was written (nothing of it ran) is
   * canceled, saying so; a run whose run.json was changed since is refused (`RunFileChanged`)
   * before anything is recorded. A run started on a model this process does not have is not
   * started or run: it waits (`ModelUnavailable`, recorded in its timeline as such).
   */
  readonly resume: (runId: string) => Effect.Effect<Outcome, ExecuteError | PipelineError>
  /** Records the approval; refused (`RunFileChanged`) when run.json is not the one the run was created with. */
  readonly approve: (runId: string, by?: string) => Effect.Effect<RunView, ExecuteError>
  readonly reject: (runId: string, reason: string) => Effect.Effect<RunView, AppendError>
  /**
   * A failed run starts again at its failed stage, with a new attempt. A failure that is not
   * retryable (`retryable: false`) is refused with `NotRetryable`, saying why, unless `force`.
   */
  readonly retry: (
    runId: string,
    options?: { readonly force?: boolean }
  ) => Effect.Effect<RunView, AppendError | NotRetryable>
  /** Records the cancel, then interrupts the run's workflow execution (see `interrupt`). */
  readonly cancel: (runId: string, reason?: string) => Effect.Effect<RunView, AppendError>
  /**
   * Interrupts the run's workflow execution: the stage under way stops at once if this
   * process runs it; otherwise the interrupt is recorded for the execution's next replay.
   */
  readonly interrupt: (runId: string) => Effect.Effect<void>
  /**
   * Starts the run if it is queued and its thread is free (else `Queued`), then hands its
   * execution to the engine without waiting (`Engine.handOver`): on the cluster, the runner
   * owning its shard carries it on. A run that is running is handed over again (idempotent:
   * the same execution), which replays it if it was suspended.
   */
  readonly submit: (runId: string) => Effect.Effect<Submitted, AppendError>
  /** The effect/workflow engine the runs execute on (default: the store's journal, here). */
  readonly engine: Engine
  /** What the journal holds of the run's current workflow execution; none before it started. */
  readonly workflowOf: (runId: string) => Effect.Effect<WorkflowView | undefined, RunsStoreError>
}

/** A run's current workflow execution, as its journal records it. */
export interface WorkflowView {
  /** `<run_id>/<n>`: the run's n-th start. */
  readonly executionId: string
  /** It has a result: the run's workflow ended. Otherwise it is under way, or suspended. */
  readonly completed: boolean
  readonly interrupted: boolean
  /** The activities whose result is recorded, in order (`stage/1/attempt/1`, `complete`, ...). */
  readonly activities: ReadonlyArray<string>
  /** The durable deferreds completed (`approval/2`, ...). */
  readonly deferreds: ReadonlyArray<string>
}

/**
 * A run as an effect/workflow workflow: one execution per start of the run (the executor
 * names them `<run_id>/<n>` and runs them with `StoreWorkflowEngine.run`, so the
 * payload's idempotency key is not what identifies them), its steps activities, its
 * approvals durable deferreds. A failure of the
 * store or the disk suspends it (`SuspendOnFailure`) rather than completing it, so it is
 * carried on once the cause is gone.
 */
export const RunWorkflow = Workflow.make("noema/run", {
  payload: { runId: Schema.String },
  success: Schema.Struct({ status: Schema.String }),
  idempotencyKey: ({ runId }) => runId
}).annotate(Workflow.SuspendOnFailure, true)

/**
 * The id of the run's current workflow execution, `<run_id>/<n>`: one per start, so a retried
 * run (started again after it failed) is a new execution and the earlier one keeps its result.
 */
export const currentExecution = (store: Store, runId: string): Effect.Effect<string, RunsStoreError> =>
  Effect.map(store.events(runId), (events) =>
    executionOfStart(runId, events.filter((event) => event.data.type === "RunStarted").length)
  )

/**
 * The journal's record of a run's workflow result (`{ status }`): its text is the same for every
 * run ending so, encoded once per status, not at each run's end.
 */
const runResults = new Map<string, string>()
const runResult = (executionId: string, status: string): Effect.Effect<ExecutionResult> => {
  const known = runResults.get(status)
  return known !== undefined
    ? Effect.succeed({ executionId, result: known })
    : Effect.tap(StoreWorkflowEngine.executionCompleted(RunWorkflow, executionId, { status }), ({ result }) =>
        Effect.sync(() => runResults.set(status, result))
      )
}

/** The execution of the run's `start`-th start (1, 2, ...). */
const executionOfStart = (runId: string, start: number) => `${runId}/${start}`

/** What the step under way does: its activity (`stepActivity`) runs it. */
class StepWork extends Context.Service<StepWork, Effect.Effect<void>>()("@noema/runs/Executor/StepWork") {}

/**
 * The activity of a run's step named `name` (`stage/2/attempt/1`, ...), made once per name:
 * effect's `Activity.make` builds and compiles its schemas each time, and a step is the same
 * activity in every run, only its work (`StepWork`) differs.
 */
const stepActivities = new Map<string, Activity.Activity<Schema.Void, Schema.Never, StepWork>>()
const stepActivity = (name: string) => {
  let activity = stepActivities.get(name)
  if (activity === undefined) {
    activity = Activity.make({ name, execute: Effect.flatMap(Effect.service(StepWork), (work) => work) })
    stepActivities.set(name, activity)
  }
  return activity
}

/** The durable deferred a run's workflow waits on before a gated stage. */
export const approvalGate = (position: number) =>
  DurableDeferred.make(`approval/${position}`, { success: Schema.Struct({ approved: Schema.Boolean }) })

/** The executor's own errors, told apart from defects when a suspended workflow reports its cause. */
const isExecuteError = Schema.is(
  Schema.Union([
    RunNotFound,
    IllegalTransition,
    RunsStoreError,
    RunFiles.FileError,
    RunFiles.RunFileChanged,
    PipelineError,
    ModelUnavailable
  ])
)

/** The tools a stage has besides the ones its pipeline names. */
const artifactTools = (
  writer: RunFiles.StageWriter,
  read: Parameters<typeof RunFiles.readArtifactTool>[0]
): Array<Tool.Any> => [
  RunFiles.writeArtifactTool(writer) as unknown as Tool.Any,
  RunFiles.readArtifactTool(read) as unknown as Tool.Any
]

export const make = (options: Options): Executor => {
  const { store, workspace } = options
  const given = options.modelIdentity
  const models: readonly [AvailableModel, ...ReadonlyArray<AvailableModel>] = [
    {
      // Through `modelIdentity` whatever it was given: run.json never gets a credential.
      identity: modelIdentity(
        given === undefined
          ? { provider: options.model.provider, name: options.model.model }
          : { provider: given.provider, name: given.name, baseUrl: given.base_url, api: given.api }
      ),
      model: options.model
    },
    ...(options.otherModels ?? [])
  ]
  /** The tool names a pipeline may use here. */
  const offered = PipelineModule.toolNames(options.tools ?? [])
  const notify = options.onEvent
  const append = (runId: string, events: ReadonlyArray<EventData>, appendOptions?: AppendOptions) =>
    notify === undefined
      ? store.append(runId, events, appendOptions)
      : Effect.tap(store.append(runId, events, appendOptions), (run) =>
          Effect.forEach(events, (event) => notify(run, event), { discard: true })
        )
  /**
   * `append` as the last act of the step under way: on the store's own engine, the step's
   * journal record goes in the same commit (`StoreWorkflowEngine.CompletedActivity`), and so
   * does the execution's result when the batch ends the run (the body returns its status next).
   */
  const appendLast = (runId: string, events: ReadonlyArray<EventData>) =>
    Effect.gen(function* () {
      const completed = Option.getOrUndefined(
        yield* Effect.serviceOption(StoreWorkflowEngine.CompletedActivity)
      )
      const ends = events.some((event) => event.type === "RunCompleted")
        ? "completed"
        : events.some((event) => event.type === "RunFailed")
          ? "failed"
          : undefined
      const result =
        completed === undefined || ends === undefined
          ? undefined
          : yield* runResult(completed.entry.executionId, ends)
      const appended = yield* append(runId, events, { journal: completed?.entry, result })
      completed?.recorded({ result: result !== undefined })
      return appended
    })

  const handOff: HandOff.Options = {
    workspace,
    budget: options.artifactBudget ?? HandOff.defaultBudget,
    counter: options.counter ?? TokenCounter.estimate
  }
  const maxReadCharacters = options.maxReadCharacters ?? HandOff.defaultMaxReadCharacters

  /**
   * The check of a pipeline a run executes, made once per pipeline given (each of its stages'
   * attempts is told its outcome), not once per stage.
   */
  const checked = new WeakMap<Pipeline, Exit.Exit<Pipeline, PipelineError>>()
  const checkPipeline = (pipeline: Pipeline): Effect.Effect<Pipeline, PipelineError> =>
    Effect.suspend(() => {
      const known = checked.get(pipeline)
      if (known !== undefined) return known
      return Effect.tap(
        Effect.exit(PipelineModule.decode(pipeline, "the run's pipeline", { tools: offered })),
        (exit) => Effect.sync(() => checked.set(pipeline, exit))
      ).pipe(Effect.flatten)
    })

  /**
   * The `event_id` of the attempt's `StageStarted`, from the timeline: for an attempt started
   * under a view stored before the view kept it (`AttemptView.startedEventId`).
   */
  const startedEventOf = (runId: string, position: number, attempt: number) =>
    Effect.map(
      store.events(runId),
      (events) =>
        events.findLast(
          (event) =>
            event.data.type === "StageStarted" &&
            event.data.position === position &&
            event.data.attempt === attempt
        )?.event_id ?? ""
    )

  /** Whether the stage at `position` is the only one of `run` not completed: its completion completes the run. */
  const isLastToComplete = (run: RunView, position: number) =>
    run.stages.every((stage) => stage.position === position || stage.status === "completed")

  /**
   * The attempt that may start in the commit of the completion of stage `position`: the next
   * stage's, unless that completion completes the run or the next stage waits for approval.
   */
  const startedWith = (run: RunView, position: number): Begun | undefined => {
    if (isLastToComplete(run, position)) return undefined
    const next = run.stages.find((stage) => stage.status !== "completed" && stage.position !== position)
    if (next === undefined || next.status === "running" || (next.needsApproval && !next.approved))
      return undefined
    return { position: next.position, attempt: next.attempts.length + 1 }
  }

  /**
   * One attempt of the stage at `position`. `begun`: its `StageStarted` is already in the
   * timeline, committed with the previous stage's completion; `onBegun` is told of the next
   * stage's attempt when this one's completion starts it.
   */
  const runAttempt = (
    run: RunView,
    pipeline: Pipeline,
    position: number,
    chosen: AvailableModel,
    begun: Begun | undefined,
    onBegun: (next: Begun) => void
  ) =>
    Effect.gen(function* () {
      const stage = run.stages.find((s) => s.position === position)
      const definition = pipeline.stages[position - 1]
      if (stage === undefined || definition === undefined || definition.key !== stage.key)
        return yield* Effect.fail(
          new IllegalTransition({
            runId: run.runId,
            event: "StageStarted",
            detail: `the pipeline has no stage ${position} "${stage?.key}"`
          })
        )
      const attempt = begun?.attempt ?? stage.attempts.length + 1
      const started =
        begun === undefined ? yield* append(run.runId, [{ type: "StageStarted", position, attempt }]) : run
      const startedAttempt = started.stages[position - 1]?.attempts[attempt - 1]
      const startedEventId =
        startedAttempt?.startedEventId ?? (yield* startedEventOf(run.runId, position, attempt))
      const startedAt = startedAttempt?.startedAt ?? new Date().toISOString()
      const writer = yield* RunFiles.stageWriter({
        workspace,
        runId: run.runId,
        position,
        key: stage.key,
        attempt,
        ...(options.maxArtifactBytes !== undefined && { maxArtifactBytes: options.maxArtifactBytes })
      })
      const manifestFields = (status: "completed" | "failed") => ({
        stage_key: stage.key,
        stage_position: position,
        attempt,
        status,
        started_at: startedAt,
        finished_at: new Date().toISOString(),
        thread_id: run.threadId,
        run_id: run.runId,
        event_id: startedEventId,
        model: chosen.identity
      })
      // The attempt's artifacts are published with its outcome, in one commit after its manifest:
      // by then they and their names are on disk (the manifest fsyncs them), and one commit a stage is enough.
      const published = (): Array<EventData> =>
        writer.artifacts().map((entry) => ({ type: "ArtifactPublished", position, attempt, ...entry }))
      const work = Effect.gen(function* () {
        // `create` and `pipelineOf` check the tools, but `execute` may be given any pipeline.
        yield* checkPipeline(pipeline)
        const given = yield* HandOff.gather(handOff, started, position, definition.instructions)
        yield* writer.writeInput(given.input)
        const named = new Map(
          (options.tools ?? [])
            .filter((tool) => !PipelineModule.stageTools.includes(tool.name))
            .map((tool) => [tool.name, tool])
        )
        const tools = [
          ...artifactTools(writer, HandOff.reader(workspace, started, position, maxReadCharacters)),
          ...definition.tools.flatMap((name) => named.get(name) ?? [])
        ]
        const agent = ToolAgent.make({
          name: `stage-${stage.key}`,
          system: definition.instructions,
          tools,
          maxSteps: options.maxSteps ?? 10
        })
        const messages = yield* agent.execute(
          ConversationContext.of(Message.user(HandOff.prompt(given.input, given.texts))),
          chosen.model
        )
        const answer = messages
          .filter((m) => m.role === "assistant")
          .map(Message.text)
          .join("\n")
          .trim()
        // A stage always leaves a result: the answer itself when the agent wrote no artifact.
        const written = writer.artifacts().map((a) => a.path)
        if (written.length === 0) {
          const name = `${stage.key}.md`
          yield* writer.writeAnswer(name, `${answer}\n`, { text: answer, artifacts: [name] })
        } else yield* writer.writeOutput({ text: answer, artifacts: written })
        yield* writer.writeManifest(manifestFields("completed"))
        // Cut off (canceled, or its process stopping), the attempt still ends with its files on
        // their way landed: none is linked later into a directory a next attempt has set aside.
      }).pipe(Effect.onInterrupt(() => writer.settle))
      return yield* work.pipe(
        Effect.matchEffect({
          // The last stage's completion completes the run in the same commit, as a failure fails
          // it: one commit fewer a run (on the cluster, one persisted step fewer), and no moment
          // between the two for a cancel to land in.
          // The next stage starts in it too, when nothing has to happen first: a stage is one commit.
          onSuccess: () => {
            const next = startedWith(started, position)
            return appendLast(run.runId, [
              ...published(),
              { type: "StageCompleted", position, attempt },
              ...(isLastToComplete(started, position) ? [{ type: "RunCompleted" as const }] : []),
              ...(next === undefined ? [] : [{ type: "StageStarted" as const, ...next }])
            ]).pipe(Effect.tap(() => Effect.sync(() => next !== undefined && onBegun(next))))
          },
          onFailure: (error) => {
            const stageError = ErrorCode.fromFailure(error)
            return Effect.gen(function* () {
              yield* Effect.ignore(writer.writeOutput({ error: stageError }))
              // Without its manifest, nothing says the artifacts' names reached the disk: none is published.
              const manifest = yield* Effect.result(
                writer.writeManifest({ ...manifestFields("failed"), ...stageError })
              )
              return yield* appendLast(run.runId, [
                ...(manifest._tag === "Success" ? published() : []),
                { type: "StageFailed", position, attempt, ...stageError },
                { type: "RunFailed", ...stageError }
              ])
            })
          }
        })
      )
    })

  // ---------------------------------------------------------------------------
  // The run as an effect/workflow workflow
  // ---------------------------------------------------------------------------

  /** The pipelines of the runs executing here (the body falls back to run.json). */
  const pipelines = new Map<string, Pipeline>()
  /**
   * The runs `execute` started here, taken by the run's body: the view their start's commit
   * returned, and the first stage's attempt when it started in that commit (`firstAttempt`)
   * with the model it runs on.
   */
  const startedHere = new Map<
    string,
    {
      readonly view: RunView
      readonly first: { readonly begun: Begun; readonly model: AvailableModel } | undefined
    }
  >()

  /**
   * The first stage's attempt, when it may start in the commit of the run's start, as a stage's
   * next one does in the commit of its completion: the execution runs here (its body carries the
   * attempt on), the stage needs no approval, and this process has the model run.json names. A
   * run.json that cannot be read or names a model missing here starts the run alone, as before,
   * and its body tells why it cannot go on.
   */
  const firstAttempt = (run: RunView) =>
    Effect.gen(function* () {
      const stage = currentStage(run)
      if (engine.placement !== "caller" || stage === undefined || stage.needsApproval) return undefined
      const file = yield* Effect.option(RunFiles.readRunFile(workspace, run))
      const model = Option.isNone(file)
        ? undefined
        : chooseModel(file.value.model, models, options.carryOnWith)
      return model === undefined
        ? undefined
        : { begun: { position: stage.position, attempt: stage.attempts.length + 1 }, model }
    })

  /**
   * The model the run's stages run on (`chooseModel`, from its run.json). Where this process
   * has none, the wait is recorded (once while nothing else happens to the run) and the run
   * is left as it is.
   */
  const modelFor = (run: RunView) =>
    Effect.gen(function* () {
      const recorded = (yield* RunFiles.readRunFile(workspace, run)).model
      const chosen = chooseModel(recorded, models, options.carryOnWith)
      if (chosen !== undefined || recorded === undefined) return chosen ?? models[0]
      const wanted = recorded
      const available = models[0].identity
      const waiting = run.waitingForModel
      if (
        waiting === undefined ||
        !sameModel(waiting.model, wanted) ||
        !sameModel(waiting.available, available)
      )
        yield* append(run.runId, [{ type: "ModelUnavailable", model: wanted, available }])
      return yield* new ModelUnavailable({ runId: run.runId, model: wanted, available })
    })

  /** One step of the run: an activity, so a replay gets its result back instead of doing it again. */
  const step = (name: string, effect: Effect.Effect<unknown, ExecuteError>) =>
    // A failure of the store or the disk is a defect here: the engine records no result for it,
    // and the workflow (SuspendOnFailure) suspends, to be replayed from this step.
    Effect.provideService(stepActivity(name), StepWork, Effect.asVoid(Effect.orDie(effect)))

  /**
   * The workflow's body: each time the run's view is read, the next step is decided from it
   * and done as an activity. Approval is a durable deferred: the execution suspends (and the
   * process may stop) until `approve` or `reject` completes it.
   */
  const body = ({ runId }: { readonly runId: string }) =>
    Effect.gen(function* () {
      // Started here just now (`startedHere`): taken once, by this run.
      const atStart = startedHere.get(runId)
      startedHere.delete(runId)
      const first = atStart?.view ?? (yield* Effect.orDie(store.getRun(runId)))
      const pipeline = pipelines.get(runId) ?? (yield* Effect.orDie(pipelineOfRun(first)))
      /**
       * The view the next step is decided from, when there is one at hand: the first one (read,
       * or returned by the run's start just now), or the view the last step's own commit
       * returned, when that step ran here (a read just after that commit would tell no more:
       * what another process appends later is seen by the next commit, as it is when it lands
       * just after a read). Otherwise the view is read.
       */
      let known: RunView | undefined = first
      /** A step whose commit returns the run's view, which the next step is decided from (`known`). */
      const stepCommitting = (name: string, effect: Effect.Effect<RunView, ExecuteError>) => {
        let committed: RunView | undefined
        return Effect.andThen(
          step(
            name,
            Effect.tap(effect, (view) =>
              Effect.sync(() => {
                committed = view
              })
            )
          ),
          Effect.sync(() => {
            known = committed
          })
        )
      }
      // An execution moved to another runner (its shards taken over): the attempt its last
      // runner left running is settled here, as `resume` does for the claims engine.
      if (engine.placement === "owner") known = yield* Effect.orDie(settleStopped(first))
      /** Chosen when a stage is first about to run: a run that only waits for approval needs none. */
      let model: AvailableModel | undefined = atStart?.first?.model
      /**
       * The attempt the last step started in its own commit (or the run's start did), which the
       * next step carries on. Only this body knows it: a replay finds that attempt running with no
       * step of its own and leaves it to be settled (`settleStopped`), as an attempt whose process
       * stopped.
       */
      let begun: Begun | undefined = atStart?.first?.begun
      while (true) {
        const run = known ?? (yield* Effect.orDie(store.getRun(runId)))
        known = undefined
        if (run.status === "waiting_approval") {
          const waiting = run.stages.find((s) => s.status === "waiting_approval")
          if (waiting === undefined) return yield* Effect.die(`run ${runId} waits for approval of no stage`)
          yield* DurableDeferred.await(approvalGate(waiting.position))
          const after = yield* Effect.orDie(store.getRun(runId))
          if (after.status === "waiting_approval" && after.seq === run.seq)
            return yield* Effect.die(
              `run ${runId}: stage ${waiting.position}'s approval was decided in the workflow but not in the timeline`
            )
          continue
        }
        if (run.status !== "running") return { status: run.status }
        const stage = currentStage(run)
        if (stage === undefined) {
          yield* stepCommitting("complete", appendLast(runId, [{ type: "RunCompleted" }]))
        } else if (stage.needsApproval && !stage.approved) {
          yield* stepCommitting(
            `request-approval/${stage.position}`,
            appendLast(runId, [{ type: "ApprovalRequested", position: stage.position }])
          )
        } else {
          const latest = stage.attempts.at(-1)
          const carried =
            begun !== undefined &&
            begun.position === stage.position &&
            latest?.attempt === begun.attempt &&
            latest.status === "running"
              ? begun
              : undefined
          begun = undefined
          const attempt = carried?.attempt ?? stage.attempts.length + 1
          model ??= yield* Effect.orDie(modelFor(run))
          // The last stage's step completes the run too (`runAttempt`); `complete` above stays for
          // a run whose last stage completed without it (stored by an earlier version).
          yield* stepCommitting(
            `stage/${stage.position}/attempt/${attempt}`,
            runAttempt(run, pipeline, stage.position, model, carried, (next) => {
              begun = next
            })
          )
        }
      }
    })

  const engineScope = Scope.makeUnsafe()
  const engine =
    options.engine ??
    storeEngine(
      Effect.runSync(Scope.provide(StoreWorkflowEngine.make(store.journal), engineScope)),
      store.journal
    )
  // The cluster registers its entity asynchronously; messages that come first wait for it.
  Effect.runFork(
    engine.service
      .register(RunWorkflow, (payload) => engine.carry(payload.runId, body(payload)))
      .pipe(Effect.provideService(WorkflowEngine.WorkflowEngine, engine.service), Scope.provide(engineScope))
  )

  const executionOf = (runId: string) => currentExecution(store, runId)

  /** A failure that stopped the workflow (it suspended on it) as the executor's error. */
  const failureOf = (cause: Cause.Cause<unknown>): Effect.Effect<never, ExecuteError | PipelineError> => {
    const error = Cause.squash(cause)
    return isExecuteError(error) ? Effect.fail(error) : Effect.die(error)
  }

  /**
   * The run, started if it was queued and its thread is free; `Queued` (with why) if not. On an
   * engine whose journal is the store's, the run's first execution is recorded in the commit of
   * its start. `here`: the run is executed here next, so its first stage's attempt may start in
   * that commit too (`firstAttempt`).
   */
  const startIfQueued = (runId: string, here: boolean) =>
    Effect.gen(function* () {
      const run = yield* store.getRun(runId)
      if (run.status !== "queued") return { _tag: "Run", run, fresh: false } as const
      // A queued run has never started: this start is its first.
      const execution =
        engine.executionStart === undefined
          ? undefined
          : yield* engine.executionStart(executionOfStart(runId, 1), { runId })
      const first = here ? yield* firstAttempt(run) : undefined
      const started = yield* Effect.result(
        append(
          runId,
          [
            { type: "RunStarted" },
            ...(first === undefined ? [] : [{ type: "StageStarted" as const, ...first.begun }])
          ],
          { execution }
        )
      )
      if (started._tag === "Success") {
        if (here) startedHere.set(runId, { view: started.success, first })
        return { _tag: "Run", run: started.success, fresh: true } as const
      }
      if (started.failure._tag !== "IllegalTransition") return yield* Effect.fail(started.failure)
      // Refused because another process (a worker, a runner) started it just now: carried on
      // as any run already started is; still queued, its thread is busy.
      const now = yield* store.getRun(runId)
      return now.status === "queued"
        ? ({ _tag: "Queued", run: now, reason: started.failure.detail } as const)
        : ({ _tag: "Run", run: now, fresh: false } as const)
    })

  const submit = (runId: string): Effect.Effect<Submitted, AppendError> =>
    Effect.gen(function* () {
      const start = yield* startIfQueued(runId, false)
      if (start._tag === "Queued") return start
      const { run } = start
      if (run.status === "waiting_approval") {
        const waiting = run.stages.find((s) => s.status === "waiting_approval")
        return { _tag: "WaitingApproval", run, position: waiting?.position ?? 0 } as const
      }
      if (run.status !== "running") return { _tag: "Finished", run } as const
      yield* engine.handOver({
        executionId: start.fresh ? executionOfStart(runId, 1) : yield* executionOf(runId),
        payload: { runId },
        fresh: start.fresh
      })
      return { _tag: "HandedOver", run } as const
    })

  const execute = (runId: string, pipeline: Pipeline): Effect.Effect<Outcome, ExecuteError> =>
    Effect.gen(function* () {
      const start = yield* startIfQueued(runId, true)
      if (start._tag === "Queued") return start
      let run = start.run
      if (run.status !== "running" && run.status !== "waiting_approval")
        return { _tag: "Finished", run } as const
      const executionId = start.fresh ? executionOfStart(runId, 1) : yield* executionOf(runId)
      const once = Effect.gen(function* () {
        pipelines.set(runId, pipeline)
        const result = yield* engine.run(RunWorkflow, { executionId, payload: { runId } }).pipe(
          Effect.ensuring(
            Effect.sync(() => {
              pipelines.delete(runId)
              startedHere.delete(runId)
            })
          )
        )
        if (result._tag === "Suspended" && result.cause !== undefined)
          return yield* failureOf(result.cause) as Effect.Effect<never, ExecuteError>
        return result
      })
      let result = yield* once
      run = yield* store.getRun(runId)
      // Suspended at the gate just as the approval was recorded elsewhere (the timeline says
      // running): the replay reads the decision and carries on.
      for (let again = 0; again < 3 && result._tag === "Suspended" && run.status === "running"; again++) {
        result = yield* once
        run = yield* store.getRun(runId)
      }
      if (run.status === "waiting_approval") {
        const waiting = run.stages.find((s) => s.status === "waiting_approval")
        return { _tag: "WaitingApproval", run, position: waiting?.position ?? 0 } as const
      }
      if (run.status === "running" || run.status === "queued")
        return yield* Effect.fail(
          new IllegalTransition({
            runId,
            event: "RunCompleted",
            detail: `its workflow execution ${executionId} ended (${result._tag}) while the run is still ${run.status}`
          })
        )
      return { _tag: "Finished", run } as const
    })

  /** Completes the approval gate the run's workflow waits on (after the timeline has the decision). */
  const decide = (runId: string, position: number, approved: boolean) =>
    Effect.flatMap(executionOf(runId), (executionId) => {
      const gate = approvalGate(position)
      return engine.service.deferredDone(gate, {
        workflowName: RunWorkflow._tag,
        executionId,
        deferredName: gate.name,
        exit: Exit.succeed({ approved })
      })
    })

  /** Interrupts the run's workflow execution: at once if it runs here, else on its next replay. */
  const interrupt = (runId: string) =>
    Effect.flatMap(executionOf(runId), (executionId) =>
      engine.service.interruptUnsafe(RunWorkflow, executionId)
    )

  const waitingStage = (runId: string) =>
    Effect.flatMap(store.getRun(runId), (run) => {
      const stage = run.stages.find((s) => s.status === "waiting_approval")
      return stage === undefined
        ? Effect.fail(
            new IllegalTransition({
              runId,
              event: "Approval",
              detail: `the run is ${run.status}, not waiting for approval`
            })
          )
        : Effect.succeed(stage.position)
    })

  /** The run's run.json, checked against the sha256 its timeline recorded. */
  const runFileOf = (runId: string) =>
    Effect.flatMap(store.getRun(runId), (run) => RunFiles.readRunFile(workspace, run))

  const pipelineOf = (runId: string) => Effect.flatMap(store.getRun(runId), pipelineOfRun)

  /** `pipelineOf` for a run already read. */
  const pipelineOfRun = (run: RunView) =>
    Effect.gen(function* () {
      const runId = run.runId
      const file = yield* RunFiles.readRunFile(workspace, run)
      if (file.pipeline_definition !== undefined)
        return yield* PipelineModule.decode(file.pipeline_definition, `run ${runId}'s run.json`, {
          tools: offered
        })
      if (file.pipeline === PipelineModule.defaultPipeline.name) return PipelineModule.defaultPipeline
      return yield* Effect.fail(
        new RunFiles.FileError({
          path: RunFiles.runFileName(runId),
          detail: `it does not hold the run's pipeline "${file.pipeline}"`
        })
      )
    })

  /**
   * A stage attempt the timeline says is running, when nothing here runs it (its process
   * stopped): recorded completed if its manifest, written last, says so, else failed
   * (`interrupted`, retryable), so the stage gets a new attempt and never a second run of this one.
   * The run's view as it leaves it.
   */
  const settleStopped = (run: RunView): Effect.Effect<RunView, ExecuteError> =>
    Effect.gen(function* () {
      const runId = run.runId
      const stopped = run.stages.find((stage) => stage.status === "running")
      const attempt = stopped?.attempts[stopped.attempts.length - 1]
      if (run.status === "running" && stopped !== undefined && attempt?.status === "running") {
        const directory = RunFiles.stagePath(workspace, runId, stopped.position, stopped.key)
        // Manifests are written whole (temp file, fsync, link); one that cannot be read claims nothing.
        const manifest = yield* Effect.sync(() => {
          try {
            return RunFiles.readManifest(directory)
          } catch {
            return undefined
          }
        })
        if (manifest?.status === "completed" && manifest.attempt === attempt.attempt) {
          // The attempt finished (its manifest, written last, says so) and the process died
          // before recording it: the timeline is brought up to the files, nothing runs again.
          const published = new Set(attempt.artifacts.map((entry) => entry.path))
          return yield* append(runId, [
            ...manifest.artifacts
              .filter((entry) => !published.has(entry.path))
              .map(
                (entry): EventData => ({
                  type: "ArtifactPublished",
                  position: stopped.position,
                  attempt: attempt.attempt,
                  ...entry
                })
              ),
            { type: "StageCompleted", position: stopped.position, attempt: attempt.attempt }
          ])
        }
        return yield* append(runId, [
          {
            type: "StageFailed",
            position: stopped.position,
            attempt: attempt.attempt,
            ...ErrorCode.interrupted
          }
        ])
      }
      return run
    })

  const resume = (runId: string): Effect.Effect<Outcome, ExecuteError | PipelineError> =>
    Effect.gen(function* () {
      const run = yield* store.getRun(runId)
      if (!fs.existsSync(path.join(workspace, RunFiles.runFileName(runId)))) {
        if (run.status !== "queued" && run.status !== "running") return { _tag: "Finished", run } as const
        // Nothing of it ran, and its pipeline was never written down: it cannot be carried on.
        const canceled = yield* append(runId, [
          {
            type: "RunCanceled",
            reason:
              "its process stopped before the run's files were set up; nothing ran (make the request again)"
          }
        ])
        return { _tag: "Finished", run: canceled } as const
      }
      const pipeline = yield* pipelineOf(runId)
      yield* settleStopped(run)
      // Checked before the run starts: one whose model this process lacks waits as it is.
      const current = yield* store.getRun(runId)
      if (current.status === "queued" || current.status === "running") yield* modelFor(current)
      return yield* execute(runId, pipeline)
    })

  return {
    create: ({ threadId, request, pipeline: given, claim }) =>
      Effect.gen(function* () {
        const input = { request }
        if (typeof input.request !== "string" || input.request.trim().length === 0)
          return yield* Effect.fail(new InvalidInput({ detail: "input.json needs a non-empty request" }))
        // The one gate every pipeline passes, whichever way it came (a file, the API, a model's plan).
        const pipeline = yield* PipelineModule.decode(given, "the pipeline", { tools: offered })
        const stages = PipelineModule.planned(pipeline)
        const file: RunFiles.RunFile = {
          run_id: newRunId(),
          thread_id: threadId,
          request,
          pipeline: pipeline.name,
          pipeline_definition: pipeline,
          model: models[0].identity,
          created_at: new Date().toISOString(),
          stages: stages.map((s) => ({
            position: s.position,
            stage_key: s.key,
            needs_approval: s.needsApproval
          }))
        }
        // run.json first, then the run: a run in the store always has its file, whenever the
        // process dies (a kill in between leaves only a directory no run names). The timeline
        // records the file's sha256: what is carried on later is checked against it.
        const runFileSha256 = yield* RunFiles.writeRunFile(workspace, file)
        return yield* store
          .createRun({
            threadId,
            request,
            pipeline: pipeline.name,
            stages,
            runId: file.run_id,
            runFileSha256,
            ...(claim !== undefined && { claim })
          })
          .pipe(Effect.tapError(() => RunFiles.discardRunFile(workspace, file.run_id)))
      }),
    pipelineOf,
    execute,
    submit,
    resume,
    approve: (runId, by) =>
      Effect.flatMap(Effect.andThen(runFileOf(runId), waitingStage(runId)), (position) =>
        Effect.tap(
          append(runId, [{ type: "ApprovalGranted", position, ...(by !== undefined && { by }) }]),
          () => decide(runId, position, true)
        )
      ),
    reject: (runId, reason) =>
      Effect.flatMap(waitingStage(runId), (position) =>
        Effect.tap(append(runId, [{ type: "ApprovalRejected", position, reason }]), () =>
          decide(runId, position, false)
        )
      ),
    retry: (runId, { force = false } = {}) =>
      Effect.gen(function* () {
        const refused = force ? undefined : retryRefusal(yield* store.getRun(runId))
        if (refused !== undefined) return yield* Effect.fail(refused)
        return yield* append(runId, [{ type: "RunStarted" }])
      }),
    cancel: (runId, reason = "canceled") =>
      Effect.gen(function* () {
        const before = yield* store.getRun(runId)
        const canceled = yield* append(runId, [{ type: "RunCanceled", reason }])
        const executionId = yield* executionOf(runId)
        yield* engine.service.interruptUnsafe(RunWorkflow, executionId)
        // Suspended at its approval gate, the execution runs nowhere: replayed here, it reads
        // the cancel and completes, so the journal does not keep it open. The cancel stands
        // whatever this tidying meets (it is retried by nothing, so it is only logged).
        if (before.status === "waiting_approval" && engine.placement === "caller")
          yield* engine
            .run(RunWorkflow, { executionId, payload: { runId } })
            .pipe(
              Effect.catchCause((cause) =>
                Effect.logWarning(`run ${runId} canceled; closing its workflow execution failed`, cause)
              )
            )
        return canceled
      }),
    interrupt: (runId) => Effect.orDie(interrupt(runId)),
    engine,
    workflowOf: (runId) => Effect.flatMap(executionOf(runId), engine.workflowOf)
  }
}
