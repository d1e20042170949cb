/**
 * RoutineStore: where each goal chain's state lives between steps.
 *
 * A chain's state (its variables, which preambles its conversation already
 * holds, its completed tasks with their evidence, the conversation itself) is
 * saved whole after every step, in one statement, so a process killed at any
 * moment leaves either the state before the step or after it. A task is
 * completed by the agent's verdict (see `TaskVerdict`); one it tried and did
 * not complete is kept open with the reason. Two
 * implementations: memory (tests, one process) and SQL on effect's `SqlClient`
 * (SQLite and PostgreSQL, the same code; see `SqlRoutineStore`).
 */
import { Message } from "@noema/core"
import type { DatabaseError } from "@noema/sql"
import { Context, Effect, Layer, Schema } from "effect"
import * as TaskVerdict from "./TaskVerdict.js"

export const CompletedTask = Schema.Struct({
  task: Schema.String,
  /** The task's output message: what the agent answered when it finished the task. */
  evidence: Message.Message,
  completedAt: Schema.Number,
  /** What decided it was done (the agent's `complete_task` call, its structured verdict, ...). */
  source: TaskVerdict.Source,
  /** The agent's own account of what was done (the verdict's summary). */
  summary: Schema.String
})
export type CompletedTask = typeof CompletedTask.Type

/** A task the agent tried and did not complete: it runs again next time, and says why it is open. */
export const OpenTask = Schema.Struct({
  task: Schema.String,
  /** The agent's reason (its verdict), or `TaskVerdict.notConfirmed` when it gave none. */
  reason: Schema.String,
  at: Schema.Number
})
export type OpenTask = typeof OpenTask.Type

export const SetupFailure = Schema.Struct({
  attempt: Schema.Number,
  error: Schema.String,
  at: Schema.Number
})
export type SetupFailure = typeof SetupFailure.Type

export const ChainState = Schema.Struct({
  /** The routine (a document) the chain belongs to. */
  routine: Schema.String,
  /** `skill/scenario`. */
  chain: Schema.String,
  status: Schema.Literals(["active", "complete"]),
  variables: Schema.Record(Schema.String, Schema.String),
  /** Which preambles the stored conversation holds (never sent twice). */
  sent: Schema.Struct({ skillPreamble: Schema.Boolean, scenarioPreamble: Schema.Boolean }),
  completed: Schema.Array(CompletedTask),
  /** Tasks tried and left open, at most one entry per task (the latest); a completed task has none. */
  open: Schema.Array(OpenTask),
  /** The chain's conversation: preambles, overviews, tasks and the agent's answers. */
  messages: Schema.Array(Message.Message),
  /** Setup attempts that failed (variables a source could not give), most recent last. */
  failures: Schema.Array(SetupFailure),
  updatedAt: Schema.Number,
  /** 1 for the first save, one more for each next: a save must follow the one it read. */
  revision: Schema.Number
})
export type ChainState = typeof ChainState.Type

export const ChainStateFromJson = Schema.fromJsonString(ChainState)

/** The chain was saved by someone else (another process working on it) since it was read. */
export class RoutineConflictError extends Schema.TaggedError<RoutineConflictError>()("RoutineConflictError", {
  routine: Schema.String,
  chain: Schema.String
}) {
  override get message(): string {
    return `Goal ${this.chain} of ${this.routine} was changed by another run since it was read; run it again to continue from there`
  }
}

export interface Service {
  /** Where the routines live, for messages to people. */
  readonly location: string
  load(routine: string, chain: string): Effect.Effect<ChainState | undefined, DatabaseError.DatabaseError>
  /** Every chain of `routine` that has state, by chain key. */
  list(routine: string): Effect.Effect<ReadonlyArray<ChainState>, DatabaseError.DatabaseError>
  /** Every routine (document) with a chain's state, in order: what a browser of routines lists. */
  routines(): Effect.Effect<ReadonlyArray<string>, DatabaseError.DatabaseError>
  /**
   * Replaces the chain's state (one atomic write), if the stored one is still revision
   * `state.revision - 1` (or there is none); otherwise `RoutineConflictError`.
   */
  save(state: ChainState): Effect.Effect<void, DatabaseError.DatabaseError | RoutineConflictError>
}

export class RoutineStore extends Context.Service<RoutineStore, Service>()("@noema/routines/RoutineStore") {}

/** A store in memory: what a process keeps, until it ends. */
export const memory = (): Service => {
  const states = new Map<string, string>()
  const key = (routine: string, chain: string) => JSON.stringify([routine, chain])
  const encode = Schema.encodeSync(ChainStateFromJson)
  const decode = Schema.decodeSync(ChainStateFromJson)
  return {
    location: "memory",
    load: (routine, chain) =>
      Effect.sync(() => {
        const stored = states.get(key(routine, chain))
        return stored === undefined ? undefined : decode(stored)
      }),
    list: (routine) =>
      Effect.sync(() =>
        [...states.values()]
          .map((stored) => decode(stored))
          .filter((state) => state.routine === routine)
          .sort((a, b) => (a.chain < b.chain ? -1 : a.chain > b.chain ? 1 : 0))
      ),
    routines: () =>
      Effect.sync(() =>
        [...new Set([...states.values()].map((stored) => decode(stored).routine))].sort((a, b) =>
          a < b ? -1 : a > b ? 1 : 0
        )
      ),
    save: (state) =>
      Effect.suspend(() => {
        const stored = states.get(key(state.routine, state.chain))
        if (stored !== undefined && decode(stored).revision !== state.revision - 1) {
          return Effect.fail(new RoutineConflictError({ routine: state.routine, chain: state.chain }))
        }
        states.set(key(state.routine, state.chain), encode(state))
        return Effect.void
      })
  }
}

export const layerMemory: Layer.Layer<RoutineStore> = Layer.sync(RoutineStore, memory)
