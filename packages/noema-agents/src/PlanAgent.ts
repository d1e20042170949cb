/**
 * PlanAgent: a plan-driven workflow, model-driven from end to end.
 *
 * 1. **Think and plan**: the model reads the conversation and writes a plan
 *    (its thoughts, the goal, steps) as structured output validated by a
 *    Schema; JSON that is invalid gets a repair round (`StructuredOutput`).
 * 2. **Execute the next step** with a tool agent (`ToolAgent` over the given
 *    tools), told which step of which plan it is doing and what earlier steps
 *    produced.
 * 3. **Validate and adjust**: the model reviews the step's result, marks it
 *    done or failed, and decides to continue, replan (new remaining steps), or
 *    finish.
 * 4. **Loop or finish**, bounded: at most `maxSteps` executed steps and
 *    `maxReplans` replans; it also stops when no progress is made (two failed
 *    steps in a row). Why it stopped is kept in the plan (`stopReason`).
 * 5. **Finalize and clean the plan**: steps never run become `skipped`.
 * 6. **Decide whether to tell the user**: the model gets one tool,
 *    `user_sendMessage` (the `user.sendMessage` of the design, named as
 *    providers allow), and calls it to tell the user something, or does not
 *    (work the user need not hear about). Its text becomes the final
 *    assistant message, carrying the final plan in `metadata.plan`.
 *
 * The output is an honest, valid history: for each step, a system message
 * saying which step runs (with the plan in its metadata), then what the
 * executor produced (tool calls, their results, its report), then the message
 * to the user if there is one. The planning and reviewing calls are not
 * messages; the plan they produce is, in metadata, and is streamed as
 * `{ type: "data", name: "plan" }` events whenever it changes. The executor's
 * text streams as reasoning (working notes); only the message to the user
 * streams as text. Interrupting stops the model call or the tools running, at
 * any point.
 *
 * Steering (the runtime's items joining a running turn) is polled as
 * ToolAgent polls it (`internal/steering`), at the plan's step boundaries:
 * after a step ran, before its review (what arrived joins the output, so the
 * review sees it and may replan, and the steps after it see it too), and when
 * the plan would finish (`final: true`: what arrived then is planned for, and
 * the loop goes on). Where the bounds leave no room for more work
 * (`maxSteps`, `maxReplans`), the final poll is not made: those messages wait
 * for the next turn rather than join one that cannot act on them.
 */
import { Agent, type ChatModel, ConversationContext, Message, StructuredOutput, Tool } from "@noema/core"
import { Effect, Queue, Schema, Stream } from "effect"
import * as Injection from "./internal/steering.js"
import * as ToolAgent from "./ToolAgent.js"

// ---------------------------------------------------------------------------
// The plan
// ---------------------------------------------------------------------------

export const PlanStepStatus = Schema.Literals(["pending", "running", "done", "failed", "skipped"])
export type PlanStepStatus = typeof PlanStepStatus.Type

export const PlanStep = Schema.Struct({
  /** 1, 2, ... in the order steps were added (replanned steps get new ids). */
  id: Schema.Number,
  title: Schema.String,
  detail: Schema.String,
  status: PlanStepStatus,
  /** What the review said the step achieved (or why it failed). */
  result: Schema.optionalKey(Schema.String)
})
export type PlanStep = typeof PlanStep.Type

export const StopReason = Schema.Literals(["finished", "max-steps", "max-replans", "no-progress"])
export type StopReason = typeof StopReason.Type

export const Plan = Schema.Struct({
  goal: Schema.String,
  steps: Schema.Array(PlanStep),
  /** Replans made so far. */
  replans: Schema.Number,
  /** Set once the loop has ended. */
  stopReason: Schema.optionalKey(StopReason),
  /** Set once the notify decision is made: whether the user was sent a message. */
  notified: Schema.optionalKey(Schema.Boolean)
})
export type Plan = typeof Plan.Type

/** The name of the `data` events carrying the plan. */
export const planEvent = "plan"

/** The plan a message carries in its metadata (step messages and the message to the user), if any. */
export const planOf = (message: Message.Message): Plan | undefined => {
  const value = message.metadata?.plan
  if (value === undefined) return undefined
  const decoded = Schema.decodeUnknownOption(Plan)(value)
  return decoded._tag === "Some" ? decoded.value : undefined
}

// ---------------------------------------------------------------------------
// What the model writes
// ---------------------------------------------------------------------------

