/**
 * Decisions on tool calls waiting for approval, as the runtime carries them.
 *
 * The contract: a decision applies once. It is refused when it arrives if its
 * call does not wait in the session, is already decided by an item in the
 * bucket, or will be answered first by a message (a turn with new input
 * answers every waiting call as superseded). Once a cycle takes it, it leaves
 * the bucket however the cycle ends, and it is recorded in the session: on the
 * call's result as the agent produced it, or, when the continued turn was
 * interrupted or failed before storing that result, by `settle`: an approved
 * call as "interrupted; may have partially run" (it started), a rejected one
 * as rejected. So no call is decided twice, none runs twice, and the history
 * answers every decided call.
 */
import { Agent, Approval, type Message } from "@noema/core"
import { Session } from "@noema/session"
import { Effect, Stream } from "effect"
import {
  type ContextItem,
  type ContextPriority,
  type Decisions,
  decisionMetadataKey,
  hasDecisions,
  priorities
} from "../ContextItem.js"

export type RefusalReason = "not-waiting" | "already-decided" | "superseded"

export interface Refusal {
  readonly toolCallId: string
  readonly reason: RefusalReason
}

/** What a decision arriving now is checked against. */
export interface Arrival {
  /** The calls the session has waiting for approval. */
  readonly waiting: ReadonlySet<string>
  /** The calls an item already queued (waiting, or being applied) decides. */
  readonly decided: ReadonlySet<string>
  /** A turn with new input runs: it answers every waiting call as superseded. */
  readonly superseding: boolean
  /** The priorities of the items of messages waiting in the bucket. */
  readonly messagesWaiting: ReadonlyArray<ContextPriority>
}

const rank = (priority: ContextPriority): number => priorities.indexOf(priority)

/** The calls the items decide. */
export const decidedCalls = (items: ReadonlyArray<ContextItem>): Set<string> =>
  new Set(items.flatMap((item) => Object.keys(item.decisions ?? {})))

/**
 * Why a trigger's items cannot be taken, if they cannot: the first decision
 * that cannot apply. A message of the same trigger counts as waiting ahead of
 * a decision it goes before.
 */
export const refusal = (items: ReadonlyArray<ContextItem>, arrival: Arrival): Refusal | undefined => {
  const decided = new Set(arrival.decided)
  for (const item of items) {
    if (!hasDecisions(item)) continue
    const messagesAhead =
      arrival.messagesWaiting.some((priority) => rank(priority) <= rank(item.priority)) ||
      items.some(
        (other) =>
          other.messages.length > 0 &&
          (rank(other.priority) < rank(item.priority) ||
            (other.priority === item.priority && items.indexOf(other) < items.indexOf(item)))
      )
    for (const toolCallId of Object.keys(item.decisions ?? {})) {
      if (decided.has(toolCallId)) return { toolCallId, reason: "already-decided" }
      if (!arrival.waiting.has(toolCallId)) return { toolCallId, reason: "not-waiting" }
      if (arrival.superseding || messagesAhead) return { toolCallId, reason: "superseded" }
      decided.add(toolCallId)
    }
  }
  return undefined
}

/** The first call of `item` the session no longer has waiting, if any. */
export const stale = (item: ContextItem, waiting: ReadonlySet<string>): Refusal | undefined => {
  const toolCallId = Object.keys(item.decisions ?? {}).find((id) => !waiting.has(id))
  return toolCallId === undefined ? undefined : { toolCallId, reason: "not-waiting" }
}

/** Every decision the items carry, by tool call id. */
export const merged = (items: ReadonlyArray<ContextItem>): Decisions =>
  Object.assign({}, ...items.map((item) => item.decisions ?? {}))

/** What the session records with a decided call's result: the decision, who made it, and the trigger. */
const recordOf = (item: ContextItem, decision: Approval.Decision): Message.Metadata => ({
  approved: decision.approved,
  ...(!decision.approved && decision.reason !== undefined && { reason: decision.reason }),
  ...(item.trigger !== undefined && { by: item.trigger.source, trigger: item.trigger.id })
})

const recordsOf = (items: ReadonlyArray<ContextItem>): Map<string, Message.Metadata> =>
  new Map(
    items.flatMap((item) =>
      Object.entries(item.decisions ?? {}).map(([id, decision]) => [id, recordOf(item, decision)] as const)
    )
  )

const withRecord = (message: Message.ToolMessage, record: Message.Metadata): Message.ToolMessage => ({
  ...message,
  metadata: { ...message.metadata, [decisionMetadataKey]: record }
})

/** `agent`, with each result of a call the items decide carrying the decision's record (see `recordOf`). */
export const recording = <R>(agent: Agent.Agent<R>, items: ReadonlyArray<ContextItem>): Agent.Agent<R> => {
  const records = recordsOf(items)
  const annotate = <M extends Message.Message>(message: M): M => {
    if (message.role !== "tool") return message
    const record = records.get(message.toolCallId)
    return record === undefined ? message : (withRecord(message, record) as M)
  }
  return Agent.make<R>({
    name: agent.name,
    execute: (context, model) =>
      Effect.map(agent.execute(context, model), (messages) => messages.map(annotate)),
    executeStream: (context, model) =>
      Stream.map(agent.executeStream(context, model), (event): Agent.AgentEvent => {
        if (event.type === "message") return { ...event, message: annotate(event.message) }
        if (event.type === "tool-result") return { ...event, message: annotate(event.message) }
        return event
      })
  })
}

/**
 * Records the decisions of `items` whose calls the session still has waiting
 * (their turn ended before storing a result): an approved call as
 * interrupted (it may have started), a rejected one as rejected. Returns what
 * was stored (nothing when every decided call is answered already).
 */
export const settle = (
  session: Session.Session,
  items: ReadonlyArray<ContextItem>
): Effect.Effect<ReadonlyArray<Message.Message>, Session.CommitError> =>
  Effect.suspend(() => {
    const waiting = new Map(session.pendingApprovals().map((call) => [call.id, call] as const))
    const results = items.flatMap((item) =>
      Object.entries(item.decisions ?? {}).flatMap(([id, decision]) => {
        const call = waiting.get(id)
        if (call === undefined) return []
        const result = decision.approved
          ? Session.interruptedCallResult(call)
          : Approval.rejected(call, decision.reason)
        return [withRecord(result, recordOf(item, decision))]
      })
    )
    if (results.length === 0) return Effect.succeed([])
    const transaction = session.begin()
    transaction.extend(results)
    return session.commit(transaction)
  })
