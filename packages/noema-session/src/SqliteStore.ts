/**
 * SqliteStore: the embedded default session store, one SQLite file.
 *
 * The SQL store (`SqlStore`) over noema's `node:sqlite` driver for effect's
 * `SqlClient` (`@noema/sql-sqlite`), opened by `Database.sqlite`: WAL with `synchronous=FULL`, so a commit
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
import { Database } from "@noema/sql"
import { Effect, Layer, type Scope } from "effect"
import { fromDatabaseError, type Service, SessionStore, type StoreError } from "./SessionStore.js"
import * as SqlStore from "./SqlStore.js"

/** The file, and how to open it (see `Database.SqliteOptions`). */
export type Options = Omit<Database.SqliteOptions, "kind">

/** Opens (creating or migrating) the database; it is closed when the scope closes. */
export const make = (options: Options): Effect.Effect<Service, StoreError, Scope.Scope> =>
  Effect.flatMap(Effect.mapError(Database.sqlite(options), fromDatabaseError), (context) =>
    Effect.provideContext(SqlStore.fromDatabase, context)
  )

/** The SQLite store as the `SessionStore` service. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError> =>
  Layer.effect(SessionStore, make(options))
