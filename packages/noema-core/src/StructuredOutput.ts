/**
 * StructuredOutput: a model's answer as a value decoded by an Effect Schema.
 *
 * The JSON Schema the model sees is derived from the Schema the way a tool's
 * parameters are (`Tool.jsonSchema`). It is sent as `responseFormat`
 * (`"json-schema"` mode) or as one tool the model is forced to call
 * (`"tool"` mode); `"auto"` uses JSON Schema unless the model declares
 * `capabilities.jsonSchema: false`. Strict mode is asked for when the schema
 * allows it (every property required, no open records), with objects closed
 * to extra keys, which the Schema would drop anyway. A schema whose root is
 * not an object (providers accept only objects) is wrapped as `{ value }`.
 *
 * Output that is not JSON or does not match the Schema is sent back with the
 * reason for a bounded number of repair rounds (`maxRepairs`, default 1);
 * then the call fails with a `StructuredOutputError` carrying the raw text,
 * the issue and the number of attempts. A refusal fails at once.
 *
 * `stream` yields partial objects (the growing JSON parsed leniently) for
 * UIs, then the decoded value. `run` also returns the assistant message that
 * carries the JSON as its text (the failed attempts are left out of it; their
 * usage is added in), which is what agents keep; `fromMessages` reads the value
 * back from such messages.
 */
import { Effect, Schema, Stream } from "effect"
import * as ChatModel from "./ChatModel.js"
import { deepFreeze } from "./internal/deepFreeze.js"
import { parsePartial } from "./internal/partialJson.js"
import type { AssistantMessage, Message, ToolCall } from "./Message.js"
import * as Messages from "./Message.js"
import * as Tool from "./Tool.js"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

/** How the schema reaches the model (see the module comment for `"auto"`). */
export type Mode = "json-schema" | "tool" | "auto"

/** Schemas an output can be decoded with: they must decode without services. */
export type OutputSchema = Tool.Parameters

/** What a request may set besides its messages and the output machinery. */
export type ModelOptions = Omit<
  ChatModel.ChatRequest,
  "messages" | "tools" | "toolChoice" | "parallelToolCalls" | "responseFormat"
>

export interface Options<S extends OutputSchema> {
  readonly schema: S
  readonly messages: Iterable<Message>
  /** The response format's (or tool's) name: 1-64 letters, digits, `_` or `-`. Default `"output"`. */
  readonly name?: string
  readonly description?: string
  /** Default `"auto"`. */
  readonly mode?: Mode
  /** Rounds in which invalid output is sent back to be corrected. Default 1; 0 for none. */
  readonly maxRepairs?: number
  readonly options?: ModelOptions
}

export interface Result<A> {
  readonly value: A
  /** The answer as an assistant message whose text is the JSON (usage summed over all attempts). */
  readonly message: AssistantMessage
  /** Model calls made, 1 when the first answer was valid. */
  readonly attempts: number
}

export type StreamEvent<A> =
  /** The best value the JSON so far implies: not validated, so typed `unknown`. */
  | { readonly type: "partial"; readonly value: unknown; readonly attempt: number }
  /** The last attempt was invalid; a new one starts (a UI should drop its partial value). */
  | { readonly type: "repair"; readonly attempt: number; readonly issue: string }
  /** The decoded value, always the last event. */
  | {
      readonly type: "value"
      readonly value: A
      readonly message: AssistantMessage
      readonly attempts: number
    }

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export const FailureReason = Schema.Literals(["invalid-json", "schema-mismatch", "no-output", "refused"])
export type FailureReason = typeof FailureReason.Type

export class StructuredOutputError extends Schema.TaggedError<StructuredOutputError>()(
  "StructuredOutputError",
  {
    /** The output's name. */
    name: Schema.String,
    reason: FailureReason,
    /** Why the last output was rejected (the JSON or Schema error, or the refusal). */
    issue: Schema.String,
    /** The last output, verbatim (text, or the tool call's arguments). */
    text: Schema.String,
    attempts: Schema.Number
  }
) {
  override get message(): string {
    const detail = this.issue.replace(/\s*\n\s*/g, "; ")
    const what = {
      "invalid-json": "not valid JSON",
      "schema-mismatch": "did not match the schema",
      "no-output": "was empty",
      refused: "was refused"
    }[this.reason]
    return `Structured output "${this.name}" ${what} after ${this.attempts} attempt${this.attempts === 1 ? "" : "s"}: ${detail}`
  }
}

// ---------------------------------------------------------------------------
// Plan: what is sent and how an answer is read
// ---------------------------------------------------------------------------

const namePattern = /^[a-zA-Z0-9_-]{1,64}$/

