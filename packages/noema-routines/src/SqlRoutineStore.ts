/**
 * SqlRoutineStore: the routine store on effect's `SqlClient`, for SQLite and
 * PostgreSQL, beside the sessions (and other stores) of the same database.
 *
 * One table, `noema_routine_chains`, one row per (routine, chain) holding the
 * chain's state as JSON text; a step's save is one upsert, so a killed process
 * leaves the state before or after the step, never half of it. The statements
 * are effect's tagged templates, the same text on both databases; migrations
 * run through @noema/sql's `Migrations` with the routines' own table
 * (`noema_routines_migrations`); the second brings states stored before task
 * verdicts to the current shape. Failures are @noema/sql's `DatabaseError`.
 */

import { Message } from "@noema/core"
import { Database, DatabaseError, Migrations } from "@noema/sql"
import { Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import {
  type ChainState,
  ChainStateFromJson,
  RoutineConflictError,
  RoutineStore,
  type Service
} from "./RoutineStore.js"

export const migrationsTable = "noema_routines_migrations"
export const chainsTable = "noema_routine_chains"

const decodeMessage = Schema.decodeUnknownOption(Message.Message)

/**
 * A state stored before task verdicts existed, in the shape the code reads now: no task
 * is open, and each completed task was completed by its answer (then the only way).
 */
export const withVerdicts = (stored: string): string => {
  const state = JSON.parse(stored) as {
    open?: unknown
    completed?: ReadonlyArray<{ readonly evidence?: unknown; readonly summary?: unknown }>
  }
  const summaryOf = (evidence: unknown): string =>
    Option.match(decodeMessage(evidence), { onNone: () => "", onSome: Message.text }).trim()
  return JSON.stringify({
    ...state,
    open: state.open ?? [],
    completed: (state.completed ?? []).map((entry) =>
      entry.summary === undefined ? { ...entry, source: "answer", summary: summaryOf(entry.evidence) } : entry
    )
  })
}
/** The same statements on both: text and 64-bit integers; rows rewritten in code, not in a JSON dialect. */
export const migrations: Migrations.Record = {
  "1_routine_chains": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`CREATE TABLE ${sql(chainsTable)} (
      routine TEXT NOT NULL,
      chain TEXT NOT NULL,
      status TEXT NOT NULL,
      state TEXT NOT NULL,
      updated_at BIGINT NOT NULL,
      revision BIGINT NOT NULL,
      PRIMARY KEY (routine, chain))`
  ),
  "2_task_verdicts": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const table = sql(chainsTable)
    const rows = yield* sql<{ routine: string; chain: string; state: string }>`SELECT routine, chain, state
      FROM ${table}`
    for (const row of rows) {
      yield* sql`UPDATE ${table} SET state = ${withVerdicts(row.state)}
        WHERE routine = ${row.routine} AND chain = ${row.chain}`
    }
  })
}

export interface Options {
  /** Where the routines live, for messages: a file path or a database name. */
  readonly location: string
  /** Check the schema, migrate nothing (a database that needs migrating is refused). */
  readonly readonly?: boolean
}

/** The store on the `SqlClient` in context, migrating its table first (or, read-only, checking it). */
export const make = (
  options: Options
): Effect.Effect<Service, DatabaseError.DatabaseError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    yield* Migrations.run({
      location,
      schema: "routines",
      table: migrationsTable,
      migrations,
      readonly: options.readonly === true
    })
    const guard = DatabaseError.mapSqlErrors(location)
    const table = sql(chainsTable)
    const decode = Schema.decodeUnknownEffect(ChainStateFromJson)
    const encode = Schema.encodeSync(ChainStateFromJson)
    const read = (row: { state: string }) =>
      Effect.mapError(decode(row.state), (error) =>
        DatabaseError.make(
          new DatabaseError.Corrupt({
            location,
            detail: `a routine chain's state does not decode: ${error.message}`
          })
        )
      )
    const service: Service = {
      location,
      load: (routine, chain) =>
        guard(
          Effect.gen(function* () {
            const rows = yield* sql<{ state: string }>`SELECT state FROM ${table}
              WHERE routine = ${routine} AND chain = ${chain}`
            return rows[0] === undefined ? undefined : yield* read(rows[0])
          })
        ),
      list: (routine) =>
        guard(
          Effect.flatMap(
            sql<{ state: string }>`SELECT state FROM ${table} WHERE routine = ${routine} ORDER BY chain`,
            (rows) => Effect.forEach(rows, read)
          )
        ),
      routines: () =>
        guard(
          Effect.map(
            sql<{ routine: string }>`SELECT DISTINCT routine FROM ${table} ORDER BY routine`,
            (rows) => rows.map((row) => row.routine)
          )
        ),
      // Inserts revision 1, or replaces the row that holds the revision before; returns a row when it wrote.
      save: (state: ChainState) =>
        guard(
          Effect.flatMap(
            sql<{ chain: string }>`INSERT INTO ${table} ${sql.insert({
              routine: state.routine,
              chain: state.chain,
              status: state.status,
              state: encode(state),
              updated_at: state.updatedAt,
              revision: state.revision
            })}
            ON CONFLICT (routine, chain) DO UPDATE
            SET status = excluded.status, state = excluded.state, updated_at = excluded.updated_at,
                revision = excluded.revision
            WHERE ${table}.revision = excluded.revision - 1
            RETURNING chain`,
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
export const fromDatabase: Effect.Effect<
  Service,
  DatabaseError.DatabaseError,
  SqlClient.SqlClient | Database.Database
> = Database.store(make)

export const layerFromDatabase: Layer.Layer<
  RoutineStore,
  DatabaseError.DatabaseError,
  SqlClient.SqlClient | Database.Database
> = Layer.effect(RoutineStore, fromDatabase)
