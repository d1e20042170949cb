/**
 * PlansJson: the bodies of the plans API as Schemas, in the panel's one JSON
 * style (snake_case keys), and how the resources a plan is stored as become
 * them.
 *
 * A plan is what `noema plan` stored: a request's `message`, the tree of
 * `task` resources under it, each task's state on its resource (status, the
 * reason it failed or what its evaluation said, when it was completed, the
 * assistant elected with its score and the candidates it was chosen among,
 * whether a supervisor added it as a corrective subtask) and its output, the
 * newest `message` stored directly under it (the planner's one home for it).
 * A tree is sent depth first in plan order, each task with its depth, as
 * `noema tasks show` prints it; the page writes each task's line as that
 * command does.
 */
import { type Resource, Urn } from "@noema/resources"
import { Schema } from "effect"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

// ---------------------------------------------------------------------------
// The list
// ---------------------------------------------------------------------------

export const PlanSummary = Schema.Struct({
  /** The request's message: what `noema tasks show` and `noema plan --resume` take. */
  urn: Schema.String,
  conversation: Schema.String,
  /** The request, or null when the server's actor may not read it. */
  request: Schema.NullOr(Schema.String),
  /** Whether the server's actor may read the plan (`deny`: listed, nothing of it sent). */
  decision: Schema.Literals(["allow", "deny"]),
  tasks: Count,
  done: Count,
  failed: Count,
  running: Count,
  pending: Count,
  /** When a task of it was last completed, or null before any was. */
  updated_at: Schema.NullOr(Schema.String)
}).annotate({ identifier: "PlanSummary" })
export type PlanSummary = typeof PlanSummary.Type

export const PlanList = Schema.Struct({
  /** Plans in all (the page holds at most `limit` of them). */
  total: Count,
  offset: Count,
  limit: Count,
  plans: Schema.Array(PlanSummary)
}).annotate({ identifier: "PlanList" })
export type PlanList = typeof PlanList.Type

// ---------------------------------------------------------------------------
// A plan's tree
// ---------------------------------------------------------------------------

const Candidate = Schema.Struct({
  assistant: Schema.String,
  /** The assistant's name, when it is registered. */
  name: Schema.NullOr(Schema.String),
  score: Schema.Number
})

const Assignment = Schema.Struct({
  assistant: Schema.String,
  name: Schema.NullOr(Schema.String),
  /** How it was elected: similarity, default (below the threshold), model (chosen among the top). */
  by: Schema.String,
  /** Its similarity to the task, or the best seen when a fallback chose it. */
  score: Schema.Number,
  candidates: Schema.Array(Candidate)
})

export const PlanTask = Schema.Struct({
  urn: Schema.String,
  /** The parent task's URN, or the request's for a task of the first level. */
  parent: Schema.String,
  /** 0 for a task of the first level. */
  depth: Count,
  /** As stored: the title numbered with its position (`2. Write it`). */
  name: Schema.String,
  status: Schema.String,
  corrective: Schema.Boolean,
  assignment: Schema.NullOr(Assignment),
  purpose: Schema.NullOr(Schema.String),
  /** What success means: the criteria its supervisor judges by. */
  evaluation: Schema.NullOr(Schema.String),
  /** Why it failed, or what its evaluation said. */
  reason: Schema.NullOr(Schema.String),
  completed_at: Schema.NullOr(Schema.String),
  /** Its output: the newest message stored under it. */
  output: Schema.NullOr(Schema.String)
}).annotate({ identifier: "PlanTask" })
export type PlanTask = typeof PlanTask.Type

export const PlanTree = Schema.Struct({
  urn: Schema.String,
  conversation: Schema.String,
  request: Schema.String,
  /** Depth first, in plan order. */
  tasks: Schema.Array(PlanTask),
  /** Resources under the plan the server's actor may not read: counted, never sent. */
  withheld: Count
}).annotate({ identifier: "PlanTree" })
export type PlanTree = typeof PlanTree.Type

// ---------------------------------------------------------------------------
// From the resources
// ---------------------------------------------------------------------------

