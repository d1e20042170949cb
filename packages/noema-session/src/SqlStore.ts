/**
 * SqlStore: the session store on effect's `SqlClient`, for SQLite and PostgreSQL.
 *
 * One implementation for every SQL database, its statements written once as
 * effect/sql tagged templates (the client's compiler writes each dialect's
 * placeholders); the few fragments that differ live in `internal/sqlDialect.ts`.
 * An append is one transaction whose first statement updates the session row
 * only if it still holds the expected message count (`UPDATE ... WHERE
 * message_count = expected RETURNING ...`; only when it returns nothing, a second
 * statement reads why), then inserts the turn's messages in one multi-row insert
 * (`sql.insert`). The update
 * locks the session (SQLite: the client's `BEGIN IMMEDIATE` write lock;
 * PostgreSQL: the row lock, under READ COMMITTED, so a waiting writer re-reads
 * the count once the first commits and matches nothing), so concurrent writers
 * in other processes or on other machines get a `SessionConflictError`, never
 * interleaved turns. The append's statements are compiled once per store
 * (@noema/sql's `Prepared`) and run on the transaction's connection directly: no
 * compilation, span or connection lookup per statement on the commit path (the
 * transaction has its span).
 * On SQLite, appends that arrive together in one process share one transaction
 * and one fsync, each with its own result (a savepoint each only once one of them
 * failed: an append does nothing but its statements, so it may be run again), and
 * each acknowledged only after that COMMIT (group commit: `@noema/sql` GroupCommit
 * states the contract); PostgreSQL keeps one transaction per append.
 * Messages are validated with core's `Message` Schema on the way in and out; a
 * session is read in batches of rows (`Dialect.messagesPerRead`) on the load's
 * transaction's connection in the same way, each message parsed once and checked
 * in place.
 * The schema is migrated by @noema/sql's `Migrations` when the store is made; a
 * SQLite file is first checked to be an empty database or noema's (application
 * id, schema version) and is refused, untouched, otherwise.
 */
import { Message } from "@noema/core"
import { Database, DatabaseError, GroupCommit, Migrations, Prepared } from "@noema/sql"
import { Clock, Effect, Layer } from "effect"
import { Migrator, SqlClient, type SqlConnection, SqlError, type Statement } from "effect/sql"
import * as SqlDialect from "./internal/sqlDialect.js"
import {
  CorruptDatabase,
  type CreateOptions,
  defaultTitle,
  fromDatabaseError,
  InvalidMessage,
  type Metadata,
  type MetadataUpdate,
  mergeMetadata,
  type Service,
  SessionAlreadyExistsError,
  SessionConflictError,
  type SessionInfo,
  SessionNotFoundError,
  SessionStore,
  type StoredSession,
  StoreError
} from "./SessionStore.js"

export interface Options {
  /** Where the sessions live, for messages to people: a file path or a database name. */
  readonly location: string
  /**
   * The client is read-only (SQLite): the schema is checked but never migrated; a
   * database that needs migrating fails with `NeedsMigration` and is left untouched.
   */
  readonly readonly?: boolean
}

/** The newest migration of the session schema this code knows. */
export const latestMigration: number = Migrations.latest(SqlDialect.migrations)

// ---------------------------------------------------------------------------
// Opening: recognise the database, then migrate
// ---------------------------------------------------------------------------

/**
 * What only the session store checks on opening: on SQLite, its schema version
 * (`PRAGMA user_version`, which release 0.1.0 migrated by) must not be newer than
 * this code's; on PostgreSQL, a `sessions` or `messages` table that noema's
 * migrations did not create (another application's) is refused before the
 * Migrator touches it.
 */
const check = (sql: SqlClient.SqlClient, location: string): Migrations.Step =>
  sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(
        sql<{ table: string }>`SELECT t.name AS "table" FROM unnest(ARRAY['sessions', 'messages']) AS t (name)
          WHERE to_regclass(t.name) IS NOT NULL AND to_regclass(${SqlDialect.migrationsTable}) IS NULL`,
        (rows) =>
          rows.length === 0
            ? Effect.void
            : Effect.fail(
                DatabaseError.make(
                  new DatabaseError.Foreign({
                    location,
                    detail: `tables ${rows.map((row) => row.table).join(", ")} without noema's ${SqlDialect.migrationsTable}`
                  })
                )
              )
      ),
    orElse: () =>
      Effect.flatMap(sqliteUserVersion(sql), (found) =>
        found > latestMigration
          ? Effect.fail(
              DatabaseError.make(
                new DatabaseError.SchemaTooNew({
                  location,
                  schema: "session",
                  found,
                  supported: latestMigration
                })
              )
            )
          : Effect.void
      )
  })

