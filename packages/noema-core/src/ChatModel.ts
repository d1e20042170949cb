/**
 * ChatModel: the contract every language-model provider implements.
 *
 * A request is normalised (messages, tool definitions, options); a response is
 * text and/or tool calls, a finish reason and token usage. `stream` yields
 * chunks as they arrive. Adapters build a model with `make`, which is where the
 * behaviour every provider shares lives once: tool-call deltas reassembled by
 * index into complete calls, `complete` derived from `stream` (or the reverse)
 * when a provider offers only one, and retries with backoff that honour a
 * provider's `retry-after`. Interrupting either effect must abort the request.
 */
import {
  Array as Arr,
  Cause,
  Channel,
  Context,
  Duration,
  Effect,
  Pull,
  Schedule,
  Schema,
  Stream
} from "effect"
import type { AssistantMessage, Message, ToolCall } from "./Message.js"
import * as Messages from "./Message.js"
import * as ModelError from "./ModelError.js"

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

/** JSON Schema for a tool's parameters, as sent to the model. */
export type JsonSchema = { readonly [key: string]: unknown }

export interface ToolDefinition {
  readonly name: string
  readonly description: string
  readonly parameters: JsonSchema
  /** Ask the provider to enforce the schema exactly, where it can. */
  readonly strict?: boolean
}

export type ToolChoice = "auto" | "none" | "required" | { readonly tool: string }

export type ResponseFormat =
  | { readonly type: "text" }
  | { readonly type: "json" }
  | {
      readonly type: "json-schema"
      readonly name: string
      readonly schema: JsonSchema
      readonly description?: string
      readonly strict?: boolean
    }

export interface ChatRequest {
  /** What the model sees; a `ConversationContext` is read once, without copying. */
  readonly messages: Iterable<Message>
  readonly tools?: ReadonlyArray<ToolDefinition>
  readonly toolChoice?: ToolChoice
  readonly parallelToolCalls?: boolean
  readonly temperature?: number
  readonly topP?: number
  readonly maxTokens?: number
  readonly stop?: ReadonlyArray<string>
  readonly seed?: number
  readonly responseFormat?: ResponseFormat
  /** Options only one provider understands, under that provider's key (e.g. `openai`). */
  readonly providerOptions?: { readonly [provider: string]: { readonly [option: string]: unknown } }
}

// ---------------------------------------------------------------------------
// Response
// ---------------------------------------------------------------------------

export type FinishReason = "stop" | "length" | "tool-calls" | "content-filter" | "other"

export interface Usage {
  readonly inputTokens: number
  readonly outputTokens: number
  readonly totalTokens: number
  readonly cachedInputTokens?: number
  readonly reasoningTokens?: number
}

export interface ChatResponse {
  readonly text: string
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly finishReason: FinishReason
  readonly usage?: Usage
  /** The provider's explicit refusal, when it refused instead of answering. */
  readonly refusal?: string
  /** The provider's response id and the model that actually answered. */
  readonly id?: string
  readonly model?: string
}

export type StreamChunk =
  | { readonly type: "text-delta"; readonly delta: string }
  | { readonly type: "refusal-delta"; readonly delta: string }
  /** A fragment of tool call number `index`; `id` and `name` usually come with the first one. */
  | {
      readonly type: "tool-call-delta"
      readonly index: number
      readonly id?: string
      readonly name?: string
      readonly argumentsDelta: string
    }
  /** A complete tool call, emitted by `make` once its deltas are all in (just before `finish`). */
  | { readonly type: "tool-call"; readonly toolCall: ToolCall }
  | { readonly type: "finish"; readonly finishReason: FinishReason }
  | { readonly type: "usage"; readonly usage: Usage }
  | { readonly type: "response-metadata"; readonly id?: string; readonly model?: string }

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export class ChatModelError extends Schema.TaggedError<ChatModelError>()(
  "ChatModelError",
  ModelError.fields
) {
  get isRetryable(): boolean {
    return this.reason.isRetryable
  }
  override get message(): string {
    return ModelError.describe(this)
  }
}

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------

export interface Service {
  readonly provider: string
  readonly model: string
  readonly complete: (request: ChatRequest) => Effect.Effect<ChatResponse, ChatModelError>
  readonly stream: (request: ChatRequest) => Stream.Stream<StreamChunk, ChatModelError>
}

