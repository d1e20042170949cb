/**
 * How a SQLite file is recognised as noema's (its application id) or as an
 * empty database, before anything is written to it.
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { type DatabaseError, Foreign, make } from "../DatabaseError.js"

/** `PRAGMA application_id`: the bytes "noem", marking a SQLite file as a noema database. */
export const applicationId = 0x6e6f656d

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
export const checkOwner = (marks: SqliteMarks, location: string): DatabaseError | undefined => {
  if (marks.applicationId === applicationId || isEmpty(marks)) return undefined
  const owner =
    marks.applicationId !== 0
      ? `application id 0x${(marks.applicationId >>> 0).toString(16).padStart(8, "0")}`
      : "no noema application id"
  const shown = marks.tables.slice(0, 5).join(", ")
  const more = marks.tables.length > 5 ? `, and ${marks.tables.length - 5} more` : ""
  const detail = marks.tables.length > 0 ? `${owner}, tables ${shown}${more}` : owner
  return make(new Foreign({ location, detail }))
}
