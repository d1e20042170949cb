/**
 * RoutineContext: one goal chain (a skill, one of its scenarios, its tasks)
 * being worked on, with the conversation the agent sees.
 *
 * `setup` collects the chain's variables, then adds the skill preamble and the
 * scenario preamble (each only if the stored conversation does not hold it
 * yet) and, when tasks are already complete, an overview of them. `runNext`
 * adds the next incomplete task and runs the agent on the conversation; the
 * task is complete when the agent answers, its answer kept as the evidence.
 * The state is saved after every step (setup, each task), so a process killed
 * at any point resumes from the last saved step: a task whose step was not
 * saved runs again, a completed one never does.
 */
import { type Agent, type ChatModel, ConversationContext, Message } from "@noema/core"
import type { DatabaseError } from "@noema/sql"
import { Effect, Stream } from "effect"
import type * as RoutineStore from "./RoutineStore.js"
import type { ChainState, CompletedTask } from "./RoutineStore.js"
import * as Variables from "./Variables.js"
import { chainKey, type GoalChain, references, type Task, type WorkBreakdown } from "./WorkBreakdown.js"

/** What a routine reports as it goes (for live progress). */
export type RoutineEvent =
  | {
      readonly type: "setup"
      readonly chain: string
      readonly resumed: boolean
      readonly completed: number
      readonly total: number
    }
  | {
      readonly type: "setup-failed"
      readonly chain: string
      readonly attempt: number
      readonly error: string
      readonly willRetry: boolean
    }
  | { readonly type: "preamble"; readonly chain: string; readonly kind: "skill" | "scenario" }
  | { readonly type: "overview"; readonly chain: string; readonly completed: ReadonlyArray<string> }
  | { readonly type: "task-started"; readonly chain: string; readonly task: string; readonly title: string }
  | {
      readonly type: "agent"
      readonly chain: string
      readonly task: string
      readonly event: Agent.AgentEvent
    }
  | {
      readonly type: "task-completed"
      readonly chain: string
      readonly task: string
      readonly evidence: Message.Message
    }
  | { readonly type: "goal-completed"; readonly chain: string }

/** How each message a routine adds is marked (`metadata.routine`), so it can be told apart. */
export type Mark = "skill-preamble" | "scenario-preamble" | "overview" | "task"

const marked = (content: string, routine: Mark, chain: string, task?: string): Message.UserMessage =>
  Message.user(content, { metadata: task === undefined ? { routine, chain } : { routine, chain, task } })

/** The overview of completed tasks a resumed chain is told first. */
export const overviewText = (chain: GoalChain, completed: ReadonlyArray<CompletedTask>): string => {
  const titles = new Map(chain.scenario.tasks.map((task) => [task.id, task.title]))
  const lines = completed.map((entry) => {
    const answer = Message.text(entry.evidence).trim().split("\n")[0] ?? ""
    return `- ${entry.task}: ${titles.get(entry.task) ?? entry.task}${answer === "" ? "" : ` (result: ${answer})`}`
  })
  return `These tasks of ${chainKey(chain)} are already completed:\n${lines.join("\n")}\n\nDo not redo them; continue with the remaining tasks.`
}

/** What the agent is told for a task. */
export const taskText = (task: Task, variables: Readonly<Record<string, string>>): string => {
  const title = Variables.fill(task.title, variables)
  return task.instructions === undefined
    ? `Task ${task.id}: ${title}`
    : `Task ${task.id}: ${title}\n\n${Variables.fill(task.instructions, variables)}`
}

/** The variables a chain's texts use. */
export const usedVariables = (chain: GoalChain): ReadonlyArray<string> => [
  ...new Set([
    ...references(chain.skill.preamble),
    ...references(chain.skill.system),
    ...references(chain.scenario.preamble),
    ...chain.scenario.tasks.flatMap((task) => [...references(task.title), ...references(task.instructions)])
  ])
]

export interface Options<R> {
  readonly routine: string
  readonly breakdown: WorkBreakdown
  readonly chain: GoalChain
  /** The agent for this chain (tools and prompts filtered to it), given the chain's variables. */
  readonly makeAgent: (variables: Readonly<Record<string, string>>) => Agent.Agent<R>
  readonly model: ChatModel.Service
  readonly store: RoutineStore.Service
  readonly sources: ReadonlyArray<Variables.Source>
  readonly onEvent: (event: RoutineEvent) => Effect.Effect<void>
  readonly now: () => number
}

export class RoutineContext<R = never> {
  readonly key: string
  private state: ChainState
  /** Whether this context (this process) ran setup already. */
  private ready = false

  private constructor(
    private readonly options: Options<R>,
    state: ChainState
  ) {
    this.key = chainKey(options.chain)
    this.state = state
  }

  /** The context of `options.chain`, from its stored state if it has one. */
  static load<R>(options: Options<R>): Effect.Effect<RoutineContext<R>, DatabaseError.DatabaseError> {
    return Effect.map(options.store.load(options.routine, chainKey(options.chain)), (stored) => {
      const state: ChainState = stored ?? {
        routine: options.routine,
        chain: chainKey(options.chain),
        status: "active",
        variables: {},
        sent: { skillPreamble: false, scenarioPreamble: false },
        completed: [],
        messages: [],
        failures: [],
        updatedAt: options.now(),
        revision: 0
      }
      return new RoutineContext(options, state)
    })
  }

  get snapshot(): ChainState {
    return this.state
  }

  /** Whether `chain` is the chain this context holds (same skill and scenario). */
  matchesGoalChain(chain: GoalChain): boolean {
    return (
      chain.skill.id === this.options.chain.skill.id && chain.scenario.id === this.options.chain.scenario.id
    )
  }

