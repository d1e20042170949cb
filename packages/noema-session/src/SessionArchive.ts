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
 * alone and reported. Nothing is lost in a round trip: the session's id, title,
 * `createdAt`, `updatedAt` and metadata, and every message with its own id and
 * timestamps, are kept, so an export of the imported store is the export it came
 * from, byte for byte.
 */
import { Message } from "@noema/core"
import { Effect, Exit, Schema, Stream } from "effect"
import {
  SessionAlreadyExistsError,
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
export const encodeLine = (stored: StoredSession): string => {
  const { id, title, createdAt, updatedAt, messageCount, metadata } = stored.info
  // The fields in one order, whichever store the session comes from: the same session is the same line.
  const session = { id, ...(title !== undefined && { title }), createdAt, updatedAt, messageCount, metadata }
  return JSON.stringify({ format, version, session, messages: stored.messages.map(Message.encode) })
}

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
 * Creates the session as it was (id, title, times, metadata) with all its messages,
 * in one step of the store: it is there whole or not at all. A session of that id
 * already in the store is left untouched (`AlreadyExists`).
 */
export const importSession = (
  stored: StoredSession
): Effect.Effect<ImportOutcome, StoreError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const { info, messages } = stored
    const created = yield* store
      .create({
        id: info.id,
        metadata: info.metadata,
        createdAt: info.createdAt,
        updatedAt: info.updatedAt,
        messages,
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
    return { _tag: "Imported", id: info.id, messages: messages.length } as const
  })
