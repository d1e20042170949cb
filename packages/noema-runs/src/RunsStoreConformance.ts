/**
 * The behaviour every runs store shares, as cases a backend's test runs
 * against a fresh store each (memory, SQLite, PostgreSQL).
 */
import { Cause, Context, Effect, Exit, Fiber, Layer, Option, Schema, type Scope } from "effect"
import { Activity, DurableClock, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import type { EventData, PlannedStage, RunView } from "./Run.js"
import { RunsStore, type Service, type WorkflowJournal } from "./RunsStore.js"
import * as StoreWorkflowEngine from "./StoreWorkflowEngine.js"

export type FreshStore = Effect.Effect<Service, unknown, Scope.Scope>

export const fromLayer = <E>(layer: Layer.Layer<RunsStore, E>): FreshStore =>
  Effect.map(Layer.build(layer), (context) => Context.get(context, RunsStore))

export interface Case {
  readonly name: string
  readonly run: (fresh: FreshStore) => Effect.Effect<void, unknown>
}

const check = (condition: boolean, what: string) => {
  if (!condition) throw new Error(`conformance: ${what}`)
}
const equal = (actual: unknown, expected: unknown, what: string) =>
  check(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: ${JSON.stringify(actual)} !== ${JSON.stringify(expected)}`
  )

const stages: ReadonlyArray<PlannedStage> = [
  { key: "plan", position: 1, needsApproval: false },
  { key: "draft", position: 2, needsApproval: false }
]

const complete: ReadonlyArray<EventData> = [
  { type: "RunStarted" },
  { type: "StageStarted", position: 1, attempt: 1 },
  {
    type: "ArtifactPublished",
    position: 1,
    attempt: 1,
    path: "plan.md",
    kind: "markdown",
    sha256: "aa",
    size: 1
  },
  { type: "StageCompleted", position: 1, attempt: 1 },
  { type: "StageStarted", position: 2, attempt: 1 },
  { type: "StageCompleted", position: 2, attempt: 1 },
  { type: "RunCompleted" }
]

const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    if (Exit.isSuccess(exit)) throw new Error("conformance: expected a failure")
    const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
    if (error === undefined) throw new Error("conformance: expected a typed failure")
    return (error as { readonly error: { readonly _tag: string; readonly message: string } }).error
  })

const scoped = (f: (store: Service) => Effect.Effect<void, unknown>) => (fresh: FreshStore) =>
  Effect.scoped(Effect.flatMap(fresh, f))

// ---------------------------------------------------------------------------
// The workflow engine on the store's journal
// ---------------------------------------------------------------------------

const Counted = Workflow.make("conformance/counted", {
  payload: { name: Schema.String },
  success: Schema.String,
  idempotencyKey: ({ name }) => name
}).annotate(Workflow.SuspendOnFailure, true)

const gate = DurableDeferred.make("gate", { success: Schema.String })

interface Behaviour {
  /** Wait for `gate` between the two activities. */
  readonly gated?: boolean
  /** Sleep on a durable clock first. */
  readonly clockMs?: number
  /** The second activity never ends. */
  readonly hang?: boolean
  /** The second activity dies this many times first. */
  readonly dies?: number
}

/**
 * A process: an engine of its own over the store's journal, with `Counted` registered
 * and counters of what its activities really ran.
 */
const process = (journal: WorkflowJournal, behaviour: Behaviour = {}) =>
  Effect.gen(function* () {
    const engine = yield* StoreWorkflowEngine.make(journal)
    const ran = { first: 0, second: 0 }
    let dies = behaviour.dies ?? 0
    const body = ({ name }: { readonly name: string }) =>
      Effect.gen(function* () {
        if (behaviour.clockMs !== undefined)
          yield* DurableClock.sleep({ name: "nap", duration: behaviour.clockMs, inMemoryThreshold: 0 })
        const first = yield* Activity.make({
          name: "first",
          success: Schema.String,
          execute: Effect.sync(() => {
            ran.first++
            return `first(${name})`
          })
        })
        const opened = behaviour.gated === true ? `+${yield* DurableDeferred.await(gate)}` : ""
        const second = yield* Activity.make({
          name: "second",
          success: Schema.String,
          execute: Effect.suspend(() => {
            ran.second++
            if (behaviour.hang === true) return Effect.never
            if (dies > 0) {
              dies--
              return Effect.die(new Error("the disk went away"))
            }
            return Effect.succeed("second")
          })
        })
        return `${first}${opened}+${second}`
      })
    yield* engine.register(Counted, body).pipe(Effect.provideService(WorkflowEngine.WorkflowEngine, engine))
    return { engine, ran }
  })

const run = (engine: StoreWorkflowEngine.StoreWorkflowEngine, executionId: string) =>
  engine.run(Counted, { executionId, payload: { name: executionId } })

const completed = (result: Workflow.Result<string, never>, what: string): string => {
  check(
    result._tag === "Complete",
    `${what}: completed, not ${result._tag}${result._tag === "Suspended" && result.cause !== undefined ? ` (${Cause.pretty(result.cause)})` : ""}`
  )
  const exit = (result as Workflow.Complete<string, never>).exit
  check(
    Exit.isSuccess(exit),
    `${what}: succeeded, not ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : ""}`
  )
  return (exit as Exit.Success<string>).value
}

/** Runs `f` with a process of its own that stops (its scope closed) at the end. */
const inProcess = <A>(
  journal: WorkflowJournal,
  behaviour: Behaviour,
  f: (process: {
    engine: StoreWorkflowEngine.StoreWorkflowEngine
    ran: { first: number; second: number }
  }) => Effect.Effect<A, unknown>
) => Effect.scoped(Effect.flatMap(process(journal, behaviour), f))

const Appends = Workflow.make("conformance/appends", {
  payload: { runId: Schema.String },
  success: Schema.Void,
  idempotencyKey: ({ runId }) => runId
})

/** The journal, counting the entries the engine writes itself, and those it reads one by one. */
const countingRecords = (journal: WorkflowJournal) => {
  const recorded: Array<string> = []
  const read: Array<string> = []
  const counted: WorkflowJournal = {
    ...journal,
    record: (executionId, key, value) => {
      recorded.push(key)
      return journal.record(executionId, key, value)
    },
    entry: (executionId, key) => {
      read.push(key)
      return journal.entry(executionId, key)
    }
  }
  return { counted, recorded, read }
}

const engineCases: ReadonlyArray<Case> = [
  {
    name: "an append records the workflow execution it starts, or the result of the one it ends, in its transaction, unless it is there; a refused one records none",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const created = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const execution = {
          executionId: `${created.runId}/1`,
          workflow: "noema/run",
          payload: JSON.stringify({ runId: created.runId })
        }
        const refused = yield* failure(
          store.append(created.runId, [{ type: "StageCompleted", position: 1, attempt: 1 }], { execution })
        )
        equal(refused._tag, "IllegalTransition", "the batch is refused")
        equal(
          yield* store.journal.execution(execution.executionId),
          undefined,
          "a refused batch records none"
        )
        yield* store.append(created.runId, [{ type: "RunStarted" }], { execution })
        const recorded = yield* store.journal.execution(execution.executionId)
        equal(
          [recorded?.workflow, recorded?.payload, recorded?.result, recorded?.interrupted],
          [execution.workflow, execution.payload, undefined, false],
          "recorded with the run's start"
        )
        yield* store.append(created.runId, [{ type: "StageStarted", position: 1, attempt: 1 }], {
          execution: { ...execution, payload: "{}" }
        })
        equal(
          (yield* store.journal.execution(execution.executionId))?.payload,
          execution.payload,
          "the first record stands"
        )
        // The batch that ends the run records the execution's result with it; the first stands.
        const ended = { executionId: execution.executionId, result: JSON.stringify("ended") }
        yield* store.append(created.runId, [{ type: "RunCanceled", reason: "r" }], { result: ended })
        equal(
          (yield* store.journal.execution(execution.executionId))?.result,
          ended.result,
          "its result recorded"
        )
        yield* store.journal.complete(execution.executionId, JSON.stringify("later"))
        equal(
          (yield* store.journal.execution(execution.executionId))?.result,
          ended.result,
          "the first result stands"
        )
      })
    )
  },
  {
    name: "workflow engine: an activity's last append records it (CompletedActivity): one commit, the engine writes nothing, a replay does not run it",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const created = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const ran = { appending: 0, plain: 0 }
        /** A process whose second activity, `plain` (void, recorded by the engine), may never end. */
        const inProcess = (hang: boolean) =>
          Effect.scoped(
            Effect.gen(function* () {
              const journal = countingRecords(store.journal)
              const engine = yield* StoreWorkflowEngine.make(journal.counted)
              const body = ({ runId }: { readonly runId: string }) =>
                Effect.gen(function* () {
                  yield* Activity.make({
                    name: "appending",
                    execute: Effect.gen(function* () {
                      ran.appending++
                      const completed = yield* Effect.serviceOption(StoreWorkflowEngine.CompletedActivity)
                      check(Option.isSome(completed), "the store's engine offers the activity its record")
                      yield* Effect.orDie(
                        store.append(runId, [{ type: "RunStarted" }], {
                          journal: Option.getOrUndefined(completed)?.entry
                        })
                      )
                      if (Option.isSome(completed)) completed.value.recorded()
                    })
                  })
                  yield* Activity.make({
                    name: "plain",
                    execute: Effect.suspend(() => {
                      ran.plain++
                      return hang ? Effect.never : Effect.void
                    })
                  })
                })
              yield* engine
                .register(Appends, body)
                .pipe(Effect.provideService(WorkflowEngine.WorkflowEngine, engine))
              const running = engine.run(Appends, {
                executionId: created.runId,
                payload: { runId: created.runId }
              })
              if (!hang) {
                const result = yield* running
                check(result._tag === "Complete", `completed, not ${result._tag}`)
                // The run read its activities' records once (`entries`), not each one before and after it.
                equal(journal.read, [], "the engine read no activity's record one by one")
                return journal.recorded
              }
              const fiber = yield* Effect.forkChild(running)
              while (ran.plain === 0) yield* Effect.sleep(5)
              // The process stops: its run is interrupted from outside, with no result.
              yield* Fiber.interrupt(fiber)
              return journal.recorded
            })
          )
        equal(yield* inProcess(true), [], "the engine itself recorded nothing")
        equal(
          (yield* store.journal.entries(created.runId)).map((entry) => entry.key),
          ["activity/appending/1"],
          "the activity recorded with its append"
        )
        equal((yield* store.getRun(created.runId)).status, "running", "its append committed")
        equal(yield* inProcess(false), ["activity/plain/1"], "the replay: the engine records only plain")
        equal(ran, { appending: 1, plain: 2 }, "the appending activity was not run again")
        const entries = yield* store.journal.entries(created.runId)
        equal(
          entries[0]?.value,
          entries[1]?.value,
          "its record is the one the engine writes for a void activity"
        )
      })
    )
  },
  {
    name: "workflow engine: a completed execution and its activities are answered from the journal in any process",
    run: scoped((store) =>
      Effect.gen(function* () {
        const journal = store.journal
        yield* inProcess(journal, {}, ({ engine, ran }) =>
          Effect.gen(function* () {
            equal(completed(yield* run(engine, "a"), "first process"), "first(a)+second", "the result")
            equal(ran, { first: 1, second: 1 }, "each activity ran once")
          })
        )
        yield* inProcess(journal, {}, ({ engine, ran }) =>
          Effect.gen(function* () {
            equal(completed(yield* run(engine, "a"), "second process"), "first(a)+second", "the same result")
            equal(ran, { first: 0, second: 0 }, "nothing ran again")
            const polled = yield* engine.poll(Counted, "a")
            check(Option.isSome(polled) && polled.value._tag === "Complete", "poll answers from the journal")
          })
        )
      })
    )
  },
  {
    name: "workflow engine: a process stopped mid-activity; the next replays and completed activities are not run again",
    run: scoped((store) =>
      Effect.gen(function* () {
        const journal = store.journal
        yield* inProcess(journal, { hang: true }, ({ engine, ran }) =>
          Effect.gen(function* () {
            const running = yield* Effect.forkChild(run(engine, "b"))
            while (ran.second === 0) yield* Effect.sleep(5)
            // The process stops: its run is interrupted from outside, with no result.
            yield* Fiber.interrupt(running)
            equal(ran, { first: 1, second: 1 }, "the first process ran both")
          })
        )
        equal((yield* journal.execution("b"))?.result, undefined, "no result recorded")
        yield* inProcess(journal, {}, ({ engine, ran }) =>
          Effect.gen(function* () {
            equal(completed(yield* run(engine, "b"), "replayed"), "first(b)+second", "the result")
            equal(ran, { first: 0, second: 1 }, "only the cut-off activity ran again")
          })
        )
      })
    )
  },
  {
    name: "workflow engine: a durable deferred or an interrupt from another process is honoured on the next replay",
    run: scoped((store) =>
      Effect.gen(function* () {
        const journal = store.journal
        yield* inProcess(journal, { gated: true }, ({ engine }) =>
          Effect.gen(function* () {
            check((yield* run(engine, "c"))._tag === "Suspended", "waits at the gate")
            check((yield* run(engine, "d"))._tag === "Suspended", "the other waits too")
          })
        )
        yield* inProcess(journal, { gated: true }, ({ engine }) =>
          Effect.gen(function* () {
            yield* engine.deferredDone(gate, {
              workflowName: Counted._tag,
              executionId: "c",
              deferredName: gate.name,
              exit: Exit.succeed("open")
            })
            yield* engine.interrupt(Counted, "d")
          })
        )
        yield* inProcess(journal, { gated: true }, ({ engine, ran }) =>
          Effect.gen(function* () {
            equal(completed(yield* run(engine, "c"), "opened"), "first(c)+open+second", "through the gate")
            const interrupted = yield* run(engine, "d")
            check(
              interrupted._tag === "Complete" &&
                Exit.isFailure(interrupted.exit) &&
                Cause.hasInterrupts(interrupted.exit.cause),
              "completed as interrupted"
            )
            equal(ran, { first: 0, second: 1 }, "the interrupted one ran nothing new")
            check((yield* journal.execution("d"))?.result !== undefined, "its result is recorded")
          })
        )
      })
    )
  },
  {
    name: "workflow engine: a deferred completed while the same process runs the execution: each activity once",
    run: scoped((store) =>
      inProcess(store.journal, { gated: true }, ({ engine, ran }) =>
        Effect.gen(function* () {
          check((yield* run(engine, "g"))._tag === "Suspended", "waits at the gate")
          // The gate opens (the panel's approve) while the process carries the run on again.
          const [, result] = yield* Effect.all(
            [
              engine.deferredDone(gate, {
                workflowName: Counted._tag,
                executionId: "g",
                deferredName: gate.name,
                exit: Exit.succeed("open")
              }),
              run(engine, "g")
            ],
            { concurrency: "unbounded" }
          )
          // Either the run read the gate open (directly, or woken while it was under way here), or
          // it suspended just before the gate was recorded: then the next execution goes through.
          const final = result._tag === "Suspended" ? yield* run(engine, "g") : result
          equal(completed(final, "carried on"), "first(g)+open+second", "through the gate")
          equal(ran, { first: 1, second: 1 }, "each activity ran once")
        })
      )
    )
  },
  {
    name: "workflow engine: an activity that dies is not recorded; the execution suspends and its replay runs it again",
    run: scoped((store) =>
      inProcess(store.journal, { dies: 1 }, ({ engine, ran }) =>
        Effect.gen(function* () {
          const stopped = yield* run(engine, "e")
          check(stopped._tag === "Suspended" && stopped.cause !== undefined, "suspended, with the cause")
          equal(
            Cause.squash((stopped as Workflow.Suspended).cause as Cause.Cause<never>) instanceof Error,
            true,
            "the defect is the cause"
          )
          equal(completed(yield* run(engine, "e"), "resumed"), "first(e)+second", "resumed")
          equal(ran, { first: 1, second: 2 }, "the dead activity ran again, the first did not")
        })
      )
    )
  },
  {
    name: "workflow engine: a durable clock's wake time outlives the process that set it",
    run: scoped((store) =>
      Effect.gen(function* () {
        const journal = store.journal
        yield* inProcess(journal, { clockMs: 100 }, ({ engine }) =>
          Effect.map(run(engine, "f"), (result) => check(result._tag === "Suspended", "asleep"))
        )
        const wakeAt = Number(yield* journal.entry("f", "clock/nap"))
        check(wakeAt > 0, "the wake time is recorded")
        while (Date.now() < wakeAt) yield* Effect.sleep(10)
        yield* inProcess(journal, { clockMs: 100 }, ({ engine }) =>
          Effect.map(run(engine, "f"), (result) =>
            equal(completed(result, "woken"), "first(f)+second", "woken by the recorded time")
          )
        )
      })
    )
  },
  {
    name: "workflow engine: effect/workflow's own API (toLayer, execute) runs on it",
    run: scoped((store) =>
      Effect.gen(function* () {
        let runs = 0
        const Greet = Workflow.make("conformance/greet", {
          payload: { name: Schema.String },
          success: Schema.String,
          idempotencyKey: ({ name }) => name
        })
        const handler = Greet.toLayer(({ name }) =>
          Activity.make({
            name: "greet",
            success: Schema.String,
            execute: Effect.sync(() => {
              runs++
              return `hello ${name}`
            })
          })
        )
        const layer = handler.pipe(Layer.provideMerge(StoreWorkflowEngine.layer(store.journal)))
        const once = Effect.scoped(
          Effect.flatMap(Layer.build(layer), (context) =>
            Greet.execute({ name: "ada" }).pipe(Effect.provideContext(context))
          )
        )
        equal(yield* once, "hello ada", "executed")
        equal(yield* once, "hello ada", "again, in another engine")
        equal(runs, 1, "the activity ran once")
      })
    )
  }
]

export const cases: ReadonlyArray<Case> = [
  {
    name: "threads: create, list, get, close",
    run: scoped((store) =>
      Effect.gen(function* () {
        const a = yield* store.createThread({ title: "A" })
        const b = yield* store.createThread({ title: "B", queuePolicy: "enqueue" })
        equal([a.status, a.queuePolicy, b.queuePolicy], ["open", "reject", "enqueue"], "defaults")
        equal((yield* store.listThreads()).map((t) => t.title).sort(), ["A", "B"], "list")
        const closed = yield* store.closeThread(a.id)
        equal(closed.status, "closed", "closed")
        equal((yield* store.getThread(a.id)).status, "closed", "read back")
        equal((yield* failure(store.getThread("thr_nope")))._tag, "ThreadNotFound", "unknown")
      })
    )
  },
  {
    name: "threads: the queue policy can be changed; it decides the next request, not the runs made before",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const first = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        equal(
          (yield* failure(store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })))
            ._tag,
          "ThreadBusy",
          "reject refuses"
        )
        const enqueuing = yield* store.setQueuePolicy(thread.id, "enqueue")
        equal(enqueuing.queuePolicy, "enqueue", "returned")
        equal((yield* store.getThread(thread.id)).queuePolicy, "enqueue", "read back")
        const second = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        equal(second.status, "queued", "enqueue queues")
        yield* store.setQueuePolicy(thread.id, "reject")
        equal(
          (yield* failure(store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })))
            ._tag,
          "ThreadBusy",
          "reject again"
        )
        equal(
          (yield* store.listRuns({ threadId: thread.id })).map((run) => run.runId),
          [first.runId, second.runId],
          "earlier runs stay"
        )
        equal((yield* failure(store.setQueuePolicy("thr_nope", "enqueue")))._tag, "ThreadNotFound", "unknown")
      })
    )
  },
  {
    name: "a run is created queued and completes; its timeline and view agree",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({
          threadId: thread.id,
          request: "write",
          pipeline: "default",
          stages
        })
        equal(run.status, "queued", "queued")
        check(run.runId.startsWith("run_"), "run id")
        const done = yield* store.append(run.runId, complete)
        equal(done.status, "completed", "completed")
        equal(yield* store.getRun(run.runId), done, "stored view")
        const events = yield* store.events(run.runId)
        equal(
          events.map((e) => e.data.type),
          ["RunQueued", ...complete.map((e) => e.type)],
          "timeline"
        )
        equal(
          events.map((e) => e.seq),
          events.map((_, i) => i + 1),
          "seq"
        )
        equal((yield* store.listRuns({ threadId: thread.id })).length, 1, "listed")
      })
    )
  },
  {
    name: "listRuns: active gives the runs not finished, in creation order, with or without a thread",
    run: scoped((store) =>
      Effect.gen(function* () {
        const one = yield* store.createThread()
        const other = yield* store.createThread()
        const done = yield* store.createRun({ threadId: one.id, request: "r", pipeline: "p", stages })
        yield* store.append(done.runId, complete)
        const running = yield* store.createRun({ threadId: other.id, request: "r", pipeline: "p", stages })
        yield* store.append(running.runId, [{ type: "RunStarted" }])
        const queued = yield* store.createRun({ threadId: one.id, request: "r", pipeline: "p", stages })
        const ids = (runs: ReadonlyArray<RunView>) => runs.map((run) => run.runId)
        equal(ids(yield* store.listRuns()), [done.runId, running.runId, queued.runId], "every run")
        equal(ids(yield* store.listRuns({ active: true })), [running.runId, queued.runId], "the active ones")
        equal(ids(yield* store.listRuns({ active: true, threadId: one.id })), [queued.runId], "of one thread")
        equal(
          ids(yield* store.listRuns({ active: false, threadId: one.id })),
          [done.runId, queued.runId],
          "false: all"
        )
      })
    )
  },
  {
    name: "refusals before anything is written: unknown or closed thread, bad stages, empty request",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        equal(
          (yield* failure(store.createRun({ threadId: "thr_nope", request: "r", pipeline: "p", stages })))
            ._tag,
          "ThreadNotFound",
          "unknown"
        )
        const bad = [
          { request: "", stages },
          { request: "r", stages: [] },
          { request: "r", stages: [{ key: "Bad Key", position: 1, needsApproval: false }] },
          { request: "r", stages: [{ key: "a", position: 2, needsApproval: false }] },
          {
            request: "r",
            stages: [
              { key: "a", position: 1, needsApproval: false },
              { key: "a", position: 2, needsApproval: false }
            ]
          }
        ]
        for (const options of bad) {
          const error = yield* failure(store.createRun({ threadId: thread.id, pipeline: "p", ...options }))
          equal(error._tag, "InvalidInput", JSON.stringify(options))
        }
        yield* store.closeThread(thread.id)
        equal(
          (yield* failure(store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })))
            ._tag,
          "ThreadClosed",
          "closed"
        )
        equal((yield* store.listRuns()).length, 0, "nothing written")
      })
    )
  },
  {
    name: "one active run per thread: reject refuses; a finished run frees the thread; a re-run is a new run",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const first = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const busy = yield* failure(
          store.createRun({ threadId: thread.id, request: "r2", pipeline: "p", stages })
        )
        equal(busy._tag, "ThreadBusy", "busy")
        check(busy.message.includes(first.runId), "names the active run")
        const done = yield* store.append(first.runId, complete)
        const second = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        check(second.runId !== first.runId, "new run id")
        equal(yield* store.getRun(first.runId), done, "the earlier run is untouched")
      })
    )
  },
  {
    name: "concurrent requests on a reject thread: exactly one run is created",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const results = yield* Effect.forEach(
          [1, 2, 3, 4],
          (n) =>
            Effect.exit(store.createRun({ threadId: thread.id, request: `r${n}`, pipeline: "p", stages })),
          { concurrency: "unbounded" }
        )
        equal(results.filter(Exit.isSuccess).length, 1, "created")
        for (const result of results.filter(Exit.isFailure)) {
          const reason = result.cause.reasons.find((r) => r._tag === "Fail") as
            | { readonly error: { readonly _tag: string } }
            | undefined
          equal(reason?.error._tag, "ThreadBusy", "refused as busy")
        }
        equal((yield* store.listRuns({ threadId: thread.id })).length, 1, "one run stored")
      })
    )
  },
  {
    name: "enqueue: runs wait in FIFO order; a later one cannot start first",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread({ queuePolicy: "enqueue" })
        const runs: Array<RunView> = []
        for (const request of ["one", "two", "three"]) {
          runs.push(yield* store.createRun({ threadId: thread.id, request, pipeline: "p", stages }))
        }
        const [one, two, three] = runs as [RunView, RunView, RunView]
        const early = yield* failure(store.append(two.runId, [{ type: "RunStarted" }]))
        equal(early._tag, "IllegalTransition", "two before one")
        yield* store.append(one.runId, [{ type: "RunStarted" }])
        const whileRunning = yield* failure(store.append(two.runId, [{ type: "RunStarted" }]))
        check(whileRunning.message.includes(one.runId), "names the running run")
        yield* store.append(one.runId, complete.slice(1))
        const skip = yield* failure(store.append(three.runId, [{ type: "RunStarted" }]))
        equal(skip._tag, "IllegalTransition", "three before two")
        equal((yield* store.append(two.runId, [{ type: "RunStarted" }])).status, "running", "two starts")
      })
    )
  },
  {
    name: "an illegal event is refused and nothing of its batch is kept",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const error = yield* failure(
          store.append(run.runId, [{ type: "RunStarted" }, { type: "StageStarted", position: 2, attempt: 1 }])
        )
        equal(error._tag, "IllegalTransition", "refused")
        equal((yield* store.getRun(run.runId)).status, "queued", "unchanged")
        equal((yield* store.events(run.runId)).length, 1, "no events kept")
        equal(
          (yield* failure(store.append("run_nope", [{ type: "RunStarted" }])))._tag,
          "RunNotFound",
          "unknown run"
        )
      })
    )
  },
  {
    name: "append with a journal entry: written in the batch's transaction; a refused batch writes none; one that stands is kept",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const entry = (value: string) => ({ executionId: `${run.runId}/1`, key: "activity/step/1", value })
        const refused = yield* failure(
          store.append(run.runId, [{ type: "StageStarted", position: 2, attempt: 1 }], {
            journal: entry('"a"')
          })
        )
        equal(refused._tag, "IllegalTransition", "refused")
        equal(yield* store.journal.entry(`${run.runId}/1`, "activity/step/1"), undefined, "no entry")
        yield* store.append(run.runId, [{ type: "RunStarted" }], { journal: entry('"b"') })
        equal(
          yield* store.journal.entry(`${run.runId}/1`, "activity/step/1"),
          '"b"',
          "written with the batch"
        )
        yield* store.append(run.runId, [{ type: "StageStarted", position: 1, attempt: 1 }], {
          journal: entry('"c"')
        })
        equal(yield* store.journal.entry(`${run.runId}/1`, "activity/step/1"), '"b"', "the first stands")
        equal((yield* store.getRun(run.runId)).stages[0]?.status, "running", "the batch is kept")
      })
    )
  },
  {
    name: "failure, retry with a new attempt, cancel",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const failed = yield* store.append(run.runId, [
          { type: "RunStarted" },
          { type: "StageStarted", position: 1, attempt: 1 },
          {
            type: "StageFailed",
            position: 1,
            attempt: 1,
            error_code: "model",
            error_message: "down",
            retryable: true
          },
          { type: "RunFailed", error_code: "model", error_message: "down", retryable: true }
        ])
        equal([failed.status, failed.error?.error_code], ["failed", "model"], "failed")
        const retried = yield* store.append(run.runId, [
          { type: "RunStarted" },
          { type: "StageStarted", position: 1, attempt: 2 }
        ])
        equal(
          retried.stages[0]?.attempts.map((a) => [a.attempt, a.status]),
          [
            [1, "failed"],
            [2, "running"]
          ],
          "attempts"
        )
        const canceled = yield* store.append(run.runId, [{ type: "RunCanceled", reason: "enough" }])
        equal(canceled.status, "canceled", "canceled")
        equal(
          (yield* failure(store.append(run.runId, [{ type: "RunStarted" }])))._tag,
          "IllegalTransition",
          "final"
        )
      })
    )
  },
  {
    name: "approval: waiting_approval, granted; the read models rebuild from the log",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({
          threadId: thread.id,
          request: "r",
          pipeline: "p",
          stages: [{ key: "publish", position: 1, needsApproval: true }]
        })
        const waiting = yield* store.append(run.runId, [
          { type: "RunStarted" },
          { type: "ApprovalRequested", position: 1 }
        ])
        equal(waiting.status, "waiting_approval", "waiting")
        const done = yield* store.append(run.runId, [
          { type: "ApprovalGranted", position: 1 },
          { type: "StageStarted", position: 1, attempt: 1 },
          { type: "StageCompleted", position: 1, attempt: 1 },
          { type: "RunCompleted" }
        ])
        const other = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        equal(yield* store.rebuild(), 2, "rebuilt runs")
        equal(yield* store.getRun(run.runId), done, "same view after rebuild")
        equal(yield* store.getRun(other.runId), other, "same queued view after rebuild")
      })
    )
  },
  {
    name: "claims: one owner at a time, renewed by its owner, taken once expired or named as stale",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread()
        const run = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        equal(yield* store.claim(run.runId, { owner: "a", ttlMs: 60_000 }), { claimed: true }, "a claims")
        const first = (yield* store.claims()).find((c) => c.runId === run.runId)
        check(first?.owner === "a" && first.expiresAt > Date.now() + 50_000, "a's claim is stored")
        const refused = yield* store.claim(run.runId, { owner: "b", ttlMs: 60_000 })
        check(!refused.claimed && refused.holder.owner === "a", "b is refused, naming a")
        equal(yield* store.claim(run.runId, { owner: "a", ttlMs: 120_000 }), { claimed: true }, "a renews")
        const renewed = (yield* store.claims()).find((c) => c.runId === run.runId)
        equal(renewed?.claimedAt, first?.claimedAt, "a renewal keeps when it was claimed")
        check((renewed?.expiresAt ?? 0) > (first?.expiresAt ?? 0), "a renewal moves the deadline")
        equal(
          yield* store.claim(run.runId, { owner: "b", ttlMs: 1000, takeOver: "a" }),
          { claimed: true },
          "b takes over a claim it names as stale"
        )
        yield* store.release(run.runId, "a")
        equal(
          (yield* store.claims()).map((c) => c.owner),
          ["b"],
          "a cannot release b's claim"
        )
        yield* store.release(run.runId, "b")
        equal(yield* store.claims(), [], "released")
        equal(yield* store.claim(run.runId, { owner: "c", ttlMs: -1 }), { claimed: true }, "c claims")
        equal(
          yield* store.claim(run.runId, { owner: "d", ttlMs: 1000 }),
          { claimed: true },
          "d takes c's expired claim"
        )
      })
    )
  },
  {
    name: "claims: a run created with a claim is claimed; concurrent claimers get it once",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread({ queuePolicy: "enqueue" })
        const claimed = yield* store.createRun({
          threadId: thread.id,
          request: "r",
          pipeline: "p",
          stages,
          claim: { owner: "creator", ttlMs: 60_000 }
        })
        equal(
          (yield* store.claims()).map((c) => [c.runId, c.owner]),
          [[claimed.runId, "creator"]],
          "claimed on creation"
        )
        const open = yield* store.createRun({ threadId: thread.id, request: "r", pipeline: "p", stages })
        const results = yield* Effect.forEach(
          [1, 2, 3, 4, 5, 6, 7, 8],
          (n) => store.claim(open.runId, { owner: `w${n}`, ttlMs: 60_000 }),
          { concurrency: "unbounded" }
        )
        equal(results.filter((r) => r.claimed).length, 1, "one claimer wins")
      })
    )
  },
  {
    name: "feed: every run's events in the order appended, after a cursor",
    run: scoped((store) =>
      Effect.gen(function* () {
        const thread = yield* store.createThread({ queuePolicy: "enqueue" })
        const one = yield* store.createRun({ threadId: thread.id, request: "one", pipeline: "p", stages })
        const two = yield* store.createRun({ threadId: thread.id, request: "two", pipeline: "p", stages })
        yield* store.append(one.runId, complete)
        const all = yield* store.feed(0)
        equal(
          all.map((item) => `${item.event.run_id === one.runId ? "one" : "two"}:${item.event.data.type}`),
          ["one:RunQueued", "two:RunQueued", ...complete.map((event) => `one:${event.type}`)],
          "in the order appended"
        )
        check(
          all.every((item, index) => index === 0 || item.cursor > (all[index - 1]?.cursor ?? 0)),
          "cursors increase"
        )
        const after = yield* store.feed(all[1]?.cursor ?? 0, 2)
        equal(
          after.map((item) => item.event.data.type),
          ["RunStarted", "StageStarted"],
          "after a cursor, limited"
        )
        yield* store.append(two.runId, [{ type: "RunCanceled", reason: "no" }])
        const latest = yield* store.feed(all[all.length - 1]?.cursor ?? 0)
        equal(
          latest.map((item) => [item.event.run_id, item.event.data.type]),
          [[two.runId, "RunCanceled"]],
          "what came after"
        )
        equal(yield* store.feed(latest[0]?.cursor ?? 0), [], "nothing newer")
      })
    )
  },
  {
    name: "workflow journal: the first write stands, also for concurrent writers",
    run: scoped((store) =>
      Effect.gen(function* () {
        const journal = store.journal
        equal(yield* journal.execution("x/1"), undefined, "unknown execution")
        const started = yield* journal.start({ executionId: "x/1", workflow: "w", payload: '{"a":1}' })
        equal(
          started,
          { executionId: "x/1", workflow: "w", payload: '{"a":1}', interrupted: false },
          "started"
        )
        const again = yield* journal.start({ executionId: "x/1", workflow: "w", payload: '{"a":2}' })
        equal(again.payload, '{"a":1}', "the first payload stands")
        const values = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, index) => index),
          (index) => journal.record("x/1", "activity/a/1", `"${index}"`),
          { concurrency: "unbounded" }
        )
        check(new Set(values).size === 1, `eight writers agree on one value: ${values.join(" ")}`)
        equal(yield* journal.entry("x/1", "activity/a/1"), values[0], "what is read is what stood")
        yield* journal.record("x/1", "deferred/d", '"d"')
        yield* journal.record("x/1", "activity/0/1", '"z"')
        yield* journal.record("x/2", "activity/a/1", '"other"')
        equal(
          (yield* journal.entries("x/1")).map((entry) => entry.key),
          ["activity/a/1", "deferred/d", "activity/0/1"],
          "entries in the order recorded, of one execution"
        )
        equal(yield* journal.entry("x/1", "clock/c"), undefined, "no such entry")
        equal(yield* journal.entry("x/3", "activity/a/1"), undefined, "entries belong to one execution")
        yield* journal.interrupt("x/1")
        yield* journal.complete("x/1", '"first"')
        yield* journal.complete("x/1", '"second"')
        const done = yield* journal.execution("x/1")
        equal([done?.result, done?.interrupted], ['"first"', true], "completed once, interrupted")
      })
    )
  },
  ...engineCases
]
