/**
 * SimpleAgent: one model call over the conversation, answered with one
 * assistant message.
 *
 * The optional system prompt is put in front of the context as a view, so the
 * history is never copied; the model reads it once. Use it for plain chat, or
 * as a stage of a pipeline (summarise, translate, critique).
 *
 * With `output`, the answer is structured (`StructuredOutput.run`: JSON
 * Schema or a forced tool, bounded repairs): the one message returned is an
 * assistant message whose text is the JSON, read back with
 * `StructuredOutput.fromMessages(messages, schema)`. Its stream emits that message
 * when it is decoded (partial objects: `StructuredOutput.stream`); output that
 * stays invalid fails the agent with reason `Failed`, whose `cause` is the
 * `StructuredOutputError` with the raw text.
 */
import { Agent, type ChatModel, ConversationContext, type Message, StructuredOutput } from "@noema/core"
import { Effect, Stream } from "effect"
import * as Turn from "./internal/turn.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** What a request may set besides its messages (temperature, maxTokens, ...); a SimpleAgent has no tools. */
export type ModelOptions = Omit<
  ChatModel.ChatRequest,
  "messages" | "tools" | "toolChoice" | "parallelToolCalls"
>

export interface Options {
  /** Shown in errors and logs. Default `"simple-agent"`. */
  readonly name?: string
  /** Put in front of the conversation for every call. */
  readonly system?: string | Message.SystemMessage
  readonly options?: ModelOptions
  /** Answer with a value of this schema instead of free text. */
  readonly output?: OutputOptions
}

/** Structured output for a SimpleAgent (see `StructuredOutput.Options`). */
export interface OutputOptions {
  readonly schema: StructuredOutput.OutputSchema
  readonly name?: string
  readonly description?: string
  readonly mode?: StructuredOutput.Mode
  readonly maxRepairs?: number
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const make = (options: Options = {}): Agent.Agent => {
  const name = options.name ?? "simple-agent"
  const request = (context: ConversationContext.ConversationContext): ChatModel.ChatRequest => ({
    ...options.options,
    messages: ConversationContext.compose({ system: options.system, history: context })
  })
  const output = options.output
  if (output !== undefined) {
    const execute = (context: ConversationContext.ConversationContext, model: ChatModel.Service) =>
      StructuredOutput.run(model, {
        ...output,
        messages: ConversationContext.compose({ system: options.system, history: context }),
        ...(options.options !== undefined && { options: options.options })
      }).pipe(
        Effect.map((result): ReadonlyArray<Message.Message> => [result.message]),
        Effect.mapError((error) =>
          error._tag === "ChatModelError"
            ? Agent.modelFailed(name, error)
            : new Agent.AgentError({
                agent: name,
                reason: new Agent.Failed({ message: error.message, cause: error }),
                messages: []
              })
        )
      )
    return Agent.make({
      name,
      execute,
      executeStream: (context, model) =>
        Stream.fromIterableEffect(
          Effect.map(execute(context, model), (messages) =>
            messages.flatMap(
              (message): Array<Agent.AgentEvent> => [
                ...(message.role === "assistant" && message.usage !== undefined
                  ? [{ type: "usage" as const, usage: message.usage }]
                  : []),
                { type: "message", message }
              ]
            )
          )
        )
    })
  }
  return Agent.make({
    name,
    execute: (context, model) => Turn.answer(name, model, request(context)),
    executeStream: (context, model) => Turn.stream(name, model, request(context))
  })
}
