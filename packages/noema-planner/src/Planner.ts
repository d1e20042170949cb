/**
 * Planner: a request planned as a task tree, each task given an assistant,
 * leaves run directly, parents supervising their subtasks through events.
 *
 * 1. **Plan** (`TaskPlanner`): the whole tree in one tool call, persisted as
 *    resources under the request's message.
 * 2. **Assign** (`Assistants.elect`): every task, recursively, gets the
 *    assistant most similar to it; the assignment (scores, candidates, how it
 *    was chosen) is stored on the task.
 * 3. **Execute.** A task without subtasks runs **directly**: its context
 *    window (the resources along its URN path, the most similar ones, the
 *    conversation's history), the assistant's inner tool loop (`ToolAgent`),
 *    and its output persisted as a `message` resource under the task in the
 *    same write as the task stored `done` (or the task stored `failed`, with
 *    why), with its `completedAt`. The
 *    statements the output states (`Graph.factFormat` lines) go into the RDF
 *    graph, named after the message, and every leaf has `graph_query` (answering
 *    with what its assistant may read). A task with subtasks
 *    **supervises**: it subscribes, as its assistant (which hears only what
 *    the policy lets it read), to `RESOURCE_PUT` events under its URN before
 *    its subtasks start, and learns from those events, not from the fibers,
 *    when each subtask has finished; then it reads their outcomes from the
 *    store (each one's status and the message under it), evaluates them
 *    against its `evaluation` with the model, and when they fall short it adds
 *    corrective subtasks (assigned and run the same way) and evaluates again;
 *    its verdict is stored as its own final message.
 *    Siblings run in parallel, at most `parallel` leaves at a time.
 * 4. **Answer**: the top-level tasks' outputs, and what is missing, read
 *    from the store.
 *
 * The store is the one home of a plan's state, so `resume` continues a plan
 * cut short (a kill, Ctrl-C) from it: what is done is not run again (its
 * output is read back), the rest is run, and a task marked `retryable: false`
 * that had started is not run twice. The registered tools are stored as
 * `tool` resources.
 *
 * Each state change is one write (the plan, the tree's assignments, a task's
 * start, its outcome with its output). A run keeps what it wrote in step with
 * its writes, so it writes a task's next state without reading it back, and in
 * a conversation it began (where everything was written by it) it lists what
 * lies under a task from there, through the policy as from the store
 * (`ResourceIndex.filterReadable`): "read from the store" above is what the
 * store holds, without reading it again.
 *
 * Hard limits: the tree's depth, children and size (at planning), corrective
 * rounds per task, model calls and tokens in all (`Budget`), and stall
 * detection: a supervisor that hears nothing from its subtasks for
 * `stallTimeout` stops them and fails, saying which did not finish. When a
 * limit stops work, the answer says what is missing; nothing loops silently.
 * Every access to resources goes through the `ResourceIndex` (the policy),
 * with the assigned assistant as the actor.
 */

import { ToolAgent } from "@noema/agents"
import { type ChatModel, ConversationContext, Message, StructuredOutput, type Tool } from "@noema/core"
import { Resource, type ResourceEvents, type ResourceIndex, Urn } from "@noema/resources"
import { Cause, Duration, Effect, Fiber, Option, Schema, Semaphore, Stream } from "effect"
import * as Assistants from "./Assistants.js"
import * as Budget from "./Budget.js"
import * as ContextWindow from "./ContextWindow.js"
import * as Graph from "./Graph.js"
import * as Listening from "./internal/Listening.js"
import * as StoredTree from "./internal/StoredTree.js"
import * as TaskPlanner from "./TaskPlanner.js"
import * as TaskTree from "./TaskTree.js"

export interface Limits extends TaskTree.Limits, Budget.Limits {
  /** Corrective rounds a supervisor may add. Default 2. */
  readonly maxCorrectiveRounds: number
  /** Leaves worked on at the same time. Default 4. */
  readonly parallel: number
  /** How long a supervisor waits without hearing from its subtasks. Default 2 minutes. */
  readonly stallTimeout: Duration.Input
  /** Model calls of one leaf's inner loop. Default 8. */
  readonly maxSteps: number
  /** Tokens of a leaf's context window. Default 2000. */
  readonly contextTokens: number
}

export const defaultLimits: Limits = {
  ...TaskTree.defaultLimits,
  maxModelCalls: 100,
  maxTokens: 400_000,
  maxCorrectiveRounds: 2,
  parallel: 4,
  stallTimeout: "2 minutes",
  maxSteps: 8,
  contextTokens: 2000
}

