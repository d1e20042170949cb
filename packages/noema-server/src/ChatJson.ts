/**
 * ChatJson: what the Chat view's API sends and takes, in the runs' JSON style
 * (snake_case): the frames of a chat's live stream (`GET /api/chat/:id/events`),
 * made from the session's runtime events (`@noema/runtime`), and the requests
 * that drive it (a message, a cancel, decisions on waiting tool calls).
 *
 * A frame says what happened, not how to draw it: the page draws the stored
 * turns from the Sessions API (SessionsJson, as `noema sessions show` shows
 * them) and the turn under way from these frames. A tool result is cut at
 * `maxResultChars` here (the whole of it is in the stored turn), so one frame
 * stays small and a client's bounded buffer means a bounded number of frames.
 */
import type { Message } from "@noema/core"
import { Schema } from "effect"

/** The longest tool result a frame carries; the stored turn has all of it. */
export const maxResultChars = 4000

export const Call = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  /** The arguments as the model sent them (JSON text). */
  arguments: Schema.String
})
export type Call = typeof Call.Type

export const Queued = Schema.Struct({ id: Schema.String, text: Schema.String })

/** How a turn ended: stored whole, stored as far as it went (interrupted), nothing stored (cancelled, failed). */
export const Outcome = Schema.Literals(["completed", "interrupted", "cancelled", "failed"])

export const Frame = Schema.Union([
  /** First, to a client that joins: whether a turn runs, what waits, and which calls wait for a decision. */
  Schema.Struct({
    type: Schema.Literal("state"),
    session_id: Schema.String,
    running: Schema.Boolean,
    queued: Schema.Array(Queued),
    pending: Schema.Array(Call)
  }),
  Schema.Struct({
    type: Schema.Literal("turn-started"),
    cycle: Schema.Number,
    /** The triggers of the messages it starts with (queued ones leave the queue). */
    ids: Schema.Array(Schema.String),
    /** The messages the turn starts with (queued ones among them). */
    messages: Schema.Array(Schema.String)
  }),
  Schema.Struct({ type: Schema.Literal("text"), delta: Schema.String }),
  Schema.Struct({ type: Schema.Literal("tool-call"), call: Call }),
  Schema.Struct({ type: Schema.Literal("approval-request"), call: Call }),
  Schema.Struct({
    type: Schema.Literal("tool-result"),
    id: Schema.String,
    name: Schema.String,
    content: Schema.String,
    is_error: Schema.Boolean,
    truncated: Schema.Boolean
  }),
  Schema.Struct({ type: Schema.Literal("compacted"), line: Schema.String }),
  /** A message sent while a turn runs: it waits, and joins the turn at its next model call or starts the next. */
  Schema.Struct({ type: Schema.Literal("queued"), id: Schema.String, text: Schema.String }),
  /** Queued messages that joined the running turn. */
  Schema.Struct({
    type: Schema.Literal("injected"),
    ids: Schema.Array(Schema.String),
    messages: Schema.Array(Schema.String)
  }),
  Schema.Struct({
    type: Schema.Literal("turn-ended"),
    cycle: Schema.Number,
    outcome: Outcome,
    /** Why it failed, or what became of an interrupted turn. */
    message: Schema.NullOr(Schema.String)
  }),
  Schema.Struct({ type: Schema.Literal("decision-refused"), message: Schema.String }),
  /** No turn runs; `pending` are the calls waiting for a decision. */
  Schema.Struct({ type: Schema.Literal("idle"), pending: Schema.Array(Call) }),
  /** The client fell too far behind: it reads the session again and comes back. */
  Schema.Struct({ type: Schema.Literal("resync") })
])
export type Frame = typeof Frame.Type

export const callOf = (call: Message.ToolCall): Call => ({
  id: call.id,
  name: call.name,
  arguments: call.arguments
})

/** A tool result as a frame carries it: cut at `maxResultChars`. */
export const resultOf = (message: Message.ToolMessage): Frame => ({
  type: "tool-result",
  id: message.toolCallId,
  name: message.name,
  content:
    message.content.length > maxResultChars ? message.content.slice(0, maxResultChars) : message.content,
  is_error: message.isError === true,
  truncated: message.content.length > maxResultChars
})

// ---------------------------------------------------------------------------
// Requests and answers
// ---------------------------------------------------------------------------

export const ChatInfo = Schema.Struct({
  /** What the page talks to: the model and its tools, as `noema chat`'s banner says. */
  agent: Schema.String,
  /** Most messages that may wait while a turn runs, per session. */
  max_queued: Schema.Number
})

export const NewChat = Schema.Struct({ session_id: Schema.String })

export const Sent = Schema.Struct({
  id: Schema.String,
  /** A turn was running: the message waits (see the `queued` frame). */
  queued: Schema.Boolean
})

export const Cancelled = Schema.Struct({ running: Schema.Boolean })

export const Decided = Schema.Struct({ decided: Schema.Array(Schema.String) })
