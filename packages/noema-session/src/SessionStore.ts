/**
 * SessionStore: where sessions and their committed messages are kept.
 *
 * The contract every backend (memory, SQLite, later Postgres) implements and
 * the conformance suite checks. A session is an append-only list of messages
 * plus a little information about it (title, times, metadata). Appends are
 * atomic and use optimistic concurrency: a handle says how many messages it
 * loaded, and the append succeeds only if the store still holds exactly that
 * many, so two handles can never interleave their turns or lose one.
 */
import { Message } from "@noema/core"
import { DatabaseError } from "@noema/sql"
import { Context, type Effect, Schema } from "effect"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

export type Metadata = Message.Metadata

export interface SessionInfo {
  readonly id: string
  /** Set explicitly, or taken from the first user message when the first turn is stored. */
  readonly title?: string
  /** Epoch milliseconds. */
  readonly createdAt: number
  /** Epoch milliseconds of the last append or metadata change. */
  readonly updatedAt: number
  readonly messageCount: number
  readonly metadata: Metadata
}

export interface StoredSession {
  readonly info: SessionInfo
  /** The committed messages in order; a fresh array the caller owns. */
  readonly messages: Array<Message.Message>
}

export interface CreateOptions {
  /** Defaults to a random UUID. */
  readonly id?: string
  readonly title?: string
  readonly metadata?: Metadata
  /**
   * The session's first messages, stored with it in one step: the session
   * exists with them or not at all (see `Session.draft`). The title comes
   * from them as from an `append`.
   */
  readonly messages?: ReadonlyArray<Message.Message>
  /**
   * The session's own times (epoch milliseconds), for a session copied from another store
   * (`SessionArchive.importSession`): it keeps when it was made and last changed, not when
   * it was copied. Default: now.
   */
  readonly createdAt?: number
  readonly updatedAt?: number
}

