/**
 * Migrations: how every store brings its tables to the schema its code knows.
 *
 * Each store keeps its own migrations (effect's `Migrator`, id and name to an
 * effect) and its own migrations table, so stores share one database without
 * sharing a schema version. `run` is the one way a store opens its tables:
 *
 * - a database migrated by a newer noema (a migration id this code does not
 *   know) is refused as `SchemaTooNew`, untouched;
 * - opened read-only, nothing is written: a schema that is current is used, one
 *   that needs migrating is refused as `NeedsMigration`;
 * - on SQLite, the file must be empty or noema's (`Foreign` otherwise), and the
 *   owner mark, the store's own preparation and its migrations land in one
 *   `BEGIN IMMEDIATE` transaction, so a crash leaves the old file or the
 *   migrated one; a current schema takes no write lock at all;
 * - on PostgreSQL the Migrator locks its table, so two processes opening one
 *   database at once migrate it once.
 */
import { Effect } from "effect"
import { Migrator, SqlClient, type SqlError } from "effect/sql"
import { claimSqlite, type Dialect, dialectOf } from "./Database.js"
import { type DatabaseError, fromSqlError, make, NeedsMigration, SchemaTooNew } from "./DatabaseError.js"
import { applicationId, checkOwner, sqliteMarks } from "./internal/databaseFile.js"

/** A store's migrations: `"<id>_<name>"` to the effect that applies it. */
export type Record = { readonly [idAndName: string]: Effect.Effect<void, unknown, SqlClient.SqlClient> }

/** A step a store adds to its opening, on the client being migrated. */
export type Step = Effect.Effect<void, DatabaseError | SqlError.SqlError, SqlClient.SqlClient>

export interface Options {
  /** How messages name the database: a file path, or a URL without its password. */
  readonly location: string
  /** Which store's schema, for messages: "session", "runs", ... */
  readonly schema: string
  /** The store's own table of applied migrations. */
  readonly table: string
  readonly migrations: Record
  /** Check the schema, migrate nothing (and write nothing). Default false. */
  readonly readonly?: boolean
  /** A store's own check, run first on every open, read-only too (it must only read). */
  readonly check?: Step
  /**
   * Run before the Migrator when something is to be migrated (on SQLite inside the
   * migrating transaction, after the owner check): a store adopting an older layout.
   */
  readonly prepare?: Step
  /** Run after the Migrator, in the same transaction on SQLite. */
  readonly finish?: Step
}

/** The newest migration id a record holds (0 for none). */
export const latest = (migrations: Record): number =>
  Math.max(0, ...Object.keys(migrations).map((key) => Number.parseInt(key, 10)))

/** The newest migration applied to the database (0 when the store's table does not exist yet). */
export const applied = (sql: SqlClient.SqlClient, table: string): Effect.Effect<number, SqlError.SqlError> =>
  Effect.gen(function* () {
    const exists = yield* sql.onDialectOrElse({
      pg: () => sql<{ found: boolean | null }>`SELECT to_regclass(${table}) IS NOT NULL AS found`,
      orElse: () =>
        sql<{
          found: number
        }>`SELECT count(*) AS found FROM sqlite_schema WHERE type = 'table' AND name = ${table}`
    })
    if (!exists[0]?.found) return 0
    const rows = yield* sql<{ id: number | string | null }>`SELECT max(migration_id) AS id FROM ${sql(table)}`
    return Number(rows[0]?.id ?? 0)
  })

const runMigrator = Migrator.make({})

/** Fails with `SchemaTooNew` when a newer noema migrated the store; else the version found. */
const version = (sql: SqlClient.SqlClient, options: Options, supported: number) =>
  Effect.flatMap(applied(sql, options.table), (found) =>
    found > supported
      ? Effect.fail(
          make(new SchemaTooNew({ location: options.location, schema: options.schema, found, supported }))
        )
      : Effect.succeed(found)
  )

/** Everything a writable open does once it knows there is something to migrate. */
const migrate = (sql: SqlClient.SqlClient, options: Options, supported: number) =>
  Effect.gen(function* () {
    const found = yield* version(sql, options, supported)
    if (found === supported) return
    if (options.prepare !== undefined) yield* options.prepare
    yield* runMigrator({ loader: Migrator.fromRecord(options.migrations), table: options.table })
    if (options.finish !== undefined) yield* options.finish
  })

const openSqlite = (sql: SqlClient.SqlClient, options: Options, supported: number) =>
  Effect.gen(function* () {
    const marks = yield* sqliteMarks(sql)
    const refused = checkOwner(marks, options.location)
    if (refused !== undefined) return yield* Effect.fail(refused)
    const found = yield* version(sql, options, supported)
    if (found === supported && marks.applicationId === applicationId) return
    if (options.readonly === true) return yield* needsMigration(options, found, supported)
    // Read again under the write lock: another process may have migrated meanwhile.
    yield* sql.withTransaction(
      Effect.andThen(claimSqlite(sql, options.location), migrate(sql, options, supported))
    )
  })

const needsMigration = (options: Options, found: number, supported: number) =>
  Effect.fail(
    make(new NeedsMigration({ location: options.location, schema: options.schema, found, supported }))
  )

const openPg = (sql: SqlClient.SqlClient, options: Options, supported: number) =>
  Effect.gen(function* () {
    if (options.readonly !== true) return yield* migrate(sql, options, supported)
    const found = yield* version(sql, options, supported)
    if (found < supported) return yield* needsMigration(options, found, supported)
  })

type Opener = (
  sql: SqlClient.SqlClient,
  options: Options,
  supported: number
) => Effect.Effect<void, DatabaseError | SqlError.SqlError | Migrator.MigrationError, SqlClient.SqlClient>

const openers: { readonly [D in Dialect]: Opener } = { sqlite: openSqlite, pg: openPg }

/**
 * Brings the store's tables to its latest migration on the `SqlClient` in context,
 * or (read-only) checks they are there; every failure is one `DatabaseError`.
 */
export const run = (options: Options): Effect.Effect<void, DatabaseError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const supported = latest(options.migrations)
    if (options.check !== undefined) yield* options.check
    yield* openers[dialectOf(sql)](sql, options, supported)
  }).pipe(
    Effect.catchTags({
      SqlError: (error) => Effect.fail(fromSqlError(options.location, error)),
      MigrationError: (error) => Effect.fail(fromSqlError(options.location, error))
    })
  )
