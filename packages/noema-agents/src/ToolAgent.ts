/**
 * ToolAgent: the model-and-tools loop.
 *
 * Each step calls the model with the tool definitions; when it asks for tool
 * calls, they run (concurrently, up to a limit) and their results are added,
 * and the model is called again. The loop ends when the model answers without
 * tool calls, when a `stopWhen` condition holds, or fails with
 * `MaxStepsExceeded` after `maxSteps` model calls that still asked for tools.
 * The model sees the original context followed by everything produced so far
 * through one live view, so no step copies the history. A tool that fails, is
 * unknown or gets bad arguments becomes an error result the model can read
 * (see `Tool.callIn`); the calls of a response cut off by the length limit are
 * not run, and each is answered with an error saying so. Only interruption
 * stops the loop, and it stops the running model call and tools with it.
 *
 * Three hooks shape the loop (the event-driven runtime is built on them):
 * `prepareStep` adjusts each model call (options, active tools, the messages
 * it sees), `stopWhen` ends the loop normally after a step, and `steering`
 * injects messages between steps. `execute` and `executeStream` drive one
 * step machine (`Run` below), so every decision is made in one place.
 */
import { Agent, Approval, type ChatModel, ConversationContext, Message, Tool } from "@noema/core"
import { Effect, Exit, Stream } from "effect"
import * as Injection from "./internal/steering.js"
import * as Turn from "./internal/turn.js"

// ---------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------

/** One completed step: a model call and the tool calls it asked for. */
export interface Step {
  /** 1 for the first model call. */
  readonly number: number
  readonly assistant: Message.AssistantMessage
  /** One per tool call of `assistant`, in call order (empty when it asked for none). */
  readonly toolResults: ReadonlyArray<Message.ToolMessage>
  readonly finishReason: ChatModel.FinishReason
  readonly usage: ChatModel.Usage | undefined
}

/** What a stop condition reads: the steps completed so far (the last one just finished). */
export interface StopConditionInput {
  /** The number of the step that just finished (`steps.length`). */
  readonly step: number
  readonly steps: ReadonlyArray<Step>
}

/** True to end the loop normally after the current step. */
export type StopCondition = (input: StopConditionInput) => boolean

/** Stops once `count` steps (model calls) have completed. */
export const stepCountIs = (count: number): StopCondition => {
  positiveInteger("stepCountIs count", count)
  return ({ steps }) => steps.length >= count
}

/**
 * Stops after a step in which the model called one of `names` (the call has
 * run). A call cut off by the length limit does not count: it was not run,
 * and the model is asked to make it again.
 */