export class ChatModel extends Context.Service<ChatModel, Service>()("@noema/core/ChatModel") {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export interface RetryOptions {
  /** Total attempts including the first; 1 disables retries. Default 3. */
  readonly maxAttempts?: number
  /** First backoff delay; doubles each attempt, with jitter. Default 500 ms. */
  readonly baseDelay?: Duration.Input
  /** Upper bound for one delay (a provider's retry-after above it is still honoured). Default 30 s. */
  readonly maxDelay?: Duration.Input
}

export type MakeOptions = {
  readonly provider: string
  readonly model: string
  /** Retries of retryable failures; omitted means no retries. */
  readonly retry?: RetryOptions
} & (
  | {
      readonly complete: Service["complete"]
      readonly stream?: Service["stream"]
    }
  | {
      readonly complete?: Service["complete"]
      readonly stream: Service["stream"]
    }
)

/**
 * Builds a ChatModel from a provider's `complete` and/or `stream`. The stream
 * is normalised (complete `tool-call` chunks, a `finish` chunk even when the
 * provider forgot one), the missing operation is derived from the other, and
 * retries are applied once here rather than in every adapter.
 */
export const make = (options: MakeOptions): Service => {
  const rawStream = options.stream
  const rawComplete = options.complete
  const stream: Service["stream"] =
    rawStream !== undefined
      ? (request) => normaliseStream(rawStream(request))
      : (request) =>
          Stream.unwrap(Effect.map((rawComplete as Service["complete"])(request), responseToStream))
  const complete: Service["complete"] =
    rawComplete !== undefined ? rawComplete : (request) => fold(stream(request))
  const service: Service = { provider: options.provider, model: options.model, complete, stream }
  return options.retry === undefined ? service : withRetry(service, options.retry)
}

// ---------------------------------------------------------------------------
// Combinators
// ---------------------------------------------------------------------------

const defaultRetry = { maxAttempts: 3, baseDelay: Duration.millis(500), maxDelay: Duration.seconds(30) }

/** The delay the provider asked for, if the failure was a rate limit that said so. */
const requestedDelay = (error: ChatModelError): Duration.Duration | undefined =>
  error.reason._tag === "RateLimited" && error.reason.retryAfterMillis !== undefined
    ? Duration.millis(error.reason.retryAfterMillis)
    : undefined

/**
 * The retry policy: exponential backoff with jitter, capped, but never
 * shorter than a rate limit's `retry-after`. Its input is the failure, so it
 * can read what the provider asked for.
 */
export const retrySchedule = (
  options: RetryOptions = {}
): Schedule.Schedule<Duration.Duration, ChatModelError> => {
  const baseDelay = Duration.fromInputUnsafe(options.baseDelay ?? defaultRetry.baseDelay)
  const maxDelay = Duration.fromInputUnsafe(options.maxDelay ?? defaultRetry.maxDelay)
  return Schedule.exponential(baseDelay, 2).pipe(
    Schedule.jittered,
    Schedule.setInputType<ChatModelError>(),
    Schedule.modifyDelay(({ input, duration }) => {
      const capped = Duration.min(duration, maxDelay)
      const asked = requestedDelay(input)
      return Effect.succeed(asked !== undefined ? Duration.max(capped, asked) : capped)
    })
  )
}

/**
 * `Stream.suspend` without what it records for `Stream.concat` (a WeakMap
 * entry per run, which showed in the profile of every streamed call).
 */
const suspendStream = <A, E, R>(evaluate: () => Stream.Stream<A, E, R>): Stream.Stream<A, E, R> =>
  Stream.fromChannel(Channel.suspend(() => Stream.toChannel(evaluate())))

/** Sleeps for the policy's next delay after `error`; one per retried call, as the policy has state. */
type RetryStep = (error: ChatModelError) => Effect.Effect<unknown>

/**
 * Retries retryable failures. A stream is retried only while it has emitted
 * nothing: once text reached the caller, replaying it would duplicate output.
 *
 * The policy's step (its clock and attempt count) is set up on the first
 * failure, not before each call: nearly every call succeeds, and setting it
 * up front cost about 9 µs per streamed call.
 */
export const withRetry = (model: Service, options: RetryOptions = {}): Service => {
  const times = (options.maxAttempts ?? defaultRetry.maxAttempts) - 1
  if (times <= 0) return model
  const schedule = retrySchedule(options)
  const makeStep: Effect.Effect<RetryStep> = Effect.map(
    Schedule.toStepWithSleep(schedule),
    (step) => (error) => Effect.orDie(step(error))
  )

  /** Waits, then calls again; `left` counts the retries still allowed, this one included. */
  const retryComplete = (
    request: ChatRequest,
    step: RetryStep,
    error: ChatModelError,
    left: number
  ): Effect.Effect<ChatResponse, ChatModelError> =>
    Effect.andThen(
      step(error),
      Effect.catch(model.complete(request), (next) =>
        next.isRetryable && left > 1 ? retryComplete(request, step, next, left - 1) : Effect.fail(next)
      )
    )

  const streamAttempt = (
    request: ChatRequest,
    step: RetryStep | undefined,
    left: number
  ): Stream.Stream<StreamChunk, ChatModelError> =>
    suspendStream(() => {
      let emitted = false
      return model.stream(request).pipe(
        Stream.mapArray((chunks) => {
          emitted = true
          return chunks
        }),
        Stream.catch((error) =>
          error.isRetryable && !emitted && left > 0
            ? Stream.unwrap(
                Effect.flatMap(step === undefined ? makeStep : Effect.succeed(step), (next) =>
                  Effect.as(next(error), streamAttempt(request, next, left - 1))
                )
              )
            : Stream.fail(error)
        )
      )
    })

  return {
    ...model,
    complete: (request) =>
      Effect.catch(model.complete(request), (error) =>
        error.isRetryable
          ? Effect.flatMap(makeStep, (step) => retryComplete(request, step, error, times))
          : Effect.fail(error)
      ),
    stream: (request) => streamAttempt(request, undefined, times)
  }
}

interface PartialCall {
  id: string | undefined
  name: string | undefined
  arguments: string
}

interface StreamState {
  readonly calls: Array<PartialCall | undefined>
  finished: boolean
}

const callId = (call: PartialCall, index: number): string => call.id ?? `call_${index}`

const completedCalls = (calls: ReadonlyArray<PartialCall | undefined>): Array<StreamChunk> => {
  const chunks: Array<StreamChunk> = []
  calls.forEach((call, index) => {
    if (call === undefined) return
    chunks.push({
      type: "tool-call",
      toolCall: { id: callId(call, index), name: call.name ?? "", arguments: call.arguments }
    })
  })
  return chunks
}

/** What a batch of chunks becomes: deltas recorded, complete calls added before `finish`. */
const normaliseBatch = (
  state: StreamState,
  chunks: Arr.NonEmptyReadonlyArray<StreamChunk>
): ReadonlyArray<StreamChunk> => {
  let out: Array<StreamChunk> | undefined
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i] as StreamChunk
    if (chunk.type === "tool-call-delta") {
      const call = state.calls[chunk.index]
      if (call === undefined) {
        state.calls[chunk.index] = { id: chunk.id, name: chunk.name, arguments: chunk.argumentsDelta }
      } else {
        if (call.id === undefined && chunk.id !== undefined) call.id = chunk.id
        if (call.name === undefined && chunk.name !== undefined) call.name = chunk.name
        call.arguments += chunk.argumentsDelta
      }
    } else if (chunk.type === "finish") {
      // Copy lazily: most batches have no finish chunk and pass through untouched.
      out ??= chunks.slice(0, i) as Array<StreamChunk>
      if (state.finished) continue
      state.finished = true
      out.push(...completedCalls(state.calls), chunk)
      continue
    } else if (chunk.type === "tool-call") {
      // A provider that reassembles calls itself (or an already normalised
      // stream): hold the call back so every model emits complete calls at
      // the same point, right before finish, and never twice.
      out ??= chunks.slice(0, i) as Array<StreamChunk>
      const { id, name, arguments: args } = chunk.toolCall
      const known = state.calls.some((call, index) => call !== undefined && callId(call, index) === id)
      if (!known) state.calls.push({ id, name, arguments: args })
      continue
    }
    out?.push(chunk)
  }
  return out ?? chunks
}