const sqliteUserVersion = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ user_version: number }>`PRAGMA user_version`, (rows) => Number(rows[0]?.user_version ?? 0))

/**
 * Release 0.1.0 migrated a SQLite file by hand up to `user_version`, without a
 * migrations table: those migrations are recorded as applied before the Migrator runs.
 */
const adoptRelease01 = (sql: SqlClient.SqlClient): Migrations.Step =>
  Effect.gen(function* () {
    if (Database.dialectOf(sql) !== "sqlite") return
    const version = yield* sqliteUserVersion(sql)
    const table = SqlDialect.migrationsTable
    if (version === 0 || (yield* Migrations.applied(sql, table)) > 0) return
    yield* sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
      migration_id integer PRIMARY KEY NOT NULL,
      created_at datetime NOT NULL DEFAULT current_timestamp,
      name VARCHAR(255) NOT NULL)`
    const known = yield* Migrator.fromRecord(SqlDialect.migrations)
    for (const [id, name] of known) {
      if (id <= version) yield* sql`INSERT INTO ${sql(table)} ${sql.insert({ migration_id: id, name })}`
    }
  }).pipe(Effect.catchTag("MigrationError", (error) => Effect.die(error)))

/**
 * Brings the database to the latest schema through @noema/sql's `Migrations`
 * (on SQLite in one transaction, so a crash leaves either the old file or the
 * migrated one), then records the version in SQLite's `user_version`.
 */
const migrate = (sql: SqlClient.SqlClient, location: string, readonly: boolean) =>
  Migrations.run({
    location,
    schema: "session",
    table: SqlDialect.migrationsTable,
    migrations: SqlDialect.migrations,
    readonly,
    check: check(sql, location),
    prepare: adoptRelease01(sql),
    ...(Database.dialectOf(sql) === "sqlite" && {
      finish: sql.unsafe(`PRAGMA user_version = ${latestMigration}`).pipe(Effect.asVoid)
    })
  })

// ---------------------------------------------------------------------------
// Constructor
// ---------------------------------------------------------------------------

/** The store over the `SqlClient` in context; migrates the database first. */
export const make = (options: Options): Effect.Effect<Service, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* Effect.mapError(migrate(sql, options.location, options.readonly === true), fromDatabaseError)
    return service(open(sql, options.location))
  })

/** The SQL store as the `SessionStore` service, over the `SqlClient` the layer is given. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError, SqlClient.SqlClient> =>
  Layer.effect(SessionStore, make(options))

/** The store in the shared database the context holds: named, and migrated or only checked, as `Database` says. */
export const fromDatabase = Database.store(make)

/** `fromDatabase` as the `SessionStore` service: sessions beside the other stores of the database. */
export const layerFromDatabase = Database.storeLayer(SessionStore, make)

// ---------------------------------------------------------------------------
// The open store
// ---------------------------------------------------------------------------

/** What every operation of one open store works with. */
interface Store {
  readonly sql: SqlClient.SqlClient
  readonly dialect: SqlDialect.Dialect
  readonly location: string
  /** `id, title, created_at, updated_at, message_count, metadata`: a `SessionRow`. */
  readonly sessionColumns: Statement.Fragment
  /** A writing transaction: PostgreSQL's names its isolation level; SQLite's keeps the client's BEGIN IMMEDIATE. */
  readonly writeTransaction: <A, E, R>(
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | SqlError.SqlError, R>
  /**
   * Runs an append's statements in a writing transaction. SQLite groups the appends that
   * arrive together into one transaction and one fsync (`@noema/sql` GroupCommit);
   * PostgreSQL keeps one transaction per append, as its server already flushes concurrent
   * commits together.
   */
  readonly appendTransaction: <A, E>(
    append: GroupCommit.Append<A, E>
  ) => Effect.Effect<A, E | SqlError.SqlError>
  readonly append: AppendStatements
  /** A batch of a session's messages: `id, from, limit` to `[seq, message]` rows from `seq` `from` on. */
  readonly readMessages: Prepared.Prepared
  readonly metadata: MetadataCache
}

const open = (sql: SqlClient.SqlClient, location: string): Store => {
  const dialect = SqlDialect.make(sql)
  const beginWrite = dialect.beginWrite
  const writeTransaction: Store["writeTransaction"] =
    beginWrite === undefined
      ? sql.withTransaction
      : (effect) =>
          sql.withTransaction(effect).pipe(Effect.provideService(SqlClient.BeginTransaction, beginWrite))
  return {
    sql,
    dialect,
    location,
    sessionColumns: sql.literal("id, title, created_at, updated_at, message_count, metadata"),
    writeTransaction,
    appendTransaction:
      dialect.name === "sqlite"
        ? // An append runs its statements and nothing else: a batch may run it twice (rerunnable).
          GroupCommit.make(sql, { rerunnable: true })
        : (append) => writeTransaction(GroupCommit.onTransactionConnection(sql, append)),
    append: appendStatements(sql, dialect),
    readMessages: Prepared.make(
      3,
      ([id, from, limit]) => sql`SELECT seq, message FROM messages
        WHERE session_id = ${id} AND seq >= ${from} ORDER BY seq LIMIT ${limit}`
    ),
    metadata: metadataCache(location)
  }
}

const service = (store: Store): Service => ({
  location: store.location,
  create: (options) => create(store, options),
  load: (id) => load(store, id),
  append: (id, expectedMessageCount, messages) => append(store, id, expectedMessageCount, messages),
  list: () => list(store),
  info: (id) => info(store, id),
  delete: (id) => remove(store, id),
  updateMetadata: (id, update) => updateMetadata(store, id, update)
})

/** Runs `effect`, turning the client's errors into `StoreError`s (the one mapping, @noema/sql's). */
const mapSqlErrors =
  (store: Store) =>
  <A, E, R>(effect: Effect.Effect<A, E | SqlError.SqlError, R>): Effect.Effect<A, E | StoreError, R> =>
    Effect.catchIf(effect, SqlError.isSqlError, (error) =>
      Effect.fail(fromDatabaseError(DatabaseError.fromSqlError(store.location, error)))
    ) as Effect.Effect<A, E | StoreError, R>

const notFound = (id: string): Effect.Effect<never, SessionNotFoundError> =>
  Effect.fail(new SessionNotFoundError({ sessionId: id }))

// ---------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------

interface SessionRow {
  readonly id: string
  readonly title: string | null
  readonly created_at: number | string
  readonly updated_at: number | string
  readonly message_count: number | string
  readonly metadata: string
}

const infoOf = (
  id: string,
  title: string | null,
  createdAt: number,
  updatedAt: number,
  messageCount: number,
  metadata: Metadata
): SessionInfo =>
  title === null
    ? { id, createdAt, updatedAt, messageCount, metadata }
    : { id, title, createdAt, updatedAt, messageCount, metadata }

const corrupt = (location: string, detail: string) =>
  new StoreError({ reason: new CorruptDatabase({ location, detail }) })

/** A session's metadata column, or the `StoreError` saying it is damaged. */
const parseMetadata = (location: string, id: string, text: string): Metadata | StoreError => {
  let metadata: unknown
  try {
    metadata = JSON.parse(text)
  } catch {
    metadata = undefined
  }
  return typeof metadata !== "object" || metadata === null || Array.isArray(metadata)
    ? corrupt(location, `session "${id}" has metadata that is not a JSON object`)
    : (metadata as Metadata)
}

/** A session row as its info, or the `StoreError` saying it is damaged. */
const infoOfRow = (location: string, row: SessionRow): Effect.Effect<SessionInfo, StoreError> => {
  const metadata = parseMetadata(location, row.id, row.metadata)
  return metadata instanceof StoreError
    ? Effect.fail(metadata)
    : Effect.succeed(
        infoOf(
          row.id,
          row.title,
          Number(row.created_at),
          Number(row.updated_at),
          Number(row.message_count),
          metadata
        )
      )
}

interface MetadataCache {
  readonly parse: (id: string, text: string) => Metadata | StoreError
}

/**
 * Commits rarely change metadata: the last text parsed is kept with its value, so a run of
 * commits parses it once. The value is shared between the infos returned, as the memory store does.
 */
const metadataCache = (location: string): MetadataCache => {
  let lastText: string | undefined
  let last: Metadata = {}
  return {
    parse: (id, text) => {
      if (text === lastText) return last
      const metadata = parseMetadata(location, id, text)
      if (metadata instanceof StoreError) return metadata
      lastText = text
      last = metadata
      return metadata
    }
  }
}

/**
 * A message's JSON text, validated by core's Schema; a one-line reason when it is not a message.
 * A plain message (`Message.isPlain`, the common case) is its own encoding. Anything else is
 * encoded by the Schema and must read back as a message: a `NaN` would be written as `null`,
 * and the session would no longer load.
 */
const encodeMessage = (message: Message.Message): string | { readonly problem: string } => {
  if (Message.isPlain(message)) return JSON.stringify(message)
  let json: string
  try {
    json = JSON.stringify(Message.encode(message))
  } catch (error) {
    return { problem: DatabaseError.describe(error) }
  }
  try {
    Message.decodeSync(JSON.parse(json))
  } catch (error) {
    return { problem: `it would not read back from JSON: ${DatabaseError.describe(error)}` }
  }
  return json
}

/**
 * Appends a batch of `[seq, message]` rows to `messages`, each parsed once and checked with
 * core's Schema in place (the parsed JSON is already the plain data a decode would return: a
 * message has no transformations, so nothing is copied); or the `StoreError` naming the first
 * damaged row: out of sequence, invalid JSON, or not a message.
 */
const readBatch = (
  location: string,
  id: string,
  rows: ReadonlyArray<ReadonlyArray<unknown>>,
  messages: Array<Message.Message>
): StoreError | undefined => {
  // An indexed loop: `for...of` would make an iterator result per row until the loop is optimised.
  for (let position = 0; position < rows.length; position++) {
    const row = rows[position] as ReadonlyArray<unknown>
    const index = messages.length
    const seq = Number(row[0])
    if (seq !== index)
      return corrupt(location, `session "${id}" is missing message ${index} (found ${seq} in its place)`)
    const text = row[1] as string
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch (error) {
      return corrupt(
        location,
        `session "${id}", message ${index}: invalid JSON (${DatabaseError.describe(error)})`
      )
    }
    if (!Message.is(parsed)) return notAMessage(location, id, index, parsed, text)
    messages.push(parsed)
  }
  return undefined
}

/** Why stored JSON is not a message: the Schema's words for what was expected, and the text that is there. */
const notAMessage = (location: string, id: string, index: number, parsed: unknown, text: string) => {
  let reason = "not a message"
  try {
    Message.decodeSync(parsed)
  } catch (error) {
    reason = DatabaseError.describe(error)
  }
  const stored = text.length > 80 ? `${text.slice(0, 79)}…` : text
  return corrupt(
    location,
    `session "${id}", message ${index}: ${reason}; stored: ${DatabaseError.oneLine(stored)}`
  )
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

const selectSession = (store: Store, id: string) =>
  Effect.map(
    store.sql<SessionRow>`SELECT ${store.sessionColumns} FROM sessions WHERE id = ${id}`,
    (rows) => rows[0]
  )

/** Where the first batch starts: the smallest PostgreSQL INTEGER, so a stray row below 0 is read, and refused. */
const lowestSeq = -2_147_483_648

/**
 * The session's `expected` messages, read in batches of `messagesPerRead` by their `seq`
 * (keyset pagination, on the connection of the load's transaction, each batch one prepared
 * statement); one row past the last is asked for, so a session holding more rows than its
 * count says is found out.
 */
const readMessages = (
  store: Store,
  connection: SqlConnection.Connection,
  id: string,
  expected: number
): Effect.Effect<Array<Message.Message>, StoreError | SqlError.SqlError> => {
  const { location } = store
  const messages: Array<Message.Message> = []
  const next: Effect.Effect<Array<Message.Message>, StoreError | SqlError.SqlError> = Effect.suspend(() => {
    const limit = Math.max(1, Math.min(store.dialect.messagesPerRead, expected + 1 - messages.length))
    const from = messages.length === 0 ? lowestSeq : messages.length
    return Effect.flatMap(valuesOn(connection, store.readMessages, [id, from, limit]), (rows) => {
      const damaged = readBatch(location, id, rows, messages)
      if (damaged !== undefined) return Effect.fail(damaged)
      if (rows.length === limit && messages.length <= expected) return next
      return messages.length === expected
        ? Effect.succeed(messages)
        : Effect.fail(
            corrupt(
              location,
              `session "${id}" should hold ${expected} messages but ${messages.length} were found`
            )
          )
    })
  })
  return next
}

const load = (store: Store, id: string): Effect.Effect<StoredSession, SessionNotFoundError | StoreError> =>
  store.sql
    .withTransaction(
      Effect.gen(function* () {
        const row = yield* selectSession(store, id)
        if (row === undefined) return yield* notFound(id)
        const info = yield* infoOfRow(store.location, row)
        const messages = yield* GroupCommit.onTransactionConnection(store.sql, (connection) =>
          readMessages(store, connection, id, info.messageCount)
        )
        return { info, messages }
      })
    )
    .pipe(Effect.provideService(SqlClient.BeginTransaction, store.dialect.beginRead), mapSqlErrors(store))

const list = (store: Store): Effect.Effect<ReadonlyArray<SessionInfo>, StoreError> =>
  Effect.flatMap(
    store.sql<SessionRow>`SELECT ${store.sessionColumns} FROM sessions ORDER BY activity DESC`,
    (rows) => Effect.forEach(rows, (row) => infoOfRow(store.location, row))
  ).pipe(mapSqlErrors(store))

const info = (store: Store, id: string): Effect.Effect<SessionInfo, SessionNotFoundError | StoreError> =>
  Effect.flatMap(
    selectSession(store, id),
    (row): Effect.Effect<SessionInfo, SessionNotFoundError | StoreError> =>
      row === undefined ? notFound(id) : infoOfRow(store.location, row)
  ).pipe(mapSqlErrors(store))

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

const create = (
  store: Store,
  options: CreateOptions | undefined
): Effect.Effect<SessionInfo, SessionAlreadyExistsError | StoreError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const { sql } = store
    const id = options?.id ?? crypto.randomUUID()
    const insert = Effect.flatMap(
      sql<SessionRow>`INSERT INTO sessions (id, title, created_at, updated_at, activity, message_count, metadata)
        VALUES (${id}, ${options?.title ?? null}, ${options?.createdAt ?? now}, ${options?.updatedAt ?? now},
          ${store.dialect.firstActivity}, 0, ${JSON.stringify(options?.metadata ?? {})})
        ON CONFLICT (id) DO NOTHING
        RETURNING ${store.sessionColumns}`,
      (rows): Effect.Effect<SessionInfo, SessionAlreadyExistsError | StoreError> => {
        const row = rows[0]
        return row === undefined
          ? Effect.fail(new SessionAlreadyExistsError({ sessionId: id }))
          : infoOfRow(store.location, row)
      }
    )
    const first = options?.messages
    if (first === undefined || first.length === 0) return insert.pipe(mapSqlErrors(store))
    const updatedAt = options?.updatedAt
    // The session and its first messages in one transaction (the append's nests as a savepoint);
    // an imported session keeps its own `updatedAt`, which the append would have made now.
    return store
      .writeTransaction(
        Effect.flatMap(insert, () =>
          append(store, id, 0, first).pipe(
            Effect.catchTags({
              // The session was created a moment ago in this very transaction.
              SessionNotFoundError: Effect.die,
              SessionConflictError: Effect.die
            }),
            Effect.flatMap((info) =>
              updatedAt === undefined
                ? Effect.succeed(info)
                : Effect.as(sql`UPDATE sessions SET updated_at = ${updatedAt} WHERE id = ${id}`, {
                    ...info,
                    updatedAt
                  })
            )
          )
        )
      )
      .pipe(mapSqlErrors(store))
  })

/** The columns of a message row, in the order `append` lays its parameters out. */
const messageColumns = ["session_id", "seq", "message", "created_at"] as const

/**
 * The turn's rows as the insert's parameters, laid out flat (`messageColumns` per row),
 * each message validated and serialised; or the `StoreError` refusing the first that is not one.
 */
const messageParameters = (
  store: Store,
  id: string,
  first: number,
  messages: ReadonlyArray<Message.Message>,
  now: number
): Array<unknown> | StoreError => {
  const parameters = new Array<unknown>(messages.length * messageColumns.length)
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index] as Message.Message
    const json = encodeMessage(message)
    if (typeof json !== "string") {
      return new StoreError({
        reason: new InvalidMessage({ location: store.location, sessionId: id, index, detail: json.problem })
      })
    }
    const offset = index * messageColumns.length
    parameters[offset] = id
    parameters[offset + 1] = first + index
    parameters[offset + 2] = json
    parameters[offset + 3] = Math.floor(message.createdAt ?? now)
  }
  return parameters
}

/**
 * The append's statements, compiled once per store (`Prepared`): a commit runs them on its
 * transaction's connection directly, with no statement object, compilation or span each.
 */
interface AppendStatements {
  /** The check and update: `count, now, id, expectedMessageCount`, returning `created_at, title, metadata`. */
  readonly update: Prepared.Prepared
  /**
   * Only when `update` returned nothing, `id`: why, the count now stored. No row: no such session.
   * (One statement on both databases: on SQLite, `RETURNING` measured no dearer than a plain
   * update read back by a second statement alone, and cheaper in a group commit.)
   */
  readonly refusal: Prepared.Prepared
  /** An untitled session's title, from the turn just appended: `title, id`. */
  readonly setTitle: Prepared.Prepared
  /** The multi-row insert of `rows` messages, their parameters laid out by `messageColumns`. */
  readonly insert: (rows: number) => Prepared.Prepared
}

const appendStatements = (sql: SqlClient.SqlClient, dialect: SqlDialect.Dialect): AppendStatements => {
  const inserts: Array<Prepared.Prepared | undefined> = []
  const columns = messageColumns.length
  const rowsOf = (parameters: ReadonlyArray<unknown>, count: number) =>
    Array.from({ length: count }, (_, row) =>
      Object.fromEntries(messageColumns.map((column, place) => [column, parameters[row * columns + place]]))
    ) as [Record<string, unknown>]
  return {
    update: Prepared.make(
      4,
      ([count, now, id, expected]) => sql`UPDATE sessions
        SET message_count = message_count + ${count}, updated_at = ${now}, activity = ${dialect.nextActivity}
        WHERE id = ${id} AND message_count = ${expected}
        RETURNING created_at, title, metadata`
    ),
    refusal: Prepared.make(1, ([id]) => sql`SELECT message_count FROM sessions WHERE id = ${id}`),
    setTitle: Prepared.make(2, ([title, id]) => sql`UPDATE sessions SET title = ${title} WHERE id = ${id}`),
    insert: (rows) => {
      let insert = inserts[rows]
      if (insert === undefined) {
        insert = Prepared.make(
          rows * columns,
          (parameters) => sql`INSERT INTO messages ${sql.insert(rowsOf(parameters, rows))}`
        )
        inserts[rows] = insert
      }
      return insert
    }
  }
}

/** Runs a prepared statement on the `connection` of the transaction it is part of (@noema/sql's). */
const valuesOn = Prepared.valuesOn

type AppendError = StoreError | SqlError.SqlError | SessionNotFoundError | SessionConflictError

/**
 * The append's statements on the transaction's `connection`: the check and update, the turn's
 * rows, then the session's new info (or why it was not updated: a conflict, another count
 * stored, or no such session). Each statement's continuation runs the next one directly: no
 * step in between that a commit would pay for.
 */
const appendRows = (
  store: Store,
  connection: SqlConnection.Connection,
  id: string,
  expectedMessageCount: number,
  messages: ReadonlyArray<Message.Message>,
  parameters: ReadonlyArray<unknown>,
  now: number
): Effect.Effect<SessionInfo, AppendError> => {
  const count = messages.length
  return Effect.flatMap(
    valuesOn(connection, store.append.update, [count, now, id, expectedMessageCount]),
    (rows): Effect.Effect<SessionInfo, AppendError> => {
      const row = rows[0]
      if (row === undefined) return refusal(store, connection, id, expectedMessageCount)
      return Effect.flatMap(
        insertMessages(store, connection, parameters, 0),
        (): Effect.Effect<SessionInfo, AppendError> => {
          const stored = row[1] as string | null
          // Only an untitled session takes a title from the turn: worked out only then.
          const title = stored === null ? (defaultTitle(messages) ?? null) : stored
          const metadata = store.metadata.parse(id, row[2] as string)
          if (metadata instanceof StoreError) return Effect.fail(metadata)
          const info = infoOf(id, title, Number(row[0]), now, expectedMessageCount + count, metadata)
          return title === stored
            ? Effect.succeed(info)
            : Effect.as(valuesOn(connection, store.append.setTitle, [title, id]), info)
        }
      )
    }
  )
}

/** Why an append's update changed nothing, read only then: another count stored (a conflict), or no session at all. */
const refusal = (
  store: Store,
  connection: SqlConnection.Connection,
  id: string,
  expectedMessageCount: number
): Effect.Effect<never, SqlError.SqlError | SessionNotFoundError | SessionConflictError> =>
  Effect.flatMap(
    valuesOn(connection, store.append.refusal, [id]),
    (counts): Effect.Effect<never, SessionNotFoundError | SessionConflictError> => {
      const stored = counts[0]
      return stored === undefined
        ? notFound(id)
        : Effect.fail(
            new SessionConflictError({
              sessionId: id,
              expectedMessageCount,
              actualMessageCount: Number(stored[0])
            })
          )
    }
  )

/**
 * Inserts the rows laid out flat in `parameters` from row `first` on, in multi-row inserts; the
 * last insert is the effect's own end (a turn is one insert).
 */
const insertMessages = (
  store: Store,
  connection: SqlConnection.Connection,
  parameters: ReadonlyArray<unknown>,
  first: number
): Effect.Effect<unknown, SqlError.SqlError> => {
  const columns = messageColumns.length
  const count = parameters.length / columns
  if (first >= count) return Effect.void
  const rows = Math.min(store.dialect.maximumRowsPerInsert, count - first)
  const insert = valuesOn(
    connection,
    store.append.insert(rows),
    rows === count ? parameters : parameters.slice(first * columns, (first + rows) * columns)
  )
  return first + rows >= count
    ? insert
    : Effect.flatMap(insert, () => insertMessages(store, connection, parameters, first + rows))
}

const append = (
  store: Store,
  id: string,
  expectedMessageCount: number,
  messages: ReadonlyArray<Message.Message>
): Effect.Effect<SessionInfo, SessionNotFoundError | SessionConflictError | StoreError> =>
  Effect.clockWith((clock) => {
    const now = clock.currentTimeMillisUnsafe()
    // Validated and serialised before the write lock is taken, so the lock is held briefly.
    const parameters = messageParameters(store, id, expectedMessageCount, messages, now)
    if (parameters instanceof StoreError) return Effect.fail(parameters)
    return store
      .appendTransaction((connection) =>
        appendRows(store, connection, id, expectedMessageCount, messages, parameters, now)
      )
      .pipe(mapSqlErrors(store))
  })

const remove = (store: Store, id: string): Effect.Effect<void, SessionNotFoundError | StoreError> => {
  const { sql } = store
  return store
    .writeTransaction(
      Effect.gen(function* () {
        yield* sql`DELETE FROM messages WHERE session_id = ${id}`
        const deleted = yield* sql`DELETE FROM sessions WHERE id = ${id} RETURNING id`
        if (deleted.length === 0) return yield* notFound(id)
      })
    )
    .pipe(mapSqlErrors(store))
}

const updateMetadata = (
  store: Store,
  id: string,
  update: MetadataUpdate
): Effect.Effect<SessionInfo, SessionNotFoundError | StoreError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const { sql, dialect } = store
    return store
      .writeTransaction(
        Effect.gen(function* () {
          const rows = yield* sql<SessionRow>`SELECT ${store.sessionColumns} FROM sessions
            WHERE id = ${id}${dialect.forUpdate}`
          const row = rows[0]
          if (row === undefined) return yield* notFound(id)
          const current = yield* infoOfRow(store.location, row)
          const updated = yield* sql<SessionRow>`UPDATE sessions
            SET title = ${update.title ?? current.title ?? null},
              metadata = ${JSON.stringify(mergeMetadata(current.metadata, update.metadata))},
              updated_at = ${now}, activity = ${dialect.nextActivity}
            WHERE id = ${id}
            RETURNING ${store.sessionColumns}`
          return yield* infoOfRow(store.location, updated[0] as SessionRow)
        })
      )
      .pipe(mapSqlErrors(store))
  })
