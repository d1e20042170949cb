/**
 * Routine: runs the goal chains of a work breakdown, each in its own
 * `RoutineContext`, and plain work items as ordinary turns.
 *
 * A work item of a goal chain goes to the context holding that chain
 * (`matchesGoalChain`); when there is none, one is made from the chain's
 * stored state and set up (variables, preambles not yet sent, the overview of
 * completed tasks). Setup failures are retried with exponential backoff, each
 * reported and kept in the store. A task counts as complete only by the
 * agent's verdict (`TaskVerdict`); a chain stops at a task left open, which
 * runs again next time. When every task of a chain is complete (or ticked in
 * the document) the goal is marked complete and its context dropped. Several chains may run at
 * once: each context has its own conversation, so their messages never mix.
 */

import { ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, ConversationContext, type Message, type Tool } from "@noema/core"
import type { DatabaseError } from "@noema/sql"
import { type Duration, Effect, Schedule } from "effect"
import { marked, RoutineContext, type RoutineEvent, remaining, tickedTasks } from "./RoutineContext.js"
import type * as RoutineStore from "./RoutineStore.js"
import * as TaskVerdict from "./TaskVerdict.js"
import * as Variables from "./Variables.js"
import { chainKey, type GoalChain, type Task, type WorkBreakdown } from "./WorkBreakdown.js"

export interface SetupRetry {
  /** Attempts after the first. Default 3. */
  readonly times?: number
  /** The first pause; each next one doubles. Default 1 second. */
  readonly base?: Duration.Input
}

export interface Options<R> {
  readonly breakdown: WorkBreakdown
  /** The routine's id in the store. Default the breakdown's source (its path). */
  readonly id?: string
  readonly model: ChatModel.Service
  readonly store: RoutineStore.Service
  /** Every tool the routine may use; a chain's agent gets the ones its skill, scenario and tasks name. */
  readonly tools?: ReadonlyArray<Tool.Any<R>>
  /** Put in front of every request, before the skill's own `system`. */
  readonly system?: string
  readonly sources?: ReadonlyArray<Variables.Source>
  readonly onEvent?: (event: RoutineEvent) => Effect.Effect<void>
  readonly setupRetry?: SetupRetry
  /**
   * How the agent says a task is done: a `complete_task` tool call (default), or a
   * structured verdict asked after its answer, for a model that cannot call tools.
   */
  readonly verdict?: TaskVerdict.Mode
  /** Model calls allowed for one task. Default ToolAgent's. */
  readonly maxSteps?: number
  /** Epoch milliseconds (default `Date.now`). */
  readonly now?: () => number
}

/** A piece of work: the next task of a goal chain, or a plain turn. */
export type WorkItem =
  | { readonly type: "goal"; readonly chain: GoalChain }
  | { readonly type: "plain"; readonly messages: ReadonlyArray<Message.Message> }

export type WorkResult =
  | {
      readonly type: "task"
      readonly chain: string
      readonly task: string | undefined
      /** Set when the task was left open: the agent's reason, or that it gave no verdict. */
      readonly openReason?: string
      readonly goalComplete: boolean
    }
  | { readonly type: "plain"; readonly messages: ReadonlyArray<Message.Message> }

export class SetupFailed extends Error {
  readonly _tag = "SetupFailed"
  constructor(
    readonly chain: string,
    readonly attempts: number,
    override readonly cause: Variables.MissingVariable | Variables.VariableSourceError
  ) {
    super(
      `Setting up goal ${chain} failed after ${attempts} attempt${attempts === 1 ? "" : "s"}: ${cause.message}`
    )
  }
}

export type RoutineError =
  | SetupFailed
  | Agent.AgentError
  | DatabaseError.DatabaseError
  | RoutineStore.RoutineConflictError

export class Routine<R = never> {
  readonly id: string
  private readonly contexts = new Map<string, RoutineContext<R>>()
  private readonly now: () => number
  private readonly onEvent: (event: RoutineEvent) => Effect.Effect<void>

  constructor(readonly options: Options<R>) {
    if (this.verdict === "tool-call" && options.tools?.some((tool) => tool.name === TaskVerdict.toolName)) {
      throw new TypeError(
        `A routine's tools may not include "${TaskVerdict.toolName}": the routine gives its own to every task's agent`
      )
    }
    this.id = options.id ?? options.breakdown.source
    this.now = options.now ?? Date.now
    this.onEvent = options.onEvent ?? (() => Effect.void)
  }

