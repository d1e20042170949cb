/**
 * SqlResourceStore: the resource store on effect's `SqlClient`, for SQLite and
 * PostgreSQL, beside the sessions, runs and routines of the same database.
 *
 * One table, `noema_resources`, one row per URN (type, parent, the resource as
 * JSON). The URN is the primary key, so `findByPrefix` is a range scan on it:
 * `urn >= 'P/' AND urn < 'P0'` ('0' follows '/'), never a full scan. Migrations
 * are run by effect's `Migrator` with the resources' own table
 * (`noema_resources_migrations`). The dialects differ only in placeholders and
 * in the key's collation: PostgreSQL compares the key byte-wise (`COLLATE "C"`)
 * so the range and the order are those of the URN's characters, as on SQLite.
 */
import { Database, SqlStore } from "@noema/session"
import { Effect, Layer } from "effect"
import { Migrator, SqlClient, type SqlError } from "effect/sql"
import { checkResource, checkUrn } from "./MemoryResourceStore.js"
import * as Resource from "./Resource.js"
import { notFound, ResourceStore, ResourceStoreError, type Service } from "./ResourceStore.js"

export const migrationsTable = "noema_resources_migrations"
export const resourcesTable = "noema_resources"

interface Dialect {
  readonly name: "sqlite" | "pg"
  readonly placeholders: (text: string) => string
  readonly keyCollation: string
}

const sqlite: Dialect = { name: "sqlite", placeholders: (text) => text, keyCollation: "" }
const pg: Dialect = {
  name: "pg",
  placeholders: (text) => {
    let index = 0
    return text.replace(/\?/g, () => `$${++index}`)
  },
  keyCollation: ` COLLATE "C"`
}

const migrations = (dialect: Dialect): Record<string, Effect.Effect<void, unknown, SqlClient.SqlClient>> => ({
  "1_resources": Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.andThen(
      sql.unsafe(`CREATE TABLE ${resourcesTable} (
        urn TEXT${dialect.keyCollation} NOT NULL PRIMARY KEY,
        type TEXT NOT NULL,
        parent TEXT,
        body TEXT NOT NULL)`).unprepared,
      sql.unsafe(`CREATE INDEX ${resourcesTable}_type ON ${resourcesTable} (type, urn)`).unprepared
    )
  )
})

const statements = (dialect: Dialect) => ({
  get: dialect.placeholders(`SELECT body FROM ${resourcesTable} WHERE urn = ?`),
  prefix: dialect.placeholders(`SELECT body FROM ${resourcesTable} WHERE urn >= ? AND urn < ? ORDER BY urn`),
  type: dialect.placeholders(`SELECT body FROM ${resourcesTable} WHERE type = ? ORDER BY urn`),
  put: dialect.placeholders(`INSERT INTO ${resourcesTable} (urn, type, parent, body) VALUES (?, ?, ?, ?)
    ON CONFLICT (urn) DO UPDATE SET type = excluded.type, parent = excluded.parent, body = excluded.body`),
  delete: dialect.placeholders(`DELETE FROM ${resourcesTable} WHERE urn = ? RETURNING urn`)
})

/** The bounds of the range holding every descendant of `urn`. */
export const prefixRange = (urn: string): readonly [string, string] => [`${urn}/`, `${urn}0`]

export interface Options {
  /** Where the resources live, for messages: a file path or a database name. */
  readonly location: string
  readonly dialect?: "sqlite" | "pg"
  /** Migrate nothing. */
  readonly readonly?: boolean
}

const runMigrations = Migrator.make({})

const toStoreError = (location: string) => (error: SqlError.SqlError | Migrator.MigrationError | unknown) =>
  new ResourceStoreError({
    message: SqlStore.storeError(location, error as SqlError.SqlError).message,
    cause: error
  })

