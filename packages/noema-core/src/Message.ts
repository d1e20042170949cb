/**
 * Message: one entry of a conversation.
 *
 * Messages are immutable plain objects discriminated by `role` (system, user,
 * assistant, tool). Being plain data keeps them cheap to create, cheap to keep
 * by the hundred thousand, and losslessly encodable to JSON, which is what
 * stores keep. The Schema below is the single source of truth for that JSON.
 */
import { Effect, Schema } from "effect"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

/** A tool call requested by the model: `arguments` is the model's JSON text, kept verbatim. */
export const ToolCall = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  arguments: Schema.String
})
export type ToolCall = typeof ToolCall.Type

/** Free-form, JSON-compatible data attached to a message (never sent to a model). */
export const Metadata = Schema.JsonObject
export type Metadata = typeof Metadata.Type

const common = {
  /** A stable identifier, assigned by whoever needs one (stores, UIs). */
  id: Schema.optionalKey(Schema.String),
  /** Creation time in epoch milliseconds. */
  createdAt: Schema.optionalKey(Schema.Number),
  metadata: Schema.optionalKey(Metadata)
}

export const SystemMessage = Schema.Struct({
  role: Schema.tag("system"),
  content: Schema.String,
  ...common
})
export type SystemMessage = typeof SystemMessage.Type

export const UserMessage = Schema.Struct({
  role: Schema.tag("user"),
  content: Schema.String,
  ...common
})
export type UserMessage = typeof UserMessage.Type

/**
 * The model's turn: text, tool calls, or both. `refusal` carries a provider's
 * explicit refusal text, kept apart from `content` so callers can tell them apart.
 */
export const AssistantMessage = Schema.Struct({
  role: Schema.tag("assistant"),
  content: Schema.String,
  toolCalls: Schema.optionalKey(Schema.Array(ToolCall)),
  refusal: Schema.optionalKey(Schema.String),
  ...common
})
export type AssistantMessage = typeof AssistantMessage.Type

/** The result of exactly one tool call; `isError` tells the model the call failed. */
export const ToolMessage = Schema.Struct({
  role: Schema.tag("tool"),
  toolCallId: Schema.String,
  name: Schema.String,
  content: Schema.String,
  isError: Schema.Boolean,
  ...common
})
export type ToolMessage = typeof ToolMessage.Type

export const Message = Schema.Union([SystemMessage, UserMessage, AssistantMessage, ToolMessage])
export type Message = typeof Message.Type
export type Role = Message["role"]

/** A message as JSON text, decoded and validated. */
export const MessageFromJson = Schema.fromJsonString(Message)

export class MessageDecodeError extends Schema.TaggedError<MessageDecodeError>()("MessageDecodeError", {
  message: Schema.String
}) {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

type Common = {
  readonly id?: string
  readonly createdAt?: number
  readonly metadata?: Metadata
}

export const system = (content: string, options?: Common): SystemMessage => ({
  role: "system",
  content,
  ...options
})

export const user = (content: string, options?: Common): UserMessage => ({
  role: "user",
  content,
  ...options
})

export const assistant = (
  content: string,
  options?: Common & { readonly toolCalls?: ReadonlyArray<ToolCall>; readonly refusal?: string }
): AssistantMessage => {
  if (options === undefined) return { role: "assistant", content }
  const { toolCalls, ...rest } = options
  // An empty tool-call list is the same as none; normalising keeps equality and JSON stable.
  return toolCalls !== undefined && toolCalls.length > 0
    ? { role: "assistant", content, toolCalls, ...rest }
    : { role: "assistant", content, ...rest }
}

export const toolResult = (
  options: {
    readonly toolCallId: string
    readonly name: string
    readonly content: string
    readonly isError?: boolean
  } & Common
): ToolMessage => {
  const { isError = false, ...rest } = options
  return { role: "tool", isError, ...rest }
}

// ---------------------------------------------------------------------------
// Guards
// ---------------------------------------------------------------------------

export const isSystem = (message: Message): message is SystemMessage => message.role === "system"
export const isUser = (message: Message): message is UserMessage => message.role === "user"
export const isAssistant = (message: Message): message is AssistantMessage => message.role === "assistant"
export const isTool = (message: Message): message is ToolMessage => message.role === "tool"

/** True for an assistant message that asks for at least one tool call. */
export const hasToolCalls = (
  message: Message
): message is AssistantMessage & { toolCalls: ReadonlyArray<ToolCall> } =>
  message.role === "assistant" && message.toolCalls !== undefined && message.toolCalls.length > 0

// ---------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------

const decodeUnknownSyncUnsafe = Schema.decodeUnknownSync(Message)
const decodeJsonEffect = Schema.decodeUnknownEffect(MessageFromJson)
const decodeUnknownEffect = Schema.decodeUnknownEffect(Message)
const encodeSync = Schema.encodeSync(Message)

/** The JSON-compatible form of a message (the message itself: it is plain data). */
export const encode = (message: Message): unknown => encodeSync(message)

export const toJson = (message: Message): string => JSON.stringify(message)

/** Decodes and validates unknown data (e.g. a parsed row) into a message. */
export const decode = (input: unknown): Effect.Effect<Message, MessageDecodeError> =>
  decodeUnknownEffect(input).pipe(
    Effect.mapError((error) => new MessageDecodeError({ message: `Invalid message: ${error.message}` }))
  )

/** Decodes and validates JSON text into a message. */
export const fromJson = (json: string): Effect.Effect<Message, MessageDecodeError> =>
  decodeJsonEffect(json).pipe(
    Effect.mapError((error) => new MessageDecodeError({ message: `Invalid message JSON: ${error.message}` }))
  )

/**
 * Synchronous validation for hot paths that already run outside Effect (a store
 * decoding rows). Throws a `MessageDecodeError`.
 */
export const decodeSync = (input: unknown): Message => {
  try {
    return decodeUnknownSyncUnsafe(input)
  } catch (error) {
    throw new MessageDecodeError({
      message: `Invalid message: ${error instanceof Error ? error.message : String(error)}`
    })
  }
}

/** A short, human-readable rendering: `role: text` (tool calls listed by name). */
export const toText = (message: Message): string => {
  switch (message.role) {
    case "assistant": {
      const calls = message.toolCalls?.map((call) => `${call.name}(${call.arguments})`).join(", ")
      const text = message.refusal !== undefined ? `[refused] ${message.refusal}` : message.content
      return calls ? `assistant: ${text}${text ? " " : ""}[calls ${calls}]` : `assistant: ${text}`
    }
    case "tool":
      return `tool ${message.name}${message.isError ? " (error)" : ""}: ${message.content}`
    default:
      return `${message.role}: ${message.content}`
  }
}
