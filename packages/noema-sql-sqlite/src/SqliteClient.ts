/**
 * SqliteClient: Node's built-in `node:sqlite` as a driver for effect's `SqlClient`.
 *
 * Effect's own SQLite drivers target older effect releases; this one is built
 * on `effect/sql` of effect 4.1 and depends on nothing else. One connection per
 * client, shared through a semaphore (node:sqlite is synchronous, so a
 * statement runs to completion inside the effect that runs it, and no other
 * fiber can slip a statement into someone else's transaction). Prepared
 * statements are cached by their SQL text. Top-level transactions start with
 * `BEGIN IMMEDIATE`, so a writer takes SQLite's write lock up front and two
 * writers never deadlock half-way through; nested `withTransaction`s are
 * savepoints. The file is opened in WAL mode with `synchronous = FULL` (a
 * commit that returned has reached the disk) and a busy timeout for locks
 * held by other processes. `stream` iterates rows without loading them all.
 *
 * Extensions: `loadExtension` loads a SQLite extension (a shared library such as
 * sqlite-vec) into the connection from code. SQL text can never load one: the
 * connection is opened with extensions allowed (node:sqlite refuses them for
 * good otherwise) and loading is switched off at once, then on only for the
 * duration of one `loadExtension` call; SQL's `load_extension()` stays
 * unauthorised throughout.
 */
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite"
import { Cause, Context, Duration, Effect, Exit, Layer, Option, type Scope, Semaphore, Stream } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient, type SqlConnection, SqlError, Statement } from "effect/sql"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

export type Synchronous = "OFF" | "NORMAL" | "FULL" | "EXTRA"

export interface Config {
  /** The database file, or ":memory:". */
  readonly filename: string
  readonly readonly?: boolean | undefined
  /** How long a statement waits for another connection's lock before failing. Default 5 seconds. */
  readonly busyTimeout?: Duration.Input | undefined
  /**
   * Switch the file to WAL mode when opening it. Default true. Turning WAL on
   * writes to the file, so a caller that must inspect a file before changing it
   * passes false and runs `PRAGMA journal_mode = WAL` itself.
   */
  readonly wal?: boolean | undefined
  /** `PRAGMA synchronous`. Default "FULL": in WAL mode "NORMAL" may lose the last commits on power loss. */
  readonly synchronous?: Synchronous | undefined
  /** `PRAGMA foreign_keys`. Default true. */
  readonly foreignKeys?: boolean | undefined
  /**
   * The statement that starts a top-level transaction. Default "BEGIN IMMEDIATE":
   * the write lock is taken at the start, so a transaction that reads then
   * writes cannot fail half-way with SQLITE_BUSY. One transaction can still ask
   * for another with `SqlClient.BeginTransaction` (e.g. "BEGIN" for a read).
   */
  readonly beginTransaction?: string | undefined
  /**
   * Whether `loadExtension` may load extensions into this connection. Default true. False
   * opens it as node:sqlite does by default: no extension can ever be loaded.
   */
  readonly extensions?: boolean | undefined
  /** How many prepared statements are kept. Default 200. */
  readonly prepareCacheSize?: number | undefined
  readonly spanAttributes?: Record<string, unknown> | undefined
  readonly transformResultNames?: ((name: string) => string) | undefined
  readonly transformQueryNames?: ((name: string) => string) | undefined
}

const TypeId = "~@noema/sql-sqlite/SqliteClient" as const