/** The store on the `SqlClient` in context, migrating its table first (unless read-only). */
export const make = (options: Options): Effect.Effect<Service, ResourceStoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    const dialect = (options.dialect ?? Database.dialectOf(sql)) === "pg" ? pg : sqlite
    const failure = toStoreError(location)
    const guard = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, ResourceStoreError, R> =>
      Effect.mapError(effect, (error) => (error instanceof ResourceStoreError ? error : failure(error)))
    if (options.readonly !== true) {
      const migrate = runMigrations({
        loader: Migrator.fromRecord(migrations(dialect)),
        table: migrationsTable
      })
      // A SQLite file must be empty or noema's before a table goes into it.
      yield* guard(
        dialect === sqlite
          ? sql.withTransaction(Effect.andThen(Database.claimSqlite(sql, location), migrate))
          : migrate
      )
    }
    const text = statements(dialect)
    const read = (rows: ReadonlyArray<{ body: string }>) =>
      Effect.try({
        try: () => rows.map((row) => Resource.decode(JSON.parse(row.body))),
        catch: (error) =>
          new ResourceStoreError({
            message: `${location}: a stored resource does not decode: ${error instanceof Error ? error.message : String(error)}`,
            cause: error
          })
      })
    const getOne = (urn: string) =>
      guard(Effect.flatMap(sql.unsafe<{ body: string }>(text.get, [urn]), read)).pipe(
        Effect.map((found) => found[0])
      )
    const service: Service = {
      put: (resource) =>
        Effect.flatMap(checkResource(resource), (checked) =>
          guard(
            sql.unsafe(text.put, [
              checked.meta.urn,
              checked.meta.type,
              checked.meta.parent ?? null,
              JSON.stringify(checked)
            ])
          ).pipe(Effect.asVoid)
        ),
      get: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.flatMap(getOne(key), (found) =>
            found === undefined ? Effect.fail(notFound(key)) : Effect.succeed(found)
          )
        ),
      getMany: (urns) =>
        Effect.flatMap(Effect.forEach(urns, checkUrn), (keys) => {
          // One query per batch of keys (IN list), then back into the order asked.
          const batches: Array<Array<string>> = []
          const distinct = [...new Set(keys)]
          for (let offset = 0; offset < distinct.length; offset += 500)
            batches.push(distinct.slice(offset, offset + 500))
          return Effect.map(
            Effect.forEach(batches, (batch) =>
              guard(
                Effect.flatMap(
                  sql.unsafe<{ body: string }>(
                    dialect.placeholders(
                      `SELECT body FROM ${resourcesTable} WHERE urn IN (${batch.map(() => "?").join(", ")})`
                    ),
                    batch
                  ),
                  read
                )
              )
            ),
            (found) => {
              const byUrn = new Map(found.flat().map((resource) => [resource.meta.urn, resource]))
              return keys.flatMap((key) => {
                const resource = byUrn.get(key)
                return resource === undefined ? [] : [resource]
              })
            }
          )
        }),
      findByPrefix: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          guard(Effect.flatMap(sql.unsafe<{ body: string }>(text.prefix, [...prefixRange(key)]), read))
        ),
      findByType: (type) => guard(Effect.flatMap(sql.unsafe<{ body: string }>(text.type, [type]), read)),
      delete: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          guard(Effect.map(sql.unsafe<{ urn: string }>(text.delete, [key]), (rows) => rows.length > 0))
        )
    }
    return service
  })

export const layer = (
  options: Options
): Layer.Layer<ResourceStore, ResourceStoreError, SqlClient.SqlClient> =>
  Layer.effect(ResourceStore, make(options))

/** The store on the command's `Database` (its location, dialect and read-only flag). */
export const fromDatabase: Effect.Effect<
  Service,
  ResourceStoreError,
  SqlClient.SqlClient | Database.Database
> = Effect.flatMap(Database.Database, (database) =>
  make({ location: database.location, dialect: database.dialect, readonly: database.readonly })
)

export const layerFromDatabase: Layer.Layer<
  ResourceStore,
  ResourceStoreError,
  SqlClient.SqlClient | Database.Database
> = Layer.effect(ResourceStore, fromDatabase)
