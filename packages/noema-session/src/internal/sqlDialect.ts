/**
 * sqlDialect: the one place where the session store's SQL differs between SQLite
 * and PostgreSQL.
 *
 * Every statement is written once, as an effect/sql tagged template, in
 * `SqlStore.ts` and in the migration below; the client's compiler writes each
 * dialect's placeholders. What truly differs is a handful of fragments and
 * settings, here: how a session's `activity` (the list's order) is drawn, whether
 * reading a row to update it locks it, whether an append reads its row back with
 * a second statement or `RETURNING`, how transactions begin, how many rows one
 * statement carries, and the column types of the schema. Messages and metadata
 * are kept as JSON text on both (not `jsonb`): text round-trips exactly what was
 * written, including `\u0000` escapes, and costs no conversion on either side.
 */
import { Database, type Migrations } from "@noema/sql"
import { Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"

/** The table effect's `Migrator` records applied migrations in. */
export const migrationsTable = "noema_session_migrations"

export interface Dialect {
  readonly name: Database.Dialect
  /** Appended to the `SELECT` that reads a session before updating its metadata. */
  readonly forUpdate: Statement.Fragment
  /** The `activity` of a new session. */
  readonly firstActivity: Statement.Fragment
  /** The `activity` of a changed session: higher than every other. */
  readonly nextActivity: Statement.Fragment
  /** Rows per multi-row insert: a turn fits in one; a big import is split (bound parameters are capped). */
  readonly maximumRowsPerInsert: number
  /**
   * Messages per statement when a session is loaded. On SQLite a thousand rows at a time
   * let each batch's text die young instead of aging, all of a long session's at once,
   * through the garbage collector before it is parsed; PostgreSQL pays a round trip per
   * statement, so it takes more.
   */
  readonly messagesPerRead: number
  /**
   * The statement that starts a writing transaction, or undefined for the client's own
   * (SQLite: `BEGIN IMMEDIATE`). PostgreSQL names READ COMMITTED, whatever the server's
   * default: the append's conflict check relies on it (see `SqlStore`'s append).
   */
  readonly beginWrite: string | undefined
  /** The statement that starts a read-only transaction (a consistent snapshot for `load`). */
  readonly beginRead: string
}

/** The dialect of `sql`'s database, its fragments built once for the store. */
export const make = (sql: SqlClient.SqlClient): Dialect =>
  Database.dialectOf(sql) === "pg"
    ? {
        name: "pg",
        // Writers on other machines are serialised by the row lock the append's UPDATE takes:
        // under READ COMMITTED the second waits for the first to commit, re-evaluates its WHERE
        // on the new row version, no longer matches the count, updates nothing and is a
        // conflict. (Under REPEATABLE READ or SERIALIZABLE it would fail with a serialisation
        // error instead, hence `beginWrite`.) Metadata updates read, merge and write, so they
        // lock the row first.
        forUpdate: sql.literal(" FOR UPDATE"),
        // A sequence: writers to different sessions run at once here, and `max(activity) + 1`
        // would give two of them the same value.
        firstActivity: sql.literal("nextval('session_activity')"),
        nextActivity: sql.literal("nextval('session_activity')"),
        maximumRowsPerInsert: 1000,
        messagesPerRead: 20_000,
        beginWrite: "BEGIN ISOLATION LEVEL READ COMMITTED",
        beginRead: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
      }
    : {
        name: "sqlite",
        // The client begins writers with BEGIN IMMEDIATE: the write lock serialises appends,
        // and the store-wide maximum read under it is the latest.
        forUpdate: sql.literal(""),
        firstActivity: sql.literal("(SELECT coalesce(max(activity), 0) + 1 FROM sessions)"),
        nextActivity: sql.literal("(SELECT max(activity) + 1 FROM sessions)"),
        maximumRowsPerInsert: 64,
        messagesPerRead: 1000,
        beginWrite: undefined,
        beginRead: "BEGIN"
      }

// ---------------------------------------------------------------------------
// The schema
// ---------------------------------------------------------------------------

/**
 * Migration 1, the same tables on both: on SQLite the schema release 0.1.0 created by
 * hand (`PRAGMA user_version = 1`; a file of that release is recorded as having it
 * applied instead of running it again), `STRICT`, the messages clustered on
 * `(session_id, seq)` so loading a session is one range scan; on PostgreSQL times are
 * milliseconds in BIGINT (the driver returns them as strings; the store reads them with
 * `Number`) and `activity` comes from a sequence (see `make`).
 */
const sessionsTables = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const pg = Database.dialectOf(sql) === "pg"
  const time = sql.literal(pg ? "BIGINT" : "INTEGER")
  const strict = sql.literal(pg ? "" : " STRICT")
  const clustered = sql.literal(pg ? "" : " STRICT, WITHOUT ROWID")
  if (pg) yield* sql`CREATE SEQUENCE session_activity AS BIGINT`
  // `activity`: a store-wide change counter; it orders the list even when changes share a millisecond.
  yield* sql`CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    title TEXT,
    created_at ${time} NOT NULL,
    updated_at ${time} NOT NULL,
    activity ${time} NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}'
  )${strict}`
  yield* sql`CREATE INDEX sessions_by_activity ON sessions (activity)`
  yield* sql`CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at ${time} NOT NULL,
    PRIMARY KEY (session_id, seq)
  )${clustered}`
})

/** Migration id to its effect, for `Migrations.run` ("1_sessions", ...). */
export const migrations: Migrations.Record = {
  "1_sessions": sessionsTables
}
