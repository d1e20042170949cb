/**
 * StoreWorkflowEngine: an `effect/workflow` engine whose durable state is the
 * runs store's `WorkflowJournal` (memory, SQLite or PostgreSQL).
 *
 * Workflows, activities, durable deferreds, durable clocks and interrupts are
 * effect/workflow's own: this module only supplies the `WorkflowEngine` that
 * runs them. Its in-process part follows effect's `WorkflowEngine.layerMemory`
 * (one fiber per execution, replays on resume, a completed deferred preempting
 * the run parked on it); what must survive the process is written to the
 * journal:
 *
 * - the execution (its payload, first write wins) when it is first executed,
 *   and its result once it completes: a completed execution is answered from
 *   the journal, never run again;
 * - an activity's result once it completes: a replay, in this process or in
 *   another after a crash, gets the recorded result back instead of running the
 *   activity again. An activity that dies (a defect: the database or the disk
 *   failed under it) is not recorded, so the next replay runs it again;
 * - a durable deferred's result (`deferredDone`, from any process), read by the
 *   execution's next replay;
 * - a durable clock's wake time, so a replay after a restart sleeps only what
 *   is left;
 * - an interrupt, so whichever process replays the execution next completes it
 *   as interrupted.
 *
 * Who runs an execution is not decided here: one process at a time must, and
 * in noema the run's claim in the store (`RunLease`) decides it. So the engine
 * starts a run only when asked to (`execute`, `run`, `resume`): a deferred
 * completed (or a clock due) wakes a run under way in this process, or one a
 * caller here is waiting for, and is otherwise read by the execution's next
 * replay, wherever that happens (a caller whose run suspended on a deferred
 * completed meanwhile gets a replay, not a stale suspension); an interrupt
 * stops a run under way here at once and is otherwise completed by the next
 * replay.
 */
import {
  Cause,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  FiberMap,
  Layer,
  Option,
  Schema,
  Scope
} from "effect"
import {
  type Activity,
  type DurableClock,
  type DurableDeferred,
  Workflow,
  WorkflowEngine
} from "effect/workflow"
import type {
  ExecutionRecord,
  ExecutionResult,
  ExecutionStart,
  JournalEntry,
  WorkflowJournal
} from "./RunsStore.js"

/**
 * Offered by this engine to the activity under way: the journal entry that records it as
 * completed with no value (an activity whose success is void). An activity whose last act is
 * a write to the runs store writes the entry in that write's transaction (`append`'s
 * `journal`), so the activity's outcome and its record are one commit where they were two,
 * and says so once that write committed (`recorded`, with `result` when the write also recorded
 * the execution's result, `RunsStore.AppendOptions.result`): the engine then writes nothing, and
 * reads nothing back (not told, it writes the entry, the first write standing, and reads the
 * execution before it writes its result: a commit or a read more, nothing changed). An engine
 * that keeps its journal elsewhere (effect/cluster's) offers none.
 */
export class CompletedActivity extends Context.Service<
  CompletedActivity,
  {
    readonly entry: JournalEntry
    readonly recorded: (also?: { readonly result: boolean }) => void
  }
>()("@noema/runs/StoreWorkflowEngine/CompletedActivity") {}

type WorkflowInstance = WorkflowEngine.WorkflowInstance["Service"]
type Result = Workflow.Result<unknown, unknown>
type Execute = (
  payload: object,
  executionId: string
) => Effect.Effect<unknown, unknown, WorkflowEngine.WorkflowInstance | WorkflowEngine.WorkflowEngine>

type EngineService = WorkflowEngine.WorkflowEngine["Service"]

export interface StoreWorkflowEngine extends EngineService {
  /**
   * Executes the workflow here (or joins its run under way here) and waits for the run to
   * end: `Complete` (also when the journal already holds the result), or `Suspended` (waiting
   * for a durable deferred or clock, or, with `SuspendOnFailure`, stopped by a failure whose
   * cause it carries). Interrupting the wait interrupts the run without a result: the
   * execution is left for a later replay, here or in another process.
   */
  readonly run: <
    Name extends string,
    Payload extends Workflow.AnyStructSchema,
    Success extends Schema.Top,
    Error extends Schema.Top
  >(
    workflow: Workflow.Workflow<Name, Payload, Success, Error>,
    options: { readonly executionId: string; readonly payload: Payload["Type"] }
  ) => Effect.Effect<Workflow.Result<Success["Type"], Error["Type"]>>
}