const StepDraft = Schema.Struct({
  title: Schema.String.annotate({ description: "A short imperative title" }),
  detail: Schema.String.annotate({ description: "What exactly to do, and what counts as done" })
})

const Draft = Schema.Struct({
  thoughts: Schema.String.annotate({ description: "Your reasoning about the request, before planning" }),
  goal: Schema.String.annotate({ description: "What the user wants, in one sentence" }),
  steps: Schema.Array(StepDraft).annotate({ description: "The steps, in order; as few as the work needs" })
})

const Review = Schema.Struct({
  thoughts: Schema.String,
  outcome: Schema.Literals(["done", "failed"]).annotate({
    description: "Whether the step achieved what it had to"
  }),
  summary: Schema.String.annotate({
    description: "What the step achieved, or why it failed, in one or two sentences"
  }),
  decision: Schema.Literals(["continue", "replan", "finish"]).annotate({
    description: "continue with the remaining steps; replan them (give remainingSteps); or finish now"
  }),
  remainingSteps: Schema.NullOr(Schema.Array(StepDraft)).annotate({
    description: "With replan: the steps that replace every remaining step; otherwise null"
  })
})

const SendMessage = Schema.Struct({
  text: Schema.String.annotate({ description: "The message to the user" })
})

/** The tool the notify decision is made with. */
export const sendMessageToolName = "user_sendMessage"

const sendMessageTool = Tool.make({
  name: sendMessageToolName,
  description: "Send a message to the user. Call it only if the user should be told something.",
  parameters: SendMessage,
  handler: () => Effect.void
})

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

export interface Options<Tools extends ReadonlyArray<Tool.Any<unknown>>> {
  /** Shown in errors. Default `"plan-agent"`. */
  readonly name?: string
  /** Put in front of the conversation for the executor (the planner and reviewer have their own). */
  readonly system?: string
  /** The tools steps may use. */
  readonly tools: Tools
  /** Steps executed at most; the rest are skipped. Default 8. */
  readonly maxSteps?: number
  /** Replans at most. Default 3. */
  readonly maxReplans?: number
  /** Model calls one step's tool loop may make. Default `ToolAgent.defaultMaxSteps`. */
  readonly maxStepCalls?: number
  /** Repair rounds for the plan's and reviews' JSON. Default 1. */
  readonly maxRepairs?: number
  /** How the plan and reviews reach the model (`StructuredOutput.Mode`). Default `"auto"`. */
  readonly outputMode?: StructuredOutput.Mode
  /**
   * Polled after each step and when the plan would finish (see the module comment); what it
   * returns joins the output. The runtime gives its own (`ToolAgent.Steering`, the same contract).
   */
  readonly steering?: ToolAgent.Steering
}

export const defaultMaxSteps = 8
export const defaultMaxReplans = 3

const planner = [
  "You plan how to do what the user asks in the conversation below.",
  "First think about the request; then give the goal and the steps to reach it.",
  "Each step is done by an assistant with tools, one at a time; keep the plan short.",
  "A request that needs no work (a greeting, a simple question) gets one step."
].join(" ")

const reviewer = [
  "You review the step of a plan that was just executed, against its detail.",
  "Say whether it was done, what it achieved, and decide: continue with the remaining steps,",
  "replan them (give the new remaining steps), or finish (the goal is reached, or cannot be)."
].join(" ")

/** Told to the reviewer when messages joined while the step ran. */
const joinedNote = "Messages arrived while the step ran (above): replan if they change the remaining work."

/** Told to the planner when messages joined as the plan would finish. */
const morePlanning =
  "The work above is done; new messages arrived after it. Plan only the steps those messages still need."

const notifier = [
  "The plan below has ended. Decide whether the user should be told anything: the answer to",
  "their request, results, or a problem they must know about. If so, call user_sendMessage",
  "with the message; write it for the user, complete, without mentioning the plan's mechanics.",
  "If nothing needs to be said, do not call it."
].join(" ")

type DraftOptions = Pick<Options<ReadonlyArray<Tool.Any<unknown>>>, "outputMode" | "maxRepairs">

/** The planning call: the model's thoughts, goal and steps for `context`, `note` last. */
const writeDraft = (
  context: ConversationContext.ConversationContext,
  model: ChatModel.Service,
  options: DraftOptions,
  note: string
) =>
  StructuredOutput.generate(model, {
    schema: Draft,
    name: "plan",
    messages: ConversationContext.concat(
      [Message.system(planner)],
      ConversationContext.withoutSystem(context),
      [Message.system(note)]
    ),
    ...(options.outputMode !== undefined && { mode: options.outputMode }),
    maxRepairs: options.maxRepairs ?? 1
  })