/** What the planner reports as it works (the CLI draws the tree from these). */
export type PlannerEvent =
  | { readonly type: "planned"; readonly tree: TaskPlanner.PlannedTree }
  | {
      readonly type: "assigned"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly assignment: Resource.Assignment
    }
  | {
      readonly type: "started"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly mode: "direct" | "supervising"
    }
  | {
      readonly type: "done"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly output: string
      /** Done in an earlier run of the plan (resumed): not run again, its output read back. */
      readonly before?: true
    }
  | {
      readonly type: "failed"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly reason: string
    }
  | {
      readonly type: "evaluated"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly successful: boolean
      readonly reason: string
    }
  | {
      readonly type: "corrective"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly tasks: ReadonlyArray<TaskPlanner.PlannedTask>
    }
  | {
      readonly type: "stalled"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly waitingFor: ReadonlyArray<string>
    }
  /** A leaf's context window: what it holds, what did not fit, what the policy withheld. */
  | {
      readonly type: "context"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly items: ReadonlyArray<string>
      readonly dropped: ReadonlyArray<string>
      readonly withheld: ReadonlyArray<string>
    }

export interface Options {
  readonly model: ChatModel.Service
  /**
   * The index every access goes through: its store, its policy, and its vector index (made
   * with `{ vectors }`), which elections and context windows search through the policy.
   */
  readonly index: ResourceIndex.Service
  readonly events: ResourceEvents.Service
  /** Tools the leaves' inner loops may use, by name (an assistant's `tools` picks among them; none named: all). */
  readonly tools?: ReadonlyArray<Tool.Any>
  /** Who plans and persists the tree. Default `cld:assistant.planner`. */
  readonly plannerActor?: string
  readonly election?: Assistants.ElectionOptions
  readonly limits?: Partial<Limits>
  /** An existing conversation to plan in (a new one otherwise). */
  readonly conversation?: string
  readonly onEvent?: (event: PlannerEvent) => Effect.Effect<void>
  /**
   * The RDF graph the leaves' statements go into and `graph_query` answers from (a new one
   * by default); `false`: no graph, no `graph_query`.
   */
  readonly graph?: Graph.Graph | false
}

export type TaskReport = StoredTree.Outcome

export interface Result {
  readonly tree: TaskPlanner.PlannedTree
  /** The answer for the user: the top-level tasks' results, then what is missing. */
  readonly answer: string
  readonly tasks: ReadonlyArray<TaskReport>
  /** Tasks that did not get done, each with why. */
  readonly missing: ReadonlyArray<TaskReport>
  readonly modelCalls: number
  readonly tokens: number
  /** The limit that stopped work, if one did. */
  readonly limit?: string
  /** The graph the leaves' statements went into (none when `graph: false`). */
  readonly graph?: Graph.Graph
}

