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
 * an earlier release is migrated in place.
 */
import * as fs from "node:fs"
import * as path from "node:path"
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
}

/** Opens (creating or migrating) the database; it is closed when the scope closes. */
export const make = (options: Options): Effect.Effect<Service, StoreError, Scope.Scope> => {
  const isFile = options.filename !== ":memory:"
  const location = isFile ? path.resolve(options.filename) : options.filename
  return Effect.gen(function* () {
    if (isFile) {
      yield* Effect.try({
        try: () => fs.mkdirSync(path.dirname(location), { recursive: true }),
        catch: (error) =>
          new StoreError({
            reason: new IoFailure({
              location,
              detail: error instanceof Error ? error.message : String(error)
            })
          })
      })
    }
    const client = yield* SqliteClient.make({
      filename: location,
      busyTimeout: options.busyTimeout ?? Duration.seconds(5),
      // The store switches to WAL itself, once it knows the file is its own: a foreign file stays untouched.
      wal: false,
      synchronous: "FULL"
    }).pipe(
      Effect.provideServiceEffect(Reactivity.Reactivity, Reactivity.make),
      Effect.mapError((error) => SqlStore.storeError(location, error))
    )
    return yield* Effect.provideService(SqlStore.make({ location }), SqlClient.SqlClient, client)
  })
}

/** The SQLite store as the `SessionStore` service. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError> =>
  Layer.effect(SessionStore, make(options))