export const hasToolCall = (...names: ReadonlyArray<string>): StopCondition => {
  if (names.length === 0) throw new RangeError("hasToolCall needs at least one tool name")
  return ({ steps }) => {
    const last = steps.at(-1)
    if (last === undefined || last.finishReason === "length") return false
    return last.assistant.toolCalls?.some((call) => names.includes(call.name)) ?? false
  }
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** What a request may set besides its messages and tools (temperature, toolChoice, ...). */
export type ModelOptions = Omit<ChatModel.ChatRequest, "messages" | "tools">

/** What `prepareStep` is told before a model call. */
export interface PrepareStepInput {
  /** The number of the model call about to be made (1 for the first). */
  readonly step: number
  /** The steps completed so far. */
  readonly steps: ReadonlyArray<Step>
  /** The request this call makes without overrides: the agent's options, every tool, `messages`. */
  readonly request: ChatModel.ChatRequest
  /** System prompt + context + everything produced so far: a live view, never a copy. */
  readonly messages: ConversationContext.ConversationContext
}

/** What one model call changes; everything left out is as in the base request. */
export interface StepOverrides {
  /** Merged over the agent's `options` for this call only. */
  readonly options?: ModelOptions
  /** Names of the tools this call offers (and may run); a call to another tool is answered as unknown. */
  readonly activeTools?: ReadonlyArray<string>
  /** What the model sees in this call, e.g. `input.messages.window(20)` (a view: do not copy). */
  readonly messages?: ConversationContext.ConversationContext
}

export type PrepareStep = (
  input: PrepareStepInput
) => StepOverrides | undefined | Effect.Effect<StepOverrides | undefined>

/** What steering is told when it is polled (shared with PlanAgent: `internal/steering`). */
export type SteeringInput = Injection.SteeringInput

/**
 * Messages to inject between steps, polled after each step's tool calls have
 * all been answered and before the next model call. Return what arrived since
 * the last poll (e.g. `Queue.clear(queue)`), or an empty array.
 */
export type Steering = Injection.Steering

export interface Options<Tools extends ReadonlyArray<Tool.Any<unknown>>> {
  /** Shown in errors and logs. Default `"tool-agent"`. */
  readonly name?: string
  /** Put in front of the conversation for every call. */
  readonly system?: string | Message.SystemMessage
  readonly tools: Tools
  /** Model calls allowed in one execution (a hard limit: exceeding it is an error). Default 10. */
  readonly maxSteps?: number
  /** Tool calls of one step that may run at the same time. Default 4. */
  readonly concurrency?: number
  readonly options?: ModelOptions
  /** Ends the loop normally after a step when it (or any of them) holds; checked once the step's tools ran. */
  readonly stopWhen?: StopCondition | ReadonlyArray<StopCondition>
  /** Called before every model call; its overrides apply to that call only. */
  readonly prepareStep?: PrepareStep
  /** Polled between steps; what it returns is added to the output and seen by the next model call. */
  readonly steering?: Steering
}

export const defaultMaxSteps = 10
export const defaultConcurrency = 4

/** The error result of a call that was not run because the response was cut off. */
export const truncatedCallMessage = (call: Message.ToolCall): string =>
  `Tool call "${call.name}" was not run: the response was cut off by the length limit, so its arguments ` +
  "may be incomplete. Make the call again with complete arguments, keeping the response shorter."

// ---------------------------------------------------------------------------
// The step machine
// ---------------------------------------------------------------------------

const positiveInteger = (what: string, value: number): number => {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`ToolAgent ${what} must be a positive integer, got ${value}`)
  }
  return value
}

/** What one model call is made with: its request and the tools its calls may run. */
interface Prepared<R> {
  readonly request: ChatModel.ChatRequest
  readonly tools: ReadonlyArray<Tool.Any<R>>
}

/** The agent's fixed settings, shared by all its runs. */
interface Loop<R> {
  readonly name: string
  readonly maxSteps: number
  readonly concurrency: number
  readonly system: string | Message.SystemMessage | undefined
  readonly options: ModelOptions | undefined
  readonly tools: ReadonlyArray<Tool.Any<R>>
  readonly toolsByName: ReadonlyMap<string, Tool.Any<R>>
  readonly definitions: ReadonlyArray<ChatModel.ToolDefinition>
  readonly stopWhen: ReadonlyArray<StopCondition>
  readonly prepareStep: PrepareStep | undefined
  readonly steering: Steering | undefined
  readonly annotate: Turn.Annotate | undefined
  /** Whether any tool may need approval (otherwise no call is checked for it). */
  readonly gated: boolean
  /** Whether a hook reads the steps (otherwise they are only counted). */
  readonly recordSteps: boolean
}

/** What comes after a step: `undefined` ends the run; an array continues it, after injecting those messages. */
type Next = ReadonlyArray<Message.Message> | undefined

const end: Effect.Effect<Next> = Effect.succeed(undefined)
const proceed: Effect.Effect<Next> = Effect.succeed([])

// Some providers reject an empty tool list; no tools means a plain chat call.
const requestOf = (
  options: ModelOptions | undefined,
  messages: ConversationContext.ConversationContext,
  definitions: ReadonlyArray<ChatModel.ToolDefinition>
): ChatModel.ChatRequest => ({ ...options, messages, ...(definitions.length > 0 && { tools: definitions }) })

/** One execution of the loop: the output so far and every decision between model calls. */
class Run<R> {
  /** Everything produced so far, in order; the model's view reads through it. */
  readonly produced: Array<Message.Message> = []
  readonly steps: Array<Step> = []
  /** Model calls completed (`steps.length` when steps are recorded). */
  count = 0
  readonly messages: ConversationContext.ConversationContext
  readonly base: Prepared<R>

  constructor(
    readonly loop: Loop<R>,
    context: ConversationContext.ConversationContext
  ) {
    this.messages = ConversationContext.compose({
      system: loop.system,
      history: context,
      pending: this.produced
    })
    this.base = { request: requestOf(loop.options, this.messages, loop.definitions), tools: loop.tools }
  }

