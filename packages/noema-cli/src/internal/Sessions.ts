/**
 * Sessions: what the commands share about saved sessions: the default system
 * prompt (the session is its one home), and sessions by id or unique prefix.
 */
import { type Session, SessionStore } from "@noema/session"
import { Effect } from "effect"
import * as IdPrefix from "./IdPrefix.js"

export const defaultSystemPrompt =
  "You are noema, a helpful assistant in a terminal chat. Answer concisely; plain text reads best in a terminal. " +
  "Use the tools when they help: calculator for any arithmetic, current_time for dates and times, " +
  "read_file to read text files in the user's current directory."
/**
 * The session is the one home of the system prompt; the CLI's default becomes a
 * session's own prompt when the CLI creates it, and, for a session that has none
 * (one noema 0.1 made, which relied on the default being added to every turn),
 * before the CLI runs a turn on it.
 */
export const adoptDefaultSystemPrompt = (
  session: Session.Session
): Effect.Effect<void, SessionStore.SessionNotFoundError | SessionStore.StoreError> =>
  session.systemPrompt !== undefined || session.context().at(0)?.role === "system"
    ? Effect.void
    : Effect.asVoid(session.setSystemPrompt(defaultSystemPrompt))

/** The full id of the session `idOrPrefix` names: an exact id, or a unique prefix of one (`IdPrefix`). */
export const resolveSessionId = (idOrPrefix: string) =>
  Effect.gen(function* () {
    const store = yield* SessionStore.SessionStore
    const sessions = yield* store.list()
    return yield* IdPrefix.resolve(
      "session",
      idOrPrefix,
      sessions.map((info) => info.id),
      (sessionId) => new SessionStore.SessionNotFoundError({ sessionId })
    )
  })

export const deleteSession = (id: string) =>
  Effect.flatMap(Effect.service(SessionStore.SessionStore), (store) => store.delete(id))

export const listSessions = Effect.flatMap(Effect.service(SessionStore.SessionStore), (store) => store.list())

/** The first characters of a session id: enough to name it in `/resume` and `--session`. */
export const shortId = (id: string): string => id.slice(0, 8)