export class PlannerError extends Schema.TaggedError<PlannerError>()("PlannerError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

const Verdict = Schema.Struct({
  successful: Schema.Boolean,
  reason: Schema.String,
  corrective: Schema.Array(TaskTree.TaskSpec).annotate({
    description: "When unsuccessful: the subtasks that would fix it (empty when none would)"
  })
})

const describe = (error: unknown): string =>
  (error instanceof Error || (typeof error === "object" && error !== null && "message" in error)
    ? String((error as { message: unknown }).message)
    : String(error)
  ).replace(/\s*\n\s*/g, "; ")

const titleOf = (task: TaskPlanner.PlannedTask) => task.spec.title

/**
 * A task's URN holds its conversation, the request and one element per level (a corrective
 * subtask adds one more): refused before anything is asked when that cannot fit a URN.
 */
const checkDepth = (limits: Limits, conversation: string | undefined): Effect.Effect<void, PlannerError> => {
  const parsed = conversation === undefined ? undefined : Urn.parseEither(conversation)
  const above = parsed === undefined || parsed instanceof Urn.InvalidUrnError ? 1 : parsed.elements.length
  const deepest = above + 1 + limits.maxDepth + 1
  return deepest <= Urn.maxElements
    ? Effect.void
    : Effect.fail(
        new PlannerError({
          message: `a plan at most ${limits.maxDepth} levels deep makes URNs of ${deepest} elements here, more than the ${Urn.maxElements} a URN may have: at most ${Urn.maxElements - above - 2} levels`
        })
      )
}

/** What every step of one planner run shares. */
interface Run {
  readonly options: Options
  readonly limits: Limits
  readonly model: ChatModel.Service
  readonly planner: string
  readonly index: ResourceIndex.Service
  readonly events: ResourceEvents.Service
  /**
   * `onEvent`, or undefined when nobody listens: then no event is built and no step is run for
   * it (a run reports about 80).
   */
  readonly emit: ((event: PlannerEvent) => Effect.Effect<void>) | undefined
  readonly permits: Semaphore.Semaphore
  readonly election: Assistants.ElectionOptions
  readonly graph: Graph.Graph | undefined
  readonly tools: ReadonlyArray<Tool.Any>
  /** Outcomes that could not be stored (a write the policy denied): the store cannot tell them. */
  readonly unstored: Map<string, TaskReport>
  /**
   * What this run wrote, as it last wrote it (and its tasks as read, resuming): a task's state
   * change is written over it without reading the task back first. The store stays the one
   * home of the plan (resume reads it from there); only this run writes its tasks while it runs.
   */
  readonly written: Map<string, Resource.Resource>
  /**
   * The conversation this run began, when it did: everything under it is in `written` (and
   * all `written` holds is under it), so what lies under it is read from there (through the
   * policy, as from the store).
   */
  readonly began?: string
  /** Each assistant's profile, read once per run (as the assistant itself). */
  readonly profiles: Map<string, Option.Option<Resource.Assistant>>
  /** Each assistant's `graph_query`. */
  readonly graphTools: Map<string, Tool.Any>
}

const storeError =
  (what: string) =>
  (error: { readonly message: string }): PlannerError =>
    new PlannerError({ message: `${what}: ${error.message}`, cause: error })

/**
 * Elects an assistant for every task of `tasks` that has none yet, recursively; `fresh` gets
 * them, parents first. Written with `mapBoth` and `flatMap`, not a generator per task: a leaf's
 * election (most tasks) is one step around the search.
 */
const elections = (
  run: Run,
  tasks: ReadonlyArray<TaskPlanner.PlannedTask>,
  fresh: Array<TaskPlanner.PlannedTask>
): Effect.Effect<Array<TaskPlanner.PlannedTask>, PlannerError> =>
  Effect.forEach(tasks, (task) => {
    // A leaf (most tasks) has nothing below to elect: no loop started for it.
    const below = (elected: TaskPlanner.PlannedTask) =>
      task.subtasks.length === 0
        ? Effect.succeed(elected)
        : Effect.map(elections(run, task.subtasks, fresh), (subtasks) => ({ ...elected, subtasks }))
    if (task.resource.assignment !== undefined) return below(task)
    const elected = Effect.mapBoth(Assistants.elect(run.index, run.planner, task.resource, run.election), {
      onFailure: (error) => new PlannerError({ message: error.message, cause: error }),
      onSuccess: (assignment) => {
        const elected = { ...task, resource: { ...task.resource, assignment } }
        fresh.push(elected)
        return elected
      }
    })
    return task.subtasks.length === 0 ? elected : Effect.flatMap(elected, below)
  })

/** Elects and stores (one write) the assignment of every task of `tasks` that has none yet, recursively. */
const assign = (
  run: Run,
  tasks: ReadonlyArray<TaskPlanner.PlannedTask>
): Effect.Effect<Array<TaskPlanner.PlannedTask>, PlannerError> =>
  Effect.gen(function* () {
    const fresh: Array<TaskPlanner.PlannedTask> = []
    const assigned = yield* elections(run, tasks, fresh)
    const stored = yield* Effect.mapError(
      run.index.putMany(
        run.planner,
        fresh.map((task) => task.resource)
      ),
      storeError("storing the assignments")
    )
    remember(
      run,
      StoredTree.flatten(assigned).map((task) => task.resource)
    )
    // The fresh ones as the store completed them.
    remember(run, stored)
    if (run.emit !== undefined)
      for (const task of fresh)
        yield* run.emit({
          type: "assigned",
          urn: task.urn,
          title: titleOf(task),
          depth: task.depth,
          assignment: task.resource.assignment as Resource.Assignment
        })
    return assigned
  })

/**
 * Stores the task's new state as its assistant, with `alongside` (its output) in the same
 * write; its PUT event tells its supervisor.
 */
const store = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string,
  change: Partial<Resource.Task>,
  alongside: ReadonlyArray<Resource.Resource> = []
) => {
  const next = { ...((run.written.get(task.urn) as Resource.Task | undefined) ?? task.resource), ...change }
  const failure = (error: ResourceIndex.Failure) => storeError(`storing "${titleOf(task)}"`)(error)
  // One step around the write (not a map, a mapError and a map): a run makes about 40.
  return alongside.length === 0
    ? Effect.mapBoth(run.index.put(actor, next), {
        onFailure: failure,
        onSuccess: (stored) => {
          run.written.set(stored.meta.urn, stored)
          return [stored]
        }
      })
    : Effect.mapBoth(run.index.putMany(actor, [...alongside, next]), {
        onFailure: failure,
        onSuccess: (stored) => {
          remember(run, stored)
          return stored
        }
      })
}

const remember = (run: Run, resources: ReadonlyArray<Resource.Resource>) => {
  for (const resource of resources) run.written.set(resource.meta.urn, resource)
}

