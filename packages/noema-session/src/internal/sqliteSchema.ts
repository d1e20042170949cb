/**
 * Every SQL statement of the SQLite store, and its schema migrations.
 *
 * Kept in one place so a second SQL backend (Postgres) can be written against
 * the same list, and so a schema change is one reviewable diff.
 */

/** `PRAGMA application_id`: the bytes "noem", marking the file as a noema database. */
export const applicationId = 0x6e6f656d

export interface Migration {
  /** The `PRAGMA user_version` the database has after this migration. */
  readonly version: number
  readonly sql: string
}

/** Ordered; each runs once, inside the same transaction as the version bump. */
export const migrations: ReadonlyArray<Migration> = [
  {
    version: 1,
    sql: `
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
  }
]

export const schemaVersion = migrations.at(-1)?.version ?? 0

const sessionColumns = "id, title, created_at, updated_at, message_count, metadata"

export const sql = {
  begin: "BEGIN",
  beginImmediate: "BEGIN IMMEDIATE",
  commit: "COMMIT",
  rollback: "ROLLBACK",

  insertSession: `INSERT INTO sessions (id, title, created_at, updated_at, activity, message_count, metadata)
    VALUES (?, ?, ?, ?, (SELECT coalesce(max(activity), 0) + 1 FROM sessions), 0, ?)
    ON CONFLICT (id) DO NOTHING
    RETURNING ${sessionColumns}`,
  selectSession: `SELECT ${sessionColumns} FROM sessions WHERE id = ?`,
  // What an append needs to check the expected count and to answer without reading the row again.
  selectForAppend: "SELECT message_count, created_at, title, metadata FROM sessions WHERE id = ?",
  listSessions: `SELECT ${sessionColumns} FROM sessions ORDER BY activity DESC`,
  selectMessages: "SELECT seq, message FROM messages WHERE session_id = ? ORDER BY seq",
  // `coalesce(title, ?)`: the first turn names an untitled session, never renames a titled one.
  updateAfterAppend: `UPDATE sessions
    SET message_count = ?, updated_at = ?, title = coalesce(title, ?),
        activity = (SELECT max(activity) + 1 FROM sessions)
    WHERE id = ?`,
  updateMetadata: `UPDATE sessions
    SET title = ?, metadata = ?, updated_at = ?, activity = (SELECT max(activity) + 1 FROM sessions)
    WHERE id = ?
    RETURNING ${sessionColumns}`,
  deleteMessages: "DELETE FROM messages WHERE session_id = ?",
  deleteSession: "DELETE FROM sessions WHERE id = ?",

  tables: "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
} as const

/** Parameters of one message row in `insertMessages`: session id, seq, message JSON, created at. */
export const parametersPerMessage = 4

/**
 * Inserts `count` messages in one statement (one multi-row VALUES): one
 * statement per commit instead of one per message.
 */
export const insertMessages = (count: number): string =>
  `INSERT INTO messages (session_id, seq, message, created_at) VALUES ${Array.from({ length: count }, () => "(?, ?, ?, ?)").join(", ")}`

/** `selectForAppend`'s row, read as an array (no object per commit). */
export type AppendRow = readonly [
  messageCount: number,
  createdAt: number,
  title: string | null,
  metadata: string
]

/** Columns of a session row, as `node:sqlite` returns them. */
export interface SessionRow {
  readonly id: string
  readonly title: string | null
  readonly created_at: number
  readonly updated_at: number
  readonly message_count: number
  readonly metadata: string
}
