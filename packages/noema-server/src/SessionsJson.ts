/**
 * SessionsJson: the bodies of the sessions API as Schemas, in the panel's one
 * JSON style (snake_case keys), and how a stored session becomes them.
 *
 * A session is shown as `noema sessions show` shows it: turns (a user message
 * and what followed it), each with its usage and, where the models' prices
 * are known, its cost, in the CLI's own words (`Usage.format`,
 * `Usage.formatCost`, so the page and the terminal never disagree). Each
 * message becomes an entry that says what happened rather than leaving the
 * page to guess: a tool call with its arguments and its result, a call that
 * waits for approval or was rejected, an answer or call cut short by an
 * interruption, and the point where older messages were summarised
 * (compaction). System messages other than a summary are configuration and
 * are not entries (the session's system prompt is shown apart).
 */
import { Message } from "@noema/core"
import { ContextItem } from "@noema/runtime"
import { Compaction, Session, type SessionStore, Usage } from "@noema/session"
import { Schema } from "effect"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

// ---------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------

export const SessionSummary = Schema.Struct({
  id: Schema.String,
  title: Schema.NullOr(Schema.String),
  created_at: Schema.String,
  updated_at: Schema.String,
  message_count: Count
}).annotate({ identifier: "SessionSummary" })
export type SessionSummary = typeof SessionSummary.Type

export const SessionPage = Schema.Struct({
  /** Sessions matching the search, in all (the page holds at most `limit` of them). */
  total: Count,
  offset: Count,
  limit: Count,
  sessions: Schema.Array(SessionSummary)
}).annotate({ identifier: "SessionPage" })
export type SessionPage = typeof SessionPage.Type

// ---------------------------------------------------------------------------
// A session's history
// ---------------------------------------------------------------------------

const ToolCall = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  /** The arguments as the model sent them (JSON text, shown as is). */
  arguments: Schema.String,
  /** pending: it waits for a person's decision (answered in `noema chat` or the page). */
  approval: Schema.Literals(["none", "pending"])
})

/** A person's decision on a call that needed approval. */
const Decision = Schema.Struct({
  approved: Schema.Boolean,
  reason: Schema.NullOr(Schema.String),
  by: Schema.NullOr(Schema.String)
})

export const Entry = Schema.Union([
  Schema.Struct({ kind: Schema.Literal("user"), text: Schema.String }),
  Schema.Struct({
    kind: Schema.Literal("assistant"),
    text: Schema.String,
    refusal: Schema.NullOr(Schema.String),
    /** The answer was cut short (Ctrl-C, interrupt): this is what had streamed. */
    interrupted: Schema.Boolean,
    model: Schema.NullOr(Schema.String),
    usage: Schema.NullOr(Schema.String),
    tool_calls: Schema.Array(ToolCall)
  }),
  Schema.Struct({
    kind: Schema.Literal("tool"),
    tool_call_id: Schema.String,
    name: Schema.String,
    arguments: Schema.String,
    content: Schema.String,
    is_error: Schema.Boolean,
    /** The call was interrupted after it started: it may have partially run. */
    interrupted: Schema.Boolean,
    /** A person's decision on the call, as the runtime recorded it with the result (none: it needed none). */
    approval: Schema.NullOr(Decision)
  }),
  Schema.Struct({ kind: Schema.Literal("compaction"), replaced: Count, line: Schema.String })
]).annotate({ identifier: "SessionEntry" })
export type Entry = typeof Entry.Type

export const Turn = Schema.Struct({
  number: Count,
  /** The seq of the turn's first message: its trace is `GET /api/traces?session=&seq=`. */
  first_seq: Count,
  /** `Usage.format`: tokens in and out, model calls. */
  usage: Schema.String,
  input_tokens: Count,
  output_tokens: Count,
  /** `Usage.formatCost`, when the models' prices are known. */
  cost: Schema.NullOr(Schema.String),
  entries: Schema.Array(Entry)
}).annotate({ identifier: "SessionTurn" })
export type Turn = typeof Turn.Type

export const SessionDetail = Schema.Struct({
  session: SessionSummary,
  system_prompt: Schema.NullOr(Schema.String),
  usage: Schema.String,
  cost: Schema.NullOr(Schema.String),
  turn_count: Count,
  /** The first turn shown (1-based); turns come a page at a time (`?from_turn=`). */
  from_turn: Count,
  turns: Schema.Array(Turn)
}).annotate({ identifier: "SessionDetail" })
export type SessionDetail = typeof SessionDetail.Type

// ---------------------------------------------------------------------------
// From the store's models
// ---------------------------------------------------------------------------

const iso = (epochMillis: number) => new Date(epochMillis).toISOString()

export const summaryOf = (info: SessionStore.SessionInfo): SessionSummary => ({
  id: info.id,
  title: info.title ?? null,
  created_at: iso(info.createdAt),
  updated_at: iso(info.updatedAt),
  message_count: info.messageCount
})