/**
 * The planning step alone: the plan (goal, pending steps) the workflow would start from for
 * this conversation, with the same instructions, Schema and repair round. For orchestrators
 * that carry the steps out themselves (a run's stages in `@noema/runs`).
 */
export const draftPlan = (
  context: ConversationContext.ConversationContext,
  model: ChatModel.Service,
  options: DraftOptions = {}
): Effect.Effect<Plan, StructuredOutput.StructuredOutputError | ChatModel.ChatModelError> =>
  Effect.map(
    writeDraft(context, model, options, "Write the plan now."),
    (draft): Plan => ({
      goal: draft.goal,
      steps: draft.steps.map((step, index) => ({
        id: index + 1,
        title: step.title,
        detail: step.detail,
        status: "pending"
      })),
      replans: 0
    })
  )

// ---------------------------------------------------------------------------
// The workflow
// ---------------------------------------------------------------------------

const render = (plan: Plan): string =>
  [
    `Goal: ${plan.goal}`,
    ...plan.steps.map(
      (step) =>
        `${step.id}. [${step.status}] ${step.title}: ${step.detail}${step.result === undefined ? "" : ` (result: ${step.result})`}`
    )
  ].join("\n")

/** One execution: the plan, what was produced, and the events for the stream. */
class Run<R> {
  readonly produced: Array<Message.Message> = []
  plan: Plan = { goal: "", steps: [], replans: 0 }
  nextId = 1

  constructor(
    readonly agent: Required<
      Omit<Options<ReadonlyArray<Tool.Any<R>>>, "system" | "outputMode" | "steering">
    > &
      Pick<Options<ReadonlyArray<Tool.Any<R>>>, "system" | "outputMode" | "steering">,
    readonly executor: Agent.Agent<R>,
    readonly context: ConversationContext.ConversationContext,
    readonly model: ChatModel.Service,
    readonly emit: (event: Agent.AgentEvent) => Effect.Effect<void>
  ) {}

  failed(error: { readonly message: string }): Agent.AgentError {
    return new Agent.AgentError({
      agent: this.agent.name,
      reason: new Agent.Failed({ message: error.message }),
      messages: this.produced.slice()
    })
  }

  modelFailed(error: ChatModel.ChatModelError): Agent.AgentError {
    return Agent.prependMessages(Agent.modelFailed(this.agent.name, error), this.produced)
  }

  /** Structured output over the conversation and what was produced, with an instruction in front. */
  decide<S extends StructuredOutput.OutputSchema>(
    schema: S,
    name: string,
    instructions: string,
    note: string
  ): Effect.Effect<S["Type"], Agent.AgentError> {
    return StructuredOutput.generate(this.model, {
      schema,
      name,
      messages: ConversationContext.concat(
        [Message.system(instructions)],
        ConversationContext.withoutSystem(this.context),
        this.produced,
        [Message.system(note)]
      ),
      ...(this.agent.outputMode !== undefined && { mode: this.agent.outputMode }),
      maxRepairs: this.agent.maxRepairs
    }).pipe((effect) => this.asAgentError(effect))
  }

  /** A planning call's failure as the agent's. */
  asAgentError<A>(
    effect: Effect.Effect<A, StructuredOutput.StructuredOutputError | ChatModel.ChatModelError>
  ): Effect.Effect<A, Agent.AgentError> {
    return effect.pipe(
      Effect.catchTags({
        StructuredOutputError: (error) => Effect.fail(this.failed(error)),
        ChatModelError: (error) => Effect.fail(this.modelFailed(error))
      })
    )
  }

  setPlan(plan: Plan): Effect.Effect<void> {
    this.plan = plan
    return this.emit({ type: "data", name: planEvent, data: plan })
  }

  addMessage(message: Message.Message): Effect.Effect<void> {
    this.produced.push(message)
    return this.emit({ type: "message", message })
  }

  newSteps(drafts: ReadonlyArray<typeof StepDraft.Type>): Array<PlanStep> {
    return drafts.map((draft) => ({
      id: this.nextId++,
      title: draft.title,
      detail: draft.detail,
      status: "pending"
    }))
  }

  withStep(id: number, change: Partial<PlanStep>): Plan {
    return {
      ...this.plan,
      steps: this.plan.steps.map((step) => (step.id === id ? { ...step, ...change } : step))
    }
  }

