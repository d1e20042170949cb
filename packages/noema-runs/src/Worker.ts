/**
 * Worker: carries runs on for as long as it runs, alongside any number of
 * other workers (processes, machines) sharing the store.
 *
 * `carryOn` is how anything executes a run: it holds the run's lease
 * (`RunLease`) and watches the store, so a run canceled elsewhere (another
 * process, the panel) interrupts the stage under way here.
 *
 * A worker looks at the store every `pollMs` (or when woken): every run that is
 * running or queued and that no live process holds (its claim missing, expired,
 * or left by a dead process on this host) is taken, up to `concurrency` at a
 * time, and resumed (`Executor.resume`: a stage left running gets a new
 * attempt, completed stages are not run again). Queued runs are taken in their
 * thread's order and only when their thread is free; the store refuses a start
 * that would break a thread's serialisation anyway, whichever worker asks.
 *
 * On an engine that places executions itself (`ClusterEngine`: the runner owning
 * the execution's shard runs it, holding the lease), a worker takes nothing
 * into this process: it starts the queued runs whose thread is free and hands
 * the runs nobody carries on to the engine (`Executor.submit`), all of them at
 * each look (the runners bound what they carry at once), once per
 * `retryAfterMs` each, since the engine keeps them from then on (a dead
 * runner's executions are replayed by the runner that takes its shards). It
 * looks again as soon as a run's body ends in this process
 * (`Engine.onBodyEnded`), so the next run of that thread starts without
 * waiting for the poll.
 */
import { Cause, Duration, Effect, Exit, Fiber, FiberSet, type Scope } from "effect"
import type { ExecuteError, Executor, Outcome } from "./Executor.js"
import type { PipelineError } from "./Pipeline.js"
import type { RunNotFound, RunView } from "./Run.js"
import * as RunLease from "./RunLease.js"
import type { Claim, RunsStoreError, Service as Store } from "./RunsStore.js"
import { startRefusal } from "./RunsStore.js"

export interface CarryOnOptions extends RunLease.Options {
  /** How often the store is asked whether the run was canceled. Default 500 ms. */
  readonly cancelPollMs?: number
}

/** Ends when the run is canceled (by anyone), with that run. */
const canceled = (store: Store, runId: string, pollMs: number) =>
  Effect.gen(function* () {
    while (true) {
      yield* Effect.sleep(Duration.millis(pollMs))
      const run = yield* store.getRun(runId)
      if (run.status === "canceled") return { _tag: "Finished", run } as Outcome
    }
  })

/**
 * Runs `step` on the run holding its lease; a cancel recorded meanwhile, here or anywhere,
 * stops `step` (see `interrupt`): the attempt under way is left canceled, with no manifest,
 * and `step` ends with the canceled run.
 */
export const carryOn = <E, R>(
  store: Store,
  runId: string,
  step: Effect.Effect<Outcome, E, R>,
  options: CarryOnOptions & {
    /**
     * How a cancel seen in the store stops the work: `Executor.interrupt`, which interrupts
     * the run's workflow execution (it completes as interrupted, and `step` ends with the
     * canceled run).
     */
    readonly interrupt: (runId: string) => Effect.Effect<void>
  }
): Effect.Effect<Outcome, E | RunLease.RunBusy | RunLease.LeaseLost | RunsStoreError | RunNotFound, R> =>
  RunLease.withLease(
    store,
    runId,
    Effect.gen(function* () {
      // A store that fails a poll is asked again at the next one.
      const watcher = yield* Effect.forkChild(
        Effect.flatMap(Effect.eventually(canceled(store, runId, options.cancelPollMs ?? 500)), () =>
          options.interrupt(runId)
        )
      )
      return yield* Effect.ensuring(step, Fiber.interrupt(watcher))
    }),
    options
  )

/**
 * The runs a worker may take now, in creation order: running or queued, not held by a live
 * process, and (queued) first in a thread that is free.
 */
export const runnable = (
  runs: ReadonlyArray<RunView>,
  claims: ReadonlyArray<Claim>,
  now: number = Date.now()
): ReadonlyArray<RunView> => {
  const held = RunLease.carried(claims, now)
  const byThread = new Map<string, Array<RunView>>()
  for (const run of runs) {
    const list = byThread.get(run.threadId)
    if (list === undefined) byThread.set(run.threadId, [run])
    else list.push(run)
  }
  return runs.filter(
    (run) =>
      !held.has(run.runId) &&
      (run.status === "running" ||
        (run.status === "queued" && startRefusal(run, byThread.get(run.threadId) ?? []) === undefined))
  )
}

export type WorkerError = ExecuteError | PipelineError | RunLease.RunBusy | RunLease.LeaseLost

export interface Options {
  readonly store: Store
  readonly executor: Executor
  readonly lease?: CarryOnOptions
  /** How often the store is looked at. Default 1 s. */
  readonly pollMs?: number
  /** Runs carried on at once. Default 4. */
  readonly concurrency?: number
  /** How long a run that failed to be carried on (not for a lost race) is left alone. Default 30 s. */
  readonly retryAfterMs?: number
  /** Told when a run it took stops (finished, waiting, or failed to carry on: `RunBusy` when another worker won it). */
  readonly onStopped?: (runId: string, exit: Exit.Exit<Outcome, WorkerError>) => Effect.Effect<void>
}

