/**
 * SqlStore: the session store on effect's `SqlClient`, for SQLite and PostgreSQL.
 *
 * One implementation for every SQL database: the statements that differ live
 * in `internal/sqlDialect.ts`, the rest is here. An append is one transaction
 * whose first statement updates the session row only if it still holds the
 * expected message count (`UPDATE ... WHERE message_count = ?`; PostgreSQL
 * returns the row with `RETURNING`, SQLite reads it back with one `SELECT
 * changes(), ...`, which costs it less), then inserts the turn's messages in one multi-row insert. The update locks
 * the session (SQLite: the client's `BEGIN IMMEDIATE` write lock; PostgreSQL:
 * the row lock, under READ COMMITTED, so a waiting writer re-reads the count
 * once the first commits and matches nothing), so concurrent writers in other
 * processes or on other machines get a `SessionConflictError`, never
 * interleaved turns.
 * On SQLite, appends that arrive together in one process share one transaction
 * and one fsync, each in its own savepoint with its own result, and each
 * acknowledged only after that COMMIT (group commit: `internal/GroupCommit.ts`
 * states the contract); PostgreSQL keeps one transaction per append.
 * Messages are validated with core's `Message` Schema on the way in and out.
 * The schema is migrated by @noema/sql's `Migrations` when the store is made; a
 * SQLite file is first checked to be an empty database or noema's (application
 * id, schema version) and is refused, untouched, otherwise.
 */
import { Message } from "@noema/core"
import { Database, DatabaseError, Migrations } from "@noema/sql"
import { Clock, Effect, Layer } from "effect"
import { Migrator, SqlClient, type SqlConnection, SqlError } from "effect/sql"
import * as GroupCommit from "./internal/GroupCommit.js"
import { type Dialect, migrationsTable, pg, sqlite } from "./internal/sqlDialect.js"
import {
  CorruptDatabase,
  defaultTitle,
  fromDatabaseError,
  InvalidMessage,
  type Metadata,
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
  /** Defaults to the client's dialect. */
  readonly dialect?: Dialect
  /**
   * The client is read-only (SQLite): the schema is checked but never migrated; a
   * database that needs migrating fails with `NeedsMigration` and is left untouched.
   */
  readonly readonly?: boolean
}

export const latestMigration = (dialect: Dialect): number => Migrations.latest(dialect.migrations)

// ---------------------------------------------------------------------------
// Opening: recognise the database, then migrate
// ---------------------------------------------------------------------------

/** A SQL failure as the store's one-line `StoreError` naming `location` (the one mapping, @noema/sql's). */
const storeError = (location: string, error: SqlError.SqlError): StoreError =>
  fromDatabaseError(DatabaseError.fromSqlError(location, error))

/**
 * What only the session store checks on opening: on SQLite, its schema version
 * (`PRAGMA user_version`, which release 0.1.0 migrated by) must not be newer than
 * this code's; on PostgreSQL, a `sessions` or `messages` table that noema's
 * migrations did not create (another application's) is refused before the
 * Migrator touches it.
 */
