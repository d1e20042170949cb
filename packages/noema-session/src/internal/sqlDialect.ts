/**
 * Every SQL statement of the session store, per dialect, and its migrations.
 *
 * The one place where SQLite and PostgreSQL differ: table definitions, the
 * placeholder style, how an append locks its session row, how a file or
 * database is recognised as noema's. Everything else in `SqlStore` is the
 * same code for both. Messages and metadata are kept as JSON text on both
 * (not `jsonb`): text round-trips exactly what was written, including `\u0000`
 * escapes, and costs no conversion on either side.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export type DialectName = "sqlite" | "pg"

/** The table effect's `Migrator` records applied migrations in. */
export const migrationsTable = "noema_session_migrations"

export interface Statements {
  readonly insertSession: string
  readonly selectSession: string
  /**
   * The append's check and update in one statement: updates the session only while it holds
   * the expected count. The update locks the row until the commit, so on PostgreSQL a second
   * writer waits, then finds the new count and updates nothing. Without `appendedSession`
   * (PostgreSQL) it returns the row's `created_at, title, metadata`, none when it updated nothing.
   */
  readonly appendToSession: string
  /**
   * Read right after `appendToSession` in the same transaction, when that returns nothing
   * itself (SQLite, where `RETURNING` costs more than a second statement): whether the update
   * changed the row (`changes()`, 1 or 0), then `message_count, created_at, title, metadata`;
   * no row at all when there is no such session.
   */
  readonly appendedSession: string | undefined
  /** Why `appendToSession` updated nothing (without `appendedSession`): the count now stored, or no row at all. */
  readonly selectMessageCount: string
  /** An untitled session's title, from the turn just appended (in the append's transaction, the row locked). */
  readonly setTitle: string
  /** A session's `updated_at` as given (an imported session keeps its own). */
  readonly setUpdatedAt: string
  /** `selectSession`, locking the row (metadata updates). */
  readonly selectSessionForUpdate: string
  readonly listSessions: string
  readonly selectMessages: string
  readonly updateMetadata: string
  readonly deleteMessages: string
  readonly deleteSession: string
}

export interface Dialect {
  readonly name: DialectName
  readonly statements: Statements
  /** Inserts `count` message rows in one statement. */
  readonly insertMessages: (count: number) => string
  /** Rows per multi-row insert: a turn fits in one; a big import is split (bound parameters are capped). */
  readonly maximumRowsPerInsert: number
  /**
   * The statement that starts a writing transaction, or undefined for the client's own
   * (SQLite: `BEGIN IMMEDIATE`). PostgreSQL names READ COMMITTED, whatever the server's
   * default: the append's conflict check relies on it (see `appendToSession`).
   */
  readonly beginWrite: string | undefined
  /**
   * The statement that starts a read-only transaction (a consistent snapshot for `load`),
   * or undefined for the client's own `BEGIN`.
   */
  readonly beginRead: string | undefined
  /** Migration id to its effect, for `Migrator.fromRecord` ("1_sessions", ...). */
  readonly migrations: Record<string, Effect.Effect<void, unknown, SqlClient.SqlClient>>
}

const sessionColumns = "id, title, created_at, updated_at, message_count, metadata"

interface Variant {
  /** Appended to the `SELECT` that reads a session before updating its metadata. */
  readonly forUpdate: string
  /** The `activity` of a new session. */
  readonly firstActivity: string
  /** The `activity` of a changed session: higher than every other. */
  readonly nextActivity: string
  /** The append reads the session back with a second statement (`appendedSession`) instead of `RETURNING`. */
  readonly readBack: boolean
}

/** The statements with `?` placeholders; PostgreSQL numbers them. */
const statements = ({ forUpdate, firstActivity, nextActivity, readBack }: Variant): Statements => ({
  insertSession: `INSERT INTO sessions (id, title, created_at, updated_at, activity, message_count, metadata)
    VALUES (?, ?, ?, ?, ${firstActivity}, 0, ?)
    ON CONFLICT (id) DO NOTHING
    RETURNING ${sessionColumns}`,
  selectSession: `SELECT ${sessionColumns} FROM sessions WHERE id = ?`,
  appendToSession: `UPDATE sessions
    SET message_count = message_count + ?, updated_at = ?, activity = ${nextActivity}
    WHERE id = ? AND message_count = ?${
      readBack
        ? ""
        : `
    RETURNING created_at, title, metadata`
    }`,
  appendedSession: readBack
    ? "SELECT changes(), message_count, created_at, title, metadata FROM sessions WHERE id = ?"
    : undefined,
  selectMessageCount: "SELECT message_count FROM sessions WHERE id = ?",
  setTitle: "UPDATE sessions SET title = ? WHERE id = ?",
  setUpdatedAt: "UPDATE sessions SET updated_at = ? WHERE id = ?",
  selectSessionForUpdate: `SELECT ${sessionColumns} FROM sessions WHERE id = ?${forUpdate}`,
  listSessions: `SELECT ${sessionColumns} FROM sessions ORDER BY activity DESC`,
  selectMessages: "SELECT seq, message FROM messages WHERE session_id = ? ORDER BY seq",
  updateMetadata: `UPDATE sessions
    SET title = ?, metadata = ?, updated_at = ?, activity = ${nextActivity}
    WHERE id = ?
    RETURNING ${sessionColumns}`,
  deleteMessages: "DELETE FROM messages WHERE session_id = ?",
  deleteSession: "DELETE FROM sessions WHERE id = ?"
})