export interface SqliteClient extends SqlClient.SqlClient {
  readonly [TypeId]: typeof TypeId
  readonly config: Config
  /** Not supported by SQLite. */
  readonly updateValues: never
  /**
   * Loads a SQLite extension (the path of its shared library) into the connection, between
   * statements (it waits for a transaction in progress to end). Fails with a `SqlError` when the
   * file cannot be loaded or the client was opened with `extensions: false`.
   */
  readonly loadExtension: (file: string) => Effect.Effect<void, SqlError.SqlError>
  /**
   * Runs `body` as a top-level transaction on the connection, handed to it: what
   * `withTransaction` does for a body that only runs statements on that connection, with
   * less CPU (a one-row insert on tmpfs: 10 µs against 13.8). The connection is leased as `withTransaction` leases it (the same
   * semaphore, and a failed COMMIT rolled back or the connection refused until it is), begun
   * with the client's statement or the `SqlClient.BeginTransaction` provided, committed when
   * `body` succeeds and rolled back when it fails or is interrupted; waiting for the connection
   * is interruptible. Nothing is added to the context, so `body` must use the connection it is
   * handed and nothing else of the client: a statement of the client would wait for the
   * connection this transaction holds, `withTransaction` inside would not nest, and
   * `afterCommit` callbacks and reactivity invalidations would run at once. The transaction
   * still has its `sql.transaction` span (without effect's commit and rollback events); the
   * statements run on the connection have none. Dies when a transaction of this client is
   * already open in the fiber (use `withTransaction`, which nests).
   */
  readonly transactionOnConnection: <A, E>(
    body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>
  ) => Effect.Effect<A, E | SqlError.SqlError>
}

export const SqliteClient = Context.Service<SqliteClient>("@noema/sql-sqlite/SqliteClient")

/** Whether a `SqlClient` is this driver's (and so can `loadExtension`). */
export const isSqliteClient = (client: SqlClient.SqlClient): client is SqliteClient => TypeId in client

// ---------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------

