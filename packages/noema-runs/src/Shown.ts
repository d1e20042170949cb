/**
 * Shown: threads and runs as their readers see them (`noema threads|runs`, the
 * HTTP API, the panel), and the one JSON encoder of everything they are sent.
 *
 * What is shown adds to the store's views what only the claims know: a run the
 * timeline says is `running` but that no live process carries on (its process
 * was killed or stopped) is shown `interrupted`, with the stage and attempt it
 * was cut in (`RunLease.isInterrupted`); a thread says which run holds it.
 * `interrupted` is not a state of the run: the timeline still says running,
 * and `noema runs resume` or a worker carries it on from there.
 *
 * The JSON style is the files' (seed 004: `run_id`, `stage_key`,
 * `started_at`): every key in snake_case. The models keep TypeScript's
 * camelCase; `json` renames their keys, all the way down, at this one boundary,
 * for `--json` and the API's bodies alike. Values are never touched.
 */
import { Effect } from "effect"
import type { AttemptView, RunStatus, RunView, StageStatus, StageView, Thread } from "./Run.js"
import * as RunLease from "./RunLease.js"
import { holderOf, type RunsStoreError, type Service as Store } from "./RunsStore.js"

// ---------------------------------------------------------------------------
// Runs and threads as shown
// ---------------------------------------------------------------------------

export type ShownAttempt = Omit<AttemptView, "status"> & {
  readonly status: AttemptView["status"] | "interrupted"
}

export type ShownStage = Omit<StageView, "status" | "attempts"> & {
  readonly status: StageStatus | "interrupted"
  readonly attempts: ReadonlyArray<ShownAttempt>
}

export type ShownRun = Omit<RunView, "status" | "stages"> & {
  readonly status: RunStatus | "interrupted"
  readonly stages: ReadonlyArray<ShownStage>
}

export interface ShownThread extends Thread {
  /** The run holding the thread (running or waiting for approval), as shown; null when it is free. */
  readonly activeRun: { readonly runId: string; readonly status: ShownRun["status"] } | null
  /** Runs waiting in the thread's queue. */
  readonly queuedRuns: number
}

/** `view` as shown, given the runs a live process carries on (`RunLease.carried`). */
export const run = (view: RunView, carriedOn: ReadonlySet<string>): ShownRun => {
  if (!RunLease.isInterrupted(view, carriedOn)) return view
  return {
    ...view,
    status: "interrupted",
    stages: view.stages.map((stage) =>
      stage.status === "running"
        ? {
            ...stage,
            status: "interrupted",
            attempts: stage.attempts.map((attempt) =>
              attempt.status === "running" ? { ...attempt, status: "interrupted" } : attempt
            )
          }
        : stage
    )
  }
}

/** `thread` as shown, given its runs (any order) and the runs a live process carries on. */
export const thread = (
  thread: Thread,
  threadRuns: ReadonlyArray<RunView>,
  carriedOn: ReadonlySet<string>
): ShownThread => {
  const holder = holderOf(threadRuns)
  return {
    ...thread,
    activeRun: holder === undefined ? null : { runId: holder.runId, status: run(holder, carriedOn).status },
    queuedRuns: threadRuns.filter((other) => other.status === "queued").length
  }
}

/** The runs (of a thread, or all), in creation order, as shown. */
export const runs = (
  store: Store,
  filter: { readonly threadId?: string } = {}
): Effect.Effect<ReadonlyArray<ShownRun>, RunsStoreError> =>
  Effect.gen(function* () {
    const views = yield* store.listRuns(filter)
    const carriedOn = RunLease.carried(yield* store.claims())
    return views.map((view) => run(view, carriedOn))
  })

/** Every thread, as shown. */
export const threads = (store: Store): Effect.Effect<ReadonlyArray<ShownThread>, RunsStoreError> =>
  Effect.gen(function* () {
    const all = yield* store.listThreads()
    const views = yield* store.listRuns()
    const carriedOn = RunLease.carried(yield* store.claims())
    return all.map((one) =>
      thread(
        one,
        views.filter((view) => view.threadId === one.id),
        carriedOn
      )
    )
  })

/** `one` as shown, with its runs read from the store. */
export const threadOf = (store: Store, one: Thread): Effect.Effect<ShownThread, RunsStoreError> =>
  Effect.gen(function* () {
    const views = yield* store.listRuns({ threadId: one.id })
    return thread(one, views, RunLease.carried(yield* store.claims()))
  })

/** The run `runId` as shown. */
export const runOf = (store: Store, runId: string) =>
  Effect.gen(function* () {
    const view = yield* store.getRun(runId)
    return run(view, RunLease.carried(yield* store.claims()))
  })

// ---------------------------------------------------------------------------
// The JSON style
// ---------------------------------------------------------------------------

/** `runFileSha256` -> `run_file_sha256`; a snake_case key stays as it is. */
export const snakeCase = (key: string): string =>
  key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`)

const isPlainObject = (value: unknown): value is Record<string, unknown> => {
  if (typeof value !== "object" || value === null) return false
  const prototype = Object.getPrototypeOf(value)
  return prototype === Object.prototype || prototype === null
}

/**
 * `value` ready for `JSON.stringify` in the runs' JSON style: every key of every plain object
 * in snake_case, all the way down. Only names are renamed: no model keys an object by data
 * (a path, a user's text), so no data is ever rewritten.
 */
export const json = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(json)
  if (!isPlainObject(value)) return value
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) out[snakeCase(key)] = json(inner)
  return out
}

/** `value` as JSON text in the runs' style (see `json`). */
export const stringify = (value: unknown): string => JSON.stringify(json(value))