interface Plan<S extends OutputSchema> {
  readonly schema: S
  readonly name: string
  readonly description: string | undefined
  /** The JSON Schema sent (wrapped and closed as needed). */
  readonly sent: ChatModel.JsonSchema
  readonly strict: boolean
  /** The root was not an object, so the model answers `{ "value": ... }`. */
  readonly wrapped: boolean
}

type JsonNode = { [key: string]: unknown }

const isNode = (value: unknown): value is JsonNode =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A copy of the schema with every object closed to extra keys, and whether it
 * meets strict mode (all properties required, no open records).
 */
const closeObjects = (schema: unknown): { readonly schema: unknown; readonly strict: boolean } => {
  let strict = true
  const visit = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(visit)
    if (!isNode(node)) return node
    const out: JsonNode = {}
    for (const [key, value] of Object.entries(node)) out[key] = visit(value)
    if (node.type === "object") {
      const properties = isNode(node.properties) ? Object.keys(node.properties) : []
      const required = Array.isArray(node.required) ? node.required : []
      if (properties.some((key) => !required.includes(key))) strict = false
      if (isNode(node.additionalProperties) || isNode(node.patternProperties)) strict = false
      else out.additionalProperties = false
    }
    return out
  }
  return { schema: visit(schema), strict }
}

const plan = <S extends OutputSchema>(
  schema: S,
  options: { readonly name?: string | undefined; readonly description?: string | undefined }
): Plan<S> => {
  const name = options.name ?? "output"
  if (!namePattern.test(name)) {
    throw new TypeError(
      `Invalid structured output name "${name}": use 1-64 letters, digits, underscores or hyphens`
    )
  }
  return { schema, name, description: options.description, ...sentFor(schema) }
}

type Sent = Pick<Plan<OutputSchema>, "sent" | "strict" | "wrapped">

const sentSchemas = new WeakMap<OutputSchema, Sent>()

/**
 * The JSON Schema sent for `schema`, wrapped and closed, derived once per schema: a caller
 * asking again with one schema (a supervisor's every evaluation) shares it, frozen, as tools
 * share their parameters' (adapters copy what they send).
 */
const sentFor = (schema: OutputSchema): Sent => {
  const known = sentSchemas.get(schema)
  if (known !== undefined) return known
  const { $defs, ...root } = Tool.jsonSchema(schema) as JsonNode
  const wrapped = root.type !== "object"
  const body: JsonNode = wrapped ? { type: "object", properties: { value: root }, required: ["value"] } : root
  const closed = closeObjects($defs === undefined ? body : { ...body, $defs })
  const sent: Sent = {
    sent: deepFreeze(closed.schema as ChatModel.JsonSchema),
    strict: closed.strict,
    wrapped
  }
  sentSchemas.set(schema, sent)
  return sent
}

const request = (
  plan: Plan<OutputSchema>,
  mode: "json-schema" | "tool",
  messages: Iterable<Message>,
  options: ModelOptions | undefined
): ChatModel.ChatRequest =>
  mode === "json-schema"
    ? {
        ...options,
        messages,
        responseFormat: {
          type: "json-schema",
          name: plan.name,
          schema: plan.sent,
          strict: plan.strict,
          ...(plan.description !== undefined && { description: plan.description })
        }
      }
    : {
        ...options,
        messages,
        tools: [
          {
            name: plan.name,
            description: plan.description ?? "Give the answer as this tool's arguments.",
            parameters: plan.sent,
            strict: plan.strict
          }
        ],
        toolChoice: { tool: plan.name },
        parallelToolCalls: false
      }

/** Models often fence JSON in Markdown even when asked not to. */
const unfence = (text: string): string => {
  const match = /^\s*```[a-zA-Z]*\s*\n([\s\S]*?)\n?\s*```\s*$/.exec(text)
  return match === null ? text : (match[1] as string)
}

type Reading<A> =
  | { readonly _tag: "valid"; readonly value: A }
  | { readonly _tag: "invalid"; readonly reason: FailureReason; readonly issue: string }

/** Parses and decodes one output text. */
const read = <S extends OutputSchema>(plan: Plan<S>, text: string): Reading<S["Type"]> => {
  if (text.trim() === "") return { _tag: "invalid", reason: "no-output", issue: "the answer was empty" }
  let parsed: unknown
  try {
    parsed = JSON.parse(unfence(text))
  } catch (error) {
    return {
      _tag: "invalid",
      reason: "invalid-json",
      issue: error instanceof Error ? error.message : String(error)
    }
  }
  if (plan.wrapped) {
    if (!isNode(parsed) || !("value" in parsed)) {
      return { _tag: "invalid", reason: "schema-mismatch", issue: 'Expected an object with a "value" key' }
    }
    parsed = parsed.value
  }
  try {
    return {
      _tag: "valid",
      value: Schema.decodeUnknownSync(Tool.jsonCodec(plan.schema))(parsed, { errors: "all" })
    }
  } catch (error) {
    return {
      _tag: "invalid",
      reason: "schema-mismatch",
      issue: error instanceof Error ? error.message : String(error)
    }
  }
}

