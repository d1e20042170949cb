/**
 * Tool: a function the model may call.
 *
 * A tool has a name, a description, parameters described by an Effect Schema
 * (the JSON Schema the model sees is derived from it once) and an Effect
 * handler. Calling a tool always yields a tool message: arguments that are not
 * JSON or do not match the schema, a handler that fails and a handler that
 * throws all become a tool message with `isError: true` and a text the model
 * can read and correct. Only interruption escapes, so cancelling a turn still
 * cancels its tools.
 */
import { Cause, Effect, Schema } from "effect"
import type { JsonSchema, ToolDefinition } from "./ChatModel.js"
import { deepFreeze } from "./internal/deepFreeze.js"
import type { ToolCall, ToolMessage } from "./Message.js"
import * as Messages from "./Message.js"
import * as Tracing from "./Tracing.js"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/**
 * What running a tool does to the world, for whoever schedules or cancels its
 * calls (a runtime may interrupt a read-only or idempotent call and run it
 * again; any other call must finish, or be recorded as interrupted). They are
 * the tool author's promises, not checked. Names map to MCP's tool
 * annotations: `readOnly` = `readOnlyHint`, `destructive` = `destructiveHint`,
 * `idempotent` = `idempotentHint`. Unset means unknown: treat the tool as
 * having effects (as MCP's defaults do).
 */
export interface Annotations {
  /** It changes nothing outside itself (reads, computes). */
  readonly readOnly?: boolean
  /** It may delete or overwrite something (meaningful when not read-only). */
  readonly destructive?: boolean
  /** Calling it again with the same arguments has no further effect. */
  readonly idempotent?: boolean
}

/** Schemas a tool can take its parameters from: they must decode without services. */
export type Parameters = Schema.Constraint & { readonly DecodingServices: never }

export interface Tool<
  Params extends Parameters = Parameters,
  Success = unknown,
  Failure = unknown,
  R = never
> {
  readonly name: string
  readonly description: string
  readonly parameters: Params
  /** What the model is told about the tool (JSON Schema derived from `parameters`). */
  readonly definition: ToolDefinition
  /** What calling it does to the world (empty when the author said nothing). */
  readonly annotations: Annotations
  /**
   * Whether a call must be approved by a person before it runs: always (`true`),
   * or when a predicate on the decoded arguments says so. Unset: never. See `Approval`.
   */
  readonly needsApproval?: boolean | ApprovalPredicate<Params["Type"]>
  handler(params: Params["Type"]): Effect.Effect<Success, Failure, R>
  /** The text the model reads for a success. */
  formatSuccess(success: Success): string
  /** The text the model reads for a failure. */
  formatFailure(failure: Failure): string
}

/**
 * Whether a call with these arguments needs approval. (Declared as a method, so
 * a tool with a predicate on its own arguments is still an `Any` tool.)
 */
export type ApprovalPredicate<A> = { check(params: A): boolean }["check"]

/** Any tool whose handler needs services `R`. */
export type Any<R = never> = Tool<Parameters, unknown, unknown, R>

/** The services a set of tools needs. */
export type Services<T> = T extends Tool<Parameters, unknown, unknown, infer R> ? R : never

