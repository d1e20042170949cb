/**
 * Database: the one SQL database every noema store shares.
 *
 * Sessions, runs, resources and routines keep their tables in one database:
 * an embedded SQLite file (noema's `node:sqlite` driver) or a PostgreSQL
 * server (`@effect/sql-pg`). This module opens it once, as effect's
 * `SqlClient`, and each store runs its own migrations (effect's `Migrator`,
 * one migrations table per store) over that client. One process holds one
 * client per database: SQLite allows one writer at a time, and two handles on
 * one file in one process would only wait on each other.
 *
 * A SQLite file is checked before anything is written to it: an empty
 * database, or one marked as noema's (`PRAGMA application_id`), is opened;
 * anything else is refused with a one-line `DatabaseError` (`Foreign`) and left untouched. A
 * writable file is then switched to WAL with `synchronous=FULL` (a commit that
 * returned survives a crash or a power cut) and marked as noema's; a new file
 * is created private to its user (0600, with its directory 0700). Opened
 * `readonly`, nothing at all is written (see `SqliteStore`).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { SqliteClient } from "@noema/sql-sqlite"
import { Context, Duration, Effect, Layer, Redacted, type Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient, type SqlError } from "effect/sql"
import { type DatabaseError, fromSqlError, io, make, ReadOnly } from "./DatabaseError.js"
import { applicationId, checkOwner, isEmpty, sqliteMarks } from "./internal/databaseFile.js"
import * as Postgres from "./Postgres.js"

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

export interface SqliteOptions {
  readonly kind: "sqlite"
  /** The database file (created with its directory if missing), or ":memory:". */
  readonly filename: string
  /** How long a write waits for another process's lock before failing with `Locked`. Default 5 seconds. */
  readonly busyTimeout?: Duration.Input
  /** Open for reading only and write nothing; the file must exist. Default false. */
  readonly readonly?: boolean
}

export interface PostgresOptions extends Postgres.Options {
  readonly kind: "postgres"
}

export type Options = SqliteOptions | PostgresOptions

/**
 * The database a `--database` / `NOEMA_DATABASE_URL` value names: a `postgres://`
 * or `postgresql://` URL, or a SQLite file path (relative to `cwd`). Any other
 * URL scheme is `undefined`: the caller says which setting was wrong, without
 * repeating the value (a URL may hold a password).
 */
export const fromString = (value: string, cwd: string = process.cwd()): Options | undefined => {
  if (Postgres.isUrl(value)) return { kind: "postgres", url: Redacted.make(value.trim()) }
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return undefined
  return { kind: "sqlite", filename: value === ":memory:" ? value : path.resolve(cwd, value) }
}

/** How the database is named to people: the file's path, or the URL without its password. */
export const describe = (options: Options): string =>
  options.kind === "sqlite"
    ? options.filename === ":memory:"
      ? options.filename
      : path.resolve(options.filename)
    : Postgres.redactUrl(typeof options.url === "string" ? options.url : Redacted.value(options.url))

// ---------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------

/** What the stores over the shared client know of the database they are in. */
export class Database extends Context.Service<
  Database,
  {
    /** How messages name it: a file path, or a URL without its password. */
    readonly location: string
    readonly dialect: Dialect
    /** Opened for reading only: stores check their schema but migrate nothing. */
    readonly readonly: boolean
  }
>()("@noema/sql/Database") {}

/** What a store is told of the database it opens on: how to name it, and whether it may write. */
export interface StoreOptions {
  readonly location: string
  readonly readonly: boolean
}

/**
 * A store made on the database in context (`make` given its location and read-only
 * flag): how every store's `fromDatabase` opens it, so none forgets `readonly`.
 */
