/**
 * Agent: a pure function of (conversation context, model) to the messages it
 * produces.
 *
 * An agent reads the context and never changes it; its input is whatever the
 * context ends with (a user message, a tool result, "continue"). It returns
 * only the new messages, and the caller (a session, a pipeline) decides what
 * to keep. `executeStream` yields events as they happen, for live UIs. Agents
 * can be written with Effect (`make`) or as plain async functions
 * (`fromAsync`, `fromAsyncGenerator`) by people who do not use Effect.
 */
import { Cause, Effect, Schema, Stream } from "effect"
import type * as ChatModel from "./ChatModel.js"
import { ChatModelError } from "./ChatModel.js"
import type { ConversationContext } from "./ConversationContext.js"
import { toAsyncIterable } from "./internal/asyncIterable.js"
import type { Message, ToolCall, ToolMessage } from "./Message.js"
import { Message as MessageSchema, reasoning, text } from "./Message.js"
import type { Annotations } from "./Tool.js"

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

export type AgentEvent =
  /** A fragment of assistant text, as the model produces it. */
  | { readonly type: "text-delta"; readonly delta: string }
  /** A fragment of the model's reasoning (not part of the answer), as the model produces it. */
  | { readonly type: "reasoning-delta"; readonly delta: string }
  /**
   * The model asked for a tool call (complete arguments). `annotations` are the
   * called tool's (see `Tool.Annotations`), when the agent knows the tool and
   * its author gave any: a runtime reads them to decide whether the call may be
   * cancelled.
   */
  | { readonly type: "tool-call"; readonly toolCall: ToolCall; readonly annotations?: Annotations }
  /**
   * A tool call waits for a person's approval (its tool's `needsApproval`): the
   * agent stops, leaving the call unanswered in its output, until it is run
   * again with a decision (see `Approval`).
   */
  | { readonly type: "approval-request"; readonly toolCall: ToolCall; readonly annotations?: Annotations }
  /** A tool call finished (successfully or with an error result). */
  | { readonly type: "tool-result"; readonly message: ToolMessage }
  /** Token usage of one model call. */
  | { readonly type: "usage"; readonly usage: ChatModel.Usage }
  /** A message the agent produced, complete. The messages of `execute` are exactly these. */
  | { readonly type: "message"; readonly message: Message }
  /**
   * Structured progress an agent shows beside its messages, under a `name` its
   * UIs know (e.g. `PlanAgent`'s `"plan"`: the plan as it changes). Not part of
   * the conversation: a UI that does not know the name ignores it.
   */
  | { readonly type: "data"; readonly name: string; readonly data: unknown }

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export class ModelFailed extends Schema.TaggedClass<ModelFailed>()("ModelFailed", {
  error: ChatModelError
}) {
  get message(): string {
    return this.error.message
  }
}

export class MaxStepsExceeded extends Schema.TaggedClass<MaxStepsExceeded>()("MaxStepsExceeded", {
  maxSteps: Schema.Number
}) {
  get message(): string {
    return `The agent stopped after ${this.maxSteps} model calls without a final answer`
  }
}