/**
 * What lies under `urn` that `actor` may read (and the URNs of what it may not): from what the
 * run wrote when it began the conversation (no store read, the same decisions and events),
 * else from the store.
 */
const readableUnder = (run: Run, actor: string, urn: string) => {
  if (run.began === undefined || !(urn === run.began || urn.startsWith(`${run.began}/`)))
    return run.index.findReadable(actor, urn)
  // Every window asks about the conversation itself, under which the run wrote everything it
  // holds (it began it); a supervisor about its task: one pass over what the run wrote.
  // `forEach`, not a spread or `for (const [urn, resource] of ...)`: no iterator result or entry
  // pair per resource (about 20 passes a run over 50 to 70 resources).
  const held: Array<Resource.Resource> = []
  if (urn === run.began)
    run.written.forEach((resource) => {
      held.push(resource)
    })
  else {
    const prefix = `${urn}/`
    run.written.forEach((resource, written) => {
      if (written.startsWith(prefix)) held.push(resource)
    })
  }
  return run.index.filterReadable(actor, urn, held)
}

/** `text` as the task's output: a message under it, named so the newest sorts last. */
const outputMessage = (task: TaskPlanner.PlannedTask, text: string) =>
  Resource.make("message", {
    name: `${new Date().toISOString()} output`,
    parent: task.urn,
    role: "assistant",
    content: text
  })

/**
 * Stores the outcome (done with its output message, in one write, or failed with why) and
 * reports it. A leaf's output `states` facts: they go into the graph, named after the
 * message that states them, once it is stored.
 */
const finish = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string,
  outcome: TaskReport,
  output: "states" | "plain" = "plain"
) =>
  Effect.gen(function* () {
    const message = outcome.status === "done" ? outputMessage(task, outcome.output ?? "") : undefined
    yield* store(
      run,
      task,
      actor,
      {
        status: outcome.status,
        completedAt: new Date().toISOString(),
        ...(outcome.reason === undefined ? {} : { reason: outcome.reason })
      },
      message === undefined ? [] : [message]
    )
    if (output === "states" && message !== undefined)
      run.graph?.add(message.meta.urn, Graph.statementsOf(message.content))
    if (run.emit !== undefined)
      yield* run.emit(
        outcome.status === "done"
          ? {
              type: "done",
              urn: task.urn,
              title: titleOf(task),
              depth: task.depth,
              output: outcome.output ?? ""
            }
          : {
              type: "failed",
              urn: task.urn,
              title: titleOf(task),
              depth: task.depth,
              reason: outcome.reason ?? "failed"
            }
      )
    return outcome
  })

const done = (task: TaskPlanner.PlannedTask, output: string): TaskReport => ({
  urn: task.urn,
  title: titleOf(task),
  status: "done",
  output
})

const failed = (task: TaskPlanner.PlannedTask, reason: string): TaskReport => ({
  urn: task.urn,
  title: titleOf(task),
  status: "failed",
  reason
})

/** The tools a leaf's assistant gets: those it names (all when it names none), and `graph_query`. */
const toolsFor = (run: Run, actor: string, profile: Resource.Assistant | undefined): Array<Tool.Any> => {
  const allowed = profile?.tools
  const graphTool = graphToolFor(run, actor)
  return [...run.tools, ...(graphTool === undefined ? [] : [graphTool])].filter(
    (tool) => allowed === undefined || allowed.includes(tool.name)
  )
}

/** `graph_query` as the assistant may use it, made once per run and assistant (making a tool derives its JSON Schema). */
const graphToolFor = (run: Run, actor: string): Tool.Any | undefined => {
  if (run.graph === undefined) return undefined
  const known = run.graphTools.get(actor)
  if (known !== undefined) return known
  // Statements come from resources: the assistant hears only those whose source it may read.
  const tool = run.graph.toolFor((source) =>
    Effect.match(run.index.get(actor, source), { onFailure: () => false, onSuccess: () => true })
  )
  run.graphTools.set(actor, tool)
  return tool
}

/** The assistant's profile, as it reads it (none when it may not or it is not stored), once per run. */
const profileOf = (run: Run, actor: string): Effect.Effect<Option.Option<Resource.Assistant>> => {
  const known = run.profiles.get(actor)
  if (known !== undefined) return Effect.succeed(known)
  const keep = (profile: Option.Option<Resource.Assistant>) => {
    run.profiles.set(actor, profile)
    return profile
  }
  return Effect.match(run.index.get(actor, actor), {
    onFailure: () => keep(Option.none()),
    onSuccess: (found) => keep(Option.some(found as Resource.Assistant))
  })
}

