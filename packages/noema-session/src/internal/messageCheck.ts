/**
 * A structural check of a message, for the store's hot paths.
 *
 * `Message.decodeSync` validates through Schema and costs about as much as
 * reading the rows themselves; loading 100,000 messages with it takes twice
 * as long. This check looks at the same fields the Schema defines and returns
 * a one-line reason when something is wrong, so a store never hands out
 * unvalidated data and still stays fast. Keep it in step with core's Message.
 */
import type { Message } from "@noema/core"

type Field = Readonly<Record<string, unknown>>

const isPlainObject = (value: unknown): value is Field =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const optionalString = (value: Field, key: string): string | undefined => {
  const field = value[key]
  return field === undefined || typeof field === "string" ? undefined : `"${key}" must be a string`
}

const requiredString = (value: Field, key: string): string | undefined =>
  typeof value[key] === "string" ? undefined : `"${key}" must be a string`

const checkToolCalls = (toolCalls: unknown): string | undefined => {
  if (toolCalls === undefined) return undefined
  if (!Array.isArray(toolCalls)) return `"toolCalls" must be an array`
  for (let i = 0; i < toolCalls.length; i++) {
    const call: unknown = toolCalls[i]
    if (
      !isPlainObject(call) ||
      typeof call.id !== "string" ||
      typeof call.name !== "string" ||
      typeof call.arguments !== "string"
    ) {
      return `tool call ${i} must have string "id", "name" and "arguments"`
    }
  }
  return undefined
}

/** A string, or a list of content parts (`reasoning` allowed only where the model speaks). */
const checkContent = (content: unknown, reasoningAllowed: boolean): string | undefined => {
  if (typeof content === "string") return undefined
  if (!Array.isArray(content)) return `"content" must be a string or an array of parts`
  for (let i = 0; i < content.length; i++) {
    const part: unknown = content[i]
    if (!isPlainObject(part)) return `content part ${i} must be an object`
    switch (part.type) {
      case "text":
        if (typeof part.text !== "string") return `content part ${i} must have a string "text"`
        break
      case "reasoning":
        if (!reasoningAllowed) return `content part ${i}: only an assistant message holds reasoning`
        if (typeof part.text !== "string") return `content part ${i} must have a string "text"`
        break
      case "file":
        if (typeof part.uri !== "string" || typeof part.mediaType !== "string") {
          return `content part ${i} must have string "uri" and "mediaType"`
        }
        if (
          optionalString(part, "name") !== undefined ||
          optionalString(part, "sha256") !== undefined ||
          (part.size !== undefined && typeof part.size !== "number")
        ) {
          return `content part ${i} has a malformed "name", "sha256" or "size"`
        }
        break
      default:
        return `content part ${i} has unknown type ${JSON.stringify(part.type) ?? "(missing)"}`
    }
  }
  return undefined
}

const finishReasons: ReadonlySet<unknown> = new Set([
  "stop",
  "length",
  "tool-calls",
  "content-filter",
  "other"
])

const checkCallInfo = (value: Field): string | undefined => {
  if (value.finishReason !== undefined && !finishReasons.has(value.finishReason)) {
    return `"finishReason" must be one of ${[...finishReasons].join(", ")}`
  }
  const usage = value.usage
  if (usage === undefined) return optionalString(value, "rawFinishReason")
  if (
    !isPlainObject(usage) ||
    typeof usage.inputTokens !== "number" ||
    typeof usage.outputTokens !== "number" ||
    typeof usage.totalTokens !== "number"
  ) {
    return `"usage" must have numeric "inputTokens", "outputTokens" and "totalTokens"`
  }
  return optionalString(value, "rawFinishReason")
}

/** Why `value` is not a message, or `undefined` when it is one. */
export const problemOf = (value: unknown): string | undefined => {
  if (!isPlainObject(value)) return "not a JSON object"
  const problem =
    (value.role === "user" || value.role === "assistant"
      ? checkContent(value.content, value.role === "assistant")
      : requiredString(value, "content")) ??
    optionalString(value, "id") ??
    (value.createdAt === undefined ||
    (typeof value.createdAt === "number" && Number.isFinite(value.createdAt))
      ? undefined
      : `"createdAt" must be a number`) ??
    (value.metadata === undefined || isPlainObject(value.metadata)
      ? undefined
      : `"metadata" must be an object`)
  if (problem !== undefined) return problem
  switch (value.role) {
    case "system":
    case "user":
      return undefined
    case "assistant":
      return checkToolCalls(value.toolCalls) ?? optionalString(value, "refusal") ?? checkCallInfo(value)
    case "tool":
      return (
        requiredString(value, "toolCallId") ??
        requiredString(value, "name") ??
        (typeof value.isError === "boolean" ? undefined : `"isError" must be a boolean`)
      )
    default:
      return `unknown role ${JSON.stringify(value.role) ?? "(missing)"}`
  }
}

/** Parses a stored message; returns the message, or a one-line reason it is not one. */
export const parse = (json: string): Message.Message | string => {
  let value: unknown
  try {
    value = JSON.parse(json)
  } catch (error) {
    return `invalid JSON (${error instanceof Error ? error.message : String(error)})`
  }
  const problem = problemOf(value)
  return problem === undefined ? (value as Message.Message) : problem
}
