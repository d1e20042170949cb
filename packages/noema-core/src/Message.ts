/**
 * Message: one entry of a conversation.
 *
 * Messages are immutable plain objects discriminated by `role` (system, user,
 * assistant, tool). Being plain data keeps them cheap to create, cheap to keep
 * by the hundred thousand, and losslessly encodable to JSON, which is what
 * stores keep. The Schema below is the single source of truth for that JSON.
 *
 * A user or assistant message's `content` is either a string (the text-only
 * form, what `user("hi")` builds and what every release so far stored) or a
 * list of content parts: text, reasoning (assistant only: the model's
 * thinking, kept apart from its answer, with whatever the provider needs to
 * accept it back, such as a signature) and references to files. Read it
 * through `text`, `reasoning`, `files` and `parts`, which accept both forms.
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

// Content parts ------------------------------------------------------------

/** Answer text (or, in a user message, what the user wrote). */
export const TextPart = Schema.Struct({
  type: Schema.tag("text"),
  text: Schema.String
})
export type TextPart = typeof TextPart.Type

/**
 * What a provider attached to a part, under the provider's name (e.g.
 * `{ anthropic: { signature: "..." } }`): opaque to noema, kept so the part can
 * be sent back to that provider exactly as it came.
 */
export const ProviderMetadata = Schema.Record(Schema.String, Schema.JsonObject)
export type ProviderMetadata = typeof ProviderMetadata.Type

/**
 * The model's reasoning ("thinking"), kept apart from its answer: never shown
 * as the answer and never sent back to a provider as one. Assistant only.
 * `providerMetadata` is what the provider needs to accept the reasoning back
 * in a later request (Anthropic's thinking `signature`, or the encrypted data of
 * redacted thinking, whose `text` is empty); a provider that signs reasoning
 * refuses it altered, so a part with metadata is kept as it came.
 */
export const ReasoningPart = Schema.Struct({
  type: Schema.tag("reasoning"),
  text: Schema.String,
  providerMetadata: Schema.optionalKey(ProviderMetadata)
})
export type ReasoningPart = typeof ReasoningPart.Type

/**
 * A reference to a file or artifact: `uri` says where it is (`https:`,
 * `file:`, an artifact URN, or a `data:` URI carrying the bytes inline).
 */
export const FilePart = Schema.Struct({
  type: Schema.tag("file"),
  uri: Schema.String,
  /** E.g. `image/png`, `application/pdf`. */
  mediaType: Schema.String,
  name: Schema.optionalKey(Schema.String),
  /** Hex SHA-256 of the bytes, when known. */
  sha256: Schema.optionalKey(Schema.String),
  /** Size in bytes, when known. */
  size: Schema.optionalKey(Schema.Number)
})
export type FilePart = typeof FilePart.Type

export const ContentPart = Schema.Union([TextPart, ReasoningPart, FilePart])
export type ContentPart = typeof ContentPart.Type

/** What a user message may hold: text and files (reasoning belongs to the model). */
export const UserContentPart = Schema.Union([TextPart, FilePart])
export type UserContentPart = typeof UserContentPart.Type

// Finish reason and usage ----------------------------------------------------

/** Why the model stopped, normalised across providers. */
export const FinishReason = Schema.Literals(["stop", "length", "tool-calls", "content-filter", "other"])
export type FinishReason = typeof FinishReason.Type

/** Token usage of one model call. */
export const Usage = Schema.Struct({
  inputTokens: Schema.Number,
  outputTokens: Schema.Number,
  totalTokens: Schema.Number,
  /** Input tokens read from the provider's prompt cache (part of `inputTokens`). */
  cachedInputTokens: Schema.optionalKey(Schema.Number),
  /** Input tokens written to the provider's prompt cache (part of `inputTokens`; Anthropic bills them apart). */
  cacheWriteInputTokens: Schema.optionalKey(Schema.Number),
  reasoningTokens: Schema.optionalKey(Schema.Number)
})
export type Usage = typeof Usage.Type