/**
 * Adds complete `tool-call` chunks (reassembled from deltas by index, however
 * interleaved) right before `finish`, and a `finish` when the provider ended
 * without one (but not when it failed). Normalising twice changes nothing.
 *
 * One pull-level layer (not map + concat): it sits on every streamed call,
 * and each stream layer costs per batch and per run.
 */
export const normaliseStream = <E, R>(
  stream: Stream.Stream<StreamChunk, E, R>
): Stream.Stream<StreamChunk, E, R> =>
  Stream.transformPull(stream, (pull) =>
    Effect.sync(() => {
      const state: StreamState = { calls: [], finished: false }
      let ended = false
      const end = (): Pull.Pull<Arr.NonEmptyReadonlyArray<StreamChunk>, E> => {
        const alreadyFinished = ended || state.finished
        ended = true
        if (alreadyFinished) return Cause.done()
        const calls = completedCalls(state.calls)
        calls.push({ type: "finish", finishReason: calls.length > 0 ? "tool-calls" : "stop" })
        return Effect.succeed(calls as Arr.NonEmptyArray<StreamChunk>)
      }
      const next: Pull.Pull<Arr.NonEmptyReadonlyArray<StreamChunk>, E> = Effect.suspend(() =>
        ended
          ? Cause.done()
          : Pull.catchDone(
              Effect.flatMap(pull, (chunks) => {
                const out = normaliseBatch(state, chunks)
                return Arr.isReadonlyArrayNonEmpty(out) ? Effect.succeed(out) : next
              }),
              end
            )
      )
      return next
    })
  )