const resolveMode = (model: ChatModel.Service, mode: Mode | undefined): "json-schema" | "tool" =>
  mode === undefined || mode === "auto"
    ? model.capabilities?.jsonSchema === false
      ? "tool"
      : "json-schema"
    : mode

/** One answer: the output text, and the call that carried it in tool mode. */
const outputOf = (
  plan: Plan<OutputSchema>,
  response: ChatModel.ChatResponse
): { readonly text: string; readonly call: ToolCall | undefined } => {
  const call = response.toolCalls.find((candidate) => candidate.name === plan.name)
  return { text: call?.arguments ?? response.text, call }
}

/** The messages a repair round adds: the invalid answer, and what was wrong with it. */
const repairMessages = (
  plan: Plan<OutputSchema>,
  response: ChatModel.ChatResponse,
  issue: string
): ReadonlyArray<Message> => {
  const { text, call } = outputOf(plan, response)
  const instruction = `Your answer did not match the required schema: ${issue}. Answer again with the whole corrected JSON, nothing else.`
  if (call !== undefined) {
    return [
      Messages.assistant("", { toolCalls: [call] }),
      Messages.toolResult({ toolCallId: call.id, name: call.name, content: instruction, isError: true })
    ]
  }
  return [Messages.assistant(text), Messages.user(instruction)]
}

/** The kept assistant message: the JSON as text, no tool call (it would need a result), usage summed. */
const finalMessage = (
  response: ChatModel.ChatResponse,
  text: string,
  usage: ChatModel.Usage | undefined
): AssistantMessage => {
  const { rawFinishReason: _raw, usage: _usage, ...rest } = response
  return ChatModel.toMessage({
    ...rest,
    text,
    toolCalls: [],
    finishReason: response.finishReason === "tool-calls" ? "stop" : response.finishReason,
    ...(response.finishReason !== "tool-calls" &&
      response.rawFinishReason !== undefined && {
        rawFinishReason: response.rawFinishReason
      }),
    ...(usage !== undefined && { usage })
  })
}

type Judgement<A> =
  | { readonly _tag: "done"; readonly result: Result<A> }
  | { readonly _tag: "repair"; readonly issue: string; readonly messages: ReadonlyArray<Message> }
  | { readonly _tag: "fail"; readonly error: StructuredOutputError }

/** What to do after attempt number `attempt`; shared by `run` and `stream`. */
const judge = <S extends OutputSchema>(
  plan: Plan<S>,
  response: ChatModel.ChatResponse,
  attempt: number,
  maxRepairs: number,
  usage: ChatModel.Usage | undefined
): Judgement<S["Type"]> => {
  const { text } = outputOf(plan, response)
  if (response.refusal !== undefined) {
    return {
      _tag: "fail",
      error: new StructuredOutputError({
        name: plan.name,
        reason: "refused",
        issue: response.refusal,
        text,
        attempts: attempt
      })
    }
  }
  const reading = read(plan, text)
  if (reading._tag === "valid") {
    return {
      _tag: "done",
      result: { value: reading.value, message: finalMessage(response, text, usage), attempts: attempt }
    }
  }
  if (attempt > maxRepairs) {
    return {
      _tag: "fail",
      error: new StructuredOutputError({
        name: plan.name,
        reason: reading.reason,
        issue: reading.issue,
        text,
        attempts: attempt
      })
    }
  }
  return { _tag: "repair", issue: reading.issue, messages: repairMessages(plan, response, reading.issue) }
}

const checkRepairs = (maxRepairs: number | undefined): number => {
  const value = maxRepairs ?? 1
  if (!Number.isInteger(value) || value < 0) {
    throw new RangeError(`maxRepairs must be a whole number of 0 or more, got ${value}`)
  }
  return value
}

// ---------------------------------------------------------------------------
// Generating
// ---------------------------------------------------------------------------

/** The decoded value with the assistant message that carries it (what an agent keeps). */
export const run = <S extends OutputSchema>(
  model: ChatModel.Service,
  options: Options<S>
): Effect.Effect<Result<S["Type"]>, StructuredOutputError | ChatModel.ChatModelError> =>
  Effect.suspend(() => {
    const planned = plan(options.schema, options)
    const mode = resolveMode(model, options.mode)
    const maxRepairs = checkRepairs(options.maxRepairs)
    const base = Array.from(options.messages)
    const loop = (
      attempt: number,
      extra: ReadonlyArray<Message>,
      usage: ChatModel.Usage | undefined
    ): Effect.Effect<Result<S["Type"]>, StructuredOutputError | ChatModel.ChatModelError> =>
      Effect.flatMap(
        model.complete(
          request(planned, mode, extra.length === 0 ? base : [...base, ...extra], options.options)
        ),
        (response) => {
          const total = ChatModel.addUsage(usage, response.usage)
          const judgement = judge(planned, response, attempt, maxRepairs, total)
          switch (judgement._tag) {
            case "done":
              return Effect.succeed(judgement.result)
            case "fail":
              return Effect.fail(judgement.error)
            case "repair":
              return loop(attempt + 1, [...extra, ...judgement.messages], total)
          }
        }
      )
    return loop(1, [], undefined)
  })