  /** The chains with a live context (being worked on by this routine now). */
  get active(): ReadonlyArray<string> {
    return [...this.contexts.keys()]
  }

  get verdict(): TaskVerdict.Mode {
    return this.options.verdict ?? "tool-call"
  }

  /** The tools of `chain`'s agent: those of the routine's tools its skill, scenario and tasks name. */
  toolsFor(chain: GoalChain): ReadonlyArray<Tool.Any<R>> {
    const named = new Set([
      ...(chain.skill.tools ?? []),
      ...(chain.scenario.tools ?? []),
      ...chain.scenario.tasks.flatMap((task) => task.tools ?? [])
    ])
    return (this.options.tools ?? []).filter((tool) => named.has(tool.name))
  }

  /**
   * The agent of `task` in `chain`: the chain's tools and the skill's own prompt;
   * with tool-call verdicts also `complete_task`, which ends its loop, and one
   * nudge when it answers without calling it.
   */
  agentFor(chain: GoalChain, variables: Readonly<Record<string, string>>, task: Task): Agent.Agent<R> {
    const system = [
      this.options.system,
      TaskVerdict.instructions(this.verdict),
      chain.skill.system === undefined ? undefined : Variables.fill(chain.skill.system, variables)
    ]
      .filter((part): part is string => part !== undefined && part !== "")
      .join("\n\n")
    const verdictByTool =
      this.verdict === "tool-call"
        ? {
            stopWhen: TaskVerdict.stopWhen,
            steering: TaskVerdict.nudgeOnce(marked(TaskVerdict.nudgeText, "nudge", chainKey(chain), task.id))
          }
        : {}
    return ToolAgent.make({
      name: `routine ${chainKey(chain)}`,
      tools:
        this.verdict === "tool-call" ? [...this.toolsFor(chain), TaskVerdict.tool] : this.toolsFor(chain),
      system,
      ...verdictByTool,
      ...(this.options.maxSteps === undefined ? {} : { maxSteps: this.options.maxSteps })
    }) as Agent.Agent<R>
  }

  /**
   * The context holding `chain`, made and set up when there is none (from the
   * chain's stored state: a resumed chain is told what is already done).
   */
  ensureContext(
    chain: GoalChain
  ): Effect.Effect<
    RoutineContext<R>,
    SetupFailed | DatabaseError.DatabaseError | RoutineStore.RoutineConflictError
  > {
    const self = this
    return Effect.gen(function* () {
      for (const context of self.contexts.values()) if (context.matchesGoalChain(chain)) return context
      const context = yield* RoutineContext.load<R>({
        routine: self.id,
        breakdown: self.options.breakdown,
        chain,
        makeAgent: (variables, task) => self.agentFor(chain, variables, task),
        tools: self.toolsFor(chain).map((tool) => tool.name),
        verdict: self.verdict,
        model: self.options.model,
        store: self.options.store,
        sources: self.options.sources ?? [],
        onEvent: self.onEvent,
        now: self.now
      })
      const times = self.options.setupRetry?.times ?? 3
      const base = self.options.setupRetry?.base ?? "1 second"
      let attempt = 0
      // A source that failed (a file it could not read) is asked again; a variable that no
      // source has stops the setup at once (asking again would not make it appear).
      yield* context.setup().pipe(
        Effect.tapError((error) =>
          error._tag === "DatabaseError" || error._tag === "RoutineConflictError"
            ? Effect.void
            : Effect.suspend(() => {
                attempt++
                return context.recordFailure(
                  attempt,
                  error.message,
                  error._tag === "VariableSourceError" && attempt <= times
                )
              })
        ),
        Effect.retry({
          schedule: Schedule.exponential(base),
          times,
          while: (error) => error._tag === "VariableSourceError"
        }),
        Effect.catchIf(
          (error): error is Variables.MissingVariable | Variables.VariableSourceError =>
            error._tag === "MissingVariable" || error._tag === "VariableSourceError",
          (error) => Effect.fail(new SetupFailed(chainKey(chain), attempt, error))
        )
      )
      self.contexts.set(context.key, context)
      return context
    })
  }

