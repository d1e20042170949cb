/**
 * SqlResourceStore: the resource store on effect's `SqlClient`, for SQLite and
 * PostgreSQL, beside the sessions, runs and routines of the same database.
 *
 * One table, `noema_resources`, one row per URN (type, parent, the resource as
 * JSON). The URN is the primary key, so `findByPrefix` is a range scan on it:
 * `urn >= 'P/' AND urn < 'P0'` ('0' follows '/'), never a full scan. Migrations
 * run through @noema/sql's `Migrations` with the resources' own table
 * (`noema_resources_migrations`). The statements are effect's tagged templates,
 * the same on both databases; only the key's collation differs: PostgreSQL
 * compares the key byte-wise (`COLLATE "C"`) so the range and the order are
 * those of the URN's characters, as on SQLite. A body read again is not
 * decoded again: its readers share the resource decoded the first time, frozen.
 *
 * `transaction` on SQLite is a group commit (`GroupCommit`, as the session store's
 * appends): writes that arrive together (a planner's tasks changing state at once)
 * share one transaction and one fsync, each in a savepoint of its own, rolled back
 * alone when it fails; each caller goes on once the COMMIT holding its writes
 * returned. A write waits one turn of the event loop for company first (`gather`):
 * node:sqlite is synchronous, so a write alone would commit before a sibling task
 * started in the same turn could queue beside it. PostgreSQL keeps one transaction
 * each (its server flushes concurrent commits together).
 */
import { Database, DatabaseError, GroupCommit, Migrations, Prepared } from "@noema/sql"
import { Context, Effect, Layer } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { deepFreeze } from "./internal/frozen.js"
import { upsertBatches } from "./internal/upsertRows.js"
import * as Resource from "./Resource.js"
import {
  type Backend,
  type BackendOptions,
  checkUrn,
  checkUrns,
  fromBackend,
  notFound,
  ResourceStore,
  ResourceStoreError,
  type Service
} from "./ResourceStore.js"

export const migrationsTable = "noema_resources_migrations"
export const resourcesTable = "noema_resources"

const migrations: Migrations.Record = {
  "1_resources": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // PostgreSQL compares the key byte-wise, so range and order are the URN's characters', as on SQLite.
    const key = sql.onDialectOrElse({
      pg: () => sql.literal(`TEXT COLLATE "C"`),
      orElse: () => sql.literal("TEXT")
    })
    yield* sql`CREATE TABLE ${sql(resourcesTable)} (
      urn ${key} NOT NULL PRIMARY KEY,
      type TEXT NOT NULL,
      parent TEXT,
      body TEXT NOT NULL)`
    yield* sql`CREATE INDEX ${sql(`${resourcesTable}_type`)} ON ${sql(resourcesTable)} (type, urn)`
  })
}

/** The bounds of the range holding every descendant of `urn`. */
export const prefixRange = (urn: string): readonly [string, string] => [`${urn}/`, `${urn}0`]

export interface Options extends BackendOptions {
  /** Where the resources live, for messages: a file path or a database name. */
  readonly location: string
  /** Migrate nothing: check the table is there. */
  readonly readonly?: boolean
}

/** A stored resource as read (`SELECT urn, body`): its key and its JSON. */
type Row = ReadonlyArray<unknown>

/** Decoded bodies remembered (the latest of each URN), and the longest body remembered. */
const cachedBodies = 1024
const cachedBodyLength = 8192

/** Keys per `IN (...)` query: well below both databases' limits on bound parameters. */
const keysPerQuery = 500

/** A database failure as the store's error, the `DatabaseError` kept as its cause. */
const storeError = (error: DatabaseError.DatabaseError) =>
  new ResourceStoreError({ message: error.message, cause: error })

