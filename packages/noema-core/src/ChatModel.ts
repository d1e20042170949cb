/**
 * ChatModel: the contract every language-model provider implements.
 *
 * A request is normalised (messages, tool definitions, options); a response is
 * text and/or tool calls, optional reasoning, a finish reason and token usage.
 * `stream` yields chunks as they arrive. Adapters build a model with `make`,
 * which is where the behaviour every provider shares lives once: tool-call
 * deltas reassembled by index into complete calls with ids unique within the
 * response, `complete` derived from `stream` (or the reverse) when a provider
 * offers only one, and retries with backoff that honour a provider's
 * `retry-after` (`Retry`). Interrupting either effect must abort the request.
 * The stream normaliser and the accumulator live in `internal/responseStream`
 * and are re-exported here.
 */
import { Context, Effect, Layer, Schema, Stream } from "effect"
import { fold, normaliseStream, responseToStream, withUniqueToolCallIds } from "./internal/responseStream.js"
import { traceChatModel } from "./internal/tracing.js"
import type { Message, ToolCall } from "./Message.js"
import * as Messages from "./Message.js"
import * as ModelError from "./ModelError.js"
import * as Retry from "./Retry.js"

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

/** Why the model stopped, normalised (the schema lives in `Message`, which assistant messages carry). */
export const FinishReason = Messages.FinishReason
export type FinishReason = Messages.FinishReason

/** Token usage of one call (the schema lives in `Message`, which assistant messages carry). */
export const Usage = Messages.Usage
export type Usage = Messages.Usage

export interface ChatResponse {
  /** The answer text (reasoning excluded). */
  readonly text: string
  /** The model's reasoning, kept apart from the answer (e.g. DeepSeek's `reasoning_content`). */
  readonly reasoning?: string
  /**
   * The reasoning as the provider divided it, each part with what the provider
   * attached to it (Anthropic's thinking signatures): present when the stream
   * ended a reasoning part (`reasoning-end`); their texts joined are `reasoning`.
   * `toMessage` keeps these parts, so they go back to the provider unchanged.
   */
  readonly reasoningParts?: ReadonlyArray<Messages.ReasoningPart>
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly finishReason: FinishReason
  /** The provider's own finish reason, verbatim (e.g. `"tool_calls"`, `"MAX_TOKENS"`). */
  readonly rawFinishReason?: string
  readonly usage?: Usage
  /** The provider's explicit refusal, when it refused instead of answering. */
  readonly refusal?: string
  /** The provider's response id and the model that actually answered. */
  readonly id?: string
  readonly model?: string
  /** What the provider reported beyond the contract, under its name (e.g. a bridge's provider metadata). */
  readonly providerMetadata?: Messages.ProviderMetadata
}

export type StreamChunk =
  | { readonly type: "text-delta"; readonly delta: string }
  /** A fragment of the model's reasoning, which is not part of the answer. */
  | { readonly type: "reasoning-delta"; readonly delta: string }
  /**
   * The reasoning part being streamed is complete; `providerMetadata` is what
   * the provider attached to it (e.g. `{ anthropic: { signature } }`) and needs
   * back with it. Providers that do not divide or sign reasoning never send it.
   */
  | { readonly type: "reasoning-end"; readonly providerMetadata?: Messages.ProviderMetadata }
  | { readonly type: "refusal-delta"; readonly delta: string }
  /**
   * A fragment of tool call number `index`; `id` and `name` usually come with the first one.
   * An empty or repeated id is replaced by `make` with one unique within the response.
   */
  | {
      readonly type: "tool-call-delta"
      readonly index: number
      readonly id?: string
      readonly name?: string
      readonly argumentsDelta: string
    }
  /** A complete tool call, emitted by `make` once its deltas are all in (just before `finish`). */
  | { readonly type: "tool-call"; readonly toolCall: ToolCall }
  | { readonly type: "finish"; readonly finishReason: FinishReason; readonly rawFinishReason?: string }
  | { readonly type: "usage"; readonly usage: Usage }
  | {
      readonly type: "response-metadata"
      readonly id?: string
      readonly model?: string
      /** Merged into the response's `providerMetadata` (later chunks win, key by key). */
      readonly providerMetadata?: Messages.ProviderMetadata
    }

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