  private failed(message: string): Agent.AgentError {
    return new Agent.AgentError({
      agent: this.loop.name,
      reason: new Agent.Failed({ message }),
      messages: this.produced.slice()
    })
  }

  /** The request and tools of the next model call (the base one unless `prepareStep` overrides it). */
  prepare(): Effect.Effect<Prepared<R>, Agent.AgentError> {
    const prepareStep = this.loop.prepareStep
    if (prepareStep === undefined) return Effect.succeed(this.base)
    return Effect.suspend(() => {
      const overrides = prepareStep({
        step: this.count + 1,
        steps: this.steps,
        request: this.base.request,
        messages: this.messages
      })
      return Effect.isEffect(overrides)
        ? Effect.flatMap(overrides, (value) => this.apply(value))
        : this.apply(overrides)
    })
  }

  private apply(overrides: StepOverrides | undefined): Effect.Effect<Prepared<R>, Agent.AgentError> {
    if (overrides === undefined) return Effect.succeed(this.base)
    const loop = this.loop
    let tools = loop.tools
    let definitions = loop.definitions
    if (overrides.activeTools !== undefined) {
      const active: Array<Tool.Any<R>> = []
      for (const name of overrides.activeTools) {
        const tool = loop.toolsByName.get(name)
        if (tool === undefined) {
          return Effect.fail(
            this.failed(
              `prepareStep made unknown tool "${name}" active (tools: ${[...loop.toolsByName.keys()].join(", ") || "none"})`
            )
          )
        }
        // Named twice, offered once: providers reject a request with two tools of one name.
        if (!active.includes(tool)) active.push(tool)
      }
      tools = active
      definitions = Tool.definitions(active)
    }
    const options = overrides.options === undefined ? loop.options : { ...loop.options, ...overrides.options }
    return Effect.succeed({
      request: requestOf(options, overrides.messages ?? this.messages, definitions),
      tools
    })
  }

  /**
   * Answers one call of a step: runs it, refuses it when the response was cut
   * off, or (a call that needs approval) runs or rejects it as `Approvals`
   * decides; `undefined` when no decision is there yet (the call waits).
   */
  call(
    prepared: Prepared<R>,
    outcome: Turn.Outcome,
    call: Message.ToolCall
  ): Effect.Effect<Message.ToolMessage | undefined, never, R> {
    if (outcome.finishReason === "length") {
      return Effect.succeed(
        Message.toolResult({
          toolCallId: call.id,
          name: call.name,
          content: truncatedCallMessage(call),
          isError: true
        })
      )
    }
    return this.answer(prepared.tools, call)
  }

  /** Runs a call, through the approval gate when its tool needs one. */
  answer(
    tools: ReadonlyArray<Tool.Any<R>>,
    call: Message.ToolCall
  ): Effect.Effect<Message.ToolMessage | undefined, never, R> {
    if (!this.loop.gated) return Tool.callIn(tools, call)
    const tool = tools.find((candidate) => candidate.name === call.name)
    if (tool === undefined || !Tool.requiresApproval(tool, call)) return Tool.callIn(tools, call)
    return Effect.flatMap(Approval.decide(call), (decision) =>
      decision === undefined
        ? Effect.succeed(undefined)
        : decision.approved
          ? Tool.callIn(tools, call)
          : Effect.succeed(Approval.rejected(call, decision.reason))
    )
  }

  /**
   * The calls the context ends with unanswered (a turn that stopped for
   * approval), answered before the first model call: run, rejected, or still
   * waiting (`undefined`). Their results join the output.
   */
  pendingFrom(context: ConversationContext.ConversationContext): ReadonlyArray<Message.ToolCall> {
    return this.loop.gated ? Approval.pendingCalls(context) : []
  }