export class Failed extends Schema.TaggedClass<Failed>()("Failed", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export const AgentErrorReason = Schema.Union([ModelFailed, MaxStepsExceeded, Failed])
export type AgentErrorReason = typeof AgentErrorReason.Type

export class AgentError extends Schema.TaggedError<AgentError>()("AgentError", {
  agent: Schema.String,
  reason: AgentErrorReason,
  /** What the agent had produced before it failed (tool calls may already have run). */
  messages: Schema.Array(MessageSchema)
}) {
  get isRetryable(): boolean {
    return this.reason._tag === "ModelFailed" && this.reason.error.isRetryable
  }
  override get message(): string {
    return `Agent "${this.agent}" failed: ${this.reason.message}`
  }
}

/** Wraps a model failure as an agent failure. */
export const modelFailed = (
  agent: string,
  error: ChatModelError,
  messages: ReadonlyArray<Message> = []
): AgentError => new AgentError({ agent, reason: new ModelFailed({ error }), messages })

/**
 * The error with `earlier` in front of its own messages: what a composition
 * (a pipeline's earlier stages, a fallback's kept tool calls) had produced
 * before the failing agent ran, so `error.messages` is the whole output.
 */
export const prependMessages = (error: AgentError, earlier: ReadonlyArray<Message>): AgentError =>
  earlier.length === 0
    ? error
    : new AgentError({ agent: error.agent, reason: error.reason, messages: [...earlier, ...error.messages] })

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export interface Agent<R = never> {
  readonly name: string
  execute(
    context: ConversationContext,
    model: ChatModel.Service
  ): Effect.Effect<ReadonlyArray<Message>, AgentError, R>
  executeStream(
    context: ConversationContext,
    model: ChatModel.Service
  ): Stream.Stream<AgentEvent, AgentError, R>
}

/** The services an agent needs. */
export type Services<A> = A extends Agent<infer R> ? R : never

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/** The events a finished list of messages amounts to (for agents that do not stream). */
export const eventsOf = (messages: ReadonlyArray<Message>): Array<AgentEvent> => {
  const events: Array<AgentEvent> = []
  for (const message of messages) {
    if (message.role === "assistant") {
      const thought = reasoning(message)
      if (thought.length > 0) events.push({ type: "reasoning-delta", delta: thought })
      const answer = text(message)
      if (answer.length > 0) events.push({ type: "text-delta", delta: answer })
      for (const toolCall of message.toolCalls ?? []) events.push({ type: "tool-call", toolCall })
    } else if (message.role === "tool") {
      events.push({ type: "tool-result", message })
    }
    events.push({ type: "message", message })
  }
  return events
}

/** The messages of a stream of events (what `execute` returns). */
export const collectMessages = <E, R>(
  events: Stream.Stream<AgentEvent, E, R>
): Effect.Effect<ReadonlyArray<Message>, E, R> =>
  Stream.runFold(
    events,
    (): Array<Message> => [],
    (messages, event) => {
      if (event.type === "message") messages.push(event.message)
      return messages
    }
  )

export type MakeOptions<R> = { readonly name: string } & (
  | {
      readonly execute: Agent<R>["execute"]
      readonly executeStream?: Agent<R>["executeStream"]
    }
  | {
      readonly execute?: Agent<R>["execute"]
      readonly executeStream: Agent<R>["executeStream"]
    }
)

/** An agent from Effect code; give `execute`, `executeStream` or both (the other is derived). */
export const make = <R = never>(options: MakeOptions<R>): Agent<R> => {
  const { name } = options
  const executeStream: Agent<R>["executeStream"] =
    options.executeStream ??
    ((context, model) =>
      Stream.unwrap(
        Effect.map((options.execute as Agent<R>["execute"])(context, model), (messages) =>
          Stream.fromArray(eventsOf(messages))
        )
      ))
  const execute: Agent<R>["execute"] =
    options.execute ?? ((context, model) => collectMessages(executeStream(context, model)))
  return { name, execute, executeStream }
}

// ---------------------------------------------------------------------------
// Plain async functions (no Effect needed)
// ---------------------------------------------------------------------------

/** A ChatModel with Promise and AsyncIterable methods, for async-function agents. */
export interface AsyncChatModel {
  readonly provider: string
  readonly model: string
  complete(request: ChatModel.ChatRequest): Promise<ChatModel.ChatResponse>
  stream(request: ChatModel.ChatRequest): AsyncIterable<ChatModel.StreamChunk>
}

export interface AsyncAgentInput {
  readonly context: ConversationContext
  readonly model: AsyncChatModel
  /** Aborted when the turn is cancelled; pass it on to anything slow. */
  readonly signal: AbortSignal
}

const asyncModel = (model: ChatModel.Service, signal: AbortSignal): AsyncChatModel => ({
  provider: model.provider,
  model: model.model,
  complete: (request) => Effect.runPromise(model.complete(request), { signal }),
  stream: (request) => iterate(model.stream(request), signal)
})

/** An Effect stream as an async iterable that stops (and aborts the stream) with `signal`. */
const iterate = <A, E>(stream: Stream.Stream<A, E>, signal: AbortSignal): AsyncIterable<A> => ({
  [Symbol.asyncIterator]() {
    const iterator = toAsyncIterable(stream)[Symbol.asyncIterator]()
    const onAbort = () => void iterator.return?.()
    signal.addEventListener("abort", onAbort, { once: true })
    return {
      next: () =>
        iterator.next().then((result) => {
          if (result.done === true) signal.removeEventListener("abort", onAbort)
          return result
        }),
      return: (value?: unknown) => {
        signal.removeEventListener("abort", onAbort)
        return iterator.return ? iterator.return(value) : Promise.resolve({ done: true, value: undefined })
      }
    }
  }
})

const failureOf = (name: string, error: unknown): AgentError => {
  if (error instanceof AgentError) return error
  if (error instanceof ChatModelError) return modelFailed(name, error)
  return new AgentError({
    agent: name,
    reason: new Failed({
      message: error instanceof Error ? error.message : String(error),
      cause: error
    }),
    messages: []
  })
}

/**
 * An agent from an async function returning the new messages. Errors it
 * throws become `AgentError`s; a model failure keeps its `ChatModelError`.
 */
export const fromAsync = (
  name: string,
  run: (input: AsyncAgentInput) => Promise<ReadonlyArray<Message>>
): Agent =>
  make({
    name,
    execute: (context, model) =>
      Effect.suspend(() => {
        // Aborted when the turn is cancelled and also when `run` settles, so a
        // request or stream the function started and abandoned does not outlive it.
        const controller = new AbortController()
        return Effect.tryPromise({
          try: (signal) => {
            signal.addEventListener("abort", () => controller.abort(), { once: true })
            return run({ context, model: asyncModel(model, controller.signal), signal: controller.signal })
          },
          catch: (error) => failureOf(name, error)
        }).pipe(Effect.ensuring(Effect.sync(() => controller.abort())))
      })
  })

/** A streaming agent from an async generator of events (its `message` events are its output). */
export const fromAsyncGenerator = (
  name: string,
  run: (input: AsyncAgentInput) => AsyncIterable<AgentEvent>
): Agent =>
  make({
    name,
    executeStream: (context, model) =>
      Stream.suspend(() => {
        const controller = new AbortController()
        return Stream.fromAsyncIterable(
          run({ context, model: asyncModel(model, controller.signal), signal: controller.signal }),
          (error) => failureOf(name, error)
        ).pipe(Stream.ensuring(Effect.sync(() => controller.abort())))
      })
  })

// ---------------------------------------------------------------------------
// Running from plain async code
// ---------------------------------------------------------------------------

/** Runs an agent from async code; rejects with the `AgentError`. */
export const run = (
  agent: Agent,
  context: ConversationContext,
  model: ChatModel.Service,
  options?: { readonly signal?: AbortSignal }
): Promise<ReadonlyArray<Message>> =>
  // The fiber's exit settles the promise directly: `runPromiseExit(...).then(...)` would make a
  // second promise and keep both alive while the agent's requests are in flight.
  new Promise((resolve, reject) => {
    Effect.runFork(agent.execute(context, model), options).addObserver((exit) =>
      exit._tag === "Success" ? resolve(exit.value) : reject(Cause.squash(exit.cause))
    )
  })

/** Streams an agent's events to async code. */
export const runStream = (
  agent: Agent,
  context: ConversationContext,
  model: ChatModel.Service
): AsyncIterable<AgentEvent> => toAsyncIterable(agent.executeStream(context, model))
