/**
 * SqliteStore: the embedded default session store, one SQLite file.
 *
 * The SQL store (`SqlStore`) over noema's `node:sqlite` driver for effect's
 * `SqlClient` (`@noema/sql-sqlite`): WAL with `synchronous=FULL`, so a commit
 * that returned has reached the disk and survives a crash or a power cut, and
 * readers never block the writer; appends are `BEGIN IMMEDIATE` transactions,
 * so concurrent handles, also in other processes, cannot interleave. A file
 * that is corrupt, belongs to another application or was written by a newer
 * noema is refused with a one-line `StoreError` and left untouched; a file of
 * an earlier release is migrated in place. A new file is created private to
 * its user (0600; SQLite gives its -wal and -shm files the same mode).
 *
 * Opened `readonly`, the store writes nothing at all: no directory, file or
 * migration, no switch to WAL. A database in a directory the user cannot write
 * (where SQLite cannot create the -shm file a WAL reader needs) is then read as
 * immutable, which is safe because no writer can be at work in it either: a
 * WAL writer needs that file too. Writes fail with a `StoreError`.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { SqliteClient } from "@noema/sql-sqlite"
import { Duration, Effect, Layer, type Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql"
import { IoFailure, type Service, SessionStore, StoreError } from "./SessionStore.js"
import * as SqlStore from "./SqlStore.js"

export interface Options {
  /** The database file (created with its directory if missing), or ":memory:". */
  readonly filename: string
  /** How long a write waits for another process's lock before failing with `Locked`. Default 5 seconds. */
  readonly busyTimeout?: Duration.Input
  /**
   * Open for reading only and write nothing (for commands that only read). The
   * file must exist and be current: one that needs migrating fails with
   * `NeedsMigration`. Default false.
   */
  readonly readonly?: boolean
}

const ioFailure = (location: string, error: unknown) =>
  new StoreError({
    reason: new IoFailure({ location, detail: error instanceof Error ? error.message : String(error) })
  })

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
 * -shm file a WAL reader needs and would fail with "attempt to write a readonly database".
 */
const readonlyFilename = (location: string): string => {
  if (directoryWritable(location) || walPending(location)) return location
  const url = pathToFileURL(location)
  url.searchParams.set("immutable", "1")
  return url.href
}

/** Opens (creating or migrating) the database; it is closed when the scope closes. */
export const make = (options: Options): Effect.Effect<Service, StoreError, Scope.Scope> => {
  const isFile = options.filename !== ":memory:"
  const location = isFile ? path.resolve(options.filename) : options.filename
  return Effect.gen(function* () {
    const readonly = options.readonly === true
    if (isFile && !readonly) {
      yield* Effect.try({
        try: () => {
          fs.mkdirSync(path.dirname(location), { recursive: true, mode: 0o700 })
          // Created here, private to the user, before SQLite would create it with 0644.
          if (!fs.existsSync(location)) {
            try {
              fs.closeSync(fs.openSync(location, "wx", 0o600))
            } catch (error) {
              // Another process created it meanwhile: theirs it is.
              if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
            }
          }
        },
        catch: (error) => ioFailure(location, error)
      })
    }
    if (isFile && readonly && !fs.existsSync(location)) {
      return yield* Effect.fail(ioFailure(location, "no such file"))
    }
    const client = yield* SqliteClient.make({
      filename: isFile && readonly ? readonlyFilename(location) : location,
      readonly,
      busyTimeout: options.busyTimeout ?? Duration.seconds(5),
      // The store switches to WAL itself, once it knows the file is its own: a foreign file stays untouched.
      wal: false,
      synchronous: "FULL"
    }).pipe(
      Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make),
      Effect.mapError((error) => SqlStore.storeError(location, error))
    )
    return yield* Effect.provideService(SqlStore.make({ location, readonly }), SqlClient.SqlClient, client)
  })
}

/** The SQLite store as the `SessionStore` service. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError> =>
  Layer.effect(SessionStore, make(options))