  /**
   * Ends a step whose calls have all been answered (`results`, in call order):
   * records it, then decides, in this order: a `stopWhen` condition holds →
   * end; `maxSteps` reached → fail if the step ran tools, else end; the
   * model asked for tools → continue, with whatever steering returns; it did
   * not → continue only if steering returns messages, else end.
   */
  next(
    outcome: Turn.Outcome,
    answers: ReadonlyArray<Message.ToolMessage | undefined>
  ): Effect.Effect<Next, Agent.AgentError> {
    const { loop, produced, steps } = this
    const results = answered(answers)
    for (let i = 0; i < results.length; i++) produced.push(results[i] as Message.ToolMessage)
    // A call waits for approval: the run stops here, that call unanswered (see `Approval`).
    if (results.length < answers.length) return end
    const number = ++this.count
    if (loop.recordSteps) {
      steps.push({
        number,
        assistant: outcome.message,
        toolResults: results,
        finishReason: outcome.finishReason,
        usage: outcome.usage
      })
    }
    const stopWhen = loop.stopWhen
    if (stopWhen.length > 0) {
      const input: StopConditionInput = { step: number, steps }
      for (let i = 0; i < stopWhen.length; i++) if ((stopWhen[i] as StopCondition)(input)) return end
    }
    const ranTools = results.length > 0
    if (number >= loop.maxSteps) {
      // The last step's calls were answered, so the produced history answers every call it makes.
      return ranTools
        ? Effect.fail(
            new Agent.AgentError({
              agent: loop.name,
              reason: new Agent.MaxStepsExceeded({ maxSteps: loop.maxSteps }),
              messages: produced.slice()
            })
          )
        : end
    }
    if (loop.steering === undefined) return ranTools ? proceed : end
    return Effect.map(
      Injection.poll(loop.name, loop.steering, { step: number, final: !ranTools }, produced),
      (messages) => {
        for (let i = 0; i < messages.length; i++) produced.push(messages[i] as Message.Message)
        return messages.length > 0 || ranTools ? messages : undefined
      }
    )
  }
}

const messageEvent = (message: Message.Message): Agent.AgentEvent => ({ type: "message", message })

