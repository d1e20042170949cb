/**
 * StoredTree: a plan as the store holds it, the one home of its state.
 *
 * A task's status, reason and completion time are on its `task` resource; its
 * output is the newest `message` stored directly under it (a leaf's answer, a
 * supervisor's final verdict). Supervisors read their subtasks' outcomes from
 * here, the answer is composed from here, and a plan cut short (a kill, Ctrl-C)
 * is rebuilt from here to be resumed: nothing is kept only in memory.
 */
import type { Resource, ResourceIndex, ResourceStore } from "@noema/resources"
import { Effect, Schema } from "effect"
import type * as TaskPlanner from "../TaskPlanner.js"
import type * as TaskTree from "../TaskTree.js"

/** What became of a task, as stored. */
export interface Outcome {
  readonly urn: string
  readonly title: string
  readonly status: "done" | "failed"
  readonly output?: string
  readonly reason?: string
}

/** The title a task was planned with: its name without the position it was numbered with. */
export const titleOf = (task: Resource.Task): string => {
  const prefix = `${task.position}. `
  return task.position !== undefined && task.meta.name.startsWith(prefix)
    ? task.meta.name.slice(prefix.length)
    : task.meta.name
}

/** Each task's output among `found`: the newest message directly under it (names start with the time). */
export const outputs = (found: ReadonlyArray<Resource.Resource>): Map<string, Resource.Message> => {
  const newest = new Map<string, Resource.Message>()
  for (const resource of found) {
    if (resource.meta.type !== "message" || resource.meta.parent === undefined) continue
    const current = newest.get(resource.meta.parent)
    if (current === undefined || current.meta.name < resource.meta.name)
      newest.set(resource.meta.parent, resource as Resource.Message)
  }
  return newest
}

/** The outcome `task` has in the store, or undefined while it is not stored done or failed. */
export const outcomeOf = (
  task: Resource.Task,
  found: ReadonlyMap<string, Resource.Message>
): Outcome | undefined => {
  const title = titleOf(task)
  if (task.status === "done")
    return { urn: task.meta.urn, title, status: "done", output: found.get(task.meta.urn)?.content ?? "" }
  if (task.status === "failed")
    return { urn: task.meta.urn, title, status: "failed", reason: task.reason ?? "failed" }
  return undefined
}

const specOf = (task: Resource.Task, subtasks: ReadonlyArray<TaskTree.TaskSpec>): TaskTree.TaskSpec => ({
  title: titleOf(task),
  purpose: task.purpose ?? "",
  instructions: task.instructions ?? "",
  ...(task.applicability === undefined ? {} : { applicability: task.applicability }),
  evaluation: task.evaluation ?? "",
  ...(task.retryable === false ? { retryable: false } : {}),
  subtasks
})

/** The tasks under `parent` among `found`, in their plan order, each with its subtree. */
export const tasksUnder = (
  found: ReadonlyArray<Resource.Resource>,
  parent: string,
  depth = 1
): Array<TaskPlanner.PlannedTask> => {
  const children = new Map<string, Array<Resource.Task>>()
  for (const resource of found)
    if (resource.meta.type === "task" && resource.meta.parent !== undefined)
      children.set(resource.meta.parent, [
        ...(children.get(resource.meta.parent) ?? []),
        resource as Resource.Task
      ])
  const build = (urn: string, level: number): Array<TaskPlanner.PlannedTask> =>
    (children.get(urn) ?? [])
      .sort((a, b) => (a.position ?? 0) - (b.position ?? 0))
      .map((resource) => {
        const subtasks = build(resource.meta.urn, level + 1)
        return {
          urn: resource.meta.urn,
          depth: level,
          spec: specOf(
            resource,
            subtasks.map((subtask) => subtask.spec)
          ),
          resource,
          subtasks
        }
      })
  return build(parent, depth)
}

/** The tree planned under a request's `message`, read as `actor`, with the request it answers. */
export const read = (
  index: ResourceIndex.Service,
  actor: string,
  message: string
): Effect.Effect<
  {
    readonly tree: TaskPlanner.PlannedTree
    readonly request: string
    readonly found: Array<Resource.Resource>
  },
  ResourceIndex.Failure | ResourceStore.ResourceNotFoundError | NotAPlanError
> =>
  Effect.gen(function* () {
    const request = yield* index.get(actor, message)
    if (request.meta.type !== "message" || request.meta.parent === undefined)
      return yield* Effect.fail(notAPlan(message, `it is a ${request.meta.type}, not a request's message`))
    const found = yield* index.findByPrefix(actor, message)
    const tasks = tasksUnder(found, message)
    if (tasks.length === 0) return yield* Effect.fail(notAPlan(message, "no tasks are stored under it"))
    const tree: TaskPlanner.PlannedTree = { conversation: request.meta.parent, message, tasks }
    return { tree, request: (request as Resource.Message).content, found }
  })

/** The URN names no plan to resume. */
export class NotAPlanError extends Schema.TaggedError<NotAPlanError>()("NotAPlanError", {
  urn: Schema.String,
  message: Schema.String
}) {}

const notAPlan = (urn: string, why: string) =>
  new NotAPlanError({ urn, message: `${urn} is not a plan to resume: ${why}` })

/** Every task of `tasks`, depth first in plan order. */
export const flatten = (tasks: ReadonlyArray<TaskPlanner.PlannedTask>): Array<TaskPlanner.PlannedTask> =>
  tasks.flatMap((task) => [task, ...flatten(task.subtasks)])
