/**
 * TurnRunner: one turn of a session, as `noema ask` runs it. (`noema chat`
 * runs its turns, and goes on with those that stop for approval, on the
 * runtime: `@noema/runtime`.)
 *
 * It streams the turn through a renderer and answers with what happened, as
 * the session reported it: the turn was stored (`Committed`, with the stored
 * messages, from `turnStream`'s `committed` event), it failed with a typed
 * error (`Failed`: nothing was stored), it hit a defect (`Died`: nothing was
 * stored), or it was cancelled before the commit (`Cancelled`: nothing was
 * stored). Nobody infers the outcome from the history's length.
 *
 * Cancelling goes through an `AbortSignal` (Ctrl-C), handed to the session as
 * `TurnOptions.signal`: it stops the agent and its model request, but once the
 * answer is complete and being saved it no longer stops anything, so a Ctrl-C
 * during the commit yields `Committed` with `cancelRequested: true`. Cancel
 * through the signal, not by interrupting the runner's fiber: an interruption
 * landing during the commit stores the turn too, but no outcome reaches anyone.
 */
import type { Agent, ChatModel, Message } from "@noema/core"
import type { Session } from "@noema/session"
import { Cause, Effect, Exit, Result, Stream } from "effect"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

/** Draws a turn's agent events (the CLI's `TurnRenderer` is one). */
export interface Renderer {
  /** Before the first event. */
  start(): void
  event(event: Agent.AgentEvent): void
  /** Older turns were summarised before this one (`TurnOptions.compaction`). */
  compacted?(event: Session.Compacted): void
  /** After the last event, however the turn ended. */
  end(): void
}

/** The turn is stored: `messages` are exactly what the store holds for it. */
export interface Committed {
  readonly _tag: "Committed"
  readonly messages: ReadonlyArray<Message.Message>
  /** The signal was aborted, too late to stop the turn: it landed while the turn was being saved. */
  readonly cancelRequested: boolean
}

/** The turn failed with a typed error (the agent's, or the commit's); nothing of it is stored. */
export interface Failed {
  readonly _tag: "Failed"
  readonly error: Session.TurnError
}

/** The turn hit a defect (a bug, not an expected failure); nothing of it is stored. */
export interface Died {
  readonly _tag: "Died"
  readonly defect: unknown
}

/** The turn was cancelled (or interrupted) before its commit; nothing of it is stored. */
export interface Cancelled {
  readonly _tag: "Cancelled"
}

export type Outcome = Committed | Failed | Died | Cancelled

export interface Options<R> {
  readonly session: Session.Session
  readonly agent: Agent.Agent<R>
  readonly model: ChatModel.Service
  /** The user's message (a string is a user message). */
  readonly input: string | Message.Message
  readonly renderer?: Renderer
  /** Aborting it cancels the turn unless it is already being saved. */
  readonly signal?: AbortSignal
  /** Compact the session first when it passes this budget (see `Session.TurnOptions.compaction`). */
  readonly compaction?: Session.TurnOptions["compaction"]
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/** Runs one turn; never fails: every ending is an `Outcome`. */
export const run = <R>(options: Options<R>): Effect.Effect<Outcome, never, R> =>
  Effect.suspend(() => {
    const { renderer, signal, compaction } = options
    let committed: ReadonlyArray<Message.Message> | undefined
    const turnOptions = {
      ...(signal !== undefined && { signal }),
      ...(compaction !== undefined && { compaction })
    }
    const events = options.session.turnStream(options.agent, options.model, options.input, turnOptions)
    renderer?.start()
    return Stream.runForEach(events, (event) =>
      Effect.sync(() => {
        if (event.type === "committed") committed = event.messages
        else if (event.type === "compacted") renderer?.compacted?.(event)
        else renderer?.event(event)
      })
    ).pipe(
      Effect.ensuring(Effect.sync(() => renderer?.end())),
      Effect.exit,
      Effect.map((exit): Outcome => {
        // The session said the turn is stored: that holds whatever happened after.
        if (committed !== undefined) {
          return { _tag: "Committed", messages: committed, cancelRequested: signal?.aborted === true }
        }
        if (Exit.isSuccess(exit)) {
          return { _tag: "Died", defect: new Error("the turn's stream ended without a committed event") }
        }
        return fromCause(exit.cause)
      })
    )
  })

const fromCause = (cause: Cause.Cause<Session.TurnError>): Outcome => {
  const error = Cause.findError(cause)
  if (Result.isSuccess(error)) return { _tag: "Failed", error: error.success }
  if (Cause.hasInterruptsOnly(cause)) return { _tag: "Cancelled" }
  return { _tag: "Died", defect: Cause.squash(cause) }
}
