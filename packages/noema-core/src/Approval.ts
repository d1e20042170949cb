/**
 * Approval: tool calls that wait for a person.
 *
 * A tool made with `needsApproval` (always, or by a predicate on its
 * arguments) is not run when the model calls it. The agent asks the
 * `Approvals` service in its context for a decision; without one, it stops:
 * it emits an `approval-request` event and ends its output with the call
 * unanswered (the calls of the same step that need no approval have run and
 * are answered). That output is what a session commits, so the pending call
 * is stored, and survives the process.
 *
 * The agent is then run again on the history (no new input) with the
 * decisions (`Approvals.fromDecisions`): it finds the unanswered calls at the
 * end of its context (`pendingCalls`), runs the approved ones, answers the
 * rejected ones with an error result saying so (`rejected`), and carries on
 * with the model. A session does that with `Session.resume`; a new message
 * instead of a decision rejects what was pending (`superseded`), so the
 * history the model sees always answers every call.
 */
import { Context, Effect } from "effect"
import type { ConversationContext } from "./ConversationContext.js"
import type { Message, ToolCall, ToolMessage } from "./Message.js"
import * as Messages from "./Message.js"

export type Decision =
  | { readonly approved: true }
  | {
      readonly approved: false
      /** Told to the model with the rejection. */
      readonly reason?: string
    }

export const approve: Decision = { approved: true }

export const reject = (reason?: string): Decision =>
  reason === undefined ? { approved: false } : { approved: false, reason }

export interface Service {
  /** The decision on a call that needs approval, or `undefined` when there is none yet (the agent stops). */
  readonly decide: (toolCall: ToolCall) => Effect.Effect<Decision | undefined>
}

/** Where an agent gets decisions on calls that need approval; without it, every such call waits. */
export class Approvals extends Context.Service<Approvals, Service>()("@noema/core/Approvals") {}

/** Decisions known in advance, by tool call id (what a person said about the pending calls). */
export const fromDecisions = (
  decisions: ReadonlyMap<string, Decision> | Record<string, Decision>
): Service => {
  const byId = decisions instanceof Map ? decisions : new Map(Object.entries(decisions))
  return { decide: (toolCall) => Effect.succeed(byId.get(toolCall.id)) }
}

/** Every call approved (a user who said "yes to all"). */
export const approveAll: Service = { decide: () => Effect.succeed(approve) }

/** The decision the context holds for `toolCall`, or `undefined` without `Approvals` or without a decision. */
export const decide = (toolCall: ToolCall): Effect.Effect<Decision | undefined> =>
  Effect.flatMap(Effect.serviceOption(Approvals), (service) =>
    service._tag === "Some" ? service.value.decide(toolCall) : Effect.succeed(undefined)
  )

/**
 * The calls left unanswered at the end of `context`: those of its last
 * assistant message with no tool result after it (only tool results may
 * follow it). Empty when the context ends otherwise. Reads from the end only.
 */
export const pendingCalls = (context: ConversationContext): ReadonlyArray<ToolCall> => {
  const answered = new Set<string>()
  for (let index = context.length - 1; index >= 0; index--) {
    const message = context.at(index) as Message
    if (message.role === "tool") {
      answered.add(message.toolCallId)
      continue
    }
    if (message.role !== "assistant" || message.toolCalls === undefined) return []
    return message.toolCalls.filter((call) => !answered.has(call.id))
  }
  return []
}

/** The result the model reads for a call a person rejected. */
export const rejected = (toolCall: ToolCall, reason?: string): ToolMessage =>
  Messages.toolResult({
    toolCallId: toolCall.id,
    name: toolCall.name,
    content:
      `The user did not approve this call of "${toolCall.name}", so it was not run` +
      (reason === undefined || reason.trim() === "" ? "." : `: ${reason.trim()}`),
    isError: true
  })

/** The result of a pending call that was left for a new message instead of a decision. */
export const superseded = (toolCall: ToolCall): ToolMessage =>
  rejected(toolCall, "they sent a new message instead of deciding")
