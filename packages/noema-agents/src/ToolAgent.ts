/**
 * ToolAgent: the model-and-tools loop.
 *
 * Each step calls the model with the tool definitions; when it asks for tool
 * calls, they run (concurrently, up to a limit) and their results are added,
 * and the model is called again. The loop ends when the model answers without
 * tool calls, or fails with `MaxStepsExceeded` after `maxSteps` model calls.
 * The model sees the original context followed by everything produced so far
 * through one live view, so no step copies the history. A tool that fails, is
 * unknown or gets bad arguments becomes an error result the model can read
 * (see `Tool.callIn`); only interruption stops the loop, and it stops the
 * running model call and tools with it.
 */
import { Agent, type ChatModel, ConversationContext, Message, Tool } from "@noema/core"
import { Effect, Stream } from "effect"
import * as Turn from "./internal/turn.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** What a request may set besides its messages and tools (temperature, toolChoice, ...). */
export type ModelOptions = Omit<ChatModel.ChatRequest, "messages" | "tools">

export interface Options<Tools extends ReadonlyArray<Tool.Any<unknown>>> {
  /** Shown in errors and logs. Default `"tool-agent"`. */
  readonly name?: string
  /** Put in front of the conversation for every call. */
  readonly system?: string | Message.SystemMessage
  readonly tools: Tools
  /** Model calls allowed in one execution. Default 10. */
  readonly maxSteps?: number
  /** Tool calls of one step that may run at the same time. Default 4. */
  readonly concurrency?: number
  readonly options?: ModelOptions
}

export const defaultMaxSteps = 10
export const defaultConcurrency = 4

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const positiveInteger = (what: string, value: number): number => {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`ToolAgent ${what} must be a positive integer, got ${value}`)
  }
  return value
}

/** An agent running the tool loop; it needs the services its tools need. */
export const make = <const Tools extends ReadonlyArray<Tool.Any<unknown>>>(
  options: Options<Tools>
): Agent.Agent<Tool.Services<Tools[number]>> => {
  type R = Tool.Services<Tools[number]>
  const name = options.name ?? "tool-agent"
  const maxSteps = positiveInteger("maxSteps", options.maxSteps ?? defaultMaxSteps)
  const concurrency = positiveInteger("concurrency", options.concurrency ?? defaultConcurrency)
  const tools = options.tools as ReadonlyArray<Tool.Any<R>>
  const seen = new Set<string>()
  for (const tool of tools) {
    // The model picks a tool by name; a duplicate would silently shadow the other.
    if (seen.has(tool.name)) throw new TypeError(`ToolAgent "${name}" has two tools named "${tool.name}"`)
    seen.add(tool.name)
  }
  const definitions = Tool.definitions(tools)

  // One request for every step: its messages are a live view over the growing output.
  const requestFor = (
    context: ConversationContext.ConversationContext,
    produced: ReadonlyArray<Message.Message>
  ): ChatModel.ChatRequest => ({
    ...options.options,
    messages: ConversationContext.compose({ system: options.system, history: context, pending: produced }),
    // Some providers reject an empty tool list; no tools means a plain chat call.
    ...(definitions.length > 0 && { tools: definitions })
  })

  const maxStepsExceeded = (produced: ReadonlyArray<Message.Message>) =>
    new Agent.AgentError({
      agent: name,
      reason: new Agent.MaxStepsExceeded({ maxSteps }),
      messages: produced.slice()
    })

  const execute: Agent.Agent<R>["execute"] = (context, model) =>
    Effect.gen(function* () {
      const produced: Array<Message.Message> = []
      const request = requestFor(context, produced)
      for (let step = 1; ; step++) {
        const assistant = yield* Turn.complete(name, model, request, produced)
        if (!Message.hasToolCalls(assistant)) return produced
        const results = yield* Effect.forEach(assistant.toolCalls, (call) => Tool.callIn(tools, call), {
          concurrency
        })
        for (const result of results) produced.push(result)
        // The last step's calls still ran, so the produced history answers every call it makes.
        if (step >= maxSteps) return yield* maxStepsExceeded(produced)
      }
    })

  const executeStream: Agent.Agent<R>["executeStream"] = (context, model) =>
    Stream.suspend(() => {
      const produced: Array<Message.Message> = []
      const request = requestFor(context, produced)

      // Results are reported as each call finishes, but kept (and emitted as messages) in call order.
      const runTools = (calls: ReadonlyArray<Message.ToolCall>): Stream.Stream<Agent.AgentEvent, never, R> =>
        Stream.suspend(() => {
          const results: Array<Message.ToolMessage> = new Array(calls.length)
          return Stream.fromArray(calls).pipe(
            Stream.mapEffect(
              (call, index) =>
                Effect.map(Tool.callIn(tools, call), (message): Agent.AgentEvent => {
                  results[index] = message
                  return { type: "tool-result", message }
                }),
              { concurrency, unordered: true }
            ),
            Stream.concat(
              Stream.suspend(() => {
                for (const result of results) produced.push(result)
                return Stream.fromArray(
                  results.map((message): Agent.AgentEvent => ({ type: "message", message }))
                )
              })
            )
          )
        })

      const step = (number: number): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> =>
        Turn.stream(name, model, request, produced).pipe(
          Stream.concat(
            Stream.suspend(() => {
              const assistant = produced.at(-1)
              if (assistant === undefined || !Message.hasToolCalls(assistant)) return Stream.empty
              return runTools(assistant.toolCalls).pipe(
                Stream.concat(
                  Stream.suspend(() =>
                    number >= maxSteps ? Stream.fail(maxStepsExceeded(produced)) : step(number + 1)
                  )
                )
              )
            })
          )
        )

      return step(1)
    })

  return Agent.make<R>({ name, execute, executeStream })
}
