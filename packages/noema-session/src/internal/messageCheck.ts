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

/** Why `value` is not a message, or `undefined` when it is one. */
export const problemOf = (value: unknown): string | undefined => {
  if (!isPlainObject(value)) return "not a JSON object"
  const problem =
    requiredString(value, "content") ??
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
      return checkToolCalls(value.toolCalls) ?? optionalString(value, "refusal")
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