type WakeMode = "explicit" | "automatic"

const isUnwakeable = (result: Result, mode: WakeMode) =>
  result._tag === "Complete" || (mode === "automatic" && result.failed === true)

const AnyOrVoid = Schema.Union([Schema.Any, Schema.Void])
/** An activity's result as its `executeEncoded` gives it (values already JSON). */
const activityResult = Schema.toCodecJson(Workflow.Result({ success: AnyOrVoid, error: AnyOrVoid }))
/** A deferred's exit as `deferredDone` gets it (values already JSON). */
const deferredExit = Schema.toCodecJson(Schema.Exit(AnyOrVoid, AnyOrVoid, Schema.Defect()))

const props = (workflow: Workflow.Any) => workflow as unknown as Workflow.AnyWithProps
/** `derive` once per workflow: a codec is built on each journal read or write otherwise. */
const perWorkflow = <A extends object>(derive: (workflow: Workflow.Any) => A) => {
  const derived = new WeakMap<Workflow.Any, A>()
  return (workflow: Workflow.Any): A => {
    let value = derived.get(workflow)
    if (value === undefined) {
      value = derive(workflow)
      derived.set(workflow, value)
    }
    return value
  }
}
const executionResult = perWorkflow((workflow) =>
  Schema.toCodecJson(
    Workflow.Result({ success: props(workflow).successSchema, error: props(workflow).errorSchema })
  )
)
const payloadCodec = perWorkflow((workflow) => Schema.toCodecJson(props(workflow).payloadSchema))

// The journal's text is JSON of these codecs' encoded forms; a value that does not decode is a defect.
const toText = (schema: Schema.Top, value: unknown): Effect.Effect<string> =>
  Effect.map(
    Effect.orDie(Schema.encodeUnknownEffect(schema as Schema.Codec<unknown, unknown>)(value)),
    // A void value (`undefined`) is kept as null: JSON drops undefined members, and the JSON codecs read null.
    (encoded) => JSON.stringify(encoded ?? null, (_key, value) => (value === undefined ? null : value))
  )
/**
 * The record of a new execution of `workflow` (its payload encoded as the engine reads it
 * back): what the engine writes when it starts one, and what a store may write with the events
 * that start it (`RunsStore.AppendOptions.execution`), the engine then reading it, not writing.
 */
export const executionStart = (
  workflow: Workflow.Any,
  executionId: string,
  payload: object
): Effect.Effect<ExecutionStart> =>
  Effect.map(toText(payloadCodec(workflow), payload), (text) => ({
    executionId,
    workflow: workflow._tag,
    payload: text
  }))

/**
 * The result of an execution of `workflow` that returns `value`, as the engine records it: for
 * a last step that knows what its execution returns next (a run it completes or fails) and
 * writes it with its events (`RunsStore.AppendOptions.result`), the engine then reading it, not
 * writing.
 */
export const executionCompleted = (
  workflow: Workflow.Any,
  executionId: string,
  value: unknown
): Effect.Effect<ExecutionResult> =>
  Effect.map(
    toText(executionResult(workflow), new Workflow.Complete({ exit: Exit.succeed(value) })),
    (result) => ({ executionId, result })
  )

/** An activity's record once it completed with no value (`CompletedActivity`), encoded once. */
const completedVoid = Effect.runSync(toText(activityResult, new Workflow.Complete({ exit: Exit.void })))
const fromText = <A>(schema: Schema.Top, text: string): Effect.Effect<A> =>
  Effect.orDie(
    Schema.decodeUnknownEffect(schema as Schema.Codec<A, unknown>)(JSON.parse(text))
  ) as Effect.Effect<A>
/**
 * An activity's recorded result, decoded. Nearly every record is `completedVoid` (each step
 * of a run): its decoding, the same immutable result each time, is done once.
 */