/** The model's answer decoded with `schema`, repaired up to `maxRepairs` times. */
export const generate = <S extends OutputSchema>(
  model: ChatModel.Service,
  options: Options<S>
): Effect.Effect<S["Type"], StructuredOutputError | ChatModel.ChatModelError> =>
  Effect.map(run(model, options), (result) => result.value)

/**
 * Partial values as the JSON arrives (one event per change), a `repair` event
 * before each repair round, and the decoded value last.
 */
export const stream = <S extends OutputSchema>(
  model: ChatModel.Service,
  options: Options<S>
): Stream.Stream<StreamEvent<S["Type"]>, StructuredOutputError | ChatModel.ChatModelError> =>
  Stream.suspend(() => {
    const planned = plan(options.schema, options)
    const mode = resolveMode(model, options.mode)
    const maxRepairs = checkRepairs(options.maxRepairs)
    const base = Array.from(options.messages)
    type Event = StreamEvent<S["Type"]>
    const attemptStream = (
      attempt: number,
      extra: ReadonlyArray<Message>,
      usage: ChatModel.Usage | undefined
    ): Stream.Stream<Event, StructuredOutputError | ChatModel.ChatModelError> =>
      Stream.suspend(() => {
        const accumulator = new ChatModel.ResponseAccumulator()
        let text = ""
        let shown: string | undefined
        const partials = model
          .stream(request(planned, mode, extra.length === 0 ? base : [...base, ...extra], options.options))
          .pipe(
            Stream.map((chunk): Array<Event> => {
              accumulator.add(chunk)
              const delta =
                mode === "json-schema"
                  ? chunk.type === "text-delta"
                    ? chunk.delta
                    : undefined
                  : chunk.type === "tool-call-delta"
                    ? chunk.argumentsDelta
                    : undefined
              if (delta === undefined || delta === "") return []
              text += delta
              const partial = parsePartial(text)
              const value = planned.wrapped && isNode(partial) ? partial.value : partial
              const key = value === undefined ? undefined : JSON.stringify(value)
              if (key === undefined || key === shown) return []
              shown = key
              return [{ type: "partial", value, attempt }]
            }),
            Stream.flattenIterable
          )
        const end = Stream.unwrap(
          Effect.sync((): Stream.Stream<Event, StructuredOutputError | ChatModel.ChatModelError> => {
            const response = accumulator.build()
            const total = ChatModel.addUsage(usage, response.usage)
            const judgement = judge(planned, response, attempt, maxRepairs, total)
            switch (judgement._tag) {
              case "done":
                return Stream.succeed({
                  type: "value",
                  value: judgement.result.value,
                  message: judgement.result.message,
                  attempts: attempt
                })
              case "fail":
                return Stream.fail(judgement.error)
              case "repair":
                return Stream.concat(
                  Stream.succeed({ type: "repair", attempt: attempt + 1, issue: judgement.issue }),
                  attemptStream(attempt + 1, [...extra, ...judgement.messages], total)
                )
            }
          })
        )
        return Stream.concat(partials, end)
      })
    return attemptStream(1, [], undefined)
  })

// ---------------------------------------------------------------------------
// Reading back
// ---------------------------------------------------------------------------

/**
 * The value carried by the last assistant message of `messages` (what an
 * agent with structured output returns), decoded with `schema`.
 */
export const fromMessages = <S extends OutputSchema>(
  messages: Iterable<Message>,
  schema: S,
  options: { readonly name?: string } = {}
): Effect.Effect<S["Type"], StructuredOutputError> =>
  Effect.suspend(() => {
    const planned = plan(schema, options)
    let last: Message | undefined
    for (const message of messages) if (message.role === "assistant") last = message
    const text = last === undefined ? "" : Messages.text(last)
    const reading = read(planned, text)
    return reading._tag === "valid"
      ? Effect.succeed(reading.value)
      : Effect.fail(
          new StructuredOutputError({
            name: planned.name,
            reason: last === undefined ? "no-output" : reading.reason,
            issue: last === undefined ? "there is no assistant message" : reading.issue,
            text,
            attempts: 0
          })
        )
  })