export const store = <A, E, R>(
  make: (options: StoreOptions) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R | Database> =>
  Effect.flatMap(Database, (database) => make({ location: database.location, readonly: database.readonly }))

/** `store(make)` as the layer of the store's service: a store beside the others of the database in context. */
export const storeLayer = <I, S, E, R>(
  service: Context.Key<I, S>,
  make: (options: StoreOptions) => Effect.Effect<S, E, R>
): Layer.Layer<I, E, Exclude<R, Scope.Scope> | Database> => Layer.effect(service, store(make))

// ---------------------------------------------------------------------------
// SQLite
// ---------------------------------------------------------------------------

/** Whether SQLite can create files next to `location` (the -shm and -wal of WAL mode). */
const directoryWritable = (location: string): boolean => {
  try {
    fs.accessSync(path.dirname(location), fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

/** Whether a -wal file holds frames not yet in the database file. */
const walPending = (location: string): boolean => {
  try {
    return fs.statSync(`${location}-wal`).size > 0
  } catch {
    return false
  }
}

/**
 * What to open read-only: the file, or (in a directory the user cannot write,
 * with no pending WAL) the file as immutable, since SQLite could not create the
 * -shm file a WAL reader needs and would fail with "attempt to write a readonly
 * database". Safe: no WAL writer can be at work there either, it needs that file too.
 */
const readonlyFilename = (location: string): string => {
  if (directoryWritable(location) || walPending(location)) return location
  const url = pathToFileURL(location)
  url.searchParams.set("immutable", "1")
  return url.href
}

/** Creates the file private to its user (and its directory), before SQLite would create it 0644. */
const createPrivately = (location: string) =>
  Effect.flatMap(
    Effect.try({
      try: () => {
        fs.mkdirSync(path.dirname(location), { recursive: true, mode: 0o700 })
        if (fs.existsSync(location)) return
        try {
          fs.closeSync(fs.openSync(location, "wx", 0o600))
        } catch (error) {
          // Another process created it meanwhile: theirs it is.
          if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
        }
      },
      catch: (error) => io(location, error)
    }),
    () => writable(location)
  )

/**
 * A database to write must be writable, and so must its directory (SQLite writes its
 * journal there): otherwise `ReadOnly` at once, whatever makes it so (the modes, another
 * user's file, a read-only file system), before SQLite fails less clearly on the first write.
 */
const writable = (location: string): Effect.Effect<void, DatabaseError> => {
  for (const target of [location, path.dirname(location)]) {
    try {
      fs.accessSync(target, fs.constants.W_OK)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === "EACCES" || code === "EPERM" || code === "EROFS")
        return Effect.fail(
          make(
            new ReadOnly({
              location,
              detail: `${target === location ? "the file" : "its directory"}: ${code}`
            })
          )
        )
      return Effect.fail(io(location, error))
    }
  }
  return Effect.void
}

export type Dialect = "sqlite" | "pg"

/**
 * The dialect of a `SqlClient`: PostgreSQL, or SQLite for anything else noema opens.
 * Statements are written once as effect's tagged templates; this names the dialect
 * only where the SQL itself differs (a column type, a lock clause).
 */
export const dialectOf = (sql: SqlClient.SqlClient): Dialect =>
  sql.onDialectOrElse({ pg: () => "pg" as const, orElse: () => "sqlite" as const })

/**
 * For a store about to create its tables in a SQLite file it was handed as a
 * bare `SqlClient` (not through `Database.layer`, which does this when it
 * opens the file): refuses a file that is neither empty nor noema's, untouched,
 * and marks an empty one as noema's. Run it in the transaction that migrates,
 * so the check and the tables land together.
 */
export const claimSqlite = (
  sql: SqlClient.SqlClient,
  location: string
): Effect.Effect<void, DatabaseError | SqlError.SqlError> =>
  Effect.gen(function* () {
    const marks = yield* sqliteMarks(sql)
    const refused = checkOwner(marks, location)
    if (refused !== undefined) return yield* Effect.fail(refused)
    if (isEmpty(marks)) yield* sql.unsafe(`PRAGMA application_id = ${applicationId}`)
  })

/**
 * Checks the file is empty or noema's; writable, switches it to WAL and marks
 * an empty one as noema's in one `BEGIN IMMEDIATE` transaction, which re-reads
 * the marks under the write lock (another process may have written meanwhile).
 */
const claim = (client: SqlClient.SqlClient, location: string, readonly: boolean) =>
  Effect.gen(function* () {
    const marks = yield* sqliteMarks(client)
    const refused = checkOwner(marks, location)
    if (refused !== undefined) return yield* Effect.fail(refused)
    if (readonly) return
    yield* client.unsafe("PRAGMA journal_mode = WAL")
    if (marks.applicationId === applicationId) return
    yield* client.withTransaction(claimSqlite(client, location))
  })

/**
 * Opens a SQLite database as `SqliteClient` (and `SqlClient`), claimed as
 * noema's (see `claim`), with `Database` describing it. Closed with the scope.
 */
export const sqlite = (
  options: Omit<SqliteOptions, "kind">
): Effect.Effect<
  Context.Context<SqliteClient.SqliteClient | SqlClient.SqlClient | Database>,
  DatabaseError,
  Scope.Scope
> => {
  const isFile = options.filename !== ":memory:"
  const location = isFile ? path.resolve(options.filename) : options.filename
  const readonly = options.readonly === true
  return Effect.gen(function* () {
    if (isFile && !readonly) yield* createPrivately(location)
    if (isFile && readonly && !fs.existsSync(location)) {
      return yield* Effect.fail(io(location, "no such file"))
    }
    const toDatabaseError = (error: SqlError.SqlError) => fromSqlError(location, error)
    const client = yield* SqliteClient.make({
      filename: isFile && readonly ? readonlyFilename(location) : location,
      readonly,
      busyTimeout: options.busyTimeout ?? Duration.seconds(5),
      // WAL is switched on below, once the file is known to be ours: a foreign file stays untouched.
      wal: false,
      synchronous: "FULL"
    }).pipe(
      Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make),
      Effect.mapError(toDatabaseError)
    )
    yield* claim(client, location, readonly).pipe(
      Effect.catchTag("SqlError", (error) => Effect.fail(toDatabaseError(error)))
    )
    return Context.make(SqliteClient.SqliteClient, client).pipe(
      Context.add(SqlClient.SqlClient, client),
      Context.add(Database, { location, dialect: "sqlite", readonly })
    )
  })
}

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

/**
 * The database as `SqlClient` (and `Database`) for every store of a program:
 * SQLite through `sqlite`, PostgreSQL through `Postgres.layer` (a pool that
 * checks the server answers before the layer is built). Nothing is opened
 * until the layer is built; it is closed with it.
 */
export const layer = (options: Options): Layer.Layer<SqlClient.SqlClient | Database, DatabaseError> => {
  if (options.kind === "sqlite") {
    const { kind: _, ...rest } = options
    return Layer.effectContext(sqlite(rest))
  }
  const { kind: _, ...rest } = options
  return Layer.merge(
    Postgres.layer(rest),
    Layer.succeed(Database, { location: describe(options), dialect: "pg", readonly: false })
  )
}