/** A leaf: its context, the inner loop, its output as a message under it, its statements in the graph. */
const direct = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string
): Effect.Effect<TaskReport, PlannerError> =>
  Effect.gen(function* () {
    // Known after the assistant's first leaf: read, not run.
    const assistant = run.profiles.get(actor) ?? (yield* profileOf(run, actor))
    const profile = Option.isSome(assistant) ? assistant.value : undefined
    const window = yield* ContextWindow.build({
      index: run.index,
      actor,
      task: task.resource,
      budget: run.limits.contextTokens,
      findReadable: (urn) => readableUnder(run, actor, urn)
    }).pipe(Effect.mapError(storeError(`building the context of "${titleOf(task)}"`)))
    if (run.emit !== undefined)
      yield* run.emit({
        type: "context",
        urn: task.urn,
        title: titleOf(task),
        depth: task.depth,
        items: window.items.map((item) => item.urn),
        dropped: window.dropped.map((item) => item.urn),
        withheld: window.withheld
      })
    const agent = ToolAgent.make({
      name: `assistant ${actor}`,
      system: [
        profile === undefined
          ? "You are an assistant."
          : `You are ${profile.meta.name}. ${Resource.describe(profile)}`,
        `Your task: ${task.spec.title}`,
        `Purpose: ${task.spec.purpose}`,
        `Success means: ${task.spec.evaluation}`,
        window.items.length === 0 ? "" : `What you know:\n${ContextWindow.toText(window)}`,
        run.graph === undefined ? "" : Graph.factFormat
      ]
        .filter((part) => part !== "")
        .join("\n\n"),
      tools: toolsFor(run, actor, profile),
      maxSteps: run.limits.maxSteps
    })
    const produced = yield* Effect.result(
      agent.execute(ConversationContext.of(Message.user(task.spec.instructions)), run.model)
    )
    if (produced._tag === "Failure")
      return yield* finish(run, task, actor, failed(task, describe(produced.failure)))
    const last = [...produced.success].reverse().find((message) => message.role === "assistant")
    const text = last === undefined ? "" : Message.text(last)
    return yield* finish(run, task, actor, done(task, text), "states")
  }).pipe(
    // The task's own writes may be denied by the policy: it fails, saying why (its supervisor
    // learns it when the subtasks' fibers return, since no event could announce it).
    Effect.catch((error) =>
      Effect.gen(function* () {
        const report = failed(task, error.message)
        run.unstored.set(task.urn, report)
        if (run.emit !== undefined)
          yield* run.emit({
            type: "failed",
            urn: task.urn,
            title: titleOf(task),
            depth: task.depth,
            reason: error.message
          })
        return report
      })
    )
  )

/** The outcomes of `children` as the store holds them, read by their supervisor `actor`. */
const outcomes = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string,
  children: ReadonlyArray<TaskPlanner.PlannedTask>
): Effect.Effect<Array<TaskReport>, PlannerError> =>
  Effect.mapBoth(readableUnder(run, actor, task.urn), {
    onFailure: storeError(`reading the subtasks of "${titleOf(task)}"`),
    onSuccess: (found) => {
      const byUrn = new Map(found.resources.map((resource) => [resource.meta.urn, resource]))
      const messages = StoredTree.outputs(found.resources)
      return children.map((child) => {
        const stored = byUrn.get(child.urn) as Resource.Task | undefined
        const outcome = stored === undefined ? undefined : StoredTree.outcomeOf(stored, messages)
        return (
          outcome ??
          run.unstored.get(child.urn) ??
          failed(
            child,
            found.withheld.includes(child.urn)
              ? `the policy withholds its outcome from ${actor}`
              : "it stopped without reporting an outcome"
          )
        )
      })
    }
  })

/**
 * Runs `children` and waits until every one is stored done or failed, as the
 * events under `task` say (`Listening`). Stalls (nothing heard for `stallTimeout`) fail.
 */
const superviseRound = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string,
  children: ReadonlyArray<TaskPlanner.PlannedTask>
): Effect.Effect<{ readonly stalled: ReadonlyArray<string> }, PlannerError> =>
  Effect.scoped(
    Effect.gen(function* () {
      const heard = yield* Effect.mapError(
        run.events.subscribe(
          actor,
          { prefix: task.urn, detailType: "RESOURCE_PUT" },
          { buffer: 4096, overflow: "fail" }
        ),
        (error) => new PlannerError({ message: error.message, cause: error })
      )
      const pull = yield* Stream.toPull(heard)
      const fiber = yield* Effect.forkScoped(
        Effect.forEach(children, (child) => execute(run, child), { concurrency: "unbounded", discard: true })
      )
      const ending = yield* Listening.listen({
        pull,
        waiting: new Set(children.map((child) => child.urn)),
        settled: (urn) => settled(run, actor, urn),
        children: fiber,
        stallTimeout: run.limits.stallTimeout
      }).pipe(
        Effect.mapError(
          (error) =>
            new PlannerError({
              message: `listening to "${titleOf(task)}"'s subtasks: ${describe(error)}`,
              cause: error
            })
        )
      )
      if (ending.kind === "stalled" && ending.waitingFor.length > 0) {
        yield* Fiber.interrupt(fiber)
        return { stalled: ending.waitingFor }
      }
      yield* Fiber.join(fiber)
      return { stalled: [] }
    })
  )