/** Folds a stream into a complete response (what `complete` returns). */
export const collect = <E, R>(stream: Stream.Stream<StreamChunk, E, R>): Effect.Effect<ChatResponse, E, R> =>
  fold(normaliseStream(stream))

/** Folds a stream that is already normalised (as every `make`-built model's is). */
const fold = <E, R>(stream: Stream.Stream<StreamChunk, E, R>): Effect.Effect<ChatResponse, E, R> =>
  Stream.runFold(
    stream,
    () => new ResponseAccumulator(),
    (accumulator, chunk) => accumulator.add(chunk)
  ).pipe(Effect.map((accumulator) => accumulator.build()))

/**
 * Folds stream chunks into the response they amount to: text, refusal,
 * complete tool calls, finish reason, usage. `collect` uses it; so can anyone
 * who consumes a stream chunk by chunk and needs the response at the end.
 */
export class ResponseAccumulator {
  private text = ""
  private refusal: string | undefined
  private readonly toolCalls: Array<ToolCall> = []
  private finishReason: FinishReason = "stop"
  private usage: Usage | undefined
  private id: string | undefined
  private model: string | undefined
  add(chunk: StreamChunk): this {
    switch (chunk.type) {
      case "text-delta":
        this.text += chunk.delta
        break
      case "refusal-delta":
        this.refusal = (this.refusal ?? "") + chunk.delta
        break
      case "tool-call":
        this.toolCalls.push(chunk.toolCall)
        break
      case "finish":
        this.finishReason = chunk.finishReason
        break
      case "usage":
        this.usage = chunk.usage
        break
      case "response-metadata":
        this.id = chunk.id ?? this.id
        this.model = chunk.model ?? this.model
        break
      case "tool-call-delta":
        break
    }
    return this
  }
  build(): ChatResponse {
    return {
      text: this.text,
      toolCalls: this.toolCalls,
      finishReason: this.finishReason,
      ...(this.usage !== undefined && { usage: this.usage }),
      ...(this.refusal !== undefined && { refusal: this.refusal }),
      ...(this.id !== undefined && { id: this.id }),
      ...(this.model !== undefined && { model: this.model })
    }
  }
}

/** A complete response replayed as stream chunks (for providers without streaming). */
export const responseToStream = (response: ChatResponse): Stream.Stream<StreamChunk> => {
  const chunks: Array<StreamChunk> = []
  if (response.id !== undefined || response.model !== undefined) {
    chunks.push({
      type: "response-metadata",
      ...(response.id !== undefined && { id: response.id }),
      ...(response.model !== undefined && { model: response.model })
    })
  }
  if (response.text.length > 0) chunks.push({ type: "text-delta", delta: response.text })
  if (response.refusal !== undefined) chunks.push({ type: "refusal-delta", delta: response.refusal })
  for (const call of response.toolCalls) chunks.push({ type: "tool-call", toolCall: call })
  chunks.push({ type: "finish", finishReason: response.finishReason })
  if (response.usage !== undefined) chunks.push({ type: "usage", usage: response.usage })
  return Stream.fromArray(chunks)
}

/** The assistant message a response amounts to. */
export const toMessage = (response: ChatResponse): AssistantMessage =>
  Messages.assistant(response.text, {
    toolCalls: response.toolCalls,
    ...(response.refusal !== undefined && { refusal: response.refusal })
  })

/** Adds two usages (e.g. over the steps of a tool loop). */
export const addUsage = (left: Usage | undefined, right: Usage | undefined): Usage | undefined => {
  if (left === undefined) return right
  if (right === undefined) return left
  const sum = (a: number | undefined, b: number | undefined) =>
    a === undefined && b === undefined ? undefined : (a ?? 0) + (b ?? 0)
  const cached = sum(left.cachedInputTokens, right.cachedInputTokens)
  const reasoning = sum(left.reasoningTokens, right.reasoningTokens)
  return {
    inputTokens: left.inputTokens + right.inputTokens,
    outputTokens: left.outputTokens + right.outputTokens,
    totalTokens: left.totalTokens + right.totalTokens,
    ...(cached !== undefined && { cachedInputTokens: cached }),
    ...(reasoning !== undefined && { reasoningTokens: reasoning })
  }
}

/** Shorthand for building a `ChatModelError`. */
export const error = (provider: string, reason: ModelError.Reason, model?: string): ChatModelError =>
  new ChatModelError(model === undefined ? { provider, reason } : { provider, model, reason })