/** The store on the `SqlClient` in context, migrating its table first (or, read-only, checking it). */
export const make = (options: Options): Effect.Effect<Service, ResourceStoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    const mapSqlErrors = DatabaseError.mapSqlErrors(location)
    const guard = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.mapError(mapSqlErrors(effect), (error) =>
        error instanceof DatabaseError.DatabaseError ? storeError(error) : error
      )
    yield* Effect.mapError(
      Migrations.run({
        location,
        schema: "resources",
        table: migrationsTable,
        migrations,
        readonly: options.readonly === true
      }),
      storeError
    )
    const statements = storeStatements(sql)
    const transaction = groupedTransactions(sql)
    // Resources decoded from recent bodies: a body read again (a task read by each of its
    // readers, a search hit) is not decoded again. Same body, same resource, frozen for sharing.
    // Found by URN, then its body compared: a body read from the database is a new string, and a
    // map keyed by bodies hashes each one whole (about 6x the time of the URN's hash and a compare).
    const decoded = new Map<string, { readonly body: string; readonly resource: Resource.Resource }>()
    const decode = (row: Row) => {
      const urn = row[0] as string
      const body = row[1] as string
      const known = decoded.get(urn)
      if (known !== undefined && known.body === body) return known.resource
      const resource = deepFreeze(Resource.decode(JSON.parse(body)))
      // A URN's newer body replaces its older one (and goes last, as the most recent).
      decoded.delete(urn)
      if (body.length <= cachedBodyLength) {
        if (decoded.size >= cachedBodies) decoded.delete(decoded.keys().next().value as string)
        decoded.set(urn, { body, resource })
      }
      return resource
    }
    const read = (rows: ReadonlyArray<Row>) =>
      Effect.try({
        try: () => rows.map(decode),
        catch: (error) =>
          new ResourceStoreError({
            message: `${location}: a stored resource does not decode: ${DatabaseError.describe(error)}`,
            cause: error
          })
      })
    const bodies = (statement: Effect.Effect<ReadonlyArray<Row>, SqlError.SqlError>) =>
      guard(Effect.flatMap(statement, read))
    const run = (statement: Prepared.Prepared, args: ReadonlyArray<unknown>) =>
      Prepared.values(sql, statement, args)
    // A put's resources in multi-row statements (`upsertBatches`): a planner's state change
    // stores some twenty at once.
    const writeMany = (resources: ReadonlyArray<Resource.Resource>) =>
      guard(
        Effect.forEach(
          upsertBatches(resources, (resource) => resource.meta.urn),
          (batch) => run(statements.upsert(batch.length), batch.flatMap(upsertParameters)),
          { discard: true }
        )
      )
    const backend: Backend = {
      write: (checked) => writeMany([checked]),
      writeMany,
      get: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.flatMap(bodies(run(statements.get, [key])), ([found]) =>
            found === undefined ? Effect.fail(notFound(key)) : Effect.succeed(found)
          )
        ),
      getMany: (urns) =>
        Effect.flatMap(checkUrns(urns), (keys) => {
          // One query per batch of keys (IN list), then back into the order asked.
          const batches: Array<Array<string>> = []
          const distinct = [...new Set(keys)]
          for (let offset = 0; offset < distinct.length; offset += keysPerQuery)
            batches.push(distinct.slice(offset, offset + keysPerQuery))
          return Effect.map(
            Effect.forEach(batches, (batch) => bodies(run(statements.getMany(batch.length), batch))),
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
        Effect.flatMap(checkUrn(urn), (key) => {
          const [from, to] = prefixRange(key)
          return bodies(run(statements.findByPrefix, [from, to]))
        }),
      findByType: (type) => bodies(run(statements.findByType, [type])),
      delete: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          guard(Effect.map(run(statements.delete, [key]), (rows) => rows.length > 0))
        ),
      transaction: (effect) => guard(transaction(effect))
    }
    return fromBackend(backend, options)
  })

/** Columns of one upserted row, in the order `upsertParameters` lays them out. */
const upsertColumns = ["urn", "type", "parent", "body"] as const

