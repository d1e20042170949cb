/**
 * RoutineContext: one goal chain (a skill, one of its scenarios, its tasks)
 * being worked on, with the conversation the agent sees.
 *
 * `setup` collects the chain's variables, then adds the skill preamble and the
 * scenario preamble (each only if the stored conversation does not hold it
 * yet) and, when tasks are already done, an overview of them. `runNext`
 * adds the next task neither completed nor ticked in the document and runs the
 * agent on the conversation; the task is complete only when the agent's
 * verdict says so (`TaskVerdict`), otherwise it stays open with the reason.
 * A chain stored as complete whose document gained tasks reopens.
 * The state is saved after every step (setup, each task), so a process killed
 * at any point resumes from the last saved step: a task whose step was not
 * saved runs again, a completed one never does.
 */
import { Agent, type ChatModel, ConversationContext, Message } from "@noema/core"
import type { DatabaseError } from "@noema/sql"
import { Effect, Stream } from "effect"
import type * as RoutineStore from "./RoutineStore.js"
import type { ChainState, CompletedTask, OpenTask } from "./RoutineStore.js"
import * as TaskVerdict from "./TaskVerdict.js"
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
  /** The chain was stored as complete and its document has tasks it never did: they run now. */
  | { readonly type: "reopened"; readonly chain: string; readonly tasks: ReadonlyArray<string> }
  /** A task ticked as done in the document: not run (reported at every setup). */
  | { readonly type: "task-skipped"; readonly chain: string; readonly task: string; readonly title: string }
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
      readonly summary: string
      readonly source: TaskVerdict.Source
    }
  /** The agent did not complete the task (its verdict said not done, or it gave none). */
  | { readonly type: "task-open"; readonly chain: string; readonly task: string; readonly reason: string }
  | { readonly type: "goal-completed"; readonly chain: string }

/** How each message a routine adds is marked (`metadata.routine`), so it can be told apart. */
export type Mark = "skill-preamble" | "scenario-preamble" | "overview" | "task" | "nudge" | "verdict"

export const marked = (content: string, routine: Mark, chain: string, task?: string): Message.UserMessage =>
  Message.user(content, { metadata: task === undefined ? { routine, chain } : { routine, chain, task } })

/** The overview of done tasks (completed by the agent, or ticked in the document) a chain is told when it resumes. */
export const overviewText = (
  chain: GoalChain,
  completed: ReadonlyArray<CompletedTask>,
  ticked: ReadonlyArray<Task> = []
): string => {
  const titles = new Map(chain.scenario.tasks.map((task) => [task.id, task.title]))
  const lines = [
    ...completed.map((entry) => {
      const answer = entry.summary.trim().split("\n")[0] ?? ""
      return `- ${entry.task}: ${titles.get(entry.task) ?? entry.task}${answer === "" ? "" : ` (result: ${answer})`}`
    }),
    ...ticked.map((task) => `- ${task.id}: ${task.title} (ticked as done in the document)`)
  ]
  return `These tasks of ${chainKey(chain)} are already completed:\n${lines.join("\n")}\n\nDo not redo them; continue with the remaining tasks.`
}

