/**
 * DatabaseError: the one error family of noema's SQL stores.
 *
 * Every store (sessions, runs, resources, vectors, routines) reports a failure
 * of its database as one `DatabaseError` whose `reason` says what happened and
 * whether trying again may help (`isRetryable`: a lock held by someone else, a
 * connection that dropped). `fromSqlError` is the one mapping from effect's
 * `SqlError` and the `Migrator`'s `MigrationError`: it decides from the error
 * classes effect's drivers classify into, and from SQLite's result code
 * (`errcode`) or PostgreSQL's SQLSTATE (`code`) on the cause, never from the
 * text of a message. Each reason names the database (`location`: a file path,
 * or a URL without its password) and says what was found (`detail`), in one line.
 */
import { Effect, Predicate, Schema } from "effect"
import { Migrator, SqlError } from "effect/sql"

// ---------------------------------------------------------------------------
// Reasons
// ---------------------------------------------------------------------------

const fields = { location: Schema.String, detail: Schema.String }

/** A row broke a constraint (a duplicate key, a missing parent): the data, not the database, is at fault. */
export class Constraint extends Schema.TaggedClass<Constraint>()("Constraint", fields) {
  get message(): string {
    return `${this.location}: refused by a constraint (${this.detail})`
  }
  get isRetryable(): boolean {
    return false
  }
}

/** Another writer held the database (a busy SQLite file, a deadlock or serialisation failure on PostgreSQL). */
export class Locked extends Schema.TaggedClass<Locked>()("Locked", fields) {
  get message(): string {
    return `${this.location} is locked by another process (${this.detail}); try again`
  }
  get isRetryable(): boolean {
    return true
  }
}

/** The database could not be reached or refused who we are (a server down, a wrong password, a file that cannot be opened). */
export class Connection extends Schema.TaggedClass<Connection>()("Connection", fields) {
  get message(): string {
    return `${this.location}: cannot connect (${this.detail})`
  }
  get isRetryable(): boolean {
    return true
  }
}

/** The file is not a readable SQLite database, or its contents are damaged. */
export class Corrupt extends Schema.TaggedClass<Corrupt>()("Corrupt", fields) {
  get message(): string {
    return `${this.location} is corrupt or not a database (${this.detail}); it was left untouched`
  }
  get isRetryable(): boolean {
    return false
  }
}

/** A write reached a database that may only be read (a read-only file, a read-only transaction). */
export class ReadOnly extends Schema.TaggedClass<ReadOnly>()("ReadOnly", fields) {
  get message(): string {
    return `${this.location} can only be read (${this.detail}); nothing was changed`
  }
  get isRetryable(): boolean {
    return false
  }
}

/** A valid database that belongs to some other application. */
export class Foreign extends Schema.TaggedClass<Foreign>()("Foreign", fields) {
  get message(): string {
    return `${this.location} is not a noema database (${this.detail}); it was left untouched`
  }
  get isRetryable(): boolean {
    return false
  }
}

const versions = {
  location: Schema.String,
  /** Which store's schema: "session", "runs", ... */
  schema: Schema.String,
  found: Schema.Number,
  supported: Schema.Number
}

/** Written by a newer noema whose schema this code does not know. */
export class SchemaTooNew extends Schema.TaggedClass<SchemaTooNew>()("SchemaTooNew", versions) {
  get detail(): string {
    return `${this.schema} schema version ${this.found}, this noema knows up to ${this.supported}`
  }
  get message(): string {
    return (
      `${this.location} has ${this.schema} schema version ${this.found}, newer than the ${this.supported} ` +
      `this version of noema understands; upgrade noema to open it`
    )
  }
  get isRetryable(): boolean {
    return false
  }
}

/**
 * The database was opened read-only but needs migrating (written by an earlier
 * noema, or not set up yet), which would write to it: it was left untouched.
 */
export class NeedsMigration extends Schema.TaggedClass<NeedsMigration>()("NeedsMigration", versions) {
  get detail(): string {
    return `${this.schema} schema version ${this.found}, this noema needs ${this.supported}`
  }
  get message(): string {
    return (
      `${this.location} needs migrating to this noema's ${this.schema} schema (version ${this.supported}), ` +
      `which a read-only open does not do; open it once with write access to migrate it`
    )
  }
  get isRetryable(): boolean {
    return false
  }
}

/** Anything else: permissions, a full disk, a missing directory, a statement the database refused. */
export class Io extends Schema.TaggedClass<Io>()("Io", fields) {
  get message(): string {
    return `${this.location}: cannot read or write (${this.detail})`
  }
  get isRetryable(): boolean {
    return false
  }
}

export const Reason = Schema.Union([
  Constraint,
  Locked,
  Connection,
  Corrupt,
  ReadOnly,
  Foreign,
  SchemaTooNew,
  NeedsMigration,
  Io
])
export type Reason = typeof Reason.Type

// ---------------------------------------------------------------------------
// The error
// ---------------------------------------------------------------------------

/** What every reason of the family says: a one-line message, and whether trying again may help. */
export interface ReasonLike {
  readonly message: string
  readonly isRetryable: boolean
}

// biome-ignore lint/suspicious/noExplicitAny: a mixin's base takes whatever its constructor takes
type ErrorWithReason = new (...args: any[]) => Error & { readonly reason: ReasonLike }

/**
 * An error class whose `message` and `isRetryable` are its reason's: `DatabaseError`, and a
 * store's own error over these reasons and some of its own (the session store's `StoreError`),
 * said once here.
 */
export const withReason = <Base extends ErrorWithReason>(base: Base) =>
  class extends base {
    get isRetryable(): boolean {
      return this.reason.isRetryable
    }
    override get message(): string {
      return this.reason.message
    }
  }

