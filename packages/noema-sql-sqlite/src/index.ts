/**
 * @noema/sql-sqlite: Node's built-in `node:sqlite` as a driver for effect's `SqlClient`.
 */
export * as SqliteClient from "./SqliteClient.js"
