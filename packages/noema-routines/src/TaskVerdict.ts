/**
 * TaskVerdict: how the agent says a routine task is done, or why it is not.
 *
 * A task is complete only when the agent says so in a structured way, never
 * because it answered (an answer may well say "I could not do this"). Two ways,
 * one `Verdict`:
 *
 * - `"tool-call"` (default): the agent has a `complete_task` tool and calls it
 *   with `done: true` and what was done, or `done: false` and why not; the
 *   loop ends with that call. An agent that answers without calling it is
 *   nudged once (a user message saying so); if it still does not call it, the
 *   task stays open with the reason `notConfirmed`.
 * - `"structured-output"`, for a model that cannot call tools: once the agent
 *   has answered, the model is asked for the verdict through core's
 *   `StructuredOutput` (JSON Schema or a forced tool, repaired once); output
 *   that never matches leaves the task open with `notConfirmed`.
 */
import type { ToolAgent } from "@noema/agents"
import { type ChatModel, Message, StructuredOutput, Tool } from "@noema/core"
import { Effect, Option, Schema } from "effect"

export const Verdict = Schema.Struct({
  done: Schema.Boolean.annotate({
    description: "true when the task is finished; false when it cannot be done (now)"
  }),
  summary: Schema.String.annotate({
    description: "done: what was done, in a sentence or two; not done: the reason it is not done"
  })
})
export type Verdict = typeof Verdict.Type

export type Mode = "tool-call" | "structured-output"

/**
 * How a completion was decided: the agent's `complete_task` call, its structured
 * verdict, or (`answer`) any answer at all, which is how tasks completed before
 * verdicts existed (kept for rows stored then).
 */
export const Source = Schema.Literals(["tool-call", "structured-output", "answer"])
export type Source = typeof Source.Type

export const toolName = "complete_task"

/** The reason a task stays open when the agent never gave a verdict. */
export const notConfirmed = "not confirmed by the agent"

export const tool: Tool.Any = Tool.make({
  name: toolName,
  description:
    "Report the outcome of the current task: done: true with a summary of what was done once it is " +
    "finished, or done: false with the reason when it cannot be done. The task counts as done only through this call.",
  parameters: Verdict,
  handler: ({ done }) =>
    Effect.succeed(done ? "Recorded: the task is done." : "Recorded: the task stays open.")
}) as Tool.Any

/** What the routine's system prompt says about verdicts, per mode. */
export const instructions = (mode: Mode): string =>
  mode === "tool-call"
    ? `You work through a routine's tasks one at a time. When a task is finished, call ${toolName} with done: true and a short summary; when you cannot do it, call ${toolName} with done: false and the reason. A task is only done through ${toolName}.`
    : "You work through a routine's tasks one at a time; after each you are asked whether it is done."

/** The one nudge an agent gets when it answered without a verdict. */
export const nudgeText = `You answered without calling ${toolName}. Call ${toolName} now: done: true with a summary of what you did, or done: false with the reason the task cannot be done.`

/** The question asked for a structured verdict. */
export const questionText = (taskId: string): string =>
  `Is task ${taskId} done? Answer with done (true or false) and a summary: what was done, or why it is not done.`

const calledVerdict = (message: Message.ToolMessage): boolean => message.name === toolName && !message.isError

/** Ends the agent's loop after a step whose `complete_task` call ran (a call with bad arguments does not count). */
export const stopWhen: ToolAgent.StopCondition = ({ steps }) =>
  steps.at(-1)?.toolResults.some(calledVerdict) ?? false

/** Steering that injects `nudge` once, the first time the agent answers without having given a verdict. */
export const nudgeOnce = (nudge: Message.Message): ToolAgent.Steering => {
  let nudged = false
  return ({ final }) =>
    Effect.sync(() => {
      if (!final || nudged) return []
      nudged = true
      return [nudge]
    })
}

const decodeArguments = Schema.decodeUnknownOption(Schema.fromJsonString(Verdict))

/** The verdict of the last `complete_task` call in `messages` that ran, if any. */
export const fromToolCalls = (messages: ReadonlyArray<Message.Message>): Verdict | undefined => {
  const ran = new Set(
    messages.flatMap((message) =>
      message.role === "tool" && calledVerdict(message) ? [message.toolCallId] : []
    )
  )
  for (const message of [...messages].reverse()) {
    if (message.role !== "assistant") continue
    for (const call of [...(message.toolCalls ?? [])].reverse()) {
      if (call.name !== toolName || !ran.has(call.id)) continue
      const verdict = decodeArguments(call.arguments)
      if (Option.isSome(verdict)) return verdict.value
    }
  }
  return undefined
}

/**
 * The model's verdict on `taskId` after the agent's work (`messages`), as the
 * question and the answer to keep in the conversation; `verdict` is undefined
 * when the model's output never matched the schema.
 */
export const ask = (
  model: ChatModel.Service,
  messages: ReadonlyArray<Message.Message>,
  question: Message.Message
): Effect.Effect<
  { readonly verdict: Verdict | undefined; readonly added: ReadonlyArray<Message.Message> },
  ChatModel.ChatModelError
> =>
  StructuredOutput.run(model, {
    schema: Verdict,
    name: "task_verdict",
    messages: [...messages, question]
  }).pipe(
    Effect.map((result) => ({ verdict: result.value, added: [question, result.message] })),
    Effect.catchTag("StructuredOutputError", (error) =>
      Effect.succeed({
        verdict: undefined,
        added: [question, Message.assistant(error.text)]
      })
    )
  )