/** Why the model's arguments were rejected (also used by agents for unknown tools). */
export class ToolArgumentsError extends Schema.TaggedError<ToolArgumentsError>()("ToolArgumentsError", {
  tool: Schema.String,
  message: Schema.String
}) {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const toolNamePattern = /^[a-zA-Z0-9_-]{1,64}$/

const defaultFormat = (value: unknown): string => {
  if (typeof value === "string") return value
  if (value === undefined) return ""
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

const defaultFormatFailure = (failure: unknown): string => {
  if (typeof failure === "object" && failure !== null && "message" in failure) {
    const message = (failure as { message: unknown }).message
    if (typeof message === "string" && message.length > 0) return message
  }
  return defaultFormat(failure)
}

/** JSON Schema for a Schema, with generated definitions inlined under `$defs`. */
export const jsonSchema = (schema: Schema.Constraint): JsonSchema => {
  const document = Schema.toJsonSchemaDocument(schema)
  const root = { ...document.schema } as { [key: string]: unknown }
  if (Object.keys(document.definitions).length > 0) root.$defs = document.definitions
  return root
}

const jsonSchemas = new WeakMap<Parameters, JsonSchema>()

/**
 * `jsonSchema` of a tool's parameters, derived once per schema: tools made again and again
 * with one schema (one per stage, per turn) share it, frozen, as it is shared.
 */
const parametersSchema = (schema: Parameters): JsonSchema => {
  let derived = jsonSchemas.get(schema)
  if (derived === undefined) {
    derived = deepFreeze(jsonSchema(schema))
    jsonSchemas.set(schema, derived)
  }
  return derived
}

const jsonCodecs = new WeakMap<Parameters, Schema.Codec<unknown, unknown, never, unknown>>()

/**
 * The codec a model's JSON for `schema` is read with: the schema's JSON codec, the form
 * `jsonSchema` describes (`Schema.toJsonSchemaDocument` documents the JSON codec). An
 * optional field is sent as `anyOf [X, null]`, so a schema-following model may send `null`
 * for it: read as absent. A number may come as `"NaN"`/`"Infinity"`, as documented.
 * Derived once per schema.
 */
export const jsonCodec = <Params extends Parameters>(
  schema: Params
): Schema.Codec<Params["Type"], unknown, never, unknown> => {
  let codec = jsonCodecs.get(schema)
  if (codec === undefined) {
    codec = Schema.toCodecJson(schema) as unknown as Schema.Codec<unknown, unknown, never, unknown>
    jsonCodecs.set(schema, codec)
  }
  return codec as Schema.Codec<Params["Type"], unknown, never, unknown>
}

export interface MakeOptions<Params extends Parameters, Success, Failure, R> {
  readonly name: string
  readonly description: string
  readonly parameters: Params
  readonly handler: (params: Params["Type"]) => Effect.Effect<Success, Failure, R>
  /** Defaults: strings as they are, anything else as JSON. */
  readonly formatSuccess?: (success: Success) => string
  /** Default: the failure's `message`, or its JSON. */
  readonly formatFailure?: (failure: Failure) => string
  readonly strict?: boolean
  readonly annotations?: Annotations
  /** Calls wait for a person's approval: always, or when this predicate on the arguments holds. */
  readonly needsApproval?: boolean | ((params: Params["Type"]) => boolean)
}

export const make = <Params extends Parameters, Success, Failure = never, R = never>(
  options: MakeOptions<Params, Success, Failure, R>
): Tool<Params, Success, Failure, R> => {
  if (!toolNamePattern.test(options.name)) {
    throw new TypeError(
      `Invalid tool name "${options.name}": use 1-64 letters, digits, underscores or hyphens`
    )
  }
  const definition: ToolDefinition = {
    name: options.name,
    description: options.description,
    parameters: parametersSchema(options.parameters),
    ...(options.strict !== undefined && { strict: options.strict })
  }
  return {
    name: options.name,
    description: options.description,
    parameters: options.parameters,
    definition,
    annotations: Object.freeze({ ...options.annotations }),
    ...(options.needsApproval !== undefined && { needsApproval: options.needsApproval }),
    handler: options.handler,
    formatSuccess: options.formatSuccess ?? defaultFormat,
    formatFailure: options.formatFailure ?? defaultFormatFailure
  }
}

/**
 * A tool from a plain async function, for code that does not use Effect. The
 * signal is aborted when the turn is cancelled; a thrown error becomes a tool
 * error message for the model.
 */
export const fromAsync = <Params extends Parameters, Success>(options: {
  readonly name: string
  readonly description: string
  readonly parameters: Params
  readonly execute: (params: Params["Type"], context: { readonly signal: AbortSignal }) => Promise<Success>
  readonly formatSuccess?: (success: Success) => string
  readonly strict?: boolean
  readonly annotations?: Annotations
  readonly needsApproval?: boolean | ((params: Params["Type"]) => boolean)
}): Tool<Params, Success, unknown> =>
  make({
    name: options.name,
    description: options.description,
    parameters: options.parameters,
    handler: (params) =>
      Effect.tryPromise({
        try: (signal) => options.execute(params, { signal }),
        catch: (error) => error
      }),
    ...(options.formatSuccess !== undefined && { formatSuccess: options.formatSuccess }),
    ...(options.strict !== undefined && { strict: options.strict }),
    ...(options.annotations !== undefined && { annotations: options.annotations }),
    ...(options.needsApproval !== undefined && { needsApproval: options.needsApproval })
  })

/**
 * The parameters of a tool described by JSON Schema rather than an Effect
 * Schema: any JSON object. The tool's own side (e.g. an MCP server) validates
 * the arguments against its schema and reports a mismatch as an error result.
 */
export const JsonObjectParameters = Schema.Record(Schema.String, Schema.Unknown)
export type JsonObjectParameters = typeof JsonObjectParameters

/**
 * A tool whose parameters come as a JSON Schema (from another system: an MCP
 * server, an OpenAPI operation). The model sees `parameters` unchanged; noema
 * only checks that the arguments are a JSON object before the handler runs.
 */
export const fromJsonSchema = <Success, Failure = never, R = never>(
  options: Omit<MakeOptions<JsonObjectParameters, Success, Failure, R>, "parameters"> & {
    readonly parameters: JsonSchema
  }
): Tool<JsonObjectParameters, Success, Failure, R> => {
  const tool = make({ ...options, parameters: JsonObjectParameters })
  return {
    ...tool,
    definition: { ...tool.definition, parameters: options.parameters }
  }
}

// ---------------------------------------------------------------------------
// Guards
// ---------------------------------------------------------------------------

/** The tool said it changes nothing. */
export const isReadOnly = (tool: { readonly annotations: Annotations }): boolean =>
  tool.annotations.readOnly === true

/**
 * A call of this tool may be interrupted (and run again later) without
 * hiding an effect: the tool is read-only or idempotent. Any other call that
 * started must finish, or be recorded as interrupted.
 */
export const isInterruptible = (tool: { readonly annotations: Annotations }): boolean =>
  tool.annotations.readOnly === true || tool.annotations.idempotent === true

/** The same tool, with calls that need a person's approval (e.g. an MCP server's tools a user wants to watch). */
export const withApproval = <Params extends Parameters, Success, Failure, R>(
  tool: Tool<Params, Success, Failure, R>,
  needsApproval: boolean | ((params: Params["Type"]) => boolean) = true
): Tool<Params, Success, Failure, R> => ({ ...tool, needsApproval })

/**
 * Whether this call of `tool` must wait for approval. Arguments that do not
 * decode need none: the call fails with an error result for the model anyway.
 */
export const requiresApproval = <Params extends Parameters>(
  tool: Tool<Params, unknown, unknown, unknown>,
  toolCall: ToolCall
): boolean => {
  const rule = tool.needsApproval
  if (rule === undefined || rule === false) return false
  if (rule === true) return true
  const text = toolCall.arguments.trim() === "" ? "{}" : toolCall.arguments
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return false
  }
  const decoded = Schema.decodeUnknownOption(jsonCodec(tool.parameters))(parsed)
  return decoded._tag === "Some" && rule(decoded.value)
}

// ---------------------------------------------------------------------------
// Calling
// ---------------------------------------------------------------------------

/** Parses and validates the model's JSON arguments for a tool. */
export const decodeArguments = <Params extends Parameters>(
  tool: Tool<Params, unknown, unknown, unknown>,
  argumentsJson: string
): Effect.Effect<Params["Type"], ToolArgumentsError> =>
  Effect.suspend(() => {
    let parsed: unknown
    // Models send "" for tools without parameters; that means "no arguments".
    const text = argumentsJson.trim() === "" ? "{}" : argumentsJson
    try {
      parsed = JSON.parse(text)
    } catch (error) {
      return Effect.fail(
        new ToolArgumentsError({
          tool: tool.name,
          message: `Invalid arguments for tool "${tool.name}": not valid JSON (${
            error instanceof Error ? error.message : String(error)
          }). Send a JSON object matching the tool's parameters.`
        })
      )
    }
    return Schema.decodeUnknownEffect(jsonCodec(tool.parameters))(parsed, { errors: "all" }).pipe(
      Effect.mapError(
        (error) =>
          new ToolArgumentsError({
            tool: tool.name,
            message: `Invalid arguments for tool "${tool.name}": ${error.message}`
          })
      )
    )
  })

const errorMessage = (call: ToolCall, content: string): ToolMessage =>
  Messages.toolResult({ toolCallId: call.id, name: call.name, content, isError: true })

/**
 * Runs one tool call to a tool message. Never fails: every problem is reported
 * to the model as an error result. Interruption propagates.
 */
export const call = <Params extends Parameters, Success, Failure, R>(
  tool: Tool<Params, Success, Failure, R>,
  toolCall: ToolCall
): Effect.Effect<ToolMessage, never, R> =>
  decodeArguments(tool, toolCall.arguments).pipe(
    Effect.flatMap((params) => tool.handler(params)),
    Effect.matchCauseEffect({
      onSuccess: (success) =>
        Effect.sync(() =>
          Messages.toolResult({
            toolCallId: toolCall.id,
            name: toolCall.name,
            content: tool.formatSuccess(success)
          })
        ),
      onFailure: (cause) => {
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
        const failure = Cause.findErrorOption(cause)
        if (failure._tag === "Some") {
          const error = failure.value
          if (error instanceof ToolArgumentsError)
            return Effect.succeed(errorMessage(toolCall, error.message))
          return Effect.succeed(
            errorMessage(toolCall, `Tool "${tool.name}" failed: ${tool.formatFailure(error as Failure)}`)
          )
        }
        const defect = Cause.squash(cause)
        return Effect.succeed(
          errorMessage(
            toolCall,
            `Tool "${tool.name}" failed unexpectedly: ${defect instanceof Error ? defect.message : String(defect)}`
          )
        )
      }
    })
  )

/**
 * Runs a call against a set of tools; an unknown tool name is reported to the
 * model. Each call is one `execute_tool {name}` span (see `Tracing`); its
 * arguments and result are recorded only with `Tracing.RecordContent` or
 * `Tracing.RecordToolContent`.
 */
export const callIn = <R>(
  tools: ReadonlyArray<Any<R>>,
  toolCall: ToolCall
): Effect.Effect<ToolMessage, never, R> => {
  const tool = tools.find((candidate) => candidate.name === toolCall.name)
  let result: Effect.Effect<ToolMessage, never, R>
  if (tool === undefined) {
    const available = tools.map((candidate) => candidate.name).join(", ")
    result = Effect.succeed(
      errorMessage(
        toolCall,
        `Unknown tool "${toolCall.name}". Available tools: ${available === "" ? "none" : available}.`
      )
    )
  } else {
    result = call(tool, toolCall)
  }
  return Tracing.withSpan(
    result,
    `execute_tool ${toolCall.name}`,
    {
      attributes: {
        [Tracing.Attributes.operationName]: "execute_tool",
        [Tracing.Attributes.toolName]: toolCall.name,
        [Tracing.Attributes.toolCallId]: toolCall.id
      }
    },
    () =>
      Effect.flatMap(recordsToolContent, (record) =>
        record
          ? Effect.annotateCurrentSpan(Tracing.Attributes.toolCallArguments, toolCall.arguments).pipe(
              Effect.andThen(result),
              Effect.tap((message) => annotateResult(message, true))
            )
          : Effect.tap(result, (message) => annotateResult(message, false))
      )
  )
}

const recordsToolContent = Effect.zipWith(
  Tracing.RecordContent,
  Tracing.RecordToolContent,
  (all, tools) => all || tools
)

const annotateResult = (message: ToolMessage, record: boolean): Effect.Effect<void> => {
  if (!message.isError && !record) return Effect.void
  const attributes: Record<string, unknown> = {}
  // The result is reported to the model, so the span itself succeeds; `error.type` says it failed.
  if (message.isError) attributes[Tracing.Attributes.errorType] = "tool_error"
  if (record) attributes[Tracing.Attributes.toolCallResult] = message.content
  return Effect.annotateCurrentSpan(attributes)
}

export const definitions = (tools: ReadonlyArray<Any<unknown>>): ReadonlyArray<ToolDefinition> =>
  tools.map((tool) => tool.definition)
