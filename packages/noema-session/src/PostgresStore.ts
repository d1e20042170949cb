/**
 * PostgresStore: the session store on a PostgreSQL server, for many processes
 * on many machines.
 *
 * The SQL store (`SqlStore`) over a `Postgres.layer` connection pool
 * (`@effect/sql-pg`): the same code, schema and behaviour as `SqliteStore`,
 * with PostgreSQL's statements from `internal/sqlDialect.ts`. An append is one
 * `UPDATE ... WHERE message_count = expected RETURNING ...` on the session row
 * in a READ COMMITTED transaction: a second writer's UPDATE waits for the row
 * lock the first one holds, re-reads the row once the first commits, no longer
 * matches the count, and fails with `SessionConflictError`; turns never
 * interleave. A commit that returned was committed by the server (durable as
 * the server's `fsync` / `synchronous_commit` settings make it). The tables
 * are created by the store's migrations on first use, in the first schema of
 * the connection's `search_path` (give `?options=-c%20search_path%3Dname` in
 * the URL to keep noema's tables in a schema of their own). The URL's password
 * is never shown: `location` and every error name the server by
 * `Postgres.redactUrl`.
 */
import { Database, type Postgres } from "@noema/sql"
import { Effect, Layer, type Scope } from "effect"
import { fromDatabaseError, type Service, SessionStore, type StoreError } from "./SessionStore.js"
import * as SqlStore from "./SqlStore.js"

export type Options = Postgres.Options

/** Connects (checking the server answers) and migrates; the pool is closed when the scope closes. */
export const make = (options: Options): Effect.Effect<Service, StoreError, Scope.Scope> =>
  Effect.flatMap(
    Effect.mapError(Layer.build(Database.layer({ kind: "postgres", ...options })), fromDatabaseError),
    (context) => Effect.provideContext(SqlStore.fromDatabase, context)
  )

/** The PostgreSQL store as the `SessionStore` service. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError> =>
  Layer.effect(SessionStore, make(options))
