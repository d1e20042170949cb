/**
 * Submind: a part of the agent's mind that listens to the runtime.
 *
 * A submind is told of the runtime's events through optional hooks, and maps
 * the triggers it understands to context items (`onTrigger`). Every hook is
 * isolated: one that fails, or runs longer than the runtime's hook timeout,
 * is reported (a `hook-failed` runtime event) and harms no other submind and
 * no turn. Hooks other than `onTrigger` are told, not awaited: they run beside
 * the cycle.
 */
import { Message } from "@noema/core"
import type { Effect } from "effect"
import { Effect as E, Option, Schema } from "effect"
import * as ContextItem from "./ContextItem.js"
import * as TriggerEvent from "./TriggerEvent.js"

/** A cycle of the runtime: one turn of the agent, and the items it carries. */
export interface Cycle {
  /** 1, 2, ... in the runtime's life. */
  readonly number: number
  readonly items: ReadonlyArray<ContextItem.ContextItem>
}

export interface Submind {
  readonly name: string
  readonly onStarted?: () => Effect.Effect<void>
  readonly onStopped?: () => Effect.Effect<void>
  /** The items this trigger puts in front of the agent (none, if it is not this submind's kind). */
  readonly onTrigger?: (
    trigger: TriggerEvent.TriggerEvent
  ) => Effect.Effect<ReadonlyArray<ContextItem.ContextItem>>
  readonly onCycleStarted?: (cycle: Cycle) => Effect.Effect<void>
  /** The cycle's turn is stored: `committed` is what the session now holds for it. */
  readonly onCycleCompleted?: (cycle: Cycle, committed: ReadonlyArray<Message.Message>) => Effect.Effect<void>
  /** The cycle was stopped (an interruption, or `stop`); its items that were not kept go back to the front. */
  readonly onCycleInterrupted?: (cycle: Cycle) => Effect.Effect<void>
  /** Nothing is queued and no cycle runs. */
  readonly onIdle?: () => Effect.Effect<void>
}

/** A submind from its hooks. */
export const make = (submind: Submind): Submind => submind

/**
 * The built-in submind for people's messages: a `user.message` trigger
 * (`{ text, interrupt? }`) becomes a user message, `ForNextTurn`, or
 * `Interruption` when it asks to interrupt; a `user.cancel` trigger becomes
 * an `Interruption` with no messages, which only stops the running turn.
 */
export const userMessages: Submind = {
  name: "user-messages",
  onTrigger: (trigger) =>
    E.sync(() => {
      if (trigger.type === TriggerEvent.userCancel) return [ContextItem.make("Interruption", [], { trigger })]
      if (trigger.type !== TriggerEvent.userMessage) return []
      const payload = trigger.payload as { readonly text?: unknown; readonly interrupt?: unknown } | null
      if (payload === null || typeof payload !== "object" || typeof payload.text !== "string") return []
      return [
        ContextItem.make(
          payload.interrupt === true ? "Interruption" : "ForNextTurn",
          [Message.user(payload.text)],
          {
            trigger
          }
        )
      ]
    })
}

const decodeDecisions = Schema.decodeUnknownOption(TriggerEvent.ApprovalDecisions)

/**
 * The built-in submind for decisions on tool calls waiting for approval: an
 * `approval.decision` trigger (`TriggerEvent.decide`) becomes an item of
 * decisions, `ForNextTurn` (in line with people's messages). The runtime
 * checks each decision against the calls the session has waiting when it
 * arrives, and goes on with the stopped turn when the item is first in line.
 */
export const approvalDecisions: Submind = {
  name: "approval-decisions",
  onTrigger: (trigger) =>
    E.sync(() => {
      if (trigger.type !== TriggerEvent.approvalDecision) return []
      const payload = decodeDecisions(trigger.payload)
      if (Option.isNone(payload) || Object.keys(payload.value.decisions).length === 0) return []
      return [ContextItem.decide(payload.value.decisions, { trigger })]
    })
}
