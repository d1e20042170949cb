/**
 * The vec0 copy of the SQLite vector index (sqlite-vec): the vectors of `noema_vectors` again, in
 * a `vec0` virtual table whose brute-force KNN reads packed float chunks in C instead of one row
 * per vector in JS. It only proposes candidates: the index re-scores them from `noema_vectors`,
 * which stays the one truth (see `VectorIndex`).
 *
 * The copy is never stale unnoticed. With it come triggers on `noema_vectors` that log the URN of
 * every row inserted, updated or deleted into a change table; they live in the database file, so
 * they fire for every writer: a process without the extension, an older noema, a plain `sqlite3`
 * shell. A writer with the extension applies the log in its own transaction (`catchUp`); a search
 * that finds the log non-empty catches up first, or (read-only) is told the copy is stale.
 *
 * Not a migration: creating a vec0 table needs the extension, which not every process opening
 * the database has, and a new migration would make the database "too new" for an older noema.
 * The copy is derived data, made by the first process that can, rebuilt when cheaper than
 * catching up, and named by its dimension count (a `reset` to another embedder gets a new one).
 *
 * vec0 filters its primary key only after the KNN (wrong results with `k`), so the URN is kept a
 * second time as the metadata column `prefix_key`, which it filters inside the KNN. Two bugs of
 * sqlite-vec 0.1.9 in text range comparisons shape the key: a column holding a value of exactly
 * 12 bytes fails the query ("Could not filter metadata fields"), and a value that is a prefix of
 * the bound compares as equal to it (so `p < p + "0"` is false). The key is therefore the URN, a
 * space, and more spaces up to at least 13 bytes: no value is 12 bytes long, and a URN equal to
 * the prefix `p` or under it (`p/...`) differs from the bound `p + "0"` at the byte after `p` (a
 * space or "/", both below "0"), so the range `[p, p + "0")` holds every URN the prefix asks
 * for, plus perhaps a lookalike (`p-x`), which the caller drops.
 */
import { Prepared } from "@noema/sql"
import { SqliteClient } from "@noema/sql-sqlite"
import { Effect } from "effect"
import type { SqlClient, SqlError } from "effect/sql"
import { getLoadablePath } from "sqlite-vec"

/** vec0's largest `k` (`SQLITE_VEC_VEC0_K_MAX`). */
export const maxK = 4096

/** A KNN candidate: its row in `noema_vectors`, and its L2 distance to the query as vec0 computed it. */
export interface Candidate {
  readonly urn: string
  readonly type: string
  readonly vector: Uint8Array
  readonly distance: number
}

export interface Filters {
  readonly type?: string | undefined
  readonly prefix?: string | undefined
}

/** What the copy proposes: candidates read in one snapshot with a fresh copy, or that it was stale. */
export type Nearest =
  | { readonly stale: false; readonly candidates: ReadonlyArray<Candidate> }
  | { readonly stale: true }

/** What a search needs to know before it asks the copy. */
export interface State {
  /** Whether writers changed `noema_vectors` since the copy last caught up. */
  readonly stale: boolean
  /** The table's largest rowid: its row count or more, in one index lookup. */
  readonly extent: number
}

export interface Copy {
  readonly state: Effect.Effect<State, SqlError.SqlError>
  /** Applies the change log; run it inside the writer's transaction. */
  readonly catchUp: Effect.Effect<void, SqlError.SqlError>
  /** Empties the copy and fills it again from `noema_vectors`, in the caller's transaction. */
  readonly rebuild: Effect.Effect<void, SqlError.SqlError>
  /**
   * The `k` (at most `maxK`) rows nearest to `query` that pass a superset of `filters` (the
   * prefix range may let a lookalike in), in no particular order; or, when writers changed
   * `noema_vectors` since the copy last caught up, only that it is stale.
   */
  readonly nearest: (
    query: Float32Array,
    k: number,
    filters: Filters
  ) => Effect.Effect<Nearest, SqlError.SqlError>
}