/** Whether the task at `urn` is stored done or failed, as `actor` reads it (what its PUT event announced). */
const settled = (run: Run, actor: string, urn: string) =>
  Effect.match(run.index.get(actor, urn), {
    onFailure: () => false,
    onSuccess: (found) => {
      const status = (found as Resource.Task).status
      return status === "done" || status === "failed"
    }
  })

/** The model's verdict on the subtasks' outcomes, judged by the task's evaluation. */
const evaluate = (run: Run, task: TaskPlanner.PlannedTask, listing: string) =>
  Effect.result(
    StructuredOutput.generate(run.model, {
      schema: Verdict,
      name: "evaluation",
      messages: [
        Message.system(
          "You supervise a task done by others. Judge whether the subtasks' results achieve it, by its evaluation criteria. When they do not, propose corrective subtasks that would fix what is missing (or none, if nothing would)."
        ),
        Message.user(
          `Task: ${task.spec.title}\nPurpose: ${task.spec.purpose}\nSuccess means: ${task.spec.evaluation}\n\nResults:\n${listing}`
        )
      ]
    })
  )

const listingOf = (results: ReadonlyArray<TaskReport>) =>
  results
    .map((r) => `## ${r.title} (${r.status})\n${r.status === "done" ? r.output : `Failed: ${r.reason}`}`)
    .join("\n\n")

const isDone = (task: TaskPlanner.PlannedTask) => task.resource.status === "done"

/**
 * A parent: its subtasks not done yet, their outcomes read from the store, their evaluation,
 * corrective rounds. Resumed, the corrective subtasks already stored count as rounds used
 * (at least one each round), so a resumed plan never gets more rounds than the limit.
 */
const supervise = (
  run: Run,
  task: TaskPlanner.PlannedTask,
  actor: string
): Effect.Effect<TaskReport, PlannerError> =>
  Effect.gen(function* () {
    let all = [...task.subtasks]
    // Resumed: the subtasks done before are not run again; they are reported as such.
    for (const child of all.filter(isDone))
      yield* reuse(run, child, child.resource.assignment?.assistant ?? run.planner)
    let children = all.filter((child) => !isDone(child))
    const used = all.filter((child) => child.resource.corrective === true).length
    for (let round = used; ; round++) {
      const { stalled } =
        children.length === 0 ? { stalled: [] } : yield* superviseRound(run, task, actor, children)
      if (stalled.length > 0) {
        const names = all.filter((child) => stalled.includes(child.urn)).map(titleOf)
        if (run.emit !== undefined)
          yield* run.emit({
            type: "stalled",
            urn: task.urn,
            title: titleOf(task),
            depth: task.depth,
            waitingFor: names
          })
        return yield* finish(
          run,
          task,
          actor,
          failed(
            task,
            `stalled: ${names.join(", ")} did not finish within ${Duration.format(Duration.fromInputUnsafe(run.limits.stallTimeout))}`
          )
        )
      }
      const listing = listingOf(yield* outcomes(run, task, actor, all))
      const verdict = yield* evaluate(run, task, listing)
      if (verdict._tag === "Failure")
        return yield* finish(
          run,
          task,
          actor,
          failed(task, `could not evaluate: ${describe(verdict.failure)}`)
        )
      const { successful, reason, corrective } = verdict.success
      if (run.emit !== undefined)
        yield* run.emit({
          type: "evaluated",
          urn: task.urn,
          title: titleOf(task),
          depth: task.depth,
          successful,
          reason
        })
      if (successful) return yield* finish(run, task, actor, done(task, `${reason}\n\n${listing}`))
      if (corrective.length === 0 || round >= run.limits.maxCorrectiveRounds)
        return yield* finish(
          run,
          task,
          actor,
          failed(
            task,
            corrective.length === 0
              ? `unsuccessful: ${reason}`
              : `unsuccessful after ${run.limits.maxCorrectiveRounds} corrective rounds: ${reason}`
          )
        )
      const added = yield* TaskPlanner.persistTasks(
        run.index,
        actor,
        task.urn,
        corrective.slice(0, run.limits.maxChildren),
        task.depth + 1,
        { firstPosition: all.length + 1, corrective: true }
      ).pipe(Effect.mapError((error) => new PlannerError({ message: error.message, cause: error })))
      children = yield* assign(run, added)
      all = [...all, ...children]
      if (run.emit !== undefined)
        yield* run.emit({
          type: "corrective",
          urn: task.urn,
          title: titleOf(task),
          depth: task.depth,
          tasks: children
        })
    }
  })