const isTask = (resource: Resource.Resource): resource is Resource.Task => resource.meta.type === "task"

/**
 * The plan a task belongs to: the request message its first task is stored under (a plan's
 * tasks are `.../message.M/task.T/...`; a task's outputs are messages, never tasks).
 */
export const rootOf = (task: string): string | undefined => {
  const elements = task.split("/")
  const first = elements.findIndex(
    (element, index) =>
      index > 0 && element.startsWith("task.") && Urn.typeOf(elements.slice(0, index).join("/")) === "message"
  )
  return first === -1 ? undefined : elements.slice(0, first).join("/")
}

/** The plans among `tasks`, each with its tasks, in the order first met. */
export const plansOf = (tasks: ReadonlyArray<Resource.Resource>): Map<string, Array<Resource.Resource>> => {
  const plans = new Map<string, Array<Resource.Resource>>()
  for (const task of tasks) {
    const root = rootOf(task.meta.urn)
    if (root !== undefined) plans.set(root, [...(plans.get(root) ?? []), task])
  }
  return plans
}

/** Each task's output among `found`: the newest message directly under it (their names start with the time). */
const outputsOf = (found: ReadonlyArray<Resource.Resource>): Map<string, Resource.Message> => {
  const newest = new Map<string, Resource.Message>()
  for (const resource of found) {
    if (resource.meta.type !== "message" || resource.meta.parent === undefined) continue
    const current = newest.get(resource.meta.parent)
    if (current === undefined || current.meta.name < resource.meta.name)
      newest.set(resource.meta.parent, resource as Resource.Message)
  }
  return newest
}

const orNull = (value: string | undefined) => value ?? null

const assignmentOf = (task: Resource.Task, names: ReadonlyMap<string, string>) => {
  const assignment = task.assignment
  if (assignment === undefined) return null
  return {
    assistant: assignment.assistant,
    name: orNull(names.get(assignment.assistant)),
    by: assignment.by,
    score: assignment.score,
    candidates: assignment.candidates.map((candidate) => ({
      assistant: candidate.assistant,
      name: orNull(names.get(candidate.assistant)),
      score: candidate.score
    }))
  }
}

/** The tasks under `root` among `found`, depth first in plan order (as `noema tasks show` walks them). */
export const tasksOf = (
  found: ReadonlyArray<Resource.Resource>,
  root: string,
  names: ReadonlyMap<string, string>
): Array<PlanTask> => {
  const children = new Map<string, Array<Resource.Task>>()
  for (const task of found.filter(isTask)) {
    const parent = task.meta.parent ?? ""
    children.set(parent, [...(children.get(parent) ?? []), task])
  }
  const outputs = outputsOf(found)
  const tasks: Array<PlanTask> = []
  const visit = (parent: string, depth: number) => {
    const siblings = (children.get(parent) ?? []).sort((a, b) => (a.position ?? 0) - (b.position ?? 0))
    for (const task of siblings) {
      tasks.push({
        urn: task.meta.urn,
        parent,
        depth,
        name: task.meta.name,
        status: task.status,
        corrective: task.corrective === true,
        assignment: assignmentOf(task, names),
        purpose: orNull(task.purpose),
        evaluation: orNull(task.evaluation),
        reason: orNull(task.reason),
        completed_at: orNull(task.completedAt),
        output: orNull(outputs.get(task.meta.urn)?.content)
      })
      visit(task.meta.urn, depth + 1)
    }
  }
  visit(root, 0)
  return tasks
}

/** How many of `tasks` are in each state, and when one was last completed. */
export const countsOf = (tasks: ReadonlyArray<Resource.Resource>) => {
  const all = tasks.filter(isTask)
  const count = (status: Resource.Task["status"]) => all.filter((task) => task.status === status).length
  const completed = all.flatMap((task) => (task.completedAt === undefined ? [] : [task.completedAt])).sort()
  return {
    tasks: all.length,
    done: count("done"),
    failed: count("failed"),
    running: count("running"),
    pending: count("pending"),
    updated_at: completed.at(-1) ?? null
  }
}
