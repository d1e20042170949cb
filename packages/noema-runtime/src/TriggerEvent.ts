/**
 * TriggerEvent: anything that happens to a runtime, in one generic envelope.
 *
 * A line typed in a chat, a timer, a webhook, a file that changed: each is a
 * `TriggerEvent` with an id, a `type` (a dotted name such as
 * `"user.message"` or `"timer.tick"`), the `source` that sent it, the time it
 * happened and a JSON payload. There are no trigger classes per kind: the
 * subminds read `type` and `payload` and decide what, if anything, the agent
 * should see.
 */
import type { Approval } from "@noema/core"
import { Schema } from "effect"

export const TriggerEvent = Schema.Struct({
  id: Schema.String,
  type: Schema.String,
  source: Schema.String,
  /** Epoch milliseconds. */
  time: Schema.Number,
  payload: Schema.Unknown
})
export type TriggerEvent = typeof TriggerEvent.Type

/** The type of the triggers the built-in `UserMessages` submind reads: `{ text, interrupt? }`. */
export const userMessage = "user.message"

/** A trigger of `type` with `payload`; id, source and time are filled in unless given. */
export const make = (
  type: string,
  payload: unknown,
  options: { readonly id?: string; readonly source?: string; readonly time?: number } = {}
): TriggerEvent => ({
  id: options.id ?? crypto.randomUUID(),
  type,
  source: options.source ?? "app",
  time: options.time ?? Date.now(),
  payload
})

/** The type of the triggers that stop the running turn and add nothing (a person's Ctrl-C). */
export const userCancel = "user.cancel"

/** A `user.cancel` trigger: stop the running turn (what was seen is kept), queue nothing. */
export const cancel = (options: { readonly source?: string } = {}): TriggerEvent =>
  make(userCancel, null, { source: options.source ?? "user" })

/** A `user.message` trigger: text a person typed; `interrupt` asks to stop the running turn for it. */
export const fromUser = (
  text: string,
  options: { readonly interrupt?: boolean; readonly source?: string } = {}
): TriggerEvent =>
  make(
    userMessage,
    { text, ...(options.interrupt === true && { interrupt: true }) },
    { source: options.source ?? "user" }
  )

/**
 * The type of the triggers that answer tool calls waiting for approval: the
 * built-in `approvalDecisions` submind reads them (`ApprovalDecisions` payload).
 */
export const approvalDecision = "approval.decision"

/** One decision: approve, or reject (the reason is told to the model). */
export const Decision = Schema.Union([
  Schema.Struct({ approved: Schema.Literal(true) }),
  Schema.Struct({ approved: Schema.Literal(false), reason: Schema.optionalKey(Schema.String) })
])

/** The payload of an `approval.decision` trigger: decisions by tool call id. */
export const ApprovalDecisions = Schema.Struct({ decisions: Schema.Record(Schema.String, Decision) })
export type ApprovalDecisions = typeof ApprovalDecisions.Type

/**
 * An `approval.decision` trigger: decisions on the calls the session has
 * waiting, by tool call id. `source` says who decided (it is recorded with
 * each call's result); default `"user"`.
 */
export const decide = (
  decisions: Readonly<Record<string, Approval.Decision>>,
  options: { readonly source?: string } = {}
): TriggerEvent =>
  make(approvalDecision, { decisions } satisfies ApprovalDecisions, { source: options.source ?? "user" })