const completedVoidResult = Effect.runSync(fromText<Result>(activityResult, completedVoid))
const activityResultOf = (text: string): Effect.Effect<Result> =>
  text === completedVoid ? Effect.succeed(completedVoidResult) : fromText<Result>(activityResult, text)

interface ExecutionState {
  payload: object
  readonly execute: Execute
  readonly parent: string | undefined
  instance: WorkflowInstance
  interrupted: boolean
  interruptedUnsafe: boolean
  /** The strongest wake requested while a run was still finishing. */
  resumeRequested: WakeMode | undefined
  fiber: Fiber.Fiber<Result> | undefined
  /** A replay is being started. */
  starting: boolean
  /**
   * The journal's record of the execution as `load` just read it, for the replay it starts next
   * to use rather than read it again (a replay after that reads it).
   */
  loaded: ExecutionRecord | undefined
  /** Callers waiting here for the execution's run (`run`): while any waits, a wake replays it. */
  awaiting: number
  /** Completed, and replaced, whenever the above change or the state is dropped (see `changed`). */
  changed: Deferred.Deferred<void>
  /** Completed once a run completes; it cannot resume after that. */
  readonly done: Deferred.Deferred<void>
  /** Parent of every run's scope: a suspended run's finalizers last until the execution finishes. */
  readonly scope: Scope.Closeable
}