const upsertParameters = (resource: Resource.Resource): Array<unknown> => [
  resource.meta.urn,
  resource.meta.type,
  resource.meta.parent ?? null,
  JSON.stringify(resource)
]

/**
 * The store's statements, compiled once (`Prepared`) and run on the connection directly: a
 * planner run on SQLite makes some 200 of them, each a few microseconds of effect's statement
 * (a span, a scope, a compile) otherwise. Those taking a number of rows (an `IN` list, a
 * multi-row upsert) are compiled once per number.
 */
const storeStatements = (sql: SqlClient.SqlClient) => {
  const table = sql(resourcesTable)
  const columns = upsertColumns.length
  return {
    get: Prepared.make(1, ([urn]) => sql`SELECT urn, body FROM ${table} WHERE urn = ${urn}`),
    getMany: Prepared.perCount((count) =>
      Prepared.make(count, (urns) => sql`SELECT urn, body FROM ${table} WHERE ${sql.in("urn", urns)}`)
    ),
    findByPrefix: Prepared.make(
      2,
      ([from, to]) => sql`SELECT urn, body FROM ${table} WHERE urn >= ${from} AND urn < ${to} ORDER BY urn`
    ),
    findByType: Prepared.make(
      1,
      ([type]) => sql`SELECT urn, body FROM ${table} WHERE type = ${type} ORDER BY urn`
    ),
    delete: Prepared.make(1, ([urn]) => sql`DELETE FROM ${table} WHERE urn = ${urn} RETURNING urn`),
    // A URN fixes its resource's type and parent (it is parent + type + hash; `Resource.decode`
    // refuses any other), so a put again changes the body only. Set alone: a column assigned in
    // an UPDATE has its indexes rewritten even when its value stays, and a task stored at each
    // state change rewrote its `(type, urn)` entry each time (8 WAL pages against 16 for eight
    // such updates in one transaction).
    upsert: Prepared.perCount((count) =>
      Prepared.make(
        count * columns,
        (parameters) => sql`INSERT INTO ${table} ${sql.insert(
          Array.from({ length: count }, (_, row) =>
            Object.fromEntries(
              upsertColumns.map((column, place) => [column, parameters[row * columns + place]])
            )
          ) as [Record<string, unknown>]
        )}
        ON CONFLICT (urn) DO UPDATE SET body = excluded.body`
      )
    )
  }
}

/**
 * `sql.withTransaction`, grouped on SQLite: the body runs in the group's transaction (another
 * fiber's) with the caller's own services, the transaction's connection added.
 */
const groupedTransactions = (sql: SqlClient.SqlClient) => {
  if (Database.dialectOf(sql) === "pg") return sql.withTransaction
  // Gathered: writers that start in one turn (a planner's sibling tasks) share a COMMIT; the
  // vector index's copy is caught up once before it (`beforeCommit`), not once a write.
  const grouped = GroupCommit.make(sql, { gather: true, beforeCommit: true })
  return <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError.SqlError, R> =>
    Effect.flatMap(Effect.context<R>(), (caller) =>
      grouped(() =>
        Effect.withFiber((fiber) => {
          // Always there: the group runs its bodies inside its transaction.
          const level = Prepared.openTransaction(sql, fiber.context)
          return level === undefined
            ? Effect.die(new Error("no transaction is open"))
            : Effect.provideContext(effect, Context.add(caller, sql.transactionService, level))
        })
      )
    )
}

export const layer = (
  options: Options
): Layer.Layer<ResourceStore, ResourceStoreError, SqlClient.SqlClient> =>
  Layer.effect(ResourceStore, make(options))

/** The store on the command's `Database` (its location, dialect and read-only flag). */
export const fromDatabase: Effect.Effect<
  Service,
  ResourceStoreError,
  SqlClient.SqlClient | Database.Database
> = Database.store(make)

export const layerFromDatabase: Layer.Layer<
  ResourceStore,
  ResourceStoreError,
  SqlClient.SqlClient | Database.Database
> = Layer.effect(ResourceStore, fromDatabase)
