/**
 * Databases: how every command opens the configured database (`--database`,
 * `NOEMA_DATABASE_URL`, default `$NOEMA_HOME/noema.db`): one shared client per
 * database, the session store on it, and read-only opening for the commands
 * that only read.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { SessionStore, SqlStore } from "@noema/session"
import { Database, DatabaseError } from "@noema/sql"
import { Cause, Effect, Exit, Layer, ManagedRuntime, Schema } from "effect"
import type { SqlClient } from "effect/sql"
import type { DatabaseConfig } from "../CliConfig.js"
import type * as Frame from "./Frame.js"
import * as Tracing from "./tracing.js"

export type StoreRuntime = ManagedRuntime.ManagedRuntime<SessionStore.SessionStore, SessionStore.StoreError>

/** A database's store, not yet opened: what `openStore` runs. */
export interface StoreLayer {
  readonly database: DatabaseConfig
  /** The database's shared client (one per runtime: layers are built once however often used). */
  readonly client: Layer.Layer<SqlClient.SqlClient | Database.Database, SessionStore.StoreError>
  readonly layer: Layer.Layer<SessionStore.SessionStore, SessionStore.StoreError>
}

/**
 * The configured database as the shared `SqlClient` (with `Database`): the one
 * place that turns `--database` / `NOEMA_DATABASE_URL` into a connection, for
 * every command and every store in it (sessions, and the systems above them),
 * so one process holds one client per database. A PostgreSQL pool is small: a
 * command runs one turn or one listing at a time. Building the layer opens nothing yet.
 */
export const databaseLayer = (
  database: DatabaseConfig,
  options: { readonly readonly?: boolean; readonly maxConnections?: number } = {}
): Layer.Layer<SqlClient.SqlClient | Database.Database, DatabaseError.DatabaseError> =>
  Database.layer(
    database.kind === "sqlite"
      ? { kind: "sqlite", filename: database.path, ...(options.readonly === true && { readonly: true }) }
      : { kind: "postgres", url: database.url, maxConnections: options.maxConnections ?? 2 }
  )

/**
 * The session store for `database`, in the database's shared client (errors
 * name a PostgreSQL server without its password). Building the layer opens nothing yet.
 */
export const storeLayer = (
  database: DatabaseConfig,
  options: { readonly readonly?: boolean } = {}
): StoreLayer => {
  // The session store's contract says `StoreError`: the database's reason, as it is.
  const client = Layer.effectContext(
    Effect.mapError(Layer.build(databaseLayer(database, options)), SessionStore.fromDatabaseError)
  )
  return { database, client, layer: SqlStore.layerFromDatabase.pipe(Layer.provide(client)) }
}

/**
 * Opens the store (for SQLite, its directory is created, private to the user) for a command
 * that runs turns, with the frame's tracing: the exporter's tracer if there is one, and the
 * recording of turns' traces in the same database over it (both get every span).
 */
export const openStore = (
  store: StoreLayer | DatabaseConfig,
  tracing?: Pick<Frame.Shape, "tracer" | "localTraces">
): StoreRuntime => {
  const { database, client, layer } = "layer" in store ? store : storeLayer(store)
  if (database.kind === "sqlite") fs.mkdirSync(path.dirname(database.path), { recursive: true, mode: 0o700 })
  const exporter = tracing?.tracer
  const local = tracing?.localTraces
  const recording = local === undefined ? undefined : Tracing.recording(local).pipe(Layer.provide(client))
  // The tracers live as long as the runtime: disposing it writes the traces that wait and flushes the spans.
  const tracer =
    recording === undefined
      ? exporter
      : exporter === undefined
        ? recording
        : recording.pipe(Layer.provideMerge(exporter))
  return ManagedRuntime.make(tracer === undefined ? layer : Layer.merge(layer, tracer))
}

/** A reading command found no SQLite file where the database should be: it creates none. */
export class NoDatabase extends Schema.TaggedError<NoDatabase>()("NoDatabase", { location: Schema.String }) {
  override get message(): string {
    return `there is no database at ${this.location} (nothing is stored there yet); nothing was created`
  }
}

