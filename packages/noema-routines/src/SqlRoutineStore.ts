/**
 * SqlRoutineStore: the routine store on effect's `SqlClient`, for SQLite and
 * PostgreSQL, beside the sessions (and other stores) of the same database.
 *
 * One table, `noema_routine_chains`, one row per (routine, chain) holding the
 * chain's state as JSON text; a step's save is one upsert, so a killed process
 * leaves the state before or after the step, never half of it. Migrations are
 * run by effect's `Migrator` with the routines' own table
 * (`noema_routines_migrations`). The two dialects differ only in how
 * placeholders are written and in SQLite's file mark (below).
 */
import { Database, SessionStore, SqlStore } from "@noema/session"
import { Effect, Layer, Schema } from "effect"
import { Migrator, SqlClient, type SqlError } from "effect/sql"
import {
  type ChainState,
  ChainStateFromJson,
  RoutineConflictError,
  RoutineStore,
  type Service,
  StoreError
} from "./RoutineStore.js"

export const migrationsTable = "noema_routines_migrations"
export const chainsTable = "noema_routine_chains"

const migration = (text: string): Effect.Effect<void, unknown, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(text).unprepared)

/** The same DDL on both: text and 64-bit integers. */
const migrations: Record<string, Effect.Effect<void, unknown, SqlClient.SqlClient>> = {
  "1_routine_chains": migration(`CREATE TABLE ${chainsTable} (
    routine TEXT NOT NULL,
    chain TEXT NOT NULL,
    status TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    revision BIGINT NOT NULL,
    PRIMARY KEY (routine, chain))`)
}

interface Dialect {
  readonly name: "sqlite" | "pg"
  readonly placeholders: (text: string) => string
}

const sqlite: Dialect = { name: "sqlite", placeholders: (text) => text }
const pg: Dialect = {
  name: "pg",
  placeholders: (text) => {
    let index = 0
    return text.replace(/\?/g, () => `$${++index}`)
  }
}

const statements = (dialect: Dialect) => ({
  select: dialect.placeholders(`SELECT state FROM ${chainsTable} WHERE routine = ? AND chain = ?`),
  list: dialect.placeholders(`SELECT state FROM ${chainsTable} WHERE routine = ? ORDER BY chain`),
  /** Inserts revision 1, or replaces the row that holds the revision before; returns a row when it wrote. */
  upsert:
    dialect.placeholders(`INSERT INTO ${chainsTable} (routine, chain, status, state, updated_at, revision)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (routine, chain) DO UPDATE
    SET status = excluded.status, state = excluded.state, updated_at = excluded.updated_at,
        revision = excluded.revision
    WHERE ${chainsTable}.revision = excluded.revision - 1
    RETURNING chain`)
})

export interface Options {
  /** Where the routines live, for messages: a file path or a database name. */
  readonly location: string
  /** Defaults to the client's dialect. */
  readonly dialect?: "sqlite" | "pg"
  /** Check the schema, migrate nothing (a database that needs migrating is refused). */
  readonly readonly?: boolean
}

const runMigrations = Migrator.make({})

const asStoreError =
  (location: string) =>
  <A, E, R>(effect: Effect.Effect<A, E | SqlError.SqlError | Migrator.MigrationError, R>) =>
    Effect.catchIf(
      effect,
      (error): error is SqlError.SqlError | Migrator.MigrationError => {
        const tag = (error as { _tag?: unknown } | null)?._tag
        return tag === "SqlError" || tag === "MigrationError"
      },
      (error) => Effect.fail(SqlStore.storeError(location, error))
    )

/** The store on the `SqlClient` in context, migrating its tables first (unless read-only). */
export const make = (options: Options): Effect.Effect<Service, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    const dialect = (options.dialect ?? Database.dialectOf(sql)) === "pg" ? pg : sqlite
    const guard = asStoreError(location)
    if (options.readonly !== true) {
      if (dialect.name === "sqlite") {
        yield* guard(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* Database.claimSqlite(sql, location)
              yield* runMigrations({ loader: Migrator.fromRecord(migrations), table: migrationsTable })
            })
          )
        )
      } else {
        yield* guard(runMigrations({ loader: Migrator.fromRecord(migrations), table: migrationsTable }))
      }
    }
    const text = statements(dialect)
    const decode = Schema.decodeUnknownEffect(ChainStateFromJson)
    const encode = Schema.encodeSync(ChainStateFromJson)
    const corrupt = (detail: string) =>
      new StoreError({ reason: new SessionStore.CorruptDatabase({ location, detail }) })
    const read = (row: { state: string }) =>
      Effect.mapError(decode(row.state), (error) =>
        corrupt(`a routine chain's state does not decode: ${error.message}`)
      )
    const service: Service = {
      location,
      load: (routine, chain) =>
        guard(
          Effect.gen(function* () {
            const rows = yield* sql.unsafe<{ state: string }>(text.select, [routine, chain])
            return rows[0] === undefined ? undefined : yield* read(rows[0])
          })
        ),
      list: (routine) =>
        guard(
          Effect.flatMap(sql.unsafe<{ state: string }>(text.list, [routine]), (rows) =>
            Effect.forEach(rows, read)
          )
        ),
      save: (state: ChainState) =>
        guard(
          Effect.flatMap(
            sql.unsafe<{ chain: string }>(text.upsert, [
              state.routine,
              state.chain,
              state.status,
              encode(state),
              state.updatedAt,
              state.revision
            ]),
            (rows) =>
              rows.length === 1
                ? Effect.void
                : Effect.fail(new RoutineConflictError({ routine: state.routine, chain: state.chain }))
          )
        )
    }
    return service
  })

/** The store on the command's `Database` (its location and read-only flag). */
export const fromDatabase: Effect.Effect<Service, StoreError, SqlClient.SqlClient | Database.Database> =
  Effect.flatMap(Database.Database, (database) =>
    make({ location: database.location, dialect: database.dialect, readonly: database.readonly })
  )

export const layerFromDatabase: Layer.Layer<
  RoutineStore,
  StoreError,
  SqlClient.SqlClient | Database.Database
> = Layer.effect(RoutineStore, fromDatabase)
