/**
 * SimpleAgent: one model call over the conversation, answered with one
 * assistant message.
 *
 * The optional system prompt is put in front of the context as a view, so the
 * history is never copied; the model reads it once. Use it for plain chat, or
 * as a stage of a pipeline (summarise, translate, critique).
 */
import { Agent, type ChatModel, ConversationContext, type Message } from "@noema/core"
import { Effect } from "effect"
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
  return Agent.make({
    name,
    execute: (context, model) =>
      Effect.map(Turn.complete(name, model, request(context), []), (outcome) => [outcome.message]),
    executeStream: (context, model) => Turn.stream(name, model, request(context))
  })
}