// Messages -------------------------------------------------------------------

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
  content: Schema.Union([Schema.String, Schema.Array(UserContentPart)]),
  ...common
})
export type UserMessage = typeof UserMessage.Type

/**
 * The model's turn: text, tool calls, or both. `refusal` carries a provider's
 * explicit refusal text, kept apart from `content` so callers can tell them apart.
 * `finishReason` (normalised), `rawFinishReason` (the provider's own word) and
 * `usage` say how the call that produced it ended, when a model produced it.
 */
export const AssistantMessage = Schema.Struct({
  role: Schema.tag("assistant"),
  content: Schema.Union([Schema.String, Schema.Array(ContentPart)]),
  toolCalls: Schema.optionalKey(Schema.Array(ToolCall)),
  refusal: Schema.optionalKey(Schema.String),
  finishReason: Schema.optionalKey(FinishReason),
  rawFinishReason: Schema.optionalKey(Schema.String),
  usage: Schema.optionalKey(Usage),
  /** The model that answered, as the provider names it (what usage and cost are counted against). */
  model: Schema.optionalKey(Schema.String),
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

export const user = (content: string | ReadonlyArray<UserContentPart>, options?: Common): UserMessage => ({
  role: "user",
  content,
  ...options
})

export type AssistantOptions = Common & {
  readonly toolCalls?: ReadonlyArray<ToolCall>
  readonly refusal?: string
  readonly finishReason?: FinishReason
  readonly rawFinishReason?: string
  readonly usage?: Usage
  readonly model?: string
}

export const assistant = (
  content: string | ReadonlyArray<ContentPart>,
  options?: AssistantOptions
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

/** A text part. */
export const textPart = (text: string): TextPart => ({ type: "text", text })

/** A reasoning part (assistant messages only), with what the provider attached to it, if anything. */
export const reasoningPart = (text: string, providerMetadata?: ProviderMetadata): ReasoningPart =>
  providerMetadata === undefined ? { type: "reasoning", text } : { type: "reasoning", text, providerMetadata }

/** A reference to a file or artifact. */
export const filePart = (file: Omit<FilePart, "type">): FilePart => ({ type: "file", ...file })

// ---------------------------------------------------------------------------
// Content
// ---------------------------------------------------------------------------

/**
 * The message's text: the whole string content, or its text parts joined
 * (reasoning and files left out). For an assistant message, the answer.
 */
export const text = (message: Message): string => {
  const content = message.content
  if (typeof content === "string") return content
  let out = ""
  for (let i = 0; i < content.length; i++) {
    const part = content[i] as ContentPart
    if (part.type === "text") out += part.text
  }
  return out
}

/** The model's reasoning (its reasoning parts joined); `""` when there is none. */
export const reasoning = (message: Message): string => {
  const content = message.content
  if (typeof content === "string") return ""
  let out = ""
  for (const part of content) if (part.type === "reasoning") out += part.text
  return out
}

/** The files the message refers to, in order. */
export const files = (message: Message): ReadonlyArray<FilePart> => {
  const content = message.content
  if (typeof content === "string") return []
  const out: Array<FilePart> = []
  for (const part of content) if (part.type === "file") out.push(part)
  return out
}

/** The content as parts, whatever its form (a non-empty string is one text part). */
export const parts = (message: Message): ReadonlyArray<ContentPart> => {
  const content = message.content
  if (typeof content !== "string") return content
  return content.length === 0 ? [] : [{ type: "text", text: content }]
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

// The fast check ----------------------------------------------------------------

const schemaIs = Schema.is(Message)

/** A plain object: `{}` or `Object.create(null)`, not a class instance, array, Map, Date... */
const isRecord = (value: unknown): value is Record<string, unknown> => {
  if (typeof value !== "object" || value === null) return false
  const prototype = Object.getPrototypeOf(value)
  return prototype === Object.prototype || prototype === null
}

const isDenseArray = (value: unknown): value is ReadonlyArray<unknown> =>
  Array.isArray(value) && Object.getPrototypeOf(value) === Array.prototype

/** A number JSON keeps as it is: finite, and not -0 (written as 0). */
const isFiniteNumber = (value: unknown): value is number =>
  typeof value === "number" && Number.isFinite(value) && !Object.is(value, -0)

/** JSON data as `JSON.stringify` writes it and `JSON.parse` gives it back, unchanged. */
const isPlainJson = (value: unknown, depth: number): boolean => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return true
  if (typeof value === "number") return isFiniteNumber(value)
  if (depth > 64) return false
  if (isDenseArray(value)) {
    for (let i = 0; i < value.length; i++) {
      if (!(i in value) || !isPlainJson(value[i], depth + 1)) return false
    }
    return true
  }
  if (!isRecord(value)) return false
  for (const key in value) {
    if (!isPlainJson(value[key], depth + 1)) return false
  }
  return true
}

/** Every key of `record` is one of `allowed` and holds a value (JSON would drop an `undefined`; the Schema refuses it). */
const onlyKeys = (record: Record<string, unknown>, allowed: Readonly<Record<string, true>>): boolean => {
  for (const key in record) if (allowed[key] !== true || record[key] === undefined) return false
  return true
}

const commonKeys = { role: true, content: true, id: true, createdAt: true, metadata: true } as const
const systemKeys: Readonly<Record<string, true>> = commonKeys
const userKeys: Readonly<Record<string, true>> = commonKeys
const assistantKeys: Readonly<Record<string, true>> = {
  ...commonKeys,
  toolCalls: true,
  refusal: true,
  finishReason: true,
  rawFinishReason: true,
  usage: true,
  model: true
}
const toolKeys: Readonly<Record<string, true>> = {
  ...commonKeys,
  toolCallId: true,
  name: true,
  isError: true
}
const finishReasons: Readonly<Record<string, true>> = {
  stop: true,
  length: true,
  "tool-calls": true,
  "content-filter": true,
  other: true
}

const isString = (value: unknown): value is string => typeof value === "string"
const isOptionalString = (value: unknown): boolean => value === undefined || typeof value === "string"
const isOptionalNumber = (value: unknown): boolean => value === undefined || isFiniteNumber(value)

// No closures and no object literals below: a store checks every message it loads, often in a
// fresh process whose code is not optimised yet, where each would be a new object per message,
// garbage that makes the collector copy the messages being loaded again and again.
// `undefined` counts as absent here: `onlyKeys` refuses a key that holds it.
const commonFields = (message: Record<string, unknown>): boolean =>
  isOptionalString(message.id) &&
  isOptionalNumber(message.createdAt) &&
  (message.metadata === undefined || (isRecord(message.metadata) && isPlainJson(message.metadata, 0)))

/** Provider name to a JSON object, as `ProviderMetadata` says. */
const isProviderMetadata = (value: unknown): boolean => {
  if (!isRecord(value)) return false
  for (const key in value) {
    const entry = value[key]
    if (!isRecord(entry) || !isPlainJson(entry, 1)) return false
  }
  return true
}

const textPartKeys: Readonly<Record<string, true>> = { type: true, text: true }
const reasoningPartKeys: Readonly<Record<string, true>> = { type: true, text: true, providerMetadata: true }
const filePartKeys: Readonly<Record<string, true>> = {
  type: true,
  uri: true,
  mediaType: true,
  name: true,
  sha256: true,
  size: true
}
const toolCallKeys: Readonly<Record<string, true>> = { id: true, name: true, arguments: true }
const usageKeys: Readonly<Record<string, true>> = {
  inputTokens: true,
  outputTokens: true,
  totalTokens: true,
  cachedInputTokens: true,
  cacheWriteInputTokens: true,
  reasoningTokens: true
}

const isPart = (part: unknown, reasoning: boolean): boolean => {
  if (!isRecord(part)) return false
  switch (part.type) {
    case "text":
      return isString(part.text) && onlyKeys(part, textPartKeys)
    case "reasoning":
      return (
        reasoning &&
        isString(part.text) &&
        (part.providerMetadata === undefined || isProviderMetadata(part.providerMetadata)) &&
        onlyKeys(part, reasoningPartKeys)
      )
    case "file":
      return (
        isString(part.uri) &&
        isString(part.mediaType) &&
        isOptionalString(part.name) &&
        isOptionalString(part.sha256) &&
        isOptionalNumber(part.size) &&
        onlyKeys(part, filePartKeys)
      )
    default:
      return false
  }
}

const isContent = (content: unknown, reasoning: boolean): boolean => {
  if (isString(content)) return true
  if (!isDenseArray(content)) return false
  // Holes refused: `every` would skip them.
  for (let i = 0; i < content.length; i++) if (!(i in content) || !isPart(content[i], reasoning)) return false
  return true
}

const isToolCall = (call: unknown): boolean =>
  isRecord(call) &&
  isString(call.id) &&
  isString(call.name) &&
  isString(call.arguments) &&
  onlyKeys(call, toolCallKeys)

const isToolCalls = (calls: unknown): boolean => {
  if (!isDenseArray(calls)) return false
  for (let i = 0; i < calls.length; i++) if (!(i in calls) || !isToolCall(calls[i])) return false
  return true
}

const isUsage = (usage: unknown): boolean =>
  isRecord(usage) &&
  isFiniteNumber(usage.inputTokens) &&
  isFiniteNumber(usage.outputTokens) &&
  isFiniteNumber(usage.totalTokens) &&
  isOptionalNumber(usage.cachedInputTokens) &&
  isOptionalNumber(usage.cacheWriteInputTokens) &&
  isOptionalNumber(usage.reasoningTokens) &&
  onlyKeys(usage, usageKeys)

const isFinishReason = (reason: unknown): boolean => isString(reason) && finishReasons[reason] === true

/**
 * Whether `input` is certainly a message in its plain form, checked field by
 * field (several times faster than the Schema): plain objects and arrays, own
 * keys the Schema names and no others, finite numbers, JSON metadata. Such a
 * message is its own encoding: `JSON.stringify` writes it and `JSON.parse`
 * gives it back equal. `false` only means "not certain": `is` then asks the
 * Schema, which decides (it accepts, e.g., keys it does not name, which it drops).
 */
export const isPlain = (input: unknown): input is Message => {
  if (!isRecord(input)) return false
  switch (input.role) {
    case "system":
      return isString(input.content) && commonFields(input) && onlyKeys(input, systemKeys)
    case "user":
      return isContent(input.content, false) && commonFields(input) && onlyKeys(input, userKeys)
    case "assistant":
      return (
        isContent(input.content, true) &&
        (input.toolCalls === undefined || isToolCalls(input.toolCalls)) &&
        isOptionalString(input.refusal) &&
        (input.finishReason === undefined || isFinishReason(input.finishReason)) &&
        isOptionalString(input.rawFinishReason) &&
        (input.usage === undefined || isUsage(input.usage)) &&
        isOptionalString(input.model) &&
        commonFields(input) &&
        onlyKeys(input, assistantKeys)
      )
    case "tool":
      return (
        isString(input.toolCallId) &&
        isString(input.name) &&
        isString(input.content) &&
        typeof input.isError === "boolean" &&
        commonFields(input) &&
        onlyKeys(input, toolKeys)
      )
    default:
      return false
  }
}

/** Whether `input` is a message, as `Schema.is(Message)` decides: the fast check first, the Schema for the rest. */
export const is = (input: unknown): input is Message => isPlain(input) || schemaIs(input)

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
      const answer = withFiles(
        message,
        message.refusal !== undefined ? `[refused] ${message.refusal}` : text(message)
      )
      return calls ? `assistant: ${answer}${answer ? " " : ""}[calls ${calls}]` : `assistant: ${answer}`
    }
    case "tool":
      return `tool ${message.name}${message.isError ? " (error)" : ""}: ${message.content}`
    default:
      return `${message.role}: ${withFiles(message, text(message))}`
  }
}

/** `text` followed by a `[file name]` marker per file part. */
const withFiles = (message: Message, body: string): string => {
  let out = body
  for (const file of files(message)) out += `${out.length > 0 ? " " : ""}[file ${file.name ?? file.uri}]`
  return out
}
