/**
 * @noema/sql: the one SQL database under every noema store (SQLite file or
 * postgres:// URL), its migrations per store, and one `DatabaseError` family.
 */
export * as Database from "./Database.js"
export * as DatabaseError from "./DatabaseError.js"
export * as GroupCommit from "./GroupCommit.js"
export * as Migrations from "./Migrations.js"
export * as Postgres from "./Postgres.js"
export * as Prepared from "./Prepared.js"