/** The engine over `journal`; its runs live in the scope. */
export const make = (journal: WorkflowJournal): Effect.Effect<StoreWorkflowEngine, never, Scope.Scope> =>
  Effect.gen(function* () {
    const scope = yield* Effect.scope
    const workflows = new Map<
      string,
      { readonly workflow: Workflow.Any; readonly execute: Execute; readonly scope: Scope.Scope }
    >()
    const executions = new Map<string, ExecutionState>()
    /** Per run, the deferreds it found not completed (what it may have suspended on). */
    const missed = new WeakMap<WorkflowInstance, Set<string>>()
    /**
     * Per run, its execution's activity records: read once, at its first activity, then kept
     * up with what the run records. Only the process running an execution records its
     * activities (one at a time runs it: the run's claim), so a run asks the journal about
     * each of its activities once, not before each one.
     */
    const activityRecords = new WeakMap<WorkflowInstance, Map<string, string>>()
    /** The runs whose last activity recorded the execution's result with its own write. */
    const resultRecorded = new WeakSet<WorkflowInstance>()
    const activityRecord = (instance: WorkflowInstance, key: string) =>
      Effect.suspend(() => {
        const known = activityRecords.get(instance)
        if (known !== undefined) return Effect.succeed(known.get(key))
        return Effect.map(durable(journal.entries(instance.executionId)), (entries) => {
          const records = new Map<string, string>()
          for (const entry of entries)
            if (entry.key.startsWith("activity/")) records.set(entry.key, entry.value)
          activityRecords.set(instance, records)
          return records.get(key)
        })
      })
    const deferredState = WorkflowEngine.makeDeferredState()
    const clocks = yield* FiberMap.make<string>()

    /** Tells whoever waits on the state (`awaitRun`) that its run, or what is pending, changed. */
    const changed = (state: ExecutionState) => {
      const waiting = state.changed
      state.changed = Deferred.makeUnsafe()
      Deferred.doneUnsafe(waiting, Effect.void)
    }
    const drop = (executionId: string, state: ExecutionState) => {
      if (executions.get(executionId) === state) executions.delete(executionId)
      changed(state)
    }

    /** Journal failures inside the engine's contract (which has no error channel) are defects. */
    const durable = <A, E>(effect: Effect.Effect<A, E>) => Effect.orDie(effect)

    const resume = Effect.fnUntraced(function* (executionId: string, mode: WakeMode): Effect.fn.Return<void> {
      const state = executions.get(executionId)
      if (!state) return
      if (state.starting) {
        // A replay is being started (its journal read is under way): this wake follows it.
        state.resumeRequested = mode === "explicit" ? mode : (state.resumeRequested ?? mode)
        return
      }
      const exit = state.fiber?.pollUnsafe()
      if (exit && exit._tag === "Success" && isUnwakeable(exit.value, mode)) {
        return
      } else if (state.fiber && !exit) {
        // Queue wakes until the run finishes; explicit wakes take priority.
        const requested = state.resumeRequested
        state.resumeRequested = mode === "explicit" ? mode : (requested ?? mode)
        if (requested === undefined) {
          yield* Fiber.await(state.fiber).pipe(
            Effect.flatMap(() => {
              const next = state.resumeRequested ?? mode
              state.resumeRequested = undefined
              changed(state)
              return resume(executionId, next)
            }),
            Effect.forkIn(scope)
          )
        }
        return
      }
      // An interrupt asked for by another process is seen on the next replay.
      const loaded = state.loaded
      state.loaded = undefined
      state.starting = true
      const record = yield* (
        loaded === undefined ? durable(journal.execution(executionId)) : Effect.succeed(loaded)
      ).pipe(
        Effect.onExit(() =>
          Effect.sync(() => {
            state.starting = false
            changed(state)
          })
        )
      )
      if (record?.interrupted === true) state.interrupted = true

      const entry = workflows.get(state.instance.workflow._tag)
      if (entry === undefined) return
      // Each run gets a fresh scope, so replays rebuild compensations instead of registering them again.
      const instance = WorkflowEngine.WorkflowInstance.initial(state.instance.workflow, executionId, {
        scope: Scope.forkUnsafe(state.scope)
      })
      state.instance = instance
      state.fiber = yield* state.execute(state.payload, executionId).pipe(
        Effect.onExit((exit) => {
          // Safe interrupts take effect only when the run would suspend; unsafe ones also
          // when a replay would complete normally.
          if (
            !state.interrupted ||
            (!state.interruptedUnsafe &&
              !instance.suspended &&
              !instance.abandoned &&
              !(
                Context.get(instance.workflow.annotations, Workflow.SuspendOnFailure) && Exit.isFailure(exit)
              ))
          ) {
            return Effect.void
          }
          instance.interrupted = true
          instance.suspended = false
          return Effect.withFiber((fiber) => Effect.interruptible(Fiber.interrupt(fiber)))
        }),
        Workflow.intoResult,
        Effect.provideService(WorkflowEngine.WorkflowEngine, engine),
        (effect) => deferredState.trackRun(instance, effect),
        // A last step that wrote the result with its events (`executionCompleted`) needs no write
        // here; not told, read first (a write that changes nothing still commits, and waits on the disk).
        Effect.tap((result) =>
          result._tag === "Complete" && !resultRecorded.has(instance)
            ? Effect.flatMap(durable(journal.execution(executionId)), (record) =>
                record?.result !== undefined
                  ? Effect.void
                  : Effect.flatMap(toText(executionResult(instance.workflow), result), (text) =>
                      durable(journal.complete(executionId, text))
                    )
              )
            : Effect.void
        ),
        Effect.tap((result) =>
          !state.parent || result._tag !== "Complete"
            ? Effect.void
            : Effect.forkIn(resume(state.parent, "automatic"), scope)
        ),
        Effect.onExit((exit) => {
          if (Exit.isSuccess(exit) && exit.value._tag === "Suspended") return Effect.void
          if (Exit.isFailure(exit)) {
            // Preempted by a completed deferred, or stopped by `interruptUnsafe`: a replay follows.
            if (state.interrupted || (instance.suspended && Cause.hasInterruptsOnly(exit.cause)))
              return Effect.void
            // Interrupted from outside (the process stops, its claim was lost): no result. The
            // execution stays in the journal for a later replay; this process forgets it.
            drop(executionId, state)
            return Scope.close(state.scope, Exit.void)
          }
          // Completed: the journal answers for it from now on; this process forgets it.
          return Effect.andThen(
            Scope.close(state.scope, Exit.void),
            Deferred.succeed(state.done, undefined)
          ).pipe(Effect.ensuring(Effect.sync(() => drop(executionId, state))))
        }),
        Effect.forkIn(entry.scope)
      )
      changed(state)
      // A wake that came while the replay was being started waits for it to end.
      const queued = state.resumeRequested
      if (queued !== undefined) {
        state.resumeRequested = undefined
        yield* resume(executionId, queued)
      }
    })

    /** The local state of an execution, from the journal when this process does not know it yet. */
    const load = (
      workflow: Workflow.Any,
      executionId: string,
      parent: WorkflowInstance | undefined,
      detached: boolean | undefined,
      payload?: object
    ) =>
      Effect.gen(function* () {
        const known = executions.get(executionId)
        if (known !== undefined) return { state: known, result: undefined }
        const entry = workflows.get(workflow._tag)
        if (entry === undefined) return yield* Effect.die(`Workflow ${workflow._tag} is not registered`)
        // Read first: an execution carried on again (a resume, a replay after an approval) is
        // there, and a write that changes nothing still commits, and waits on the disk.
        const recorded = yield* durable(journal.execution(executionId))
        const record =
          payload === undefined || recorded !== undefined
            ? recorded
            : yield* durable(journal.start(yield* executionStart(workflow, executionId, payload)))
        if (record === undefined) return { state: undefined, result: undefined }
        if (record.result !== undefined)
          return {
            state: undefined,
            result: yield* fromText<Result>(executionResult(workflow), record.result)
          }
        const state: ExecutionState = {
          // The recorded payload: the first execute's, whoever made it.
          payload: yield* fromText<object>(payloadCodec(workflow), record.payload),
          execute: entry.execute,
          instance: WorkflowEngine.WorkflowInstance.initial(workflow, executionId),
          interrupted: record.interrupted,
          interruptedUnsafe: false,
          resumeRequested: undefined,
          fiber: undefined,
          starting: false,
          loaded: record,
          awaiting: 0,
          changed: Deferred.makeUnsafe(),
          done: Deferred.makeUnsafe(),
          scope: Scope.makeUnsafe(),
          parent: detached === true ? undefined : parent?.executionId
        }
        executions.set(executionId, state)
        return { state, result: undefined }
      })

    const isRunningHere = (executionId: string) => {
      const state = executions.get(executionId)
      return (
        state !== undefined &&
        (state.starting ||
          state.awaiting > 0 ||
          (state.fiber !== undefined && state.fiber.pollUnsafe() === undefined))
      )
    }

    /** Waits for the execution's run under way here to end, following replays that replace it. */
    const awaitRun = (executionId: string, state: ExecutionState): Effect.Effect<Result> =>
      Effect.gen(function* () {
        while (true) {
          // Taken first: any change from here on completes it.
          const change = state.changed
          const fiber = state.fiber
          if (fiber === undefined) {
            if (!state.starting) return new Workflow.Suspended({})
            yield* Deferred.await(change)
            continue
          }
          const instance = state.instance
          const exit = yield* Fiber.await(fiber).pipe(Effect.onInterrupt(() => Fiber.interrupt(fiber)))
          if (state.fiber !== fiber) continue
          // A replay is starting or asked for, or follows this run: preempted by a completed
          // deferred, or stopped by `interruptUnsafe` (the replay completes the interrupt).
          const replayFollows =
            state.starting ||
            state.resumeRequested !== undefined ||
            (Exit.isFailure(exit) &&
              Cause.hasInterruptsOnly(exit.cause) &&
              (instance.suspended || state.interrupted))
          if (replayFollows && executions.get(executionId) === state) {
            yield* Deferred.await(change)
            continue
          }
          if (Exit.isFailure(exit)) return yield* Effect.failCause(exit.cause)
          // Suspended on a deferred that was completed meanwhile (its wake came before this run
          // parked, or from another process): replay rather than report a stale suspension.
          if (exit.value._tag === "Suspended" && exit.value.cause === undefined) {
            const awaited = [...(missed.get(instance) ?? [])]
            const done = yield* Effect.forEach(awaited, (name) =>
              durable(journal.entry(executionId, `deferred/${name}`))
            )
            if (state.fiber !== fiber || state.starting) continue
            if (done.some((entry) => entry !== undefined)) {
              yield* resume(executionId, "explicit")
              continue
            }
          }
          return exit.value
        }
      }).pipe(Effect.ensuring(Effect.sync(() => void state.awaiting--)), (effect) =>
        Effect.andThen(
          Effect.sync(() => void state.awaiting++),
          effect
        )
      )

    const engine: StoreWorkflowEngine = Object.assign(
      WorkflowEngine.makeUnsafe({
        register: Effect.fnUntraced(function* (workflow, execute) {
          workflows.set(workflow._tag, { workflow, execute, scope: yield* Effect.scope })
        }),
        execute: Effect.fnUntraced(function* (workflow, options) {
          const { state, result } = yield* load(
            workflow,
            options.executionId,
            options.parent,
            options.detached,
            options.payload
          )
          if (state === undefined) return (options.discard ? undefined : result) as never
          // A new execution, or one whose last run here suspended: (re)play it.
          if (state.fiber === undefined || state.fiber.pollUnsafe() !== undefined)
            yield* resume(options.executionId, "explicit")
          if (options.discard) return undefined as never
          const instance = state.instance
          const exit = yield* Fiber.await(state.fiber!)
          if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) && instance.suspended) {
            // A completion preempted the run; the caller retries into the replay.
            return new Workflow.Suspended({}) as never
          }
          return (yield* exit) as never
        }),
        awaitComplete: (_workflow, executionId) =>
          Effect.suspend(() => {
            const state = executions.get(executionId)
            return state ? Deferred.await(state.done) : Effect.never
          }),
        // An execution this process is not running is only marked: whichever process replays it
        // next completes it as interrupted (two processes never replay one execution at once).
        interrupt: Effect.fnUntraced(function* (_workflow, executionId) {
          yield* durable(journal.interrupt(executionId))
          const state = executions.get(executionId)
          if (!state) return
          state.interrupted = true
          yield* resume(executionId, "explicit")
        }),
        interruptUnsafe: Effect.fnUntraced(function* (_workflow, executionId) {
          yield* durable(journal.interrupt(executionId))
          const state = executions.get(executionId)
          if (!state) return
          state.interrupted = true
          state.interruptedUnsafe = true
          if (state.fiber) yield* Fiber.interrupt(state.fiber)
          // Replay after a hard interruption to record a terminal result.
          yield* resume(executionId, "explicit")
        }),
        resume: Effect.fnUntraced(function* (workflow, executionId) {
          const { state } = yield* load(workflow, executionId, undefined, true)
          if (state) yield* resume(executionId, "explicit")
        }),
        activityExecute: Effect.fnUntraced(function* (activity: Activity.Any, attempt: number) {
          const instance = yield* WorkflowEngine.WorkflowInstance
          const key = `activity/${activity.name}/${attempt}`
          const recorded = yield* activityRecord(instance, key)
          if (recorded !== undefined) return yield* activityResultOf(recorded)
          // A pending interrupt replays only to rebuild compensations: it runs no new activity.
          if (executions.get(instance.executionId)?.interrupted && !instance.interrupted)
            return new Workflow.Suspended({})
          const activityInstance = WorkflowEngine.WorkflowInstance.initial(
            instance.workflow,
            instance.executionId
          )
          activityInstance.interrupted = instance.interrupted
          let recordedByActivity = false
          const completed = {
            entry: { executionId: instance.executionId, key, value: completedVoid },
            recorded: (also?: { readonly result: boolean }) => {
              recordedByActivity = true
              if (also?.result === true) resultRecorded.add(instance)
            }
          }
          const result = yield* (activity as unknown as Activity.AnyWithProps).executeEncoded.pipe(
            Workflow.intoResult,
            Effect.provideService(WorkflowEngine.WorkflowInstance, activityInstance),
            Effect.provideService(CompletedActivity, completed)
          )
          if (result._tag === "Suspended") return result
          // A defect (the database, the disk) is not the activity's answer: the next replay runs it again.
          if (Exit.isFailure(result.exit) && Cause.hasDies(result.exit.cause)) return result
          // Recorded by the activity (`CompletedActivity`), there is nothing to write; otherwise the
          // run's records said it was not there, and the first write stands if another was made since.
          const standing = recordedByActivity
            ? completedVoid
            : yield* durable(journal.record(instance.executionId, key, yield* toText(activityResult, result)))
          activityRecords.get(instance)?.set(key, standing)
          return yield* activityResultOf(standing)
        }),
        poll: (workflow, executionId) =>
          Effect.gen(function* () {
            const exit = executions.get(executionId)?.fiber?.pollUnsafe()
            if (exit !== undefined)
              return exit._tag === "Success" ? Option.some(exit.value) : yield* Effect.die(exit.cause)
            const record = yield* durable(journal.execution(executionId))
            return record?.result === undefined
              ? Option.none()
              : Option.some(yield* fromText<Result>(executionResult(workflow), record.result))
          }),
        deferredResult: Effect.fnUntraced(function* (deferred: DurableDeferred.Any) {
          const instance = yield* WorkflowEngine.WorkflowInstance
          const recorded = yield* durable(journal.entry(instance.executionId, `deferred/${deferred.name}`))
          if (recorded === undefined) {
            const names = missed.get(instance) ?? new Set<string>()
            names.add(deferred.name)
            missed.set(instance, names)
          }
          return recorded === undefined
            ? Option.none()
            : Option.some(yield* fromText<Exit.Exit<unknown, unknown>>(deferredExit, recorded))
        }),
        deferredDone: (options) =>
          Effect.gen(function* () {
            const text = yield* toText(deferredExit, options.exit)
            const key = `deferred/${options.deferredName}`
            const existing = yield* durable(journal.entry(options.executionId, key))
            if (existing !== undefined) return
            yield* durable(journal.record(options.executionId, key, text))
            // Only a run under way here is woken (preempted if it waits on this deferred, then
            // replayed). A suspended execution is carried on by whoever executes it next, under
            // its claim: a wake must not start a run nobody holds.
            const wake = Effect.suspend(() =>
              isRunningHere(options.executionId)
                ? Effect.andThen(
                    deferredState.deferredDone(options.executionId, options.deferredName),
                    resume(options.executionId, "automatic")
                  )
                : Effect.void
            )
            const current = yield* Effect.serviceOption(WorkflowEngine.WorkflowInstance)
            // A workflow finalizer cannot wait for its own run's cleanup: the engine's scope owns the wake.
            if (Option.isSome(current) && current.value.executionId === options.executionId)
              yield* Effect.forkIn(wake, scope)
            else yield* wake
          }),
        scheduleClock: (
          workflow,
          options: { readonly executionId: string; readonly clock: DurableClock.DurableClock }
        ) =>
          Effect.gen(function* () {
            const now = Date.now()
            // The first schedule's wake time stands: a replay after a restart sleeps only what is left.
            const wakeAt = Number(
              yield* durable(
                journal.record(
                  options.executionId,
                  `clock/${options.clock.name}`,
                  String(now + Duration.toMillis(options.clock.duration))
                )
              )
            )
            const done = engine.deferredDone(options.clock.deferred, {
              workflowName: workflow._tag,
              executionId: options.executionId,
              deferredName: options.clock.deferred.name,
              exit: Exit.void
            })
            // Already due (a replay after the process that set it stopped): recorded for the wait
            // that follows to read; nothing to wake, this run is the one that waits.
            if (wakeAt <= now) {
              yield* durable(
                journal.record(
                  options.executionId,
                  `deferred/${options.clock.deferred.name}`,
                  yield* toText(deferredExit, Exit.void)
                )
              )
              return
            }
            yield* done.pipe(
              Effect.delay(wakeAt - now),
              FiberMap.run(clocks, `${options.executionId}/${options.clock.name}`, { onlyIfMissing: true }),
              Effect.asVoid
            )
          })
      }),
      {
        run: ((workflow: Workflow.Any, options: { readonly executionId: string; readonly payload: object }) =>
          Effect.gen(function* () {
            const { state, result } = yield* load(
              workflow,
              options.executionId,
              undefined,
              true,
              options.payload
            )
            if (state === undefined) return result as Result
            // A new execution, or one whose last run here suspended: (re)play it.
            if (state.fiber === undefined || state.fiber.pollUnsafe() !== undefined)
              yield* resume(options.executionId, "explicit")
            return yield* awaitRun(options.executionId, state)
          })) as StoreWorkflowEngine["run"]
      }
    )
    return engine
  })

/** The engine as effect's `WorkflowEngine` service, over the journal given. */
export const layer = (journal: WorkflowJournal): Layer.Layer<WorkflowEngine.WorkflowEngine> =>
  Layer.effect(WorkflowEngine.WorkflowEngine)(make(journal))