const numbered = (text: string): string => {
  let index = 0
  return text.replace(/\?/g, () => `$${++index}`)
}

/** The multi-row insert for each row count, built once (the text is also the driver's cache key). */
const multiRowInserts = (placeholder: (index: number) => string): ((count: number) => string) => {
  const built: Array<string | undefined> = []
  return (count) => {
    let text = built[count]
    if (text === undefined) {
      text = multiRowInsert(count, placeholder)
      built[count] = text
    }
    return text
  }
}

const multiRowInsert = (count: number, placeholder: (index: number) => string): string => {
  const rows = new Array<string>(count)
  for (let row = 0; row < count; row++) {
    const base = row * 4
    rows[row] =
      `(${placeholder(base + 1)}, ${placeholder(base + 2)}, ${placeholder(base + 3)}, ${placeholder(base + 4)})`
  }
  return `INSERT INTO messages (session_id, seq, message, created_at) VALUES ${rows.join(", ")}`
}

/** A migration that runs DDL text, one statement at a time (drivers prepare one statement). */
const migration = (text: string): Effect.Effect<void, unknown, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const withoutComments = text.replace(/--.*$/gm, "")
    for (const statement of withoutComments.split(";")) {
      if (statement.trim() !== "") yield* sql.unsafe(statement.trim()).unprepared
    }
  })

// ---------------------------------------------------------------------------
// SQLite
// ---------------------------------------------------------------------------

/**
 * Migration 1 is the schema release 0.1.0 created by hand (`PRAGMA user_version = 1`);
 * a file of that release is recorded as having it applied instead of running it again.
 */
const sqliteSessions = `
  CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    title TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    -- Store-wide change counter: orders the list even when changes share a millisecond.
    activity INTEGER NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}'
  ) STRICT;
  CREATE INDEX sessions_by_activity ON sessions (activity);
  -- Clustered on (session_id, seq): loading a session is one range scan.
  CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
  ) STRICT, WITHOUT ROWID;
`

export const sqlite: Dialect = {
  name: "sqlite",
  // The client begins writers with BEGIN IMMEDIATE: the write lock serialises appends, and the
  // store-wide maximum read under it is the latest.
  statements: statements({
    forUpdate: "",
    firstActivity: "(SELECT coalesce(max(activity), 0) + 1 FROM sessions)",
    nextActivity: "(SELECT max(activity) + 1 FROM sessions)",
    // Measured: `UPDATE ... RETURNING` costs SQLite more (it buffers the returned rows) than the
    // plain update and a read of the row by its key, both on pages the update just touched.
    readBack: true
  }),
  insertMessages: multiRowInserts(() => "?"),
  maximumRowsPerInsert: 64,
  beginWrite: undefined,
  beginRead: "BEGIN",
  migrations: {
    "1_sessions": migration(sqliteSessions)
  }
}

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

/**
 * Times are milliseconds in BIGINT (the driver returns them as strings; the store reads them
 * with `Number`). `activity` comes from a sequence: writers to different sessions run at
 * once here, and `max(activity) + 1` would give two of them the same value.
 */
const pgSessions = `
  CREATE SEQUENCE session_activity AS BIGINT;
  CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    title TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    activity BIGINT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}'
  );
  CREATE INDEX sessions_by_activity ON sessions (activity);
  CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
  );
`

export const pg: Dialect = {
  name: "pg",
  // Writers on other machines are serialised by the row lock the append's UPDATE takes: under
  // READ COMMITTED the second waits for the first to commit, re-evaluates its WHERE on the new
  // row version, no longer matches the count, updates nothing and is a conflict. (Under
  // REPEATABLE READ or SERIALIZABLE it would fail with a serialisation error instead, hence
  // `beginWrite`.) Metadata updates read, merge and write, so they lock the row first.
  statements: mapStatements(
    statements({
      forUpdate: " FOR UPDATE",
      firstActivity: "nextval('session_activity')",
      nextActivity: "nextval('session_activity')",
      // One round trip: the update returns the row.
      readBack: false
    }),
    numbered
  ),
  insertMessages: multiRowInserts((index) => `$${index}`),
  maximumRowsPerInsert: 1000,
  beginWrite: "BEGIN ISOLATION LEVEL READ COMMITTED",
  beginRead: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
  migrations: {
    "1_sessions": migration(pgSessions)
  }
}

function mapStatements(all: Statements, f: (text: string) => string): Statements {
  return Object.fromEntries(
    Object.entries(all).map(([key, text]) => [key, typeof text === "string" ? f(text) : text])
  ) as unknown as Statements
}