export class DatabaseError extends withReason(
  Schema.TaggedError<DatabaseError>()("DatabaseError", { reason: Reason })
) {}

/** `reason` as the error. */
export const make = (reason: Reason): DatabaseError => new DatabaseError({ reason })

export const isDatabaseError = (value: unknown): value is DatabaseError => value instanceof DatabaseError

// ---------------------------------------------------------------------------
// The one mapping
// ---------------------------------------------------------------------------

/** Text on one line, as every reason's `detail` is. */
export const oneLine = (text: string): string => text.replace(/\s*\n\s*/g, "; ").trim()

/** An error's message on one line (what `detail` says of a cause). */
export const describe = (error: unknown): string =>
  oneLine(error instanceof Error ? error.message : String(error))

// SQLite's primary result codes (https://sqlite.org/rescode.html).
const SQLITE_BUSY = 5
const SQLITE_LOCKED = 6
const SQLITE_READONLY = 8
const SQLITE_CORRUPT = 11
const SQLITE_CANTOPEN = 14
const SQLITE_CONSTRAINT = 19
const SQLITE_NOTADB = 26

/** SQLite's primary result code on a driver's cause (node:sqlite's `errcode`). */
const sqliteCode = (cause: unknown): number | undefined =>
  Predicate.hasProperty(cause, "errcode") && Predicate.isNumber(cause.errcode)
    ? cause.errcode & 0xff
    : undefined

/** PostgreSQL's SQLSTATE on a driver's cause (five characters, e.g. "23505"). */
const sqlState = (cause: unknown): string | undefined =>
  Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code) && /^[0-9A-Z]{5}$/.test(cause.code)
    ? cause.code
    : undefined

type ReasonClass = new (props: { readonly location: string; readonly detail: string }) => Reason

/** What the database's own code says, when the driver's class alone does not (corrupt, read-only). */
const fromCode = (cause: unknown): ReasonClass | undefined => {
  switch (sqliteCode(cause)) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Corrupt
    case SQLITE_READONLY:
      return ReadOnly
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Locked
    case SQLITE_CONSTRAINT:
      return Constraint
    case SQLITE_CANTOPEN:
      // A file that cannot be opened (a directory, no permission) stays so: not worth retrying.
      return Io
  }
  const state = sqlState(cause)
  if (state === undefined) return undefined
  if (state === "25006") return ReadOnly
  if (state === "40001" || state === "40P01" || state === "55P03") return Locked
  if (state.startsWith("23")) return Constraint
  if (state.startsWith("08") || state.startsWith("28")) return Connection
  return undefined
}

/** What effect's driver classified the failure as. */
const fromClass = (reason: SqlError.SqlErrorReason): ReasonClass => {
  if (reason instanceof SqlError.UniqueViolation || reason instanceof SqlError.ConstraintError)
    return Constraint
  if (
    reason instanceof SqlError.LockTimeoutError ||
    reason instanceof SqlError.DeadlockError ||
    reason instanceof SqlError.SerializationError
  )
    return Locked
  if (reason instanceof SqlError.ConnectionError || reason instanceof SqlError.AuthenticationError)
    return Connection
  return Io
}

/** The innermost cause a driver gave, below effect's wrappers. */
const rootCause = (reason: SqlError.SqlErrorReason): unknown => reason.cause

/** Hides what a detail must not show (a password a driver repeated); the identity by default. */
export type Redact = (detail: string) => string

const fromSqlReason = (location: string, reason: SqlError.SqlErrorReason, redact: Redact): Reason => {
  const cause = rootCause(reason)
  const Class = fromCode(cause) ?? fromClass(reason)
  return new Class({ location, detail: redact(describe(cause ?? reason)) })
}

/**
 * A failure of a store's SQL, or of its migrations, as one `DatabaseError` naming
 * `location`. A migration that failed on a `DatabaseError` (an owner check) or a
 * `SqlError` is that error; the Migrator's own lock is `Locked`.
 */
export const fromSqlError = (
  location: string,
  error: SqlError.SqlError | Migrator.MigrationError | DatabaseError,
  redact: Redact = (detail) => detail
): DatabaseError => {
  if (error instanceof DatabaseError) return error
  if (SqlError.isSqlError(error)) return make(fromSqlReason(location, error.reason, redact))
  const cause: unknown = error.cause
  if (cause instanceof DatabaseError) return cause
  if (SqlError.isSqlError(cause)) return make(fromSqlReason(location, cause.reason, redact))
  if (error.kind === "Locked") return make(new Locked({ location, detail: redact(describe(error)) }))
  return make(new Io({ location, detail: redact(describe(cause ?? error)) }))
}

/** Whether `error` is one `fromSqlError` maps: the driver's or the Migrator's. */
export const isMappable = (error: unknown): error is SqlError.SqlError | Migrator.MigrationError =>
  SqlError.isSqlError(error) || error instanceof Migrator.MigrationError

/**
 * `effect` with its SQL and migration failures mapped by `fromSqlError`: how a
 * store runs every statement, so no failure of the driver leaves it unmapped.
 */
export const mapSqlErrors =
  (location: string) =>
  <A, E, R>(
    effect: Effect.Effect<A, E, R>
  ): Effect.Effect<A, Exclude<E, SqlError.SqlError | Migrator.MigrationError> | DatabaseError, R> =>
    Effect.catchIf(effect, isMappable, (error) =>
      Effect.fail(fromSqlError(location, error as SqlError.SqlError | Migrator.MigrationError))
    ) as Effect.Effect<A, Exclude<E, SqlError.SqlError | Migrator.MigrationError> | DatabaseError, R>

/** A failure that is not SQL's (a file that cannot be created) as `Io` naming `location`. */
export const io = (location: string, error: unknown): DatabaseError =>
  make(new Io({ location, detail: describe(error) }))