/**
 * What a model can do beyond the contract's minimum, as its adapter declares
 * it. Unset fields mean "assumed yes": most providers and OpenAI-compatible
 * servers accept these, and an adapter (or its user) says so when one does not.
 */
export interface Capabilities {
  /** It honours `responseFormat: { type: "json-schema" }` (structured output's `"auto"` mode reads this). */
  readonly jsonSchema?: boolean
}

export interface Service {
  readonly provider: string
  readonly model: string
  /** Omitted means every capability is assumed (see `Capabilities`). */
  readonly capabilities?: Capabilities
  readonly complete: (request: ChatRequest) => Effect.Effect<ChatResponse, ChatModelError>
  readonly stream: (request: ChatRequest) => Stream.Stream<StreamChunk, ChatModelError>
}

export class ChatModel extends Context.Service<ChatModel, Service>()("@noema/core/ChatModel") {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export type MakeOptions = {
  readonly provider: string
  readonly model: string
  readonly capabilities?: Capabilities | undefined
  /** Retries of retryable failures; omitted means no retries. */
  readonly retry?: Retry.Options
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
 * provider forgot one), tool-call ids are made unique within each response
 * (a server's empty or repeated ids would make parallel calls share one),
 * the missing operation is derived from the other, and retries are applied
 * once here rather than in every adapter. Each call, retries included, is one
 * `chat {model}` span (see `Tracing`).
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
    rawComplete !== undefined
      ? (request) => Effect.map(rawComplete(request), withUniqueToolCallIds)
      : (request) => fold(stream(request))
  const service: Service = {
    provider: options.provider,
    model: options.model,
    ...(options.capabilities !== undefined && { capabilities: options.capabilities }),
    complete,
    stream
  }
  return traceChatModel(options.retry === undefined ? service : Retry.chatModel(service, options.retry))
}

/**
 * An adapter's `make` and `layer` over its SDK client: the client is built
 * from the options (what they leave out read from the environment), then the
 * model over it with `fromClient`; the layer provides it as `ChatModel`.
 */
export const overClient = <Options, Client, E>(
  makeClient: (options: Options) => Effect.Effect<Client, E>,
  fromClient: (client: Client, options: Options) => Service
): {
  readonly make: (options: Options) => Effect.Effect<Service, E>
  readonly layer: (options: Options) => Layer.Layer<ChatModel, E>
} => {
  const make = (options: Options) => Effect.map(makeClient(options), (client) => fromClient(client, options))
  return { make, layer: (options) => Layer.effect(ChatModel, make(options)) }
}

// ---------------------------------------------------------------------------
// Combinators
// ---------------------------------------------------------------------------

export {
  collect,
  normaliseStream,
  ResponseAccumulator,
  responseToStream,
  toMessage
} from "./internal/responseStream.js"

/** Adds two usages (e.g. over the steps of a tool loop). */
export const addUsage = (left: Usage | undefined, right: Usage | undefined): Usage | undefined => {
  if (left === undefined) return right
  if (right === undefined) return left
  const sum = (a: number | undefined, b: number | undefined) =>
    a === undefined && b === undefined ? undefined : (a ?? 0) + (b ?? 0)
  const cached = sum(left.cachedInputTokens, right.cachedInputTokens)
  const cacheWrite = sum(left.cacheWriteInputTokens, right.cacheWriteInputTokens)
  const reasoning = sum(left.reasoningTokens, right.reasoningTokens)
  return {
    inputTokens: left.inputTokens + right.inputTokens,
    outputTokens: left.outputTokens + right.outputTokens,
    totalTokens: left.totalTokens + right.totalTokens,
    ...(cached !== undefined && { cachedInputTokens: cached }),
    ...(cacheWrite !== undefined && { cacheWriteInputTokens: cacheWrite }),
    ...(reasoning !== undefined && { reasoningTokens: reasoning })
  }
}

/** Shorthand for building a `ChatModelError`; `requestId` is the provider's id for the request, if any. */
export const error = (
  provider: string,
  reason: ModelError.Reason,
  model?: string,
  requestId?: string
): ChatModelError =>
  new ChatModelError({
    provider,
    reason,
    ...(model !== undefined && { model }),
    ...(requestId !== undefined && { requestId })
  })
