/**
 * TaskTree: the plan a model writes in one tool call, and the limits it must keep.
 *
 * A `TaskSpec` is a task with the four descriptive fields (purpose,
 * instructions, applicability, evaluation) and its subtasks, to any depth:
 * one recursive Schema, sent to the model as the tool's JSON Schema (with
 * `$defs`). `problems` checks what a Schema cannot say: the tree's depth,
 * the children per task, the total count, and titles unique among siblings.
 *
 * The optional fields are declared to the model as `anyOf [T, null]` (JSON
 * Schema has no "absent"), and a schema-following model sends `null` for
 * them: so `null` is accepted wherever the field may be left out, and means
 * the same as leaving it out.
 */
import { Schema } from "effect"

export interface TaskSpec {
  readonly title: string
  readonly purpose: string
  readonly instructions: string
  readonly applicability?: string | null
  readonly evaluation: string
  /** False for work that must not be done twice (it sends, pays, deletes): never retried. */
  readonly retryable?: boolean | null
  readonly subtasks: ReadonlyArray<TaskSpec>
}

export const TaskSpec: Schema.Codec<TaskSpec> = Schema.Struct({
  title: Schema.String.annotate({ description: "A short name for the task (unique among its siblings)" }),
  purpose: Schema.String.annotate({ description: "What the task is meant to accomplish" }),
  instructions: Schema.String.annotate({ description: "How to do it" }),
  applicability: Schema.optionalKey(Schema.NullOr(Schema.String)).annotate({
    description: "When this task applies, or not"
  }),
  evaluation: Schema.String.annotate({ description: "What a successful result looks like" }),
  retryable: Schema.optionalKey(Schema.NullOr(Schema.Boolean)).annotate({
    description:
      "false when the task must not be done twice (it sends, pays or deletes something): it is then never retried"
  }),
  subtasks: Schema.Array(Schema.suspend((): Schema.Codec<TaskSpec> => TaskSpec)).annotate({
    description: "Smaller tasks that together achieve this one; empty when it can be done directly"
  })
}).annotate({ identifier: "Task" })

/** What the planning tool receives: the top-level tasks for the request. */
export const Plan = Schema.Struct({
  tasks: Schema.Array(TaskSpec)
})
export type Plan = typeof Plan.Type

export interface Limits {
  /** Levels of tasks, the top level being 1. Default 4. */
  readonly maxDepth: number
  /** Subtasks of one task (and top-level tasks). Default 6. */
  readonly maxChildren: number
  /** Tasks in the whole tree. Default 40. */
  readonly maxTasks: number
}

export const defaultLimits: Limits = { maxDepth: 4, maxChildren: 6, maxTasks: 40 }

/** Every way the plan breaks the limits, each naming where (empty when it keeps them). */
export const problems = (plan: Plan, limits: Limits): Array<string> => {
  const found: Array<string> = []
  let total = 0
  const visit = (tasks: ReadonlyArray<TaskSpec>, depth: number, where: string) => {
    if (tasks.length > limits.maxChildren)
      found.push(`${where} has ${tasks.length} tasks; at most ${limits.maxChildren} are allowed`)
    const titles = new Set<string>()
    for (const task of tasks) {
      total++
      const here = `${where === "the plan" ? "" : `${where} > `}"${task.title}"`
      if (task.title.trim() === "") found.push(`${where}: a task has an empty title`)
      if (titles.has(task.title)) found.push(`${where}: two tasks are titled "${task.title}"`)
      titles.add(task.title)
      if (depth > limits.maxDepth) {
        found.push(`${here} is at depth ${depth}; at most ${limits.maxDepth} levels are allowed`)
        continue
      }
      visit(task.subtasks, depth + 1, here)
    }
  }
  if (plan.tasks.length === 0) found.push("the plan has no tasks")
  visit(plan.tasks, 1, "the plan")
  if (total > limits.maxTasks)
    found.push(`the plan has ${total} tasks; at most ${limits.maxTasks} are allowed`)
  return found
}

/** How many tasks a plan holds. */
export const count = (tasks: ReadonlyArray<TaskSpec>): number =>
  tasks.reduce((sum, task) => sum + 1 + count(task.subtasks), 0)