const check = (sql: SqlClient.SqlClient, location: string, supported: number): Migrations.Step =>
  sql.onDialectOrElse({
    pg: () =>
      Effect.flatMap(
        sql<{ table: string }>`SELECT t.name AS "table" FROM unnest(ARRAY['sessions', 'messages']) AS t (name)
          WHERE to_regclass(t.name) IS NOT NULL AND to_regclass(${migrationsTable}) IS NULL`,
        (rows) =>
          rows.length === 0
            ? Effect.void
            : Effect.fail(
                DatabaseError.make(
                  new DatabaseError.Foreign({
                    location,
                    detail: `tables ${rows.map((row) => row.table).join(", ")} without noema's ${migrationsTable}`
                  })
                )
              )
      ),
    orElse: () =>
      Effect.flatMap(sqliteUserVersion(sql), (found) =>
        found > supported
          ? Effect.fail(
              DatabaseError.make(
                new DatabaseError.SchemaTooNew({ location, schema: "session", found, supported })
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
const adoptRelease01 = (sql: SqlClient.SqlClient, dialect: Dialect): Migrations.Step =>
  Effect.gen(function* () {
    if (dialect.name !== "sqlite") return
    const version = yield* sqliteUserVersion(sql)
    if (version === 0 || (yield* Migrations.applied(sql, migrationsTable)) > 0) return
    yield* sql`CREATE TABLE IF NOT EXISTS ${sql(migrationsTable)} (
      migration_id integer PRIMARY KEY NOT NULL,
      created_at datetime NOT NULL DEFAULT current_timestamp,
      name VARCHAR(255) NOT NULL)`
    const known = yield* Migrator.fromRecord(dialect.migrations)
    for (const [id, name] of known) {
      if (id <= version)
        yield* sql`INSERT INTO ${sql(migrationsTable)} ${sql.insert({ migration_id: id, name })}`
    }
  }).pipe(Effect.catchTag("MigrationError", (error) => Effect.die(error)))

/**
 * Brings the database to the latest schema through @noema/sql's `Migrations`
 * (on SQLite in one transaction, so a crash leaves either the old file or the
 * migrated one), then records the version in SQLite's `user_version`.
 */
const migrate = (sql: SqlClient.SqlClient, dialect: Dialect, location: string, readonly: boolean) => {
  const supported = latestMigration(dialect)
  return Migrations.run({
    location,
    schema: "session",
    table: migrationsTable,
    migrations: dialect.migrations,
    readonly,
    check: check(sql, location, supported),
    prepare: adoptRelease01(sql, dialect),
    ...(dialect.name === "sqlite" && {
      finish: sql.unsafe(`PRAGMA user_version = ${supported}`).pipe(Effect.asVoid)
    })
  })
}

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

// ---------------------------------------------------------------------------
// Constructor
// ---------------------------------------------------------------------------

/** The store over the `SqlClient` in context; migrates the database first. */
export const make = (options: Options): Effect.Effect<Service, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    const dialect: Dialect = options.dialect ?? sql.onDialectOrElse({ pg: () => pg, orElse: () => sqlite })
    yield* Effect.mapError(migrate(sql, dialect, location, options.readonly === true), fromDatabaseError)
    return makeService(sql, dialect, location)
  })

/** The SQL store as the `SessionStore` service, over the `SqlClient` the layer is given. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError, SqlClient.SqlClient> =>
  Layer.effect(SessionStore, make(options))

/** The store in the shared database the context holds: named, and migrated or only checked, as `Database` says. */
export const fromDatabase: Effect.Effect<Service, StoreError, SqlClient.SqlClient | Database.Database> =
  Effect.flatMap(Database.Database, (database) =>
    make({ location: database.location, readonly: database.readonly })
  )

/** `fromDatabase` as the `SessionStore` service: sessions beside the other stores of the database. */
export const layerFromDatabase: Layer.Layer<
  SessionStore,
  StoreError,
  SqlClient.SqlClient | Database.Database
> = Layer.effect(SessionStore, fromDatabase)

const makeService = (sql: SqlClient.SqlClient, dialect: Dialect, location: string): Service => {
  const statements = dialect.statements
  // PostgreSQL's writers name their isolation level; SQLite's keep the client's BEGIN IMMEDIATE.
  const beginWrite = dialect.beginWrite
  const writeTransaction: typeof sql.withTransaction =
    beginWrite === undefined
      ? sql.withTransaction
      : (effect) =>
          sql.withTransaction(effect).pipe(Effect.provideService(SqlClient.BeginTransaction, beginWrite))
  const query = <A extends object>(text: string, params: ReadonlyArray<unknown>) =>
    sql.unsafe<A>(text, params as Array<unknown>)
  const values = (text: string, params: ReadonlyArray<unknown>) =>
    sql.unsafe(text, params as Array<unknown>).values

  const corrupt = (detail: string) => new StoreError({ reason: new CorruptDatabase({ location, detail }) })

  /** Runs `effect`, turning the client's errors into `StoreError`s. */
  const store = <A, E>(effect: Effect.Effect<A, E | SqlError.SqlError>): Effect.Effect<A, E | StoreError> =>
    Effect.catchIf(effect, SqlError.isSqlError, (error) =>
      Effect.fail(storeError(location, error))
    ) as Effect.Effect<A, E | StoreError>

  const parseMetadata = (id: string, text: string): Metadata => {
    let metadata: unknown
    try {
      metadata = JSON.parse(text)
    } catch {
      metadata = undefined
    }
    if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
      throw corrupt(`session "${id}" has metadata that is not a JSON object`)
    }
    return metadata as Metadata
  }

  // Commits rarely change metadata: the last text parsed is kept with its value, so a run of
  // commits parses it once. The value is shared between the infos returned, as the memory store does.
  let lastMetadataText: string | undefined
  let lastMetadata: Metadata = {}
  const cachedMetadata = (id: string, text: string): Metadata => {
    if (text !== lastMetadataText) {
      lastMetadata = parseMetadata(id, text)
      lastMetadataText = text
    }
    return lastMetadata
  }

  const toInfo = (row: SessionRow): SessionInfo =>
    infoOf(
      row.id,
      row.title,
      Number(row.created_at),
      Number(row.updated_at),
      Number(row.message_count),
      parseMetadata(row.id, row.metadata)
    )

  /** Synchronous row work that may find damage: a thrown `StoreError` becomes the failure. */
  const decodeRows = <A>(body: () => A): Effect.Effect<A, StoreError> => {
    try {
      return Effect.succeed(body())
    } catch (error) {
      return Effect.fail(error instanceof StoreError ? error : corrupt(DatabaseError.describe(error)))
    }
  }

  const readMessages = (
    id: string,
    expectedCount: number,
    rows: ReadonlyArray<ReadonlyArray<unknown>>
  ): Array<Message.Message> => {
    if (rows.length !== expectedCount) {
      throw corrupt(`session "${id}" should hold ${expectedCount} messages but ${rows.length} were found`)
    }
    const parsed = new Array<unknown>(rows.length)
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as readonly [number | string, string]
      if (Number(row[0]) !== i) throw corrupt(`session "${id}" is missing message ${i}`)
      try {
        parsed[i] = JSON.parse(row[1])
      } catch (error) {
        throw corrupt(`session "${id}", message ${i}: invalid JSON (${DatabaseError.describe(error)})`)
      }
    }
    // Checked with core's Schema in place: the parsed JSON is already the plain data a decode
    // would return (a message has no transformations), so no copy of 100,000 messages is made.
    for (let i = 0; i < parsed.length; i++) {
      if (Message.is(parsed[i])) continue
      let reason = "not a message"
      try {
        Message.decodeSync(parsed[i])
      } catch (error) {
        reason = DatabaseError.describe(error)
      }
      // The stored text, shortened, shows what is there; the Schema's message says what was expected.
      const text = (rows[i] as readonly [unknown, string])[1]
      const stored = text.length > 80 ? `${text.slice(0, 79)}…` : text
      throw corrupt(`session "${id}", message ${i}: ${reason}; stored: ${DatabaseError.oneLine(stored)}`)
    }
    return parsed as Array<Message.Message>
  }

  const notFound = (id: string): Effect.Effect<never, SessionNotFoundError> =>
    Effect.fail(new SessionNotFoundError({ sessionId: id }))

  const sessionRow = (id: string, text: string) =>
    Effect.map(query<SessionRow>(text, [id]), (rows) => rows[0])

  /**
   * Runs an append's statements in a writing transaction, on its connection directly: no
   * statement object, compilation or span per statement on the commit path (the transaction
   * has its span). SQLite groups the appends that arrive together into one transaction and one
   * fsync (`internal/GroupCommit.ts`); PostgreSQL keeps one transaction per append, as its
   * server already flushes concurrent commits together.
   */
  const appendTransaction: <A, E>(
    append: GroupCommit.Append<A, E>
  ) => Effect.Effect<A, E | SqlError.SqlError> =
    dialect.name === "sqlite"
      ? GroupCommit.make(sql)
      : (append) => writeTransaction(GroupCommit.onTransactionConnection(sql, append))

  /**
   * The append's check and update: the session row (its `created_at, title, metadata` last),
   * or why it was not updated: a conflict (another count stored) or no such session.
   */
  const appendToSession = (
    connection: SqlConnection.Connection,
    id: string,
    expectedMessageCount: number,
    update: ReadonlyArray<unknown>
  ): Effect.Effect<
    ReadonlyArray<unknown>,
    SqlError.SqlError | SessionNotFoundError | SessionConflictError
  > => {
    type Refused = Effect.Effect<never, SessionNotFoundError | SessionConflictError>
    const conflict = (actualMessageCount: number): Refused =>
      Effect.fail(new SessionConflictError({ sessionId: id, expectedMessageCount, actualMessageCount }))
    const missing = (): Refused => notFound(id)
    const appended = statements.appendedSession
    if (appended === undefined) {
      return Effect.flatMap(connection.executeValues(statements.appendToSession, update), (rows) => {
        const row = rows[0]
        if (row !== undefined) return Effect.succeed(row)
        return Effect.flatMap(connection.executeValues(statements.selectMessageCount, [id]), (counts) => {
          const count = counts[0]
          return count === undefined ? missing() : conflict(Number(count[0]))
        })
      })
    }
    return Effect.flatMap(connection.execute(statements.appendToSession, update, undefined), () =>
      Effect.flatMap(connection.executeValues(appended, [id]), (rows) => {
        // changes(), message_count, created_at, title, metadata
        const row = rows[0]
        if (row === undefined) return missing()
        return Number(row[0]) === 1 ? Effect.succeed(row) : conflict(Number(row[1]))
      })
    )
  }

  /** Inserts the rows laid out flat in `parameters` from row `first` on, in multi-row inserts. */
  const insertMessages = (
    connection: SqlConnection.Connection,
    parameters: ReadonlyArray<unknown>,
    first: number
  ): Effect.Effect<void, SqlError.SqlError> => {
    const count = parameters.length / 4
    if (first >= count) return Effect.void
    const rows = Math.min(dialect.maximumRowsPerInsert, count - first)
    return Effect.flatMap(
      connection.execute(
        dialect.insertMessages(rows),
        rows === count ? parameters : parameters.slice(first * 4, (first + rows) * 4),
        undefined
      ),
      () => insertMessages(connection, parameters, first + rows)
    )
  }

  const service: Service = {
    location,

    create: (options) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const id = options?.id ?? crypto.randomUUID()
        const metadata = JSON.stringify(options?.metadata ?? {})
        const insert = store(
          Effect.gen(function* () {
            const rows = yield* query<SessionRow>(statements.insertSession, [
              id,
              options?.title ?? null,
              options?.createdAt ?? now,
              options?.updatedAt ?? now,
              metadata
            ])
            const row = rows[0]
            if (row === undefined) return yield* Effect.fail(new SessionAlreadyExistsError({ sessionId: id }))
            return yield* decodeRows(() => toInfo(row))
          })
        )
        const first = options?.messages
        if (first === undefined || first.length === 0) return insert
        const updatedAt = options?.updatedAt
        // The session and its first messages in one transaction (the append's nests as a savepoint);
        // an imported session keeps its own `updatedAt`, which the append would have made now.
        return store(
          writeTransaction(
            Effect.flatMap(insert, () =>
              service.append(id, 0, first).pipe(
                Effect.catchTags({
                  // The session was created a moment ago in this very transaction.
                  SessionNotFoundError: Effect.die,
                  SessionConflictError: Effect.die
                }),
                Effect.flatMap((info) =>
                  updatedAt === undefined
                    ? Effect.succeed(info)
                    : Effect.as(query(statements.setUpdatedAt, [updatedAt, id]), { ...info, updatedAt })
                )
              )
            )
          )
        )
      }),

    load: (id) =>
      store(
        sql
          .withTransaction(
            Effect.gen(function* () {
              const row = yield* sessionRow(id, statements.selectSession)
              if (row === undefined) return yield* notFound(id)
              const rows = yield* values(statements.selectMessages, [id])
              return yield* decodeRows(
                (): StoredSession => ({
                  info: toInfo(row),
                  messages: readMessages(id, Number(row.message_count), rows)
                })
              )
            })
          )
          .pipe(Effect.provideService(SqlClient.BeginTransaction, dialect.beginRead))
      ),

    append: (id, expectedMessageCount, messages) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        // Validate and serialise before taking the write lock, so the lock is held briefly. The
        // rows' parameters are laid out flat, ready for the multi-row inserts.
        const count = messages.length
        const parameters = new Array<unknown>(count * 4)
        for (let index = 0; index < count; index++) {
          const message = messages[index] as Message.Message
          const json = encodeMessage(message)
          if (typeof json !== "string") {
            return Effect.fail(
              new StoreError({
                reason: new InvalidMessage({ location, sessionId: id, index, detail: json.problem })
              })
            )
          }
          const offset = index * 4
          parameters[offset] = id
          parameters[offset + 1] = expectedMessageCount + index
          parameters[offset + 2] = json
          parameters[offset + 3] = Math.floor(message.createdAt ?? now)
        }
        return store(
          appendTransaction((connection) =>
            Effect.flatMap(
              appendToSession(connection, id, expectedMessageCount, [count, now, id, expectedMessageCount]),
              (row) =>
                Effect.flatMap(insertMessages(connection, parameters, 0), () => {
                  const stored = row[row.length - 2] as string | null
                  // Only an untitled session takes a title from the turn: worked out only then.
                  const title = stored === null ? (defaultTitle(messages) ?? null) : stored
                  const info = decodeRows(() =>
                    infoOf(
                      id,
                      title,
                      Number(row[row.length - 3]),
                      now,
                      expectedMessageCount + count,
                      cachedMetadata(id, row[row.length - 1] as string)
                    )
                  )
                  return title === stored
                    ? info
                    : Effect.flatMap(
                        connection.execute(statements.setTitle, [title, id], undefined),
                        () => info
                      )
                })
            )
          )
        )
      }),

    list: () =>
      store(
        Effect.flatMap(query<SessionRow>(statements.listSessions, []), (rows) =>
          decodeRows(() => rows.map(toInfo))
        )
      ),

    info: (id) =>
      store(
        Effect.gen(function* () {
          const row = yield* sessionRow(id, statements.selectSession)
          if (row === undefined) return yield* notFound(id)
          return yield* decodeRows(() => toInfo(row))
        })
      ),

    delete: (id) =>
      store(
        writeTransaction(
          Effect.gen(function* () {
            yield* query(statements.deleteMessages, [id])
            const deleted = yield* query<{ id: string }>(`${statements.deleteSession} RETURNING id`, [id])
            if (deleted.length === 0) return yield* notFound(id)
          })
        )
      ),

    updateMetadata: (id, update) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        store(
          writeTransaction(
            Effect.gen(function* () {
              const row = yield* sessionRow(id, statements.selectSessionForUpdate)
              if (row === undefined) return yield* notFound(id)
              const current = yield* decodeRows(() => toInfo(row))
              const metadata = JSON.stringify(mergeMetadata(current.metadata, update.metadata))
              const updated = yield* query<SessionRow>(statements.updateMetadata, [
                update.title ?? current.title ?? null,
                metadata,
                now,
                id
              ])
              return yield* decodeRows(() => toInfo(updated[0] as SessionRow))
            })
          )
        )
      )
  }
  return service
}
