/**
 * SessionArchive: sessions as JSON lines, to copy them between stores.
 *
 * One line per session, the same object `Session.exportJson` writes (there
 * pretty-printed): `{"format":"noema-session","version":1,"session":{...info},
 * "messages":[...]}`. Each line stands alone, so a bad line spoils only its
 * own session and names itself by number. Export and import use only the
 * `SessionStore` contract, so they work from and to any backend (memory,
 * SQLite, PostgreSQL): this is how sessions move from SQLite to PostgreSQL.
 *
 * Import never merges: a session whose id the target already holds is left
 * alone and reported. What the contract cannot carry over are the session's
 * own `createdAt` / `updatedAt` (the target stamps the import time); every
 * message, with its own id and timestamps, the title and the metadata are kept.
 */
import { Message } from "@noema/core"
import { Effect, Exit, Schema, Stream } from "effect"
import {
  SessionAlreadyExistsError,
  type SessionConflictError,
  SessionNotFoundError,
  SessionStore,
  type StoredSession,
  type StoreError
} from "./SessionStore.js"

export const format = "noema-session"
export const version = 1

/** A line that is not a session this version can read; `line` counts from 1. */
export class ArchiveLineError extends Schema.TaggedError<ArchiveLineError>()("ArchiveLineError", {
  line: Schema.Number,
  detail: Schema.String
}) {
  override get message(): string {
    return `line ${this.line}: ${this.detail}`
  }
}

/**
 * One session as one line of JSON (no trailing newline). Messages go through core's Schema, so
 * the same session gives the same bytes whichever backend it was read from (a store may keep a
 * message's keys in the order they were built in).
 */
export const encodeLine = (stored: StoredSession): string =>
  JSON.stringify({ format, version, session: stored.info, messages: stored.messages.map(Message.encode) })

const Info = Schema.Struct({
  id: Schema.NonEmptyString,
  title: Schema.optionalKey(Schema.String),
  createdAt: Schema.Number,
  updatedAt: Schema.Number,
  messageCount: Schema.Number,
  metadata: Message.Metadata
})

const decodeInfo = Schema.decodeUnknownExit(Info)
const decodeMessage = Schema.decodeUnknownExit(Message.Message)

const isObject = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A schema failure in one line of text. */
const oneLine = (cause: unknown): string => {
  const error = cause instanceof Error ? cause : undefined
  return (error?.message ?? String(cause)).replace(/\s+/g, " ").trim()
}

const problemOf = (exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isSuccess(exit)
    ? undefined
    : oneLine(exit.cause.reasons.map((reason) => ("error" in reason ? reason.error : reason))[0])

/** Reads line `line` of an archive; an `ArchiveLineError` says exactly what is wrong with it. */
export const decodeLine = (text: string, line: number): Effect.Effect<StoredSession, ArchiveLineError> =>
  Effect.suspend(() => {
    const fail = (detail: string) => Effect.fail(new ArchiveLineError({ line, detail }))
    let value: unknown
    try {
      value = JSON.parse(text)
    } catch (error) {
      return fail(`not valid JSON (${oneLine(error)})`)
    }
    if (!isObject(value) || value.format !== format) {
      return fail(`not a noema session (expected an object with "format": "${format}")`)
    }
    if (typeof value.version !== "number" || value.version > version) {
      return fail(`session format version ${String(value.version)} is not one this noema reads (${version})`)
    }
    const info = decodeInfo(value.session)
    if (Exit.isFailure(info)) return fail(`"session": ${problemOf(info)}`)
    if (!Array.isArray(value.messages)) return fail(`"messages" must be an array`)
    const messages: Array<Message.Message> = []
    for (let index = 0; index < value.messages.length; index++) {
      const message = decodeMessage(value.messages[index])
      if (Exit.isFailure(message)) return fail(`message ${index}: ${problemOf(message)}`)
      messages.push(message.value)
    }
    if (info.value.messageCount !== messages.length) {
      return fail(
        `session "${info.value.id}" says it has ${info.value.messageCount} messages but the line holds ${messages.length}`
      )
    }
    return Effect.succeed({ info: info.value, messages })
  })

/**
 * Every session in the store, one line each, oldest activity first (so an
 * import reproduces the order of `list`). A session deleted while the export
 * runs is left out.
 */
export const exportAll: Stream.Stream<string, StoreError, SessionStore> = Stream.unwrap(
  Effect.map(Effect.service(SessionStore), (store) =>
    Stream.fromIterableEffect(Effect.map(store.list(), (sessions) => sessions.slice().reverse())).pipe(
      Stream.mapEffect((info) =>
        store.load(info.id).pipe(
          Effect.map(encodeLine),
          Effect.catchIf(
            (error) => error instanceof SessionNotFoundError,
            () => Effect.succeed(undefined)
          )
        )
      ),
      Stream.filter((line): line is string => line !== undefined)
    )
  )
)

export type ImportOutcome =
  | { readonly _tag: "Imported"; readonly id: string; readonly messages: number }
  | { readonly _tag: "AlreadyExists"; readonly id: string }

/**
 * Creates the session with its id, title and metadata, then appends all its
 * messages in one append. A session of that id already in the store is left
 * untouched (`AlreadyExists`). If the append fails, the new session is
 * deleted again, so a failed import leaves nothing of that session behind.
 */
export const importSession = (
  stored: StoredSession
): Effect.Effect<ImportOutcome, StoreError | SessionConflictError | SessionNotFoundError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const { info, messages } = stored
    const created = yield* store
      .create({
        id: info.id,
        metadata: info.metadata,
        ...(info.title !== undefined && { title: info.title })
      })
      .pipe(
        Effect.as(true),
        Effect.catchIf(
          (error) => error instanceof SessionAlreadyExistsError,
          () => Effect.succeed(false)
        )
      )
    if (!created) return { _tag: "AlreadyExists", id: info.id } as const
    if (messages.length > 0) {
      yield* store.append(info.id, 0, messages).pipe(
        Effect.onError(() =>
          store.delete(info.id).pipe(
            Effect.catchIf(
              (error) => error instanceof SessionNotFoundError,
              () => Effect.void
            ),
            Effect.ignore
          )
        )
      )
    }
    return { _tag: "Imported", id: info.id, messages: messages.length } as const
  })
