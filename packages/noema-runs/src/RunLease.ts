/**
 * RunLease: which process carries a run on, so a run is executed by one
 * process at a time, on one machine or many, and a dead one's run is taken
 * over.
 *
 * The lease is the store's claim (`RunsStore.claim`), owned by
 * `<host>/<pid>/<random>`. Whoever holds it renews it every `ttlMs / 3`; a
 * renewal that is refused (another process took the run after this one stalled
 * longer than `ttlMs`) interrupts the work with `LeaseLost`. Another process
 * gets the run once the claim has expired, or at once when the holder was on
 * the same host and its pid is gone (a SIGKILL, a crash). A process on another
 * machine waits for the expiry: `ttlMs` is how long a dead machine's runs wait.
 * Deadlines are epoch milliseconds on each claimer's clock, so the machines'
 * clocks must agree to well within `ttlMs` (NTP).
 */
import * as os from "node:os"
import { Duration, Effect, Schema } from "effect"
import { type RunView, ThreadBusy } from "./Run.js"
import type { Claim, RunsStoreError, Service as Store } from "./RunsStore.js"

export class RunBusy extends Schema.TaggedError<RunBusy>()("RunBusy", {
  runId: Schema.String,
  owner: Schema.String,
  expiresAt: Schema.Number
}) {
  override get message() {
    const holder = ownerParts(this.owner)
    return `run ${this.runId} is being carried on by ${holder === undefined ? this.owner : `process ${holder.pid} on ${holder.host}`} (its claim runs until ${new Date(this.expiresAt).toISOString()})`
  }
}

export class LeaseLost extends Schema.TaggedError<LeaseLost>()("LeaseLost", {
  runId: Schema.String,
  owner: Schema.String
}) {
  override get message() {
    return `run ${this.runId} was taken over by ${this.owner} while this process carried it on (it stalled longer than the claim's time to live)`
  }
}

export interface Options {
  /** How long a claim lasts without renewal. Default 15 s. */
  readonly ttlMs?: number
  /** Default: this process (`processOwner`). */
  readonly owner?: string
}

export const defaultTtlMs = 15_000

/** `<host>/<pid>/<random>`: this process, as claims name it. */
export const processOwner = `${os.hostname()}/${process.pid}/${crypto.randomUUID().slice(0, 8)}`

export const ownerParts = (owner: string): { readonly host: string; readonly pid: number } | undefined => {
  const match = /^(.*)\/(\d+)\/[^/]*$/.exec(owner)
  return match === null ? undefined : { host: match[1] as string, pid: Number(match[2]) }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** Whether nobody carries the run on under `claim` any more: expired, or its process on this host is gone. */
export const isStale = (claim: Claim, now: number = Date.now()): boolean => {
  if (claim.expiresAt < now) return true
  const holder = ownerParts(claim.owner)
  return (
    holder !== undefined && holder.host === os.hostname() && holder.pid !== process.pid && !alive(holder.pid)
  )
}

/** The runs a live process carries on now: those whose claim is not stale. */
export const carried = (claims: ReadonlyArray<Claim>, now: number = Date.now()): ReadonlySet<string> =>
  new Set(claims.filter((claim) => !isStale(claim, now)).map((claim) => claim.runId))

/**
 * Whether `run` was interrupted: the timeline says it is running, but no live process carries
 * it on (its process was killed, crashed or stopped, or nobody took it since it was approved or
 * retried). It goes on only when `noema runs resume` or a worker takes it.
 */
export const isInterrupted = (run: RunView, carriedOn: ReadonlySet<string>): boolean =>
  run.status === "running" && !carriedOn.has(run.runId)

/** What carries an interrupted run on, in words (the CLI's, the panel's). */
export const resumeHint = (runId: string): string =>
  `noema runs resume ${runId}, or a worker (noema worker, noema serve)`

/**
 * `error`, saying so when the run holding the thread was interrupted: then waiting for it
 * frees nothing. The refusal as it was if the store cannot tell.
 */
export const explainBusy = (store: Store, error: ThreadBusy): Effect.Effect<ThreadBusy> =>
  Effect.gen(function* () {
    const run = yield* store.getRun(error.activeRunId)
    const carriedOn = carried(yield* store.claims())
    return isInterrupted(run, carriedOn)
      ? new ThreadBusy({ threadId: error.threadId, activeRunId: error.activeRunId, interrupted: true })
      : error
  }).pipe(Effect.orElseSucceed(() => error))

/** Takes the run's claim, taking over a stale one; `RunBusy` while a live process holds it. */
export const acquire = (
  store: Store,
  runId: string,
  options: Options = {}
): Effect.Effect<void, RunBusy | RunsStoreError> =>
  Effect.gen(function* () {
    const owner = options.owner ?? processOwner
    const ttlMs = options.ttlMs ?? defaultTtlMs
    const first = yield* store.claim(runId, { owner, ttlMs })
    if (first.claimed) return
    if (isStale(first.holder)) {
      const second = yield* store.claim(runId, { owner, ttlMs, takeOver: first.holder.owner })
      if (second.claimed) return
      return yield* Effect.fail(
        new RunBusy({ runId, owner: second.holder.owner, expiresAt: second.holder.expiresAt })
      )
    }
    return yield* Effect.fail(
      new RunBusy({ runId, owner: first.holder.owner, expiresAt: first.holder.expiresAt })
    )
  })

/**
 * Renews the claim every `ttlMs / 3`; fails with `LeaseLost` when it was taken. A store that
 * fails to answer is asked again until the claim would have expired.
 */
const keepAlive = (store: Store, runId: string, owner: string, ttlMs: number) =>
  Effect.gen(function* () {
    let renewedAt = Date.now()
    while (true) {
      yield* Effect.sleep(Duration.millis(Math.max(10, Math.floor(ttlMs / 3))))
      const renewed = yield* Effect.result(store.claim(runId, { owner, ttlMs }))
      if (renewed._tag === "Failure") {
        if (Date.now() - renewedAt > ttlMs) return yield* Effect.fail(renewed.failure)
        continue
      }
      if (!renewed.success.claimed)
        return yield* Effect.fail(new LeaseLost({ runId, owner: renewed.success.holder.owner }))
      renewedAt = Date.now()
    }
  })

/**
 * Runs `effect` holding the run's claim (see the module's comment): taken first, renewed
 * while it runs (a lost claim interrupts it), released when it ends, however it ends.
 */
export const withLease = <A, E, R>(
  store: Store,
  runId: string,
  effect: Effect.Effect<A, E, R>,
  options: Options = {}
): Effect.Effect<A, E | RunBusy | LeaseLost | RunsStoreError, R> => {
  const owner = options.owner ?? processOwner
  const ttlMs = options.ttlMs ?? defaultTtlMs
  return Effect.acquireUseRelease(
    acquire(store, runId, { owner, ttlMs }),
    () => Effect.raceFirst(effect, keepAlive(store, runId, owner, ttlMs)),
    () => Effect.ignore(store.release(runId, owner))
  )
}