/** What the agent is told for a task. */
export const taskText = (
  task: Task,
  variables: Readonly<Record<string, string>>,
  tools: ReadonlyArray<string>
): string => {
  const title = Variables.fill(task.title, variables)
  const parts = [`Task ${task.id}: ${title}`]
  if (task.instructions !== undefined) parts.push(Variables.fill(task.instructions, variables))
  // What is true of this task, whatever the reason (its chain names none, or the caller gave none).
  if (tools.length === 0) parts.push("This task has no tools: do it with what this conversation holds.")
  return parts.join("\n\n")
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
  /** The agent for a task of this chain (tools and prompts filtered to it), given the chain's variables. */
  readonly makeAgent: (variables: Readonly<Record<string, string>>, task: Task) => Agent.Agent<R>
  /** The names of the tools that agent works with (`complete_task` aside), for the task's prompt. */
  readonly tools: ReadonlyArray<string>
  readonly verdict: TaskVerdict.Mode
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
        open: [],
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
    return this.nextTask() === undefined
  }

  /** The first task neither completed by the agent nor ticked as done in the document. */
  nextTask(): Task | undefined {
    return remaining(this.options.chain, this.state)[0]
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
      const wasActive = self.state.status !== "complete"
      const added: Array<Message.Message> = []
      const sent = { ...self.state.sent }
      const events: Array<RoutineEvent> = []
      const ticked = tickedTasks(chain, self.state)
      for (const task of ticked)
        events.push({ type: "task-skipped", chain: self.key, task: task.id, title: task.title })
      if (self.state.status === "complete" && !self.isComplete()) {
        const tasks = remaining(chain, self.state).map((task) => task.id)
        events.push({ type: "reopened", chain: self.key, tasks })
      }
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
      const done = self.state.completed.length + ticked.length
      if (done > 0 && !self.isComplete() && lastMark !== "overview") {
        added.push(marked(overviewText(chain, self.state.completed, ticked), "overview", self.key))
        events.push({
          type: "overview",
          chain: self.key,
          completed: [...self.state.completed.map((entry) => entry.task), ...ticked.map((task) => task.id)]
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
        completed: done,
        total: chain.scenario.tasks.length
      })
      for (const event of events) yield* self.options.onEvent(event)
      // Completed by the document (its last tasks ticked): said once, when it is stored complete.
      if (wasActive && self.isComplete())
        yield* self.options.onEvent({ type: "goal-completed", chain: self.key })
    })
  }

  /**
   * Runs the next task through the agent and saves its outcome: completed (with
   * the agent's last answer as evidence and its verdict's summary) when the
   * verdict says done, otherwise open with the reason. Undefined when no task is left.
   */
  runNext(): Effect.Effect<
    TaskOutcome | undefined,
    Agent.AgentError | DatabaseError.DatabaseError | RoutineStore.RoutineConflictError,
    R
  > {
    const self = this
    return Effect.gen(function* () {
      const task = self.nextTask()
      if (task === undefined) return undefined
      const { model, onEvent, verdict: mode } = self.options
      const agent = self.options.makeAgent(self.state.variables, task)
      yield* onEvent({ type: "task-started", chain: self.key, task: task.id, title: task.title })
      const text = taskText(task, self.state.variables, self.options.tools)
      const conversation = [...self.state.messages, marked(text, "task", self.key, task.id)]
      const stream = agent.executeStream(ConversationContext.fromArray(conversation), model)
      const output: Array<Message.Message> = []
      yield* Stream.runForEach(stream, (event) => {
        if (event.type === "message") output.push(event.message)
        return onEvent({ type: "agent", chain: self.key, task: task.id, event })
      })
      const evidence = evidenceOf(output)
      let verdict: TaskVerdict.Verdict | undefined
      if (mode === "tool-call") verdict = TaskVerdict.fromToolCalls(output)
      else {
        const question = marked(TaskVerdict.questionText(task.id), "verdict", self.key, task.id)
        const asked = yield* Effect.mapError(
          TaskVerdict.ask(model, [...conversation, ...output], question),
          (error) => Agent.modelFailed(`routine ${self.key}`, error, output)
        )
        output.push(...asked.added)
        verdict = asked.verdict
      }
      const now = self.options.now()
      const others = self.state.open.filter((entry) => entry.task !== task.id)
      const outcome: TaskOutcome =
        verdict?.done === true
          ? { task, done: true, summary: verdict.summary }
          : { task, done: false, reason: verdict?.summary ?? TaskVerdict.notConfirmed }
      const completed: ReadonlyArray<CompletedTask> = outcome.done
        ? [
            ...self.state.completed,
            { task: task.id, evidence, completedAt: now, source: mode, summary: outcome.summary }
          ]
        : self.state.completed
      const open: ReadonlyArray<OpenTask> = outcome.done
        ? others
        : [...others, { task: task.id, reason: outcome.reason, at: now }]
      const allDone = remaining(self.options.chain, { completed }).length === 0
      yield* self.save({
        ...self.state,
        status: allDone ? "complete" : "active",
        completed,
        open,
        messages: [...conversation, ...output]
      })
      yield* outcome.done
        ? onEvent({
            type: "task-completed",
            chain: self.key,
            task: task.id,
            evidence,
            summary: outcome.summary,
            source: mode
          })
        : onEvent({ type: "task-open", chain: self.key, task: task.id, reason: outcome.reason })
      if (allDone) yield* onEvent({ type: "goal-completed", chain: self.key })
      return outcome
    })
  }
}

/** What became of a task `runNext` ran. */
export type TaskOutcome =
  | { readonly task: Task; readonly done: true; readonly summary: string }
  | { readonly task: Task; readonly done: false; readonly reason: string }

/** The tasks ticked as done in the document that the agent has not completed (not run: skipped). */
export const tickedTasks = (chain: GoalChain, state: Pick<ChainState, "completed">): ReadonlyArray<Task> => {
  const completed = new Set(state.completed.map((entry) => entry.task))
  return chain.scenario.tasks.filter((task) => task.done === true && !completed.has(task.id))
}

/** The tasks still to run, in order: neither completed by the agent nor ticked in the document. */
export const remaining = (chain: GoalChain, state: Pick<ChainState, "completed">): ReadonlyArray<Task> => {
  const completed = new Set(state.completed.map((entry) => entry.task))
  return chain.scenario.tasks.filter((task) => task.done !== true && !completed.has(task.id))
}

/** The agent's last answer with text (what the task produced), or its last message at all. */
const evidenceOf = (output: ReadonlyArray<Message.Message>): Message.Message => {
  const answers = output.filter((message) => message.role === "assistant")
  return (
    answers.findLast((message) => Message.text(message).trim() !== "") ??
    answers.at(-1) ??
    Message.assistant("(the agent produced no answer)")
  )
}
