/**
 * What every noema store on SQL shares about its database: how a SQL failure
 * becomes a one-line `StoreError` (corrupt file, lock timeout, anything else),
 * and how a SQLite file is recognised as noema's (its application id) or as an
 * empty database, before anything is written to it.
 */
import { Effect } from "effect"
import type { Migrator, SqlClient, SqlError } from "effect/sql"
import { CorruptDatabase, ForeignDatabase, IoFailure, Locked, StoreError } from "../SessionStore.js"

/** `PRAGMA application_id`: the bytes "noem", marking a SQLite file as a noema database. */
export const applicationId = 0x6e6f656d

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

export const oneLine = (text: string): string => text.replace(/\s*\n\s*/g, "; ").trim()

export const describe = (error: unknown): string =>
  oneLine(error instanceof Error ? error.message : String(error))

/** SQLite's primary result code, when the cause is a SQLite error. */
const sqliteCode = (cause: unknown): number | undefined =>
  typeof cause === "object" && cause !== null && "errcode" in cause && typeof cause.errcode === "number"
    ? cause.errcode & 0xff
    : undefined

const SQLITE_CORRUPT = 11
const SQLITE_NOTADB = 26

/** A SQL or migration failure as a one-line `StoreError` naming `location`. */
export const storeError = (
  location: string,
  error: SqlError.SqlError | Migrator.MigrationError
): StoreError => {
  const cause: unknown = error._tag === "SqlError" ? error.reason.cause : error.cause
  if (cause instanceof StoreError) return cause
  const nested: unknown =
    typeof cause === "object" && cause !== null && "reason" in cause
      ? (cause as { reason: { cause?: unknown } }).reason.cause
      : cause
  const detail = describe(nested ?? error)
  const code = sqliteCode(nested)
  if (code === SQLITE_CORRUPT || code === SQLITE_NOTADB) {
    return new StoreError({ reason: new CorruptDatabase({ location, detail }) })
  }
  const tag = error._tag === "SqlError" ? error.reason._tag : undefined
  if (tag === "LockTimeoutError" || tag === "DeadlockError" || tag === "SerializationError") {
    return new StoreError({ reason: new Locked({ location, detail }) })
  }
  return new StoreError({ reason: new IoFailure({ location, detail }) })
}

// ---------------------------------------------------------------------------
// SQLite files: noema's, empty, or someone else's
// ---------------------------------------------------------------------------

const pragma = (sql: SqlClient.SqlClient, name: string) =>
  Effect.map(sql.unsafe<Record<string, unknown>>(`PRAGMA ${name}`), (rows) => {
    const value = rows[0]?.[name]
    return typeof value === "number" ? value : 0
  })

export interface SqliteMarks {
  readonly applicationId: number
  /** `PRAGMA user_version`: the session schema's version (release 0.1.0 migrated by it). */
  readonly version: number
  readonly tables: ReadonlyArray<string>
}

export const sqliteMarks = (sql: SqlClient.SqlClient) =>
  Effect.all({
    applicationId: pragma(sql, "application_id"),
    version: pragma(sql, "user_version"),
    tables: Effect.map(
      sql.unsafe<{ name: string }>(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
      ),
      (rows) => rows.map((row) => row.name)
    )
  })

/** An empty database: nothing in it yet, not even noema's mark. */
export const isEmpty = (marks: SqliteMarks): boolean =>
  marks.applicationId === 0 && marks.tables.length === 0 && marks.version === 0

/** Refuses a file that is neither an empty database nor one of noema's. */
export const checkOwner = (marks: SqliteMarks, location: string): StoreError | undefined => {
  if (marks.applicationId === applicationId || isEmpty(marks)) return undefined
  const owner =
    marks.applicationId !== 0
      ? `application id 0x${(marks.applicationId >>> 0).toString(16).padStart(8, "0")}`
      : "no noema application id"
  const shown = marks.tables.slice(0, 5).join(", ")
  const more = marks.tables.length > 5 ? `, and ${marks.tables.length - 5} more` : ""
  const detail = marks.tables.length > 0 ? `${owner}, tables ${shown}${more}` : owner
  return new StoreError({ reason: new ForeignDatabase({ location, detail }) })
}