/** The ids of the calls the last turn left waiting for a decision (`Session.awaitingApprovalKey`). */
const awaitingOf = (info: SessionStore.SessionInfo): ReadonlySet<string> => {
  const value = info.metadata[Session.awaitingApprovalKey]
  return new Set(Array.isArray(value) ? value.filter((id): id is string => typeof id === "string") : [])
}

/** The decision the runtime recorded with a call's result (`ContextItem.decisionMetadataKey`), if any. */
const decisionOf = (message: Message.ToolMessage): typeof Decision.Type | null => {
  const record = message.metadata?.[ContextItem.decisionMetadataKey]
  if (typeof record !== "object" || record === null || !("approved" in record)) return null
  const text = (value: unknown) => (typeof value === "string" ? value : null)
  return { approved: record.approved === true, reason: text(record.reason), by: text(record.by) }
}

const interrupted = (message: Message.Message) => message.metadata?.interrupted === true

/** A turn's messages as entries (see the module's comment). */
const entriesOf = (
  messages: ReadonlyArray<Message.Message>,
  awaiting: ReadonlySet<string>,
  calls: Map<string, Message.ToolCall>
): Array<Entry> => {
  const entries: Array<Entry> = []
  for (const message of messages) {
    switch (message.role) {
      case "system": {
        const summary = Compaction.summaryOf(message)
        if (summary !== undefined)
          entries.push({
            kind: "compaction",
            replaced: summary.replaced,
            line: `here the ${summary.replaced} messages before were summarised for the model`
          })
        break
      }
      case "user":
        entries.push({ kind: "user", text: Message.text(message) })
        break
      case "assistant":
        for (const call of message.toolCalls ?? []) calls.set(call.id, call)
        entries.push({
          kind: "assistant",
          text: Message.text(message),
          refusal: message.refusal ?? null,
          interrupted: interrupted(message),
          model: message.model ?? null,
          usage: message.usage === undefined ? null : Usage.format(Usage.ofMessages([message])),
          tool_calls: (message.toolCalls ?? []).map((call) => ({
            id: call.id,
            name: call.name,
            arguments: call.arguments,
            approval: awaiting.has(call.id) ? "pending" : "none"
          }))
        })
        break
      case "tool":
        entries.push({
          kind: "tool",
          tool_call_id: message.toolCallId,
          name: message.name,
          arguments: calls.get(message.toolCallId)?.arguments ?? "",
          content: message.content,
          is_error: message.isError,
          interrupted: interrupted(message),
          approval: decisionOf(message)
        })
        break
    }
  }
  return entries
}

export interface DetailOptions {
  readonly prices?: Usage.Prices | undefined
  /** The first turn shown, 1-based. Default 1. */
  readonly fromTurn?: number
  /** Most turns shown. Default 50. */
  readonly turns?: number
}

/** A stored session as the page shows it: its turns from `fromTurn` on, a page of them. */
export const detailOf = (stored: SessionStore.StoredSession, options: DetailOptions = {}): SessionDetail => {
  const { info, messages } = stored
  const { prices } = options
  const all = Usage.byTurn(messages)
  const from = Math.max(1, Math.min(options.fromTurn ?? 1, Math.max(1, all.length)))
  const awaiting = awaitingOf(info)
  // Calls are known from the turn that made them, which may be before the page shown.
  const calls = new Map<string, Message.ToolCall>()
  for (const turn of all.slice(0, from - 1))
    for (const message of turn.messages)
      if (message.role === "assistant") for (const call of message.toolCalls ?? []) calls.set(call.id, call)
  const prompt = info.metadata[Session.systemPromptKey]
  let seq = 0
  const firstSeqs = all.map((turn) => {
    const first = seq
    seq += turn.messages.length
    return first
  })
  return {
    session: summaryOf(info),
    system_prompt: typeof prompt === "string" ? prompt : null,
    usage: Usage.format(Usage.ofMessages(messages)),
    cost: prices === undefined ? null : Usage.formatCost(Usage.cost(messages, prices)),
    turn_count: all.length,
    from_turn: from,
    turns: all.slice(from - 1, from - 1 + (options.turns ?? 50)).map((turn) => ({
      number: turn.number,
      first_seq: firstSeqs[turn.number - 1] ?? 0,
      usage: Usage.format(turn.usage),
      input_tokens: turn.usage.inputTokens,
      output_tokens: turn.usage.outputTokens,
      cost: prices === undefined ? null : Usage.formatCost(Usage.cost(turn.messages, prices)),
      entries: entriesOf(turn.messages, awaiting, calls)
    }))
  }
}

/** Whether `info` matches a search: the text in its title, or the start of its id (as the CLI takes ids), case aside. */
export const matches = (info: SessionStore.SessionInfo, search: string): boolean => {
  const text = search.trim().toLowerCase()
  return (info.title ?? "").toLowerCase().includes(text) || info.id.toLowerCase().startsWith(text)
}