/** Why there is no copy to search: said once, as a warning, by the index. */
export class Unavailable {
  readonly _tag = "Unavailable"
  constructor(readonly reason: string) {}
}

export interface Options {
  /** The index's table (`noema_vectors`). */
  readonly vectors: string
  readonly dimensions: number
  readonly readonly: boolean
  /** The extension's shared library; default the `sqlite-vec` package's build for this platform. */
  readonly extension?: string | undefined
}

/** The URN as `prefix_key` (see the header): a space, and more up to at least 13 bytes. */
const prefixKey = (column: string) =>
  `${column} || substr('             ', 1, max(1, 13 - length(CAST(${column} AS BLOB))))`

const causeOf = (error: SqlError.SqlError): string =>
  error.reason.cause instanceof Error ? error.reason.cause.message : error.message

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`

/** Loads sqlite-vec into the connection unless it is there already (another index loaded it). */
const load = (
  sql: SqlClient.SqlClient,
  extension: string | undefined
): Effect.Effect<Unavailable | undefined> => {
  if (!SqliteClient.isSqliteClient(sql))
    return Effect.succeed(new Unavailable("the SQL client is not noema's node:sqlite driver"))
  const client = sql
  return Effect.gen(function* () {
    const loaded = yield* Effect.isSuccess(client.unsafe("SELECT vec_version()"))
    if (loaded) return undefined
    let file: string
    try {
      file = extension ?? getLoadablePath()
    } catch (error) {
      return new Unavailable(`sqlite-vec has no build here: ${(error as Error).message}`)
    }
    return yield* client.loadExtension(file).pipe(
      Effect.as(undefined),
      Effect.catch((error) =>
        Effect.succeed(new Unavailable(`sqlite-vec could not be loaded from ${file}: ${causeOf(error)}`))
      )
    )
  })
}

/**
 * Vectors per vec0 chunk (sqlite-vec's default is 1024). A KNN reads each chunk's vectors whole,
 * as one blob sized for the chunk however few it holds, so a copy of a few hundred vectors read
 * 1.5 MB (at 384 dimensions) a search: about 0.26 against 0.5 ms at 300 vectors, 0.6 against
 * 0.8 ms at 1,300 (k = 52), the same at 100,000 (48 ms either way; 128 was slower there). A copy
 * made before keeps its chunks until it is rebuilt (a `reset`).
 */
export const chunkSize = 256

/** How much of the file SQLite reads through `mmap` once a copy is opened (see `mapped`). */
export const mmapBytes = 256 * 1024 * 1024

/**
 * The connection reads the file through `mmap` (`PRAGMA mmap_size`), unless its opener chose a
 * size already: a KNN reads every chunk of packed vectors as a blob, which through the pager is
 * copied page by page along the blob's overflow chain (about 1.5x slower at a few hundred vectors
 * here). Reads only: writes still go through the pager and the WAL, committed and synced as before.
 */
const mapped = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const [current] = yield* sql<{ mmap_size: number }>`PRAGMA mmap_size`
    if ((current?.mmap_size ?? 0) === 0) yield* sql.unsafe(`PRAGMA mmap_size = ${mmapBytes}`)
  })

/**
 * sqlite-vec loaded into the connection, and the copy of `options.vectors` ready (made now when
 * missing and the database is writable); `Unavailable` says why not.
 */
export const open = (
  sql: SqlClient.SqlClient,
  options: Options
): Effect.Effect<Copy | Unavailable, SqlError.SqlError> =>
  Effect.gen(function* () {
    const missing = yield* load(sql, options.extension)
    if (missing !== undefined) return missing
    const names = {
      vectors: quoted(options.vectors),
      changes: quoted(`${options.vectors}_changes`),
      copy: quoted(`${options.vectors}_vec0_${options.dimensions}`),
      copyName: `${options.vectors}_vec0_${options.dimensions}`
    }
    yield* mapped(sql)
    const copy = make(sql, options, names)
    const exists =
      (yield* sql<{ n: number }>`SELECT count(*) AS n FROM sqlite_schema WHERE name = ${names.copyName}`)[0]
        ?.n === 1
    if (exists) return copy
    if (options.readonly)
      return new Unavailable("the database is read-only and has no vec0 copy of the vectors yet")
    yield* sql.withTransaction(create(sql, options, names, copy))
    return copy
  })

interface Names {
  readonly vectors: string
  readonly changes: string
  readonly copy: string
  readonly copyName: string
}

/** The change log, its triggers and the copy, in the caller's transaction (again if another process won). */
const create = (sql: SqlClient.SqlClient, options: Options, names: Names, copy: Copy) =>
  Effect.gen(function* () {
    // Not `INSERT OR IGNORE`: inside a trigger, an upsert's own conflict clause would override it.
    const log = (row: "new" | "old") =>
      `INSERT INTO ${names.changes} (urn) SELECT ${row}.urn WHERE NOT EXISTS (SELECT 1 FROM ${names.changes} WHERE urn = ${row}.urn);`
    const trigger = (event: string, body: string) =>
      sql.unsafe(
        `CREATE TRIGGER IF NOT EXISTS ${quoted(`${options.vectors}_changed_${event.toLowerCase()}`)} AFTER ${event} ON ${names.vectors} BEGIN ${body} END`
      )
    yield* sql.unsafe(
      `CREATE TABLE IF NOT EXISTS ${names.changes} (urn TEXT NOT NULL PRIMARY KEY) WITHOUT ROWID`
    )
    yield* trigger("INSERT", log("new"))
    yield* trigger("UPDATE", `${log("old")} ${log("new")}`)
    yield* trigger("DELETE", log("old"))
    // Copies for another dimension count (an embedder since reset) are of no use any more.
    const others = yield* sql<{ name: string }>`SELECT name FROM sqlite_schema WHERE type = 'table'
      AND name LIKE ${`${options.vectors}_vec0_%`} AND name != ${names.copyName} AND sql LIKE 'CREATE VIRTUAL TABLE%'`
    for (const other of others) yield* sql.unsafe(`DROP TABLE ${quoted(other.name)}`)
    yield* copy.rebuild
  })

/** A statement run with its parameters: rows as arrays of column values. */
type Run = (
  args?: ReadonlyArray<unknown>
) => Effect.Effect<ReadonlyArray<ReadonlyArray<unknown>>, SqlError.SqlError>

/** A statement of fixed text taking `arity` parameters, compiled once and run on the connection (`Prepared`). */
const fixed = (sql: SqlClient.SqlClient, text: string, arity = 0): Run => {
  const statement = Prepared.make(arity, (args) => sql.unsafe(text, args))
  return (args: ReadonlyArray<unknown> = []) => Prepared.values(sql, statement, args)
}

const make = (sql: SqlClient.SqlClient, options: Options, names: Names): Copy => {
  const fill = (where: string) =>
    `INSERT INTO ${names.copy} (urn, vector, type, prefix_key)
      SELECT urn, vector, type, ${prefixKey("urn")} FROM ${names.vectors} ${where}`
  const rebuild = Effect.gen(function* () {
    yield* sql.unsafe(`DROP TABLE IF EXISTS ${names.copy}`)
    yield* sql.unsafe(
      `CREATE VIRTUAL TABLE ${names.copy} USING vec0(urn TEXT PRIMARY KEY, vector float[${options.dimensions}], type TEXT, prefix_key TEXT, chunk_size=${chunkSize})`
    )
    yield* sql.unsafe(fill(""))
    yield* sql.unsafe(`DELETE FROM ${names.changes}`)
  })
  // The statements of every write and search, run straight on the connection: a planner run on
  // SQLite makes about a hundred of them.
  const readLog = fixed(
    sql,
    `SELECT log.urn AS urn, EXISTS (SELECT 1 FROM ${names.copy} AS copy WHERE copy.urn = log.urn) AS present
      FROM ${names.changes} AS log`
  )
  const deleteOne = fixed(sql, `DELETE FROM ${names.copy} WHERE urn = ?`, 1)
  const fillChanged = fixed(sql, fill(`WHERE urn IN (SELECT urn FROM ${names.changes})`))
  const emptyLog = fixed(sql, `DELETE FROM ${names.changes}`)
  const catchUp = Effect.gen(function* () {
    // Whether the copy holds each (`urn, present`): a URN new to the table is new to the copy
    // (nothing to delete).
    const changed = yield* readLog()
    if (changed.length === 0) return
    // Many changes (an older noema's reset, a bulk load elsewhere): filling anew is cheaper.
    if (changed.length > 1000) {
      const [row] = yield* sql<{ n: number }>`SELECT count(*) AS n FROM ${sql.literal(names.vectors)}`
      if (changed.length * 4 > (row?.n ?? 0)) return yield* rebuild
    }
    // One delete each: vec0 finds a key given with `=`, but scans every row for `IN (...)`.
    for (const [urn, present] of changed) if (present === 1) yield* deleteOne([urn])
    // The rows still there, in one statement (a removed vector's URN finds none).
    yield* fillChanged()
    yield* emptyLog()
  })
  // One statement for each set of filters a search gives (type, prefix, both, none).
  const knn = new Map<string, Run>()
  const knnStatement = (filters: Filters) => {
    const shape = `${filters.type !== undefined} ${filters.prefix !== undefined}`
    let statement = knn.get(shape)
    if (statement === undefined) {
      const conditions = ["vector MATCH ?", "k = ?"]
      if (filters.type !== undefined) conditions.push("type = ?")
      if (filters.prefix !== undefined) conditions.push("prefix_key >= ?", "prefix_key < ?")
      // MATERIALIZED: the KNN runs first, on its own; the rows then come from the index's table.
      // The row without a URN says the log is not empty: one statement reads the copy and whether
      // it is fresh from the same snapshot, so no writer can slip in between.
      statement = fixed(
        sql,
        `WITH knn AS MATERIALIZED (SELECT urn, distance FROM ${names.copy} WHERE ${conditions.join(" AND ")})
        SELECT v.urn AS urn, v.type AS type, v.vector AS vector, knn.distance AS distance
        FROM knn JOIN ${names.vectors} AS v ON v.urn = knn.urn
        UNION ALL SELECT NULL, NULL, NULL, NULL WHERE EXISTS (SELECT 1 FROM ${names.changes})`,
        conditions.length
      )
      knn.set(shape, statement)
    }
    return statement
  }
  const nearest = (query: Float32Array, k: number, filters: Filters) => {
    const parameters: Array<unknown> = [new Uint8Array(query.buffer, query.byteOffset, query.byteLength), k]
    if (filters.type !== undefined) parameters.push(filters.type)
    if (filters.prefix !== undefined) parameters.push(filters.prefix, `${filters.prefix}0`)
    return Effect.map(knnStatement(filters)(parameters), (rows): Nearest => {
      const candidates: Array<Candidate> = []
      for (const [urn, type, vector, distance] of rows) {
        // The row without a URN: the log is not empty.
        if (urn === null) return { stale: true }
        candidates.push({
          urn: urn as string,
          type: type as string,
          vector: vector as Uint8Array,
          distance: distance as number
        })
      }
      return { stale: false, candidates }
    })
  }
  const readState = fixed(
    sql,
    `SELECT EXISTS (SELECT 1 FROM ${names.changes}) AS stale, (SELECT max(rowid) FROM ${names.vectors}) AS extent`
  )
  const state = Effect.map(
    Effect.suspend(() => readState()),
    (rows) => {
      const [stale, extent] = rows[0] ?? []
      return { stale: stale === 1, extent: (extent as number | null | undefined) ?? 0 }
    }
  )
  return { state, catchUp, rebuild, nearest }
}

export const isUnavailable = (value: Copy | Unavailable): value is Unavailable => value instanceof Unavailable
