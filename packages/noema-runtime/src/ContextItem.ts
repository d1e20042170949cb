/**
 * ContextItem: what a submind puts in front of the agent, with a priority.
 *
 * - `Interruption`: so urgent that the running turn is stopped for it; a new
 *   turn starts with it first.
 * - `ForNextTurn`: joins the running turn at its next model call (after the
 *   results of every tool call already requested), or starts one when idle.
 * - `InTheEnd`: joins when the running turn would finish, or starts one when idle.
 *
 * Interruption > ForNextTurn > InTheEnd; first in, first out within one.
 *
 * An item carries either messages or decisions on the tool calls the session
 * has waiting for approval (`decide`). A decision cannot join a running turn:
 * it waits in the bucket by its priority like any item, and when it is first
 * in line the cycle goes on with the turn that stopped for approval.
 */
import type { Approval, Message } from "@noema/core"
import type { TriggerEvent } from "./TriggerEvent.js"

export type ContextPriority = "Interruption" | "ForNextTurn" | "InTheEnd"

/** Priorities in the order they are served. */
export const priorities: ReadonlyArray<ContextPriority> = ["Interruption", "ForNextTurn", "InTheEnd"]

/** Decisions on tool calls waiting for approval, by tool call id. */
export type Decisions = Readonly<Record<string, Approval.Decision>>

/**
 * The metadata key under which the session records a decided call's decision,
 * on the call's result: `{ approved, reason?, by?, trigger? }` (`by` is the
 * deciding trigger's `source`, `trigger` its id).
 */
export const decisionMetadataKey = "approval"

export interface ContextItem {
  readonly id: string
  readonly priority: ContextPriority
  /** What the agent sees of it (user messages, or system notes without tool calls); none with `decisions`. */
  readonly messages: ReadonlyArray<Message.Message>
  /** Decisions on calls the session has waiting for approval (an item with decisions has no messages). */
  readonly decisions?: Decisions
  /** The trigger it came from, if any (its `source` is recorded as who decided). */
  readonly trigger?: TriggerEvent
}

/**
 * An item; its id is random unless given. Its messages get ids (`<item id>.<n>`)
 * unless they have their own: the runtime finds them in the session by id.
 */
export const make = (
  priority: ContextPriority,
  messages: ReadonlyArray<Message.Message>,
  options: { readonly id?: string; readonly trigger?: TriggerEvent } = {}
): ContextItem =>
  withMessageIds({
    id: options.id ?? crypto.randomUUID(),
    priority,
    messages,
    ...(options.trigger !== undefined && { trigger: options.trigger })
  })

/** An item of decisions on waiting calls (`ForNextTurn` unless told: in line with messages, first come first served). */
export const decide = (
  decisions: Decisions,
  options: { readonly id?: string; readonly priority?: ContextPriority; readonly trigger?: TriggerEvent } = {}
): ContextItem => ({
  id: options.id ?? crypto.randomUUID(),
  priority: options.priority ?? "ForNextTurn",
  messages: [],
  decisions,
  ...(options.trigger !== undefined && { trigger: options.trigger })
})

/** Whether the item carries decisions (and so continues a turn that stopped for approval). */
export const hasDecisions = (item: ContextItem): boolean =>
  item.decisions !== undefined && Object.keys(item.decisions).length > 0

/** The item with an id (`<item id>.<n>`) on each of its messages that has none. */
export const withMessageIds = (item: ContextItem): ContextItem =>
  item.messages.every((message) => message.id !== undefined)
    ? item
    : {
        ...item,
        messages: item.messages.map((message, index) =>
          message.id === undefined ? { ...message, id: `${item.id}.${index}` } : message
        )
      }