export interface MetadataUpdate {
  readonly title?: string
  /**
   * Merged into the stored metadata key by key; a key set to `null` is removed.
   * Merging inside the store keeps two handles from overwriting each other's keys.
   */
  readonly metadata?: { readonly [key: string]: Message.Metadata[string] | null }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export class SessionNotFoundError extends Schema.TaggedError<SessionNotFoundError>()("SessionNotFoundError", {
  sessionId: Schema.String
}) {
  override get message(): string {
    return `No session with id "${this.sessionId}"`
  }
}

export class SessionAlreadyExistsError extends Schema.TaggedError<SessionAlreadyExistsError>()(
  "SessionAlreadyExistsError",
  { sessionId: Schema.String }
) {
  override get message(): string {
    return `A session with id "${this.sessionId}" already exists`
  }
}

export class SessionConflictError extends Schema.TaggedError<SessionConflictError>()("SessionConflictError", {
  sessionId: Schema.String,
  /** How many messages the committing handle had loaded. */
  expectedMessageCount: Schema.Number,
  /** How many the store held when the commit was attempted. */
  actualMessageCount: Schema.Number
}) {
  override get message(): string {
    return (
      `Session "${this.sessionId}" was changed by someone else: this handle expected ` +
      `${this.expectedMessageCount} committed messages but found ${this.actualMessageCount}; ` +
      `nothing was committed (reload the session and run the turn again)`
    )
  }
}

/**
 * The database's own failures are @noema/sql's reasons (one family for every
 * store); the old names stay as aliases, so `SessionStore.CorruptDatabase` is
 * `DatabaseError.Corrupt`.
 */
export const {
  Constraint,
  Connection,
  Corrupt,
  Foreign,
  Io,
  Locked,
  NeedsMigration,
  ReadOnly,
  SchemaTooNew
} = DatabaseError
export type Constraint = DatabaseError.Constraint
export type Connection = DatabaseError.Connection
export type Corrupt = DatabaseError.Corrupt
export type Foreign = DatabaseError.Foreign
export type Io = DatabaseError.Io
export type Locked = DatabaseError.Locked
export type NeedsMigration = DatabaseError.NeedsMigration
export type ReadOnly = DatabaseError.ReadOnly
export type SchemaTooNew = DatabaseError.SchemaTooNew
export const CorruptDatabase = DatabaseError.Corrupt
export type CorruptDatabase = DatabaseError.Corrupt
export const ForeignDatabase = DatabaseError.Foreign
export type ForeignDatabase = DatabaseError.Foreign
export const IoFailure = DatabaseError.Io
export type IoFailure = DatabaseError.Io

/** A message that does not have the shape of a message was refused before it reached storage. */
export class InvalidMessage extends Schema.TaggedClass<InvalidMessage>()("InvalidMessage", {
  location: Schema.String,
  sessionId: Schema.String,
  index: Schema.Number,
  detail: Schema.String
}) {
  get message(): string {
    return `${this.location}: refused to store message ${this.index} of session "${this.sessionId}" (${this.detail})`
  }
  get isRetryable(): boolean {
    return false
  }
}

export const StoreErrorReason = Schema.Union([...DatabaseError.Reason.members, InvalidMessage])
export type StoreErrorReason = typeof StoreErrorReason.Type

/**
 * The store's own failure: @noema/sql's `DatabaseError` family (its message and retry are the
 * reason's, `DatabaseError.withReason`) with one reason of the contract's, `InvalidMessage`.
 */
export class StoreError extends DatabaseError.withReason(
  Schema.TaggedError<StoreError>()("StoreError", { reason: StoreErrorReason })
) {}

/** A database failure as the store's error: the same reason (the one mapping). */
export const fromDatabaseError = (error: DatabaseError.DatabaseError): StoreError =>
  new StoreError({ reason: error.reason })

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------

export interface Service {
  /** Where the sessions live, for messages to people: a file path, or "memory". */
  readonly location: string
  readonly create: (
    options?: CreateOptions
  ) => Effect.Effect<SessionInfo, SessionAlreadyExistsError | StoreError>
  readonly load: (id: string) => Effect.Effect<StoredSession, SessionNotFoundError | StoreError>
  /**
   * Appends all of `messages` or none of them, only if the session still holds
   * `expectedMessageCount` messages. Sets the title from the first user message
   * when the session has none.
   */
  readonly append: (
    id: string,
    expectedMessageCount: number,
    messages: ReadonlyArray<Message.Message>
  ) => Effect.Effect<SessionInfo, SessionNotFoundError | SessionConflictError | StoreError>
  /** Every session, most recently changed first. */
  readonly list: () => Effect.Effect<ReadonlyArray<SessionInfo>, StoreError>
  readonly info: (id: string) => Effect.Effect<SessionInfo, SessionNotFoundError | StoreError>
  readonly delete: (id: string) => Effect.Effect<void, SessionNotFoundError | StoreError>
  readonly updateMetadata: (
    id: string,
    update: MetadataUpdate
  ) => Effect.Effect<SessionInfo, SessionNotFoundError | StoreError>
}

export class SessionStore extends Context.Service<SessionStore, Service>()("@noema/session/SessionStore") {}

// ---------------------------------------------------------------------------
// Helpers shared by the backends
// ---------------------------------------------------------------------------

const titleLength = 60

/** A title from a message's text: one line, at most 60 characters, cut at a word. */
export const titleFrom = (text: string): string | undefined => {
  const line = text.replace(/\s+/g, " ").trim()
  if (line.length === 0) return undefined
  if (line.length <= titleLength) return line
  const cut = line.slice(0, titleLength - 1)
  const lastSpace = cut.lastIndexOf(" ")
  // Cutting at a word only when it keeps most of the text; one long word is cut mid-way.
  return `${(lastSpace > titleLength / 2 ? cut.slice(0, lastSpace) : cut).trimEnd()}…`
}

/** The title a session gets from a turn's messages: its first user message, shortened. */
export const defaultTitle = (messages: Iterable<Message.Message>): string | undefined => {
  for (const message of messages) {
    if (message.role === "user") {
      const title = titleFrom(Message.text(message))
      if (title !== undefined) return title
    }
  }
  return undefined
}

/** `current` with `update` merged in (`null` removes a key). */
export const mergeMetadata = (current: Metadata, update: MetadataUpdate["metadata"]): Metadata => {
  if (update === undefined) return current
  const merged: Record<string, Message.Metadata[string]> = { ...current }
  for (const [key, value] of Object.entries(update)) {
    if (value === null) delete merged[key]
    else merged[key] = value
  }
  return merged
}
