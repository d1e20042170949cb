/**
 * RoutinesJson: the bodies of the routines API as Schemas, in the panel's one
 * JSON style (snake_case keys), and how a routine's stored chains and its
 * document become them.
 *
 * A routine is a work breakdown document; the routine store keeps each goal
 * chain's state keyed by the document's absolute path. Each goal's progress
 * is `Routine.progress` over the document and the stored states, the function
 * `noema routine status` prints, so the page and the terminal never disagree:
 * tasks done, open with the agent's reason, ticked in the document (not run),
 * and a goal reopened because its document gained tasks. The path itself is
 * never sent: a routine is named by its path relative to the server's
 * directory (its file name when it lies elsewhere) and addressed by a hash.
 */
import { createHash } from "node:crypto"
import * as path from "node:path"
import { Routine, type RoutineStore, type WorkBreakdown } from "@noema/routines"
import { Schema } from "effect"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

export const RoutineSummary = Schema.Struct({
  /** Stable for the document: where the page finds it again. */
  id: Schema.String,
  /** The document, relative to the directory `noema serve` runs in (its file name when elsewhere). */
  name: Schema.String,
  goals: Count,
  goals_complete: Count,
  tasks: Count,
  tasks_done: Count,
  tasks_open: Count,
  updated_at: Schema.NullOr(Schema.String),
  /** Why the document could not be read (its stored progress is still shown); null when it was. */
  problem: Schema.NullOr(Schema.String)
}).annotate({ identifier: "RoutineSummary" })
export type RoutineSummary = typeof RoutineSummary.Type

export const RoutineList = Schema.Struct({ routines: Schema.Array(RoutineSummary) }).annotate({
  identifier: "RoutineList"
})
export type RoutineList = typeof RoutineList.Type

const TaskProgress = Schema.Struct({
  id: Schema.String,
  title: Schema.String,
  done: Schema.Boolean,
  /** Ticked as done in the document, never run. */
  ticked: Schema.Boolean,
  /** Why the agent left it open; null when it is not open. */
  open: Schema.NullOr(Schema.String),
  /** The agent's own account of what it did, for a task it completed. */
  summary: Schema.NullOr(Schema.String),
  completed_at: Schema.NullOr(Schema.String)
})

export const GoalProgress = Schema.Struct({
  /** `skill/scenario`. */
  chain: Schema.String,
  /** not started, active, complete, or reopened (stored complete; the document gained tasks since). */
  status: Schema.String,
  tasks: Schema.Array(TaskProgress),
  updated_at: Schema.NullOr(Schema.String)
}).annotate({ identifier: "RoutineGoal" })
export type GoalProgress = typeof GoalProgress.Type

export const RoutineDetail = Schema.Struct({
  routine: RoutineSummary,
  goals: Schema.Array(GoalProgress)
}).annotate({ identifier: "RoutineDetail" })
export type RoutineDetail = typeof RoutineDetail.Type

// ---------------------------------------------------------------------------
// From the store and the document
// ---------------------------------------------------------------------------

/** The routine's address in the API: its key's hash, so the key (a path) is never sent. */
export const idOf = (routine: string): string =>
  createHash("sha256").update(routine).digest("hex").slice(0, 16)

/** The document's name as shown: relative to `root` when it lies there, else its file name. */
export const nameOf = (routine: string, root: string): string => {
  const relative = path.relative(root, routine)
  return relative !== "" && !relative.startsWith("..") && !path.isAbsolute(relative)
    ? relative
    : path.basename(routine)
}

const iso = (epochMillis: number) => new Date(epochMillis).toISOString()

/** A goal of the document, or one only the store knows (its document gone or changed). */
const goalOf = (
  progress: Routine.ChainProgress,
  state: RoutineStore.ChainState | undefined
): GoalProgress => {
  const completed = new Map(state?.completed.map((entry) => [entry.task, entry]) ?? [])
  return {
    chain: progress.chain,
    status: progress.status,
    updated_at: state === undefined ? null : iso(state.updatedAt),
    tasks: progress.tasks.map((task) => {
      const entry = completed.get(task.id)
      return {
        id: task.id,
        title: task.title,
        done: task.done,
        ticked: task.ticked,
        open: task.open ?? null,
        summary: entry === undefined || entry.summary === "" ? null : entry.summary,
        completed_at: entry === undefined ? null : iso(entry.completedAt)
      }
    })
  }
}

/** What the store alone says of a chain: its completed and open tasks (no document to name the rest). */
const storedProgress = (state: RoutineStore.ChainState): Routine.ChainProgress => ({
  chain: state.chain,
  status: state.status,
  tasks: [
    ...state.completed.map((entry) => ({ id: entry.task, title: "", done: true, ticked: false })),
    ...state.open.map((entry) => ({
      id: entry.task,
      title: "",
      done: false,
      ticked: false,
      open: entry.reason
    }))
  ]
})

/**
 * A routine's goals: the document's (by `Routine.progress`), or, when it cannot be read,
 * what its stored chains say, with the `problem`.
 */
export const detailOf = (
  routine: string,
  root: string,
  states: ReadonlyArray<RoutineStore.ChainState>,
  document: { readonly breakdown: WorkBreakdown.WorkBreakdown } | { readonly problem: string }
): RoutineDetail => {
  const byChain = new Map(states.map((state) => [state.chain, state]))
  const progress =
    "breakdown" in document ? Routine.progress(document.breakdown, states) : states.map(storedProgress)
  const goals = progress.map((goal) => goalOf(goal, byChain.get(goal.chain)))
  const tasks = goals.flatMap((goal) => goal.tasks)
  const updated = states.map((state) => state.updatedAt).sort((a, b) => a - b)
  return {
    routine: {
      id: idOf(routine),
      name: nameOf(routine, root),
      goals: goals.length,
      goals_complete: goals.filter((goal) => goal.status === "complete").length,
      tasks: tasks.length,
      tasks_done: tasks.filter((task) => task.done).length,
      tasks_open: tasks.filter((task) => task.open !== null).length,
      updated_at: updated.length === 0 ? null : iso(updated.at(-1) as number),
      problem: "problem" in document ? document.problem : null
    },
    goals
  }
}