  /** Runs one step with the executor: its tool calls and report join the output. */
  execute(step: PlanStep): Effect.Effect<string, Agent.AgentError, R> {
    const position = this.plan.steps.findIndex((candidate) => candidate.id === step.id) + 1
    const instruction = Message.system(
      `Plan step ${position} of ${this.plan.steps.length}: ${step.title}. ${step.detail}\n` +
        "Do this step now, using the tools if they help, and end with a short report of what you did " +
        `and found.\n\nThe plan:\n${render(this.plan)}`,
      { metadata: { plan: this.plan as never } }
    )
    return Effect.gen({ self: this }, function* (this: Run<R>) {
      yield* this.addMessage(instruction)
      let report = ""
      const view = ConversationContext.concat(
        ConversationContext.withoutSystem(this.context),
        this.produced.slice()
      )
      yield* this.executor.executeStream(view, this.model).pipe(
        Stream.runForEach((event) => {
          switch (event.type) {
            // The executor's text is working notes: reasoning to a UI, the report to the review.
            case "text-delta":
              return this.emit({ type: "reasoning-delta", delta: event.delta })
            case "message":
              if (event.message.role === "assistant") report = Message.text(event.message)
              return this.addMessage(event.message)
            default:
              return this.emit(event)
          }
        }),
        Effect.mapError((error) => Agent.prependMessages(error, this.produced))
      )
      return report
    })
  }

  /** The whole workflow; ends with the final plan emitted and the message to the user, if any. */
  program(): Effect.Effect<void, Agent.AgentError, R> {
    return Effect.gen({ self: this }, function* (this: Run<R>) {
      const plan = yield* this.asAgentError(
        draftPlan(this.context, this.model, {
          ...(this.agent.outputMode !== undefined && { outputMode: this.agent.outputMode }),
          maxRepairs: this.agent.maxRepairs
        })
      )
      this.nextId = plan.steps.length + 1
      yield* this.setPlan(plan)
      let executed = 0
      let failedInARow = 0
      let stopReason: StopReason = "finished"
      for (;;) {
        const step = this.plan.steps.find((candidate) => candidate.status === "pending")
        if (step === undefined) {
          if (yield* this.planMore(executed)) continue
          break
        }
        if (executed >= this.agent.maxSteps) {
          stopReason = "max-steps"
          break
        }
        yield* this.setPlan(this.withStep(step.id, { status: "running" }))
        const report = yield* this.execute(step)
        executed++
        const joined = yield* this.steer(executed, false)
        const review = yield* this.decide(
          Review,
          "review",
          reviewer,
          `The plan:\n${render(this.plan)}\n\nStep ${step.id} ("${step.title}") just ran; its report: ${report || "(none)"}\n` +
            `${joined ? `${joinedNote}\n` : ""}Review it.`
        )
        yield* this.setPlan(this.withStep(step.id, { status: review.outcome, result: review.summary }))
        failedInARow = review.outcome === "failed" ? failedInARow + 1 : 0
        if (failedInARow >= 2) {
          stopReason = "no-progress"
          break
        }
        if (review.decision === "finish") {
          if (yield* this.planMore(executed)) continue
          break
        }
        if (review.decision === "replan" && review.remainingSteps !== null) {
          if (this.plan.replans >= this.agent.maxReplans) {
            stopReason = "max-replans"
            break
          }
          const kept = this.plan.steps.filter((candidate) => candidate.status !== "pending")
          yield* this.setPlan({
            ...this.plan,
            steps: [...kept, ...this.newSteps(review.remainingSteps)],
            replans: this.plan.replans + 1
          })
        }
      }
      // Finalize: what never ran is skipped; the reason the loop ended is kept.
      yield* this.setPlan({
        ...this.plan,
        steps: this.plan.steps.map((step) =>
          step.status === "pending" || step.status === "running" ? { ...step, status: "skipped" } : step
        ),
        stopReason
      })
      yield* this.notify()
    })
  }

  /** Polls steering at a step boundary; what arrived joins the output. True when something did. */
  steer(step: number, final: boolean): Effect.Effect<boolean, Agent.AgentError> {
    const steering = this.agent.steering
    if (steering === undefined) return Effect.succeed(false)
    return Effect.flatMap(
      Injection.poll(this.agent.name, steering, { step, final }, this.produced),
      (messages) =>
        messages.length === 0
          ? Effect.succeed(false)
          : Effect.as(
              Effect.forEach(messages, (message) => this.addMessage(message), { discard: true }),
              true
            )
    )
  }

