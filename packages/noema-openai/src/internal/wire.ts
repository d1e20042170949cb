/**
 * The parts of OpenAI's Chat Completions responses that noema reads, and a
 * structural check of each, for the adapter's hot path.
 *
 * Decoding every completion and every SSE chunk through Schema cost about as
 * much per turn as the rest of the adapter together (some 19 µs per
 * completion, 29 µs per short streamed answer). These checks look at the same
 * fields with the same tolerance (absent and `null` mean the same; fields
 * noema does not read are ignored) and return a one-line reason when one has
 * the wrong type, so a malformed response is still an `InvalidOutput` failure
 * and never an exception from deep inside the adapter.
 */

/** Absent and `null` mean the same to every field read here. */
type Maybe<A> = A | null | undefined

export interface UsageWire {
  readonly prompt_tokens?: Maybe<number>
  readonly completion_tokens?: Maybe<number>
  readonly total_tokens?: Maybe<number>
  readonly prompt_tokens_details?: Maybe<{ readonly cached_tokens?: Maybe<number> }>
  readonly completion_tokens_details?: Maybe<{ readonly reasoning_tokens?: Maybe<number> }>
}

export interface ToolCallWire {
  readonly index?: Maybe<number>
  readonly id?: Maybe<string>
  readonly type?: Maybe<string>
  readonly function?: Maybe<{ readonly name?: Maybe<string>; readonly arguments?: Maybe<string> }>
}

export interface MessageWire {
  readonly content?: Maybe<string>
  /** DeepSeek's, Qwen's and vLLM's reasoning ("thinking") text, apart from the answer. */
  readonly reasoning_content?: Maybe<string>
  /** The same under the name Ollama, OpenRouter and newer vLLM use. */
  readonly reasoning?: Maybe<string>
  readonly refusal?: Maybe<string>
  readonly tool_calls?: Maybe<ReadonlyArray<ToolCallWire>>
}

export interface CompletionWire {
  readonly id?: Maybe<string>
  readonly model?: Maybe<string>
  readonly choices: ReadonlyArray<{
    readonly index?: Maybe<number>
    readonly message: MessageWire
    readonly finish_reason?: Maybe<string>
  }>
  readonly usage?: Maybe<UsageWire>
}

export interface ChunkWire {
  readonly id?: Maybe<string>
  readonly model?: Maybe<string>
  readonly choices?: Maybe<
    ReadonlyArray<{
      readonly index?: Maybe<number>
      readonly delta?: Maybe<MessageWire>
      readonly finish_reason?: Maybe<string>
    }>
  >
  readonly usage?: Maybe<UsageWire>
}

type Fields = Readonly<Record<string, unknown>>

const isObject = (value: unknown): value is Fields =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const isAbsent = (value: unknown): value is null | undefined => value === undefined || value === null

// Each check returns why the value is wrong, naming the field by its path
// (built only on failure: the hot path allocates nothing).

const maybeString = (owner: Fields, key: string, path: string): string | undefined => {
  const value = owner[key]
  return isAbsent(value) || typeof value === "string" ? undefined : `${path}${key} must be a string or null`
}

const maybeNumber = (owner: Fields, key: string, path: string): string | undefined => {
  const value = owner[key]
  return isAbsent(value) || typeof value === "number" ? undefined : `${path}${key} must be a number or null`
}

const maybeObject = (owner: Fields, key: string, path: string): string | undefined => {
  const value = owner[key]
  return isAbsent(value) || isObject(value) ? undefined : `${path}${key} must be an object or null`
}

const usageProblem = (owner: Fields): string | undefined => {
  const usage = owner.usage
  if (isAbsent(usage)) return undefined
  if (!isObject(usage)) return "usage must be an object or null"
  const problem =
    maybeNumber(usage, "prompt_tokens", "usage.") ??
    maybeNumber(usage, "completion_tokens", "usage.") ??
    maybeNumber(usage, "total_tokens", "usage.") ??
    maybeObject(usage, "prompt_tokens_details", "usage.") ??
    maybeObject(usage, "completion_tokens_details", "usage.")
  if (problem !== undefined) return problem
  const prompt = usage.prompt_tokens_details
  const completion = usage.completion_tokens_details
  return (
    (isObject(prompt) ? maybeNumber(prompt, "cached_tokens", "usage.prompt_tokens_details.") : undefined) ??
    (isObject(completion)
      ? maybeNumber(completion, "reasoning_tokens", "usage.completion_tokens_details.")
      : undefined)
  )
}

const toolCallProblem = (call: unknown): string | undefined => {
  if (!isObject(call)) return "must be an object"
  const problem =
    maybeNumber(call, "index", "") ??
    maybeString(call, "id", "") ??
    maybeString(call, "type", "") ??
    maybeObject(call, "function", "")
  if (problem !== undefined) return problem
  const named = call.function
  if (!isObject(named)) return undefined
  return maybeString(named, "name", "function.") ?? maybeString(named, "arguments", "function.")
}

/** `message` of a completion's choice, or `delta` of a chunk's. */
const messageProblem = (message: Fields): string | undefined => {
  const problem =
    maybeString(message, "content", "") ??
    maybeString(message, "refusal", "") ??
    maybeString(message, "reasoning_content", "") ??
    maybeString(message, "reasoning", "")
  if (problem !== undefined) return problem
  const calls = message.tool_calls
  if (isAbsent(calls)) return undefined
  if (!Array.isArray(calls)) return "tool_calls must be an array or null"
  for (let index = 0; index < calls.length; index++) {
    const callProblem = toolCallProblem(calls[index])
    if (callProblem !== undefined) return `tool_calls[${index}] ${callProblem}`
  }
  return undefined
}

const choiceProblem = (choice: unknown, body: "message" | "delta"): string | undefined => {
  if (!isObject(choice)) return "must be an object"
  const problem = maybeNumber(choice, "index", "") ?? maybeString(choice, "finish_reason", "")
  if (problem !== undefined) return problem
  const message = choice[body]
  if (isAbsent(message)) return body === "message" ? "message is missing" : undefined
  if (!isObject(message)) return `${body} must be an object`
  const inner = messageProblem(message)
  return inner === undefined ? undefined : `${body}.${inner}`
}

const choicesProblem = (choices: ReadonlyArray<unknown>, body: "message" | "delta"): string | undefined => {
  for (let index = 0; index < choices.length; index++) {
    const problem = choiceProblem(choices[index], body)
    if (problem !== undefined) return `choices[${index}].${problem}`
  }
  return undefined
}

/** Why `body` is not a non-streamed chat completion, or `undefined` when it is one. */
export const completionProblem = (body: unknown): string | undefined => {
  if (!isObject(body)) return "expected a JSON object"
  const problem = maybeString(body, "id", "") ?? maybeString(body, "model", "") ?? usageProblem(body)
  if (problem !== undefined) return problem
  const choices = body.choices
  if (!Array.isArray(choices)) return "choices must be an array"
  return choicesProblem(choices, "message")
}

/** Why `body` is not a chat completion chunk, or `undefined` when it is one. */
export const chunkProblem = (body: unknown): string | undefined => {
  if (!isObject(body)) return "expected a JSON object"
  const problem = maybeString(body, "id", "") ?? maybeString(body, "model", "") ?? usageProblem(body)
  if (problem !== undefined) return problem
  const choices = body.choices
  if (isAbsent(choices)) return undefined
  if (!Array.isArray(choices)) return "choices must be an array or null"
  return choicesProblem(choices, "delta")
}