/**
 * The database's own reason for `error`, wherever the store that failed keeps it:
 * a `DatabaseError`, a store error's `reason` (sessions, runs), or its `cause` (resources, vectors).
 */
const databaseReason = (error: unknown): DatabaseError.Reason | undefined => {
  let value = error
  for (let depth = 0; depth < 4 && typeof value === "object" && value !== null; depth++) {
    const { reason, cause } = value as { readonly reason?: unknown; readonly cause?: unknown }
    if (isReason(reason)) return reason
    value = cause
  }
  return undefined
}

const isReason = Schema.is(DatabaseError.Reason)

const needsMigration = (error: unknown): boolean =>
  databaseReason(error) instanceof DatabaseError.NeedsMigration

/**
 * How every command opens the database, the one place that applies `readsOnly`
 * (`CliArguments`): `open` is given the database read-only for a command that only
 * reads a SQLite file, so a database the user may only read (mode 0444, a read-only
 * directory, another user's file) answers it, and nothing is written. Such a command
 * creates no database that is not there (`NoDatabase`). A file of an earlier noema
 * that needs migrating is migrated by opening it with write access instead; if that
 * fails on the database too, the read-only open's one-line `NeedsMigration` says why.
 * PostgreSQL, and every command that writes, open as usual. `open` must fail before
 * it shows anything when the database does not open: it may run twice.
 */
export const openReadOnlyFirst = <A, E, R>(
  database: DatabaseConfig,
  readsOnly: boolean,
  open: (options: { readonly readonly: boolean }) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | NoDatabase, R> => {
  if (!readsOnly || database.kind !== "sqlite") return open({ readonly: false })
  if (!fs.existsSync(database.path)) return Effect.fail(new NoDatabase({ location: database.path }))
  return open({ readonly: true }).pipe(
    Effect.catchIf(needsMigration, (error) =>
      open({ readonly: false }).pipe(
        Effect.catchIf(
          (again) => databaseReason(again) !== undefined,
          () => Effect.fail(error)
        )
      )
    )
  )
}

/** `program` on the configured database, opened as `openReadOnlyFirst` decides. */
export const provideDatabase = <A, E, R>(
  program: Effect.Effect<A, E, R>,
  database: DatabaseConfig,
  readsOnly: boolean,
  /** A PostgreSQL pool's size, when the command needs more than one turn's (a cluster runner). */
  maxConnections?: number
): Effect.Effect<
  A,
  E | DatabaseError.DatabaseError | NoDatabase,
  Exclude<R, SqlClient.SqlClient | Database.Database>
> =>
  openReadOnlyFirst(database, readsOnly, (options) =>
    Effect.provide(
      program,
      databaseLayer(database, { ...options, ...(maxConnections !== undefined && { maxConnections }) })
    )
  )

/**
 * Opens the session store as `openReadOnlyFirst` decides (`sessions list`, `show` and
 * `export` only read): the runtime, once the store opened.
 */
export const openFor = (database: DatabaseConfig, readsOnly: boolean): Promise<StoreRuntime> =>
  Effect.runPromise(
    openReadOnlyFirst(database, readsOnly, (options) =>
      Effect.tryPromise({
        try: async () => {
          const runtime = options.readonly
            ? ManagedRuntime.make(storeLayer(database, options).layer)
            : openStore(database)
          const exit = await runtime.runPromiseExit(Effect.void)
          if (Exit.isSuccess(exit)) return runtime
          await runtime.dispose()
          throw Cause.squash(exit.cause)
        },
        catch: (error) => error
      })
    )
  )

/** Runs `effect` on the runtime and returns its value, or throws its failure. */
export const runOn = async <A, E>(
  runtime: StoreRuntime,
  effect: Effect.Effect<A, E, SessionStore.SessionStore>
): Promise<A> => {
  const exit = await runtime.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}
