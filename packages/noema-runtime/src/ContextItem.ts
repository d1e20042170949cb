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
 */
import type { Message } from "@noema/core"
import type { TriggerEvent } from "./TriggerEvent.js"

export type ContextPriority = "Interruption" | "ForNextTurn" | "InTheEnd"

/** Priorities in the order they are served. */
export const priorities: ReadonlyArray<ContextPriority> = ["Interruption", "ForNextTurn", "InTheEnd"]

export interface ContextItem {
  readonly id: string
  readonly priority: ContextPriority
  /** What the agent sees of it (user messages, or system notes without tool calls). */
  readonly messages: ReadonlyArray<Message.Message>
  /** The trigger it came from, if any. */
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
