/**
 * TaskPlanner: a user's message becomes a tree of tasks, in one tool call.
 *
 * The model is given one tool, `create_tasks`, whose parameters are the
 * recursive `TaskTree.Plan` Schema, and must call it (structured output in
 * tool mode). A payload that is not valid JSON, does not match the Schema or
 * breaks the limits (depth, children, total) is sent back once with every
 * problem listed (a repair round); a second invalid one fails with
 * `PlanningError`, saying why.
 *
 * The tree is persisted as resources through the `ResourceIndex` (the
 * planner's actor, every write authorized): the request as a `message` under
 * its conversation, then each task under its parent, the top-level ones under
 * the message: `cld:conversation.<c>/message.<m>/task.<t1>/task.<t2>`, all in
 * one write (`putMany`: one commit on SQL), so a plan is stored whole or not at
 * all. A task's name is its position and title, so siblings never share a URN.
 */
import { type ChatModel, Message, StructuredOutput } from "@noema/core"
import { Resource, type ResourceIndex } from "@noema/resources"
import { Effect, Schema } from "effect"
import * as TaskTree from "./TaskTree.js"

export class PlanningError extends Schema.TaggedError<PlanningError>()("PlanningError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

/** A task of the persisted tree. */
export interface PlannedTask {
  readonly urn: string
  readonly depth: number
  readonly spec: TaskTree.TaskSpec
  readonly resource: Resource.Task
  readonly subtasks: ReadonlyArray<PlannedTask>
}

export interface PlannedTree {
  readonly conversation: string
  readonly message: string
  readonly tasks: ReadonlyArray<PlannedTask>
}

export const toolName = "create_tasks"

export const systemPrompt = (limits: TaskTree.Limits) =>
  `You plan work for a team of assistants. Break the user's request into tasks by calling ${toolName} once with the whole tree.
Each task has a title, its purpose, instructions, when it applies (optional), and how to evaluate success.
A task that needs several distinct pieces of work gets subtasks; a task one assistant can do directly has none.
Keep it small: at most ${limits.maxDepth} levels, ${limits.maxChildren} subtasks per task, ${limits.maxTasks} tasks in all.`

const planSchemas = new Map<string, ReturnType<typeof checkedPlan>>()
// Sets of limits are few in practice; bounded all the same for a server given them per request.
const planSchemasHeld = 64

const checkedPlan = (limits: TaskTree.Limits) => {
  // Its own copy: the filter must not see a caller's object change after it was made.
  const kept: TaskTree.Limits = {
    maxDepth: limits.maxDepth,
    maxChildren: limits.maxChildren,
    maxTasks: limits.maxTasks
  }
  return TaskTree.Plan.check(
    Schema.makeFilter((plan: TaskTree.Plan) => {
      const found = TaskTree.problems(plan, kept)
      return found.length === 0 ? undefined : found.join("; ")
    })
  )
}

/**
 * The plan's Schema checked against `limits`, one per set of limits: structured output derives
 * the JSON Schema it sends and compiles its decoder once per Schema, so a new Schema every
 * plan paid for both every run.
 */
const planSchema = (limits: TaskTree.Limits) => {
  const key = `${limits.maxDepth}/${limits.maxChildren}/${limits.maxTasks}`
  let schema = planSchemas.get(key)
  if (schema === undefined) {
    schema = checkedPlan(limits)
    if (planSchemas.size >= planSchemasHeld) planSchemas.clear()
    planSchemas.set(key, schema)
  }
  return schema
}

/** Asks the model for the plan (one tool call, one repair round). */
export const plan = (
  model: ChatModel.Service,
  request: string,
  options: { readonly limits?: TaskTree.Limits; readonly context?: ReadonlyArray<Message.Message> } = {}
): Effect.Effect<TaskTree.Plan, PlanningError> => {
  const limits = options.limits ?? TaskTree.defaultLimits
  return StructuredOutput.generate(model, {
    schema: planSchema(limits),
    name: toolName,
    description: "Create the whole tree of tasks for the request, in one call.",
    mode: "tool",
    maxRepairs: 1,
    messages: [Message.system(systemPrompt(limits)), ...(options.context ?? []), Message.user(request)]
  }).pipe(
    Effect.mapError(
      (error) =>
        new PlanningError({
          message: `planning failed: ${error.message.replace(/\s*\n\s*/g, "; ")}`,
          cause: error
        })
    )
  )
}

/** The task resource for a spec, under `parent`, at `position` among its siblings. */
export const taskResource = (
  parent: string,
  spec: TaskTree.TaskSpec,
  position: number,
  extra: { readonly corrective?: boolean; readonly input?: string } = {}
): Resource.Task =>
  Resource.make("task", {
    name: `${position}. ${spec.title}`,
    parent,
    purpose: spec.purpose,
    instructions: spec.instructions,
    // null, as a schema-following model sends for an optional field, is the field left out.
    ...(typeof spec.applicability === "string" ? { applicability: spec.applicability } : {}),
    evaluation: spec.evaluation,
    status: "pending",
    position,
    ...(spec.retryable === false ? { retryable: false } : {}),
    ...(extra.corrective === true ? { corrective: true } : {}),
    ...(extra.input === undefined ? {} : { input: extra.input })
  })

/** The tasks of `specs` under `parent`, numbered from `firstPosition`, each with its subtree (not stored yet). */
export const plannedTasks = (
  parent: string,
  specs: ReadonlyArray<TaskTree.TaskSpec>,
  depth: number,
  options: { readonly firstPosition?: number; readonly corrective?: boolean } = {}
): Array<PlannedTask> =>
  specs.map((spec, i) => {
    const resource = taskResource(parent, spec, (options.firstPosition ?? 1) + i, {
      ...(options.corrective === true ? { corrective: true } : {})
    })
    return {
      urn: resource.meta.urn,
      depth,
      spec,
      resource,
      subtasks: plannedTasks(resource.meta.urn, spec.subtasks, depth + 1)
    }
  })

/** Every task resource of `tasks`, depth-first (a parent before its subtasks). */
const resourcesOf = (tasks: ReadonlyArray<PlannedTask>): Array<Resource.Resource> =>
  tasks.flatMap((task) => [task.resource, ...resourcesOf(task.subtasks)])

/** `tasks` with each resource as the store gave it back (its `meta.tokens` and `meta.created` set). */
const asStored = (
  tasks: ReadonlyArray<PlannedTask>,
  stored: ReadonlyMap<string, Resource.Resource>
): Array<PlannedTask> =>
  tasks.map((task) => ({
    ...task,
    resource: (stored.get(task.urn) as Resource.Task | undefined) ?? task.resource,
    subtasks: asStored(task.subtasks, stored)
  }))

const byUrn = (resources: ReadonlyArray<Resource.Resource>) =>
  new Map(resources.map((resource) => [resource.meta.urn, resource]))

/**
 * Persists `specs` under `parent` (depth-first), numbering siblings from `firstPosition`:
 * one write for the whole subtree, so it is stored entirely or not at all.
 */
export const persistTasks = (
  index: ResourceIndex.Service,
  actor: string,
  parent: string,
  specs: ReadonlyArray<TaskTree.TaskSpec>,
  depth: number,
  options: { readonly firstPosition?: number; readonly corrective?: boolean } = {}
): Effect.Effect<Array<PlannedTask>, PlanningError> => {
  const tasks = plannedTasks(parent, specs, depth, options)
  return Effect.mapBoth(index.putMany(actor, resourcesOf(tasks)), {
    onFailure: (error) => new PlanningError({ message: `storing the tasks: ${error.message}`, cause: error }),
    onSuccess: (stored) => asStored(tasks, byUrn(stored))
  })
}

/**
 * Plans `request` and persists the tree: the request as a message of
 * `conversation` (a new one named after the request when not given), and the tasks under it.
 */
export const planAndPersist = (options: {
  readonly model: ChatModel.Service
  readonly index: ResourceIndex.Service
  readonly actor: string
  readonly request: string
  readonly conversation?: string
  readonly limits?: TaskTree.Limits
}): Effect.Effect<PlannedTree, PlanningError> =>
  Effect.gen(function* () {
    const stored = <A>(what: string, effect: Effect.Effect<A, { readonly message: string }>) =>
      Effect.mapError(
        effect,
        (error) => new PlanningError({ message: `storing ${what}: ${error.message}`, cause: error })
      )
    const tree = yield* plan(options.model, options.request, options.limits ? { limits: options.limits } : {})
    const created =
      options.conversation === undefined
        ? Resource.make("conversation", {
            name: `${new Date().toISOString()} ${options.request.slice(0, 60)}`,
            title: options.request.slice(0, 80)
          })
        : undefined
    const conversation = created?.meta.urn ?? (options.conversation as string)
    const message = Resource.make("message", {
      name: `request ${crypto.randomUUID()}`,
      parent: conversation,
      role: "user",
      content: options.request
    })
    const tasks = plannedTasks(message.meta.urn, tree.tasks, 1)
    // One write: the plan is stored whole (a conversation begun, its request, every task) or not at all.
    const written = yield* stored(
      "the plan",
      options.index.putMany(options.actor, [
        ...(created === undefined ? [] : [created]),
        message,
        ...resourcesOf(tasks)
      ])
    )
    return { conversation, message: message.meta.urn, tasks: asStored(tasks, byUrn(written)) }
  })