/** A task done in an earlier run: not run again, its output (the newest message under it) read back. */
const reuse = (run: Run, task: TaskPlanner.PlannedTask, actor: string) =>
  Effect.gen(function* () {
    const found = yield* Effect.mapError(
      readableUnder(run, actor, task.urn),
      storeError(`reading "${titleOf(task)}"`)
    )
    const report = done(task, StoredTree.outputs(found.resources).get(task.urn)?.content ?? "")
    if (run.emit !== undefined)
      yield* run.emit({
        type: "done",
        urn: task.urn,
        title: titleOf(task),
        depth: task.depth,
        output: report.output ?? "",
        before: true
      })
    return report
  })

/** A leaf that had started before (it failed, or was cut short) and must not be done twice. */
const notRetried = (task: TaskPlanner.PlannedTask) =>
  task.subtasks.length === 0 &&
  task.resource.retryable === false &&
  (task.resource.status === "running" || task.resource.status === "failed")

const execute = (run: Run, task: TaskPlanner.PlannedTask): Effect.Effect<TaskReport, PlannerError> => {
  const actor = task.resource.assignment?.assistant ?? run.planner
  return Effect.gen(function* () {
    if (isDone(task)) return yield* reuse(run, task, actor)
    if (notRetried(task)) {
      const before =
        task.resource.status === "failed" ? (task.resource.reason ?? "it failed") : "it was cut short"
      return yield* finish(
        run,
        task,
        actor,
        failed(task, `${before}; not retried: it is marked not retryable`)
      )
    }
    const mode = task.subtasks.length === 0 ? "direct" : "supervising"
    yield* store(run, task, actor, { status: "running" }).pipe(Effect.catch(() => Effect.void))
    if (run.emit !== undefined)
      yield* run.emit({ type: "started", urn: task.urn, title: titleOf(task), depth: task.depth, mode })
    return yield* mode === "direct"
      ? run.permits.withPermits(1)(direct(run, task, actor))
      : supervise(run, task, actor)
  }).pipe(
    // Stopped from outside (a stall, Ctrl-C): stored as such, so the tree never shows it running.
    Effect.onInterrupt(() =>
      Effect.ignore(
        store(run, task, actor, {
          status: "failed",
          reason: "interrupted before it finished",
          completedAt: new Date().toISOString()
        })
      )
    )
  )
}

/** Stores a `tool` resource for each tool the leaves may use, where it is missing or changed. */
const storeTools = (run: Run, tools: ReadonlyArray<Tool.Any>) =>
  Effect.gen(function* () {
    const wanted = tools.map((tool) =>
      Resource.make("tool", {
        name: tool.name,
        purpose: tool.description,
        parameters: tool.definition.parameters
      })
    )
    if (wanted.length === 0) return
    const stored = yield* run.index.getMany(
      run.planner,
      wanted.map((tool) => tool.meta.urn)
    )
    const storedAt = new Map(stored.map((tool) => [tool.meta.urn, tool]))
    for (const tool of wanted) {
      const current = storedAt.get(tool.meta.urn)
      if (current === undefined || !Resource.sameContent(current, tool))
        yield* run.index.put(run.planner, tool)
    }
  }).pipe(Effect.mapError(storeError("storing the tools")))

/** The answer for the user: the top-level tasks' results, then what is missing. */
const answerOf = (
  top: ReadonlyArray<TaskReport>,
  missing: ReadonlyArray<TaskReport>,
  limit: string | undefined
) =>
  [
    ...top.map((report) =>
      report.status === "done"
        ? `## ${report.title}\n${report.output ?? ""}`
        : `## ${report.title} (not done)\n${report.reason ?? ""}`
    ),
    ...(missing.length === 0
      ? []
      : [
          `## What is missing\n${missing.map((report) => `- ${report.title}: ${report.reason ?? "failed"}`).join("\n")}${
            limit === undefined ? "" : `\n\nWork stopped: ${limit}.`
          }`
        ])
  ].join("\n\n")