  isComplete(): boolean {
    const done = new Set(this.state.completed.map((entry) => entry.task))
    return this.options.chain.scenario.tasks.every((task) => done.has(task.id))
  }

  /** The first task not completed yet. */
  nextTask(): Task | undefined {
    const done = new Set(this.state.completed.map((entry) => entry.task))
    return this.options.chain.scenario.tasks.find((task) => !done.has(task.id))
  }

  private save(
    next: Omit<ChainState, "updatedAt" | "revision">
  ): Effect.Effect<void, DatabaseError.DatabaseError | RoutineStore.RoutineConflictError> {
    const state: ChainState = { ...next, updatedAt: this.options.now(), revision: this.state.revision + 1 }
    return Effect.as(this.options.store.save(state), undefined).pipe(
      Effect.tap(() =>
        Effect.sync(() => {
          this.state = state
        })
      )
    )
  }

  /** Records a failed setup attempt (kept in the store, reported as an event). */
  recordFailure(
    attempt: number,
    error: string,
    willRetry: boolean
  ): Effect.Effect<void, DatabaseError.DatabaseError | RoutineStore.RoutineConflictError> {
    const failures = [...this.state.failures, { attempt, error, at: this.options.now() }].slice(-20)
    return Effect.andThen(this.save({ ...this.state, failures }), () =>
      this.options.onEvent({ type: "setup-failed", chain: this.key, attempt, error, willRetry })
    )
  }

  /**
   * Collects the variables, then adds what the conversation lacks: the skill
   * preamble, the scenario preamble (once each, ever), and the overview of the
   * completed tasks (once per context, i.e. after every resume). One save.
   */
  setup(): Effect.Effect<
    void,
    | Variables.MissingVariable
    | Variables.VariableSourceError
    | DatabaseError.DatabaseError
    | RoutineStore.RoutineConflictError
  > {
    const self = this
    return Effect.gen(function* () {
      if (self.ready) return
      const { chain, breakdown } = self.options
      const variables = yield* Variables.collect(
        breakdown,
        usedVariables(chain),
        self.options.sources,
        self.key
      )
      const resumed = self.state.messages.length > 0 || self.state.completed.length > 0
      const added: Array<Message.Message> = []
      const sent = { ...self.state.sent }
      const events: Array<RoutineEvent> = []
      if (!sent.skillPreamble && chain.skill.preamble !== undefined) {
        added.push(marked(Variables.fill(chain.skill.preamble, variables), "skill-preamble", self.key))
        events.push({ type: "preamble", chain: self.key, kind: "skill" })
      }
      sent.skillPreamble = true
      if (!sent.scenarioPreamble && chain.scenario.preamble !== undefined) {
        added.push(marked(Variables.fill(chain.scenario.preamble, variables), "scenario-preamble", self.key))
        events.push({ type: "preamble", chain: self.key, kind: "scenario" })
      }
      sent.scenarioPreamble = true
      // A resume told nothing new since the last overview (killed before the next task was
      // saved) does not repeat it: the conversation still ends with it.
      const lastMark = self.state.messages.at(-1)?.metadata?.routine
      if (self.state.completed.length > 0 && !self.isComplete() && lastMark !== "overview") {
        added.push(marked(overviewText(chain, self.state.completed), "overview", self.key))
        events.push({
          type: "overview",
          chain: self.key,
          completed: self.state.completed.map((entry) => entry.task)
        })
      }
      yield* self.save({
        ...self.state,
        status: self.isComplete() ? "complete" : "active",
        variables,
        sent,
        messages: [...self.state.messages, ...added]
      })
      self.ready = true
      yield* self.options.onEvent({
        type: "setup",
        chain: self.key,
        resumed,
        completed: self.state.completed.length,
        total: chain.scenario.tasks.length
      })
      for (const event of events) yield* self.options.onEvent(event)
    })
  }

  /**
   * Runs the next task through the agent and saves it as completed, with the
   * agent's last answer as evidence. Returns the task, or undefined when none is left.
   */
  runNext(): Effect.Effect<
    Task | undefined,
    Agent.AgentError | DatabaseError.DatabaseError | RoutineStore.RoutineConflictError,
    R
  > {
    const self = this
    return Effect.gen(function* () {
      const task = self.nextTask()
      if (task === undefined) return undefined
      const { model, onEvent } = self.options
      const agent = self.options.makeAgent(self.state.variables)
      yield* onEvent({ type: "task-started", chain: self.key, task: task.id, title: task.title })
      const prompt = marked(taskText(task, self.state.variables), "task", self.key, task.id)
      const conversation = [...self.state.messages, prompt]
      const stream = agent.executeStream(ConversationContext.fromArray(conversation), model)
      const output: Array<Message.Message> = []
      yield* Stream.runForEach(stream, (event) => {
        if (event.type === "message") output.push(event.message)
        return onEvent({ type: "agent", chain: self.key, task: task.id, event })
      })
      const evidence =
        [...output].reverse().find((message) => message.role === "assistant") ??
        Message.assistant("(the agent produced no answer)")
      const completed: CompletedTask = { task: task.id, evidence, completedAt: self.options.now() }
      const allDone = self.options.chain.scenario.tasks.every(
        (candidate) =>
          candidate.id === task.id || self.state.completed.some((entry) => entry.task === candidate.id)
      )
      yield* self.save({
        ...self.state,
        status: allDone ? "complete" : "active",
        completed: [...self.state.completed, completed],
        messages: [...conversation, ...output]
      })
      yield* onEvent({ type: "task-completed", chain: self.key, task: task.id, evidence })
      if (allDone) yield* onEvent({ type: "goal-completed", chain: self.key })
      return task
    })
  }
}