  /**
   * The plan would finish: messages that waited for the end join, and the work they need
   * replaces the pending steps (a replan). False when none came, or when the bounds leave
   * no room for them (they then wait for the next turn).
   */
  planMore(executed: number): Effect.Effect<boolean, Agent.AgentError> {
    if (executed >= this.agent.maxSteps || this.plan.replans >= this.agent.maxReplans) {
      return Effect.succeed(false)
    }
    return Effect.gen({ self: this }, function* (this: Run<R>) {
      if (!(yield* this.steer(executed, true))) return false
      const draft = yield* this.asAgentError(
        writeDraft(
          ConversationContext.concat(this.context, this.produced),
          this.model,
          {
            ...(this.agent.outputMode !== undefined && { outputMode: this.agent.outputMode }),
            maxRepairs: this.agent.maxRepairs
          },
          morePlanning
        )
      )
      const kept = this.plan.steps.filter((candidate) => candidate.status !== "pending")
      yield* this.setPlan({
        goal: draft.goal,
        steps: [...kept, ...this.newSteps(draft.steps)],
        replans: this.plan.replans + 1
      })
      return true
    })
  }

  /** The notify decision: a `user_sendMessage` call becomes the message to the user. */
  notify(): Effect.Effect<void, Agent.AgentError> {
    return Effect.gen({ self: this }, function* (this: Run<R>) {
      const response = yield* this.model
        .complete({
          messages: ConversationContext.concat(
            [Message.system(notifier)],
            ConversationContext.withoutSystem(this.context),
            this.produced,
            [Message.system(`The plan:\n${render(this.plan)}\nIt ended: ${this.plan.stopReason}.`)]
          ),
          tools: [sendMessageTool.definition],
          toolChoice: "auto"
        })
        .pipe(Effect.mapError((error) => this.modelFailed(error)))
      const call = response.toolCalls.find((candidate) => candidate.name === sendMessageToolName)
      const decoded =
        call === undefined
          ? undefined
          : Schema.decodeUnknownOption(Schema.fromJsonString(SendMessage))(call.arguments)
      const text = decoded?._tag === "Some" ? decoded.value.text.trim() : ""
      yield* this.setPlan({ ...this.plan, notified: text.length > 0 })
      if (text.length === 0) return
      yield* this.emit({ type: "text-delta", delta: text })
      yield* this.addMessage(
        Message.assistant(text, {
          metadata: { plan: this.plan as never },
          ...(response.usage !== undefined && { usage: response.usage })
        })
      )
    })
  }
}

const positiveInteger = (what: string, value: number): number => {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`PlanAgent ${what} must be a positive integer, got ${value}`)
  }
  return value
}

/** A plan-driven agent over `tools` (see the module comment). */
export const make = <const Tools extends ReadonlyArray<Tool.Any<unknown>>>(
  options: Options<Tools>
): Agent.Agent<Tool.Services<Tools[number]>> => {
  type R = Tool.Services<Tools[number]>
  const name = options.name ?? "plan-agent"
  const settings = {
    name,
    tools: options.tools as unknown as ReadonlyArray<Tool.Any<R>>,
    maxSteps: positiveInteger("maxSteps", options.maxSteps ?? defaultMaxSteps),
    maxReplans: options.maxReplans ?? defaultMaxReplans,
    maxStepCalls: positiveInteger("maxStepCalls", options.maxStepCalls ?? ToolAgent.defaultMaxSteps),
    maxRepairs: options.maxRepairs ?? 1,
    ...(options.system !== undefined && { system: options.system }),
    ...(options.outputMode !== undefined && { outputMode: options.outputMode }),
    ...(options.steering !== undefined && { steering: options.steering })
  }
  const executor = ToolAgent.make({
    name: `${name}/step`,
    tools: options.tools,
    maxSteps: settings.maxStepCalls,
    ...(options.system !== undefined && { system: options.system })
  }) as unknown as Agent.Agent<R>
  return Agent.make<R>({
    name,
    executeStream: (context, model) =>
      Stream.callback<Agent.AgentEvent, Agent.AgentError, R>((queue) =>
        Effect.andThen(
          new Run<R>(settings, executor, context, model, (event) =>
            Effect.asVoid(Queue.offer(queue, event))
          ).program(),
          Queue.end(queue)
        )
      )
  })
}