/** Assigns, executes and answers a persisted tree (a new plan's, or one read back to resume). */
const work = (
  run: Run,
  budget: Budget.Budget,
  tree: TaskPlanner.PlannedTree
): Effect.Effect<Result, PlannerError> =>
  Effect.gen(function* () {
    yield* storeTools(run, run.graph === undefined ? run.tools : [...run.tools, run.graph.tool])
    const assigned = yield* assign(run, tree.tasks)
    yield* Effect.forEach(assigned, (task) => execute(run, task), { concurrency: "unbounded", discard: true })
    // The outcomes as stored, in plan order (corrective subtasks included).
    const found = yield* Effect.mapError(
      readableUnder(run, run.planner, tree.message),
      storeError("reading the plan's outcomes")
    )
    const stored = StoredTree.tasksUnder(found.resources, tree.message)
    const messages = StoredTree.outputs(found.resources)
    const reportOf = (task: TaskPlanner.PlannedTask) =>
      StoredTree.outcomeOf(task.resource, messages) ??
      run.unstored.get(task.urn) ??
      failed(task, "it did not finish")
    const tasks = StoredTree.flatten(stored).map(reportOf)
    const missing = tasks.filter((report) => report.status === "failed")
    const limit = budget.exceeded()
    return {
      tree: { ...tree, tasks: stored },
      answer: answerOf(stored.map(reportOf), missing, limit),
      tasks,
      missing,
      modelCalls: budget.calls(),
      tokens: budget.tokens(),
      ...(limit === undefined ? {} : { limit }),
      ...(run.graph === undefined ? {} : { graph: run.graph })
    }
  })

/** What one run shares, from the options. */
const makeRun = (options: Options) =>
  Effect.gen(function* () {
    const given: Limits = { ...defaultLimits, ...options.limits }
    // Parsed once: the supervisors' listening restarts its timeout at every event heard.
    const limits: Limits = { ...given, stallTimeout: Duration.fromInputUnsafe(given.stallTimeout) }
    const budget = Budget.make(options.model, limits)
    const model = budget.model
    const run: Run = {
      options,
      limits,
      model,
      planner: options.plannerActor ?? "cld:assistant.planner",
      index: options.index,
      events: options.events,
      emit: options.onEvent,
      permits: yield* Semaphore.make(limits.parallel),
      election: {
        ...options.election,
        ...(options.election?.fallback?.kind === "model"
          ? { fallback: { kind: "model" as const, model } }
          : {})
      },
      graph: options.graph === false ? undefined : (options.graph ?? Graph.make()),
      tools: options.tools ?? [],
      unstored: new Map(),
      written: new Map(),
      profiles: new Map(),
      graphTools: new Map()
    }
    return { run, budget }
  })

const stopped = <A>(effect: Effect.Effect<A, PlannerError>) =>
  effect.pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause) ? Effect.interrupt : Effect.fail(toPlannerError(cause))
    )
  )

/** Runs the whole flow for `request`. */
export const run = (request: string, options: Options): Effect.Effect<Result, PlannerError> =>
  stopped(
    Effect.gen(function* () {
      const { run, budget } = yield* makeRun(options)
      yield* checkDepth(run.limits, options.conversation)
      const tree = yield* TaskPlanner.planAndPersist({
        model: run.model,
        index: run.index,
        actor: run.planner,
        request,
        ...(options.conversation === undefined ? {} : { conversation: options.conversation }),
        limits: run.limits
      }).pipe(Effect.mapError((error) => new PlannerError({ message: error.message, cause: error })))
      if (run.emit !== undefined) yield* run.emit({ type: "planned", tree })
      if (options.conversation !== undefined) return yield* work(run, budget, tree)
      // The conversation it began holds only what this run writes there: the request (read
      // once) and the tree, from here on.
      const asked = yield* Effect.mapError(
        run.index.get(run.planner, tree.message),
        storeError("reading the request back")
      )
      remember(run, [asked])
      return yield* work({ ...run, began: tree.conversation }, budget, tree)
    })
  )

/**
 * Continues the plan stored under a request's `message` (its URN, as `planned` reported it):
 * what is done is not run again, its output read back (and its statements put back in the
 * graph); tasks not assigned yet are assigned; the rest runs as in `run`.
 */
export const resume = (message: string, options: Options): Effect.Effect<Result, PlannerError> =>
  stopped(
    Effect.gen(function* () {
      const { run, budget } = yield* makeRun(options)
      const { tree, found } = yield* StoredTree.read(run.index, run.planner, message).pipe(
        Effect.mapError(
          (error) => new PlannerError({ message: `resuming ${message}: ${error.message}`, cause: error })
        )
      )
      if (run.graph !== undefined) {
        const messages = StoredTree.outputs(found)
        for (const task of StoredTree.flatten(tree.tasks)) {
          const output = messages.get(task.urn)
          if (isDone(task) && task.subtasks.length === 0 && output !== undefined)
            run.graph.add(output.meta.urn, Graph.statementsOf(output.content))
        }
      }
      if (run.emit !== undefined) yield* run.emit({ type: "planned", tree })
      return yield* work(run, budget, tree)
    })
  )

const toPlannerError = (cause: Cause.Cause<unknown>): PlannerError => {
  const error = Cause.squash(cause)
  return error instanceof PlannerError ? error : new PlannerError({ message: describe(error), cause: error })
}