// Rows are whatever the database returned: objects, or arrays for `values`.
// biome-ignore lint/suspicious/noExplicitAny: the Connection contract returns rows as `any`
type Rows = ReadonlyArray<any>
type TransformRows = (<A extends object>(rows: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined

interface Prepared {
  readonly statement: StatementSync
  /** Whether the statement yields rows (a SELECT, or a write with RETURNING). */
  readonly returnsRows: boolean
  readBigInts: boolean
  returnArrays: boolean
}

interface SqliteConnection extends SqlConnection.Connection {
  readonly isTransaction: () => boolean
}

/** A node:sqlite error as a `SqlError`; `errcode` is kept on the cause for callers that need SQLite's code. */
const sqlError = (cause: unknown, message: string, operation: string): SqlError.SqlError => {
  if (
    typeof cause === "object" &&
    cause !== null &&
    "errcode" in cause &&
    typeof cause.errcode === "number" &&
    !("errno" in cause)
  ) {
    Object.assign(cause, { errno: cause.errcode })
  }
  return new SqlError.SqlError({ reason: SqlError.classifySqliteError(cause, { message, operation }) })
}

const makeConnection = (db: DatabaseSync, cacheSize: number): SqliteConnection => {
  // Insertion-ordered: the oldest entry is evicted first. Hits are not reordered, which keeps a
  // hit to one Map lookup; the store's few statements stay well below the capacity.
  const cache = new Map<string, Prepared>()

  const prepare = (sql: string): Prepared => {
    let prepared = cache.get(sql)
    if (prepared === undefined) {
      const statement = db.prepare(sql)
      prepared = {
        statement,
        returnsRows: statement.columns().length > 0,
        readBigInts: false,
        returnArrays: false
      }
      if (cache.size >= cacheSize) {
        const oldest = cache.keys().next()
        if (oldest.done !== true) cache.delete(oldest.value)
      }
      cache.set(sql, prepared)
    }
    return prepared
  }

  const unprepared = (sql: string): Prepared => {
    const statement = db.prepare(sql)
    return { statement, returnsRows: statement.columns().length > 0, readBigInts: false, returnArrays: false }
  }

  const run = (
    prepared: Prepared,
    params: ReadonlyArray<unknown>,
    readBigInts: boolean,
    returnArrays: boolean,
    raw: boolean
  ): Rows => {
    const { statement } = prepared
    if (prepared.readBigInts !== readBigInts) {
      statement.setReadBigInts(readBigInts)
      prepared.readBigInts = readBigInts
    }
    if (prepared.returnArrays !== returnArrays) {
      statement.setReturnArrays(returnArrays)
      prepared.returnArrays = returnArrays
    }
    const values = params as Array<SQLInputValue>
    if (prepared.returnsRows) return statement.all(...values)
    const result = statement.run(...values)
    return raw ? (result as unknown as Rows) : []
  }

  const execute = (
    get: (sql: string) => Prepared,
    sql: string,
    params: ReadonlyArray<unknown>,
    returnArrays: boolean,
    raw: boolean
  ): Effect.Effect<Rows, SqlError.SqlError> =>
    Effect.withFiber((fiber) => {
      const readBigInts = fiber.getRef(SqlClient.SafeIntegers)
      try {
        return Effect.succeed(run(get(sql), params, readBigInts, returnArrays, raw))
      } catch (cause) {
        return Effect.fail(sqlError(cause, "Failed to execute statement", "execute"))
      }
    })

  const withTransform = (effect: Effect.Effect<Rows, SqlError.SqlError>, transformRows: TransformRows) =>
    transformRows === undefined ? effect : Effect.map(effect, transformRows)

  return {
    isTransaction: () => db.isTransaction,
    execute: (sql, params, transformRows) =>
      withTransform(execute(prepare, sql, params, false, false), transformRows),
    executeRaw: (sql, params) => execute(prepare, sql, params, false, true),
    executeValues: (sql, params) =>
      execute(prepare, sql, params, true, false) as Effect.Effect<
        ReadonlyArray<ReadonlyArray<unknown>>,
        SqlError.SqlError
      >,
    executeValuesUnprepared: (sql, params) =>
      execute(unprepared, sql, params, true, false) as Effect.Effect<
        ReadonlyArray<ReadonlyArray<unknown>>,
        SqlError.SqlError
      >,
    executeUnprepared: (sql, params, transformRows) =>
      withTransform(execute(unprepared, sql, params, false, false), transformRows),
    executeStream: (sql, params, transformRows) =>
      // A statement of its own: a cached one could be reset by a query run while the stream is read.
      Stream.unwrap(
        Effect.withFiber((fiber) => {
          let iterator: Iterator<unknown>
          try {
            const statement = db.prepare(sql)
            statement.setReadBigInts(fiber.getRef(SqlClient.SafeIntegers))
            iterator = statement.iterate(...(params as Array<SQLInputValue>))
          } catch (cause) {
            return Effect.fail(sqlError(cause, "Failed to execute statement", "executeStream"))
          }
          const chunkSize = 256
          // A statement left mid-iteration keeps its read lock (and blocks other connections' writes
          // outside WAL): reset it however the stream ends, also when a consumer stops early.
          const release = Effect.sync(() => void iterator.return?.())
          return Effect.succeed(
            Stream.paginate(
              undefined,
              () =>
                Effect.try({
                  try: () => {
                    const rows: Array<object> = []
                    while (rows.length < chunkSize) {
                      const next = iterator.next()
                      if (next.done === true)
                        return [transformRows ? transformRows(rows) : rows, Option.none()] as const
                      rows.push(next.value as object)
                    }
                    return [transformRows ? transformRows(rows) : rows, Option.some(undefined)] as const
                  },
                  catch: (cause) => sqlError(cause, "Failed to read rows", "executeStream")
                }) as Effect.Effect<
                  readonly [ReadonlyArray<object>, Option.Option<undefined>],
                  SqlError.SqlError
                >
            ).pipe(Stream.ensuring(release))
          )
        })
      )
  }
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const pragmas = (db: DatabaseSync, options: Config): void => {
  if (options.readonly !== true) {
    if (options.wal !== false) db.exec("PRAGMA journal_mode = WAL")
    db.exec(`PRAGMA synchronous = ${options.synchronous ?? "FULL"}`)
  }
  db.exec(`PRAGMA foreign_keys = ${options.foreignKeys === false ? "OFF" : "ON"}`)
}

/**
 * Loads `file` into `db`: loading is switched on for this call only. node:sqlite is synchronous,
 * so no statement can run while it is on (and SQL's `load_extension()` is never authorised).
 */
const loadInto = (db: DatabaseSync, file: string): void => {
  db.enableLoadExtension(true)
  try {
    db.loadExtension(file)
  } finally {
    db.enableLoadExtension(false)
  }
}

// ---------------------------------------------------------------------------
// A transaction on the connection
// ---------------------------------------------------------------------------

/**
 * What `transactionOnConnection` shares with the client: the lease effect's transactions use
 * (`makeSqliteAcquirers`' borrower: the semaphore, held until the body's transaction ended, and
 * the refusal of a connection whose failed COMMIT could not be rolled back) and its cleanup.
 */
interface OnConnection {
  readonly transactionService: SqlClient.SqlClient["transactionService"]
  readonly borrower: SqlConnection.Borrower
  readonly onCommitFailure: (connection: SqlConnection.Connection) => Effect.Effect<void, SqlError.SqlError>
  readonly beginTransaction: string
  readonly spanAttributes: Record<string, unknown>
}

const control = (connection: SqlConnection.Connection, statement: string) =>
  connection.execute(statement, [], undefined)

// The connection is this driver's: whether a transaction is still open is asked, not guessed.
const rollback = (connection: SqlConnection.Connection): Effect.Effect<unknown, SqlError.SqlError> =>
  (connection as SqliteConnection).isTransaction() ? control(connection, "ROLLBACK") : Effect.void

/**
 * As effect's `withTransaction` does: a COMMIT that failed is rolled back (SQLite may keep the
 * transaction open, a deferred foreign key violated); if that fails too, both failures are
 * defects, so no typed recovery hides a connection left unsafe.
 */
const commit = (on: OnConnection, connection: SqlConnection.Connection) =>
  Effect.catchCause(control(connection, "COMMIT"), (commitCause) =>
    Effect.matchCauseEffect(on.onCommitFailure(connection), {
      onFailure: (cleanupCause) => Effect.failCause(asDefects(Cause.combine(commitCause, cleanupCause))),
      onSuccess: () => Effect.failCause(commitCause)
    })
  )

const asDefects = <E>(cause: Cause.Cause<E>): Cause.Cause<never> =>
  Cause.fromReasons(
    cause.reasons.map((reason) =>
      Cause.isFailReason(reason)
        ? Cause.makeDieReason(reason.error).annotate(Cause.reasonAnnotations(reason))
        : reason
    )
  )

/** The body's exit, once its transaction was committed (on success) or rolled back. */
const end =
  (on: OnConnection, connection: SqlConnection.Connection) =>
  <A, E>(exit: Exit.Exit<A, E>): Effect.Effect<A, E | SqlError.SqlError> =>
    Exit.isSuccess(exit)
      ? Effect.as(commit(on, connection), exit.value)
      : Effect.andThen(Effect.orDie(rollback(connection)), exit)

const transactionOnConnection =
  (on: OnConnection) =>
  <A, E>(
    body: (connection: SqlConnection.Connection) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | SqlError.SqlError> =>
    Effect.withFiber((fiber) => {
      // The connection is this very transaction's: leasing it again would wait for ever.
      if (Context.getOrUndefined(fiber.context, on.transactionService) !== undefined) {
        return Effect.die(new Error("transactionOnConnection: a transaction of this client is already open"))
      }
      const statement = fiber.getRef(SqlClient.BeginTransaction)
      return Effect.useSpan("sql.transaction", { kind: "internal", attributes: on.spanAttributes }, () =>
        on.borrower((connection) =>
          Effect.uninterruptibleMask((restore) =>
            Effect.flatMap(
              // A provided statement is not fixed, so it is not prepared (as effect's client does).
              statement === undefined
                ? control(connection, on.beginTransaction)
                : connection.executeUnprepared(statement, [], undefined),
              () => Effect.flatMap(Effect.exit(restore(body(connection))), end(on, connection))
            )
          )
        )
      )
    })

/** Opens the database; it is closed when the scope closes. */
export const make = (
  options: Config
): Effect.Effect<SqliteClient, SqlError.SqlError, Scope.Scope | Reactivity.Reactivity> =>
  Effect.gen(function* () {
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const extensions = options.extensions !== false
          const db = new DatabaseSync(options.filename, {
            readOnly: options.readonly ?? false,
            timeout: Duration.toMillis(options.busyTimeout ?? Duration.seconds(5)),
            allowExtension: extensions
          })
          try {
            // Allowed at open so that `loadExtension` can switch it on later; off until then.
            if (extensions) db.enableLoadExtension(false)
            pragmas(db, options)
          } catch (error) {
            db.close()
            throw error
          }
          return db
        },
        catch: (cause) => sqlError(cause, `Failed to open ${options.filename}`, "open")
      }),
      (db) =>
        Effect.sync(() => {
          if (db.isOpen) db.close()
        })
    )
    const connection = makeConnection(db, options.prepareCacheSize ?? 200)
    const semaphore = yield* Semaphore.make(1)
    const acquirers = SqlClient.makeSqliteAcquirers({
      connection: Effect.succeed(connection),
      semaphore,
      isTransaction: (conn) => conn.isTransaction()
    })
    const compiler = Statement.makeCompilerSqlite(options.transformQueryNames)
    const transformRows = options.transformResultNames
      ? Statement.defaultTransforms(options.transformResultNames).array
      : undefined
    const spanAttributes: ReadonlyArray<readonly [string, unknown]> = [
      ...(options.spanAttributes ? Object.entries(options.spanAttributes) : []),
      ["db.system.name", "sqlite"]
    ]
    const beginTransaction = options.beginTransaction ?? "BEGIN IMMEDIATE"
    const client = yield* SqlClient.make({
      ...acquirers,
      compiler,
      driver: "noema-sqlite-node",
      spanAttributes,
      transformRows,
      prepareTransactionControls: true,
      beginTransaction,
      savepoint: (name) => `SAVEPOINT ${name}`,
      releaseSavepoint: (name) => `RELEASE SAVEPOINT ${name}`,
      rollbackSavepoint: (name) => `ROLLBACK TO SAVEPOINT ${name}`
    })
    // Under the connection's semaphore: never in the middle of another fiber's transaction.
    const loadExtension = (file: string) =>
      semaphore.withPermits(1)(
        Effect.try({
          try: () => loadInto(db, file),
          catch: (cause) => sqlError(cause, `Failed to load the SQLite extension ${file}`, "loadExtension")
        })
      )
    return Object.assign(client, {
      [TypeId]: TypeId,
      config: options,
      loadExtension,
      transactionOnConnection: transactionOnConnection({
        transactionService: client.transactionService,
        borrower: acquirers.borrower,
        onCommitFailure: acquirers.onCommitFailure,
        beginTransaction,
        spanAttributes: Object.fromEntries(spanAttributes)
      })
    }) as unknown as SqliteClient
  })

/**
 * The client as both `SqliteClient` and the generic `SqlClient`, with the `Reactivity` its
 * reactive queries use (provided too, so mutations can invalidate them).
 */
export const layer = (
  config: Config
): Layer.Layer<SqliteClient | SqlClient.SqlClient | Reactivity.Reactivity, SqlError.SqlError> =>
  Layer.effectContext(
    Effect.map(make(config), (client) =>
      Context.make(SqliteClient, client).pipe(Context.add(SqlClient.SqlClient, client))
    )
  ).pipe(Layer.provideMerge(Reactivity.layer))