export interface Worker {
  /** Takes the runs it can now; their ids. */
  readonly tick: Effect.Effect<ReadonlyArray<string>, RunsStoreError>
  /** Looks at the store every `pollMs` (or when woken) until interrupted; the store failing is retried. */
  readonly run: Effect.Effect<never>
  /** Looks at the store now (after an approval, a retry, a new run). */
  readonly wake: () => void
  /** The runs it is carrying on now. */
  readonly active: () => ReadonlyArray<string>
}

export const make = (options: Options): Effect.Effect<Worker, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { store, executor } = options
    const concurrency = options.concurrency ?? 4
    const pollMs = options.pollMs ?? 1000
    const fibers = yield* FiberSet.make<void, never>()
    const active = new Set<string>()
    /** Runs that failed to be carried on, and when: left alone for `retryAfterMs`, not retried every poll. */
    const failedAt = new Map<string, number>()
    const retryAfterMs = options.retryAfterMs ?? 30_000
    let woken: (() => void) | undefined
    /** A wake that came while the worker was not sleeping: its next sleep is skipped. */
    let wokenMeanwhile = false
    const wake = () => {
      // Cleared before it is called: the resumed loop may run its next tick and sleep at once,
      // inside this call, and set a new one.
      const sleeping = woken
      woken = undefined
      if (sleeping === undefined) wokenMeanwhile = true
      else sleeping()
    }
    const stopped = options.onStopped ?? (() => Effect.void)

    const handOver = (runId: string) =>
      executor.submit(runId).pipe(
        Effect.exit,
        Effect.tap((exit) =>
          Effect.sync(() => {
            if (Exit.isSuccess(exit) && exit.value._tag !== "HandedOver") failedAt.delete(runId)
            else failedAt.set(runId, Date.now())
          })
        ),
        Effect.flatMap((exit) =>
          Exit.isSuccess(exit) ? Effect.void : stopped(runId, exit as Exit.Exit<never, WorkerError>)
        ),
        Effect.ensuring(
          Effect.sync(() => {
            active.delete(runId)
          })
        )
      )

    const take = (runId: string) =>
      executor.engine.placement === "owner"
        ? handOver(runId)
        : carryOn(store, runId, executor.resume(runId), {
            ...options.lease,
            interrupt: executor.interrupt
          }).pipe(
            Effect.exit,
            Effect.tap((exit) =>
              Effect.sync(() => {
                const lostRace =
                  Exit.isFailure(exit) &&
                  exit.cause.reasons.some(
                    (reason) => reason._tag === "Fail" && reason.error._tag === "RunBusy"
                  )
                if (Exit.isFailure(exit) && !lostRace && !Cause.hasInterruptsOnly(exit.cause))
                  failedAt.set(runId, Date.now())
                else failedAt.delete(runId)
              })
            ),
            Effect.flatMap((exit) => stopped(runId, exit as Exit.Exit<Outcome, WorkerError>)),
            Effect.ensuring(
              Effect.sync(() => {
                active.delete(runId)
                // A slot is free, and what it did may have freed a thread.
                wake()
              })
            )
          )

    // On the cluster a hand-over only sends a message: the runner owning the run's shard bounds
    // what it carries at once (`ClusterEngine.make`'s `concurrency`), so every run free to go is
    // handed over at once rather than `concurrency` per poll.
    const limit = executor.engine.placement === "owner" ? Number.POSITIVE_INFINITY : concurrency

    const tick = Effect.gen(function* () {
      if (active.size >= limit) return []
      const runs = yield* store.listRuns({ active: true })
      const claims = yield* store.claims()
      const taken: Array<string> = []
      const now = Date.now()
      for (const run of runnable(runs, claims, now)) {
        if (active.size >= limit) break
        if (active.has(run.runId)) continue
        const failed = failedAt.get(run.runId)
        if (failed !== undefined && now - failed < retryAfterMs) continue
        active.add(run.runId)
        taken.push(run.runId)
        yield* FiberSet.run(fibers, take(run.runId))
      }
      return taken
    })

    const sleep = Effect.callback<void>((resume) => {
      if (wokenMeanwhile) {
        wokenMeanwhile = false
        resume(Effect.void)
        return
      }
      const timer = setTimeout(() => {
        woken = undefined
        resume(Effect.void)
      }, pollMs)
      woken = () => {
        clearTimeout(timer)
        resume(Effect.void)
      }
      return Effect.sync(() => {
        clearTimeout(timer)
        woken = undefined
      })
    })

    // On the cluster a run handed over ends in whichever runner owns it; where that is here, the
    // thread it held may have a run waiting: looked at now rather than at the next poll.
    if (executor.engine.placement === "owner") yield* executor.engine.onBodyEnded(wake)

    const run = Effect.gen(function* () {
      while (true) {
        yield* Effect.ignore(tick)
        yield* sleep
      }
    }) as Effect.Effect<never>

    return { tick, run, wake, active: () => [...active] }
  })