  /** One step of `chain`: its next task (after setting the context up if needed). */
  step(chain: GoalChain): Effect.Effect<WorkResult, RoutineError, R> {
    const self = this
    return Effect.gen(function* () {
      const context = yield* self.ensureContext(chain)
      const outcome = yield* context.runNext()
      const goalComplete = context.isComplete()
      if (goalComplete) self.contexts.delete(context.key)
      return {
        type: "task",
        chain: context.key,
        task: outcome?.task.id,
        ...(outcome?.done === false ? { openReason: outcome.reason } : {}),
        goalComplete
      } as const
    })
  }

  /**
   * The remaining tasks of `chain` in order, until the goal is complete or a
   * task is left open (the tasks after it may need it; it runs again next time).
   */
  runChain(chain: GoalChain): Effect.Effect<void, RoutineError, R> {
    const self = this
    return Effect.gen(function* () {
      for (;;) {
        const result = yield* self.step(chain)
        if (result.type !== "task" || result.goalComplete || result.openReason !== undefined) return
        if (result.task === undefined) return
      }
    })
  }

  /** Several chains side by side (each in its own context). */
  runChains(
    chains: ReadonlyArray<GoalChain>,
    options: { readonly concurrency?: number } = {}
  ): Effect.Effect<void, RoutineError, R> {
    return Effect.asVoid(
      Effect.forEach(chains, (chain) => this.runChain(chain), {
        concurrency: options.concurrency ?? chains.length
      })
    )
  }

  /** A work item: a goal chain's next task, or a plain turn (an agent with every tool, no chain state). */
  execute(item: WorkItem): Effect.Effect<WorkResult, RoutineError, R> {
    if (item.type === "goal") return this.step(item.chain)
    const agent = ToolAgent.make({
      name: "routine plain turn",
      tools: this.options.tools ?? [],
      ...(this.options.system === undefined ? {} : { system: this.options.system }),
      ...(this.options.maxSteps === undefined ? {} : { maxSteps: this.options.maxSteps })
    }) as Agent.Agent<R>
    return Effect.map(
      agent.execute(ConversationContext.fromArray(item.messages), this.options.model),
      (messages) => ({ type: "plain", messages }) as const
    )
  }
}

export const make = <R = never>(options: Options<R>): Routine<R> => new Routine(options)

export interface TaskProgress {
  readonly id: string
  readonly title: string
  /** Completed by the agent, or ticked in the document. */
  readonly done: boolean
  /** Ticked as done in the document and not completed by the agent: skipped, never run. */
  readonly ticked: boolean
  /** Why the task is open, when the agent tried it and did not complete it. */
  readonly open?: string
}

export interface ChainProgress {
  readonly chain: string
  /** `reopened`: stored as complete, but the document has tasks since that are not done. */
  readonly status: "not started" | "active" | "complete" | "reopened"
  readonly tasks: ReadonlyArray<TaskProgress>
}

/** What `chain`'s stored state (if any) and its document say of each of its tasks. */
export const chainProgress = (
  chain: GoalChain,
  state: RoutineStore.ChainState | undefined
): ChainProgress => {
  const completed = new Set(state?.completed.map((entry) => entry.task) ?? [])
  const ticked = new Set(tickedTasks(chain, { completed: state?.completed ?? [] }).map((task) => task.id))
  const open = new Map(state?.open.map((entry) => [entry.task, entry.reason]) ?? [])
  const allDone = remaining(chain, { completed: state?.completed ?? [] }).length === 0
  return {
    chain: chainKey(chain),
    status: allDone
      ? "complete"
      : state === undefined
        ? "not started"
        : state.status === "complete"
          ? "reopened"
          : "active",
    tasks: chain.scenario.tasks.map((task) => {
      const reason = open.get(task.id)
      return {
        id: task.id,
        title: task.title,
        done: completed.has(task.id) || ticked.has(task.id),
        ticked: ticked.has(task.id),
        ...(reason === undefined || completed.has(task.id) ? {} : { open: reason })
      }
    })
  }
}

/** What the chains' states say of each task of the breakdown, for `status` views. */
export const progress = (
  breakdown: WorkBreakdown,
  states: ReadonlyArray<RoutineStore.ChainState>
): ReadonlyArray<ChainProgress> => {
  const byChain = new Map(states.map((state) => [state.chain, state]))
  return breakdown.skills.flatMap((skill) =>
    skill.scenarios.map((scenario) =>
      chainProgress({ skill, scenario }, byChain.get(chainKey({ skill, scenario })))
    )
  )
}