/** The answered calls of a step, in call order (`undefined`: waiting for approval). */
const answered = (
  answers: ReadonlyArray<Message.ToolMessage | undefined>
): ReadonlyArray<Message.ToolMessage> =>
  answers.includes(undefined)
    ? answers.filter((answer) => answer !== undefined)
    : (answers as ReadonlyArray<Message.ToolMessage>)

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/** An agent running the tool loop; it needs the services its tools need. */
export const make = <const Tools extends ReadonlyArray<Tool.Any<unknown>>>(
  options: Options<Tools>
): Agent.Agent<Tool.Services<Tools[number]>> => {
  type R = Tool.Services<Tools[number]>
  const name = options.name ?? "tool-agent"
  const tools = options.tools as ReadonlyArray<Tool.Any<R>>
  const toolsByName = new Map<string, Tool.Any<R>>()
  const annotations = new Map<string, Tool.Annotations>()
  for (const tool of tools) {
    // The model picks a tool by name; a duplicate would silently shadow the other.
    if (toolsByName.has(tool.name))
      throw new TypeError(`ToolAgent "${name}" has two tools named "${tool.name}"`)
    toolsByName.set(tool.name, tool)
    if (tool.annotations !== undefined && Object.keys(tool.annotations).length > 0) {
      annotations.set(tool.name, tool.annotations)
    }
  }
  const stopWhen = options.stopWhen
  const loop: Loop<R> = {
    name,
    maxSteps: positiveInteger("maxSteps", options.maxSteps ?? defaultMaxSteps),
    concurrency: positiveInteger("concurrency", options.concurrency ?? defaultConcurrency),
    system: options.system,
    options: options.options,
    tools,
    toolsByName,
    definitions: Tool.definitions(tools),
    stopWhen: stopWhen === undefined ? [] : typeof stopWhen === "function" ? [stopWhen] : stopWhen,
    prepareStep: options.prepareStep,
    steering: options.steering,
    recordSteps: stopWhen !== undefined || options.prepareStep !== undefined,
    gated: tools.some((tool) => tool.needsApproval !== undefined && tool.needsApproval !== false),
    annotate: annotations.size === 0 ? undefined : (toolName) => annotations.get(toolName)
  }
  const { concurrency } = loop

  const execute: Agent.Agent<R>["execute"] = (context, model) =>
    Effect.gen(function* () {
      const run = new Run(loop, context)
      const pending = run.pendingFrom(context)
      if (pending.length > 0) {
        const answers = yield* Effect.forEach(pending, (call) => run.answer(loop.tools, call), {
          concurrency
        })
        const results = answered(answers)
        for (const result of results) run.produced.push(result)
        if (results.length < answers.length) return run.produced
      }
      for (;;) {
        // Decisions made without an effect (no prepareStep, no steering) are read, not run.
        const prepared = loop.prepareStep === undefined ? run.base : yield* run.prepare()
        const outcome = yield* Turn.complete(name, model, prepared.request, run.produced)
        const calls = outcome.message.toolCalls
        const results =
          calls === undefined || calls.length === 0
            ? []
            : yield* Effect.forEach(calls, (call) => run.call(prepared, outcome, call), { concurrency })
        const decision = run.next(outcome, results)
        const next =
          Exit.isExit(decision) && Exit.isSuccess(decision) ? (decision.value as Next) : yield* decision
        if (next === undefined) return run.produced
      }
    })

  const executeStream: Agent.Agent<R>["executeStream"] = (context, model) =>
    Stream.suspend(() => {
      const run = new Run(loop, context)

      // Results are reported as each call finishes, but kept (and emitted as messages) in call order.
      const runTools = (
        prepared: Prepared<R>,
        outcome: Turn.Outcome,
        calls: ReadonlyArray<Message.ToolCall>
      ): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> =>
        Stream.suspend(() => {
          const results: Array<Message.ToolMessage | undefined> = new Array(calls.length)
          return Stream.fromArray(calls).pipe(
            Stream.mapEffect(
              (call, index) =>
                Effect.map(run.call(prepared, outcome, call), (message): Agent.AgentEvent => {
                  results[index] = message
                  return message === undefined ? approvalRequest(call) : { type: "tool-result", message }
                }),
              { concurrency, unordered: true }
            ),
            Stream.concat(
              Stream.suspend(() =>
                Stream.concat(Stream.fromArray(answered(results).map(messageEvent)), after(outcome, results))
              )
            )
          )
        })

      const approvalRequest = (call: Message.ToolCall): Agent.AgentEvent => {
        const annotations = loop.annotate?.(call.name)
        return annotations === undefined
          ? { type: "approval-request", toolCall: call }
          : { type: "approval-request", toolCall: call, annotations }
      }

      const after = (
        outcome: Turn.Outcome,
        results: ReadonlyArray<Message.ToolMessage | undefined>
      ): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> => {
        const continueWith = (next: Next) =>
          next === undefined
            ? Stream.empty
            : next.length === 0
              ? step()
              : Stream.concat(Stream.fromArray(next.map(messageEvent)), step())
        const decision = run.next(outcome, results)
        // Without steering the decision is already made: no effect to run.
        if (Exit.isExit(decision)) {
          const exit = decision as Exit.Exit<Next, Agent.AgentError>
          return Exit.isSuccess(exit) ? continueWith(exit.value) : Stream.failCause(exit.cause)
        }
        return Stream.unwrap(Effect.map(decision, continueWith))
      }

      const turn = (prepared: Prepared<R>): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> => {
        let outcome: Turn.Outcome | undefined
        return Turn.stream(
          name,
          model,
          prepared.request,
          run.produced,
          (value) => {
            outcome = value
          },
          loop.annotate
        ).pipe(
          Stream.concat(
            Stream.suspend(() => {
              // Only reached once the model call succeeded, so its outcome is known.
              const done = outcome as Turn.Outcome
              const calls = done.message.toolCalls
              return calls === undefined || calls.length === 0
                ? after(done, [])
                : runTools(prepared, done, calls)
            })
          )
        )
      }

      const step = (): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> =>
        loop.prepareStep === undefined
          ? Stream.suspend(() => turn(run.base))
          : Stream.unwrap(Effect.map(run.prepare(), turn))

      // A turn that stopped for approval goes on: its waiting calls are answered first.
      const pending = run.pendingFrom(context)
      if (pending.length === 0) return step()
      const answers: Array<Message.ToolMessage | undefined> = new Array(pending.length)
      return Stream.fromArray(pending).pipe(
        Stream.mapEffect(
          (call, index) =>
            Effect.map(run.answer(loop.tools, call), (message): Agent.AgentEvent => {
              answers[index] = message
              return message === undefined ? approvalRequest(call) : { type: "tool-result", message }
            }),
          { concurrency, unordered: true }
        ),
        Stream.concat(
          Stream.suspend(() => {
            const results = answered(answers)
            for (const result of results) run.produced.push(result)
            const messages = Stream.fromArray(results.map(messageEvent))
            return results.length < answers.length ? messages : Stream.concat(messages, step())
          })
        )
      )
    })

  return Agent.make<R>({ name, execute, executeStream })
}
