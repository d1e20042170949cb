/**
 * SqliteStore: the embedded default session store, one SQLite file.
 *
 * Built on Node's own `node:sqlite` (no native addon to compile). The file is
 * opened in WAL mode with `synchronous=FULL`, so a commit that returned has
 * reached the disk and survives a crash or a power cut, and readers never
 * block the writer. Each append is one `BEGIN IMMEDIATE` transaction that
 * checks the expected message count inside it, so concurrent handles, also in
 * other processes, cannot interleave. The file carries an application id and
 * a schema version; migrations run in order when it is opened, and a file
 * that is corrupt, belongs to another application or was written by a newer
 * noema is refused with a one-line `StoreError` and left untouched.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite"
import type { Message } from "@noema/core"
import { Clock, Duration, Effect, Layer, Result, type Scope } from "effect"
import { parse, problemOf } from "./internal/messageCheck.js"
import {
  type AppendRow,
  applicationId,
  insertMessages,
  migrations,
  parametersPerMessage,
  type SessionRow,
  schemaVersion,
  sql
} from "./internal/sqliteSchema.js"
import {
  CorruptDatabase,
  defaultTitle,
  ForeignDatabase,
  InvalidMessage,
  IoFailure,
  Locked,
  type Metadata,
  mergeMetadata,
  SchemaTooNew,
  type Service,
  SessionAlreadyExistsError,
  SessionConflictError,
  type SessionInfo,
  SessionNotFoundError,
  SessionStore,
  type StoredSession,
  StoreError
} from "./SessionStore.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

export interface Options {
  /** The database file (created with its directory if missing), or ":memory:". */
  readonly filename: string
  /** How long a write waits for another process's lock before failing with `Locked`. Default 5 seconds. */
  readonly busyTimeout?: Duration.Input
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const oneLine = (text: string): string => text.replace(/\s*\n\s*/g, "; ").trim()

const describe = (error: unknown): string => oneLine(error instanceof Error ? error.message : String(error))

/** SQLite's primary result code of a `node:sqlite` error. */
const resultCode = (error: unknown): number | undefined =>
  typeof error === "object" && error !== null && "errcode" in error && typeof error.errcode === "number"
    ? error.errcode & 0xff
    : undefined

const SQLITE_BUSY = 5
const SQLITE_LOCKED = 6
const SQLITE_CORRUPT = 11
const SQLITE_NOTADB = 26

const storeError = (location: string, busyTimeoutMillis: number, error: unknown): StoreError => {
  if (error instanceof StoreError) return error
  const detail = describe(error)
  switch (resultCode(error)) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return new StoreError({
        reason: new Locked({ location, detail: `gave up after ${busyTimeoutMillis} ms: ${detail}` })
      })
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return new StoreError({ reason: new CorruptDatabase({ location, detail }) })
    default:
      return new StoreError({ reason: new IoFailure({ location, detail }) })
  }
}

// ---------------------------------------------------------------------------
// Opening: inspect before writing anything, then configure and migrate
// ---------------------------------------------------------------------------

const pragma = (db: DatabaseSync, name: string): number => {
  const row = db.prepare(`PRAGMA ${name}`).get() as Record<string, unknown> | undefined
  const value = row?.[name]
  return typeof value === "number" ? value : 0
}

/** Refuses a file that is not an empty database or one of ours; reads only. */
const inspect = (db: DatabaseSync, location: string): void => {
  const foundApplicationId = pragma(db, "application_id")
  const version = pragma(db, "user_version")
  const tables = (db.prepare(sql.tables).all() as Array<{ readonly name: string }>).map((row) => row.name)
  if (foundApplicationId === applicationId) {
    if (version > schemaVersion) {
      throw new StoreError({
        reason: new SchemaTooNew({ location, found: version, supported: schemaVersion })
      })
    }
  } else if (foundApplicationId !== 0 || tables.length > 0 || version !== 0) {
    const owner =
      foundApplicationId !== 0
        ? `application id 0x${(foundApplicationId >>> 0).toString(16).padStart(8, "0")}`
        : "no noema application id"
    const shown = tables.slice(0, 5).join(", ")
    const more = tables.length > 5 ? `, and ${tables.length - 5} more` : ""
    const detail = tables.length > 0 ? `${owner}, tables ${shown}${more}` : owner
    throw new StoreError({ reason: new ForeignDatabase({ location, detail }) })
  }
}

const configure = (db: DatabaseSync): void => {
  db.exec("PRAGMA journal_mode = WAL")
  // FULL: in WAL mode NORMAL may lose the last commits on power loss; an acknowledged turn must not.
  db.exec("PRAGMA synchronous = FULL")
  db.exec("PRAGMA foreign_keys = ON")
}

const migrate = (db: DatabaseSync, location: string): void => {
  if (pragma(db, "user_version") === schemaVersion && pragma(db, "application_id") === applicationId) return
  db.exec(sql.beginImmediate)
  try {
    // Read again under the write lock: another process may have migrated meanwhile.
    const current = pragma(db, "user_version")
    if (current > schemaVersion) {
      throw new StoreError({
        reason: new SchemaTooNew({ location, found: current, supported: schemaVersion })
      })
    }
    for (const migration of migrations) {
      if (migration.version > current) db.exec(migration.sql)
    }
    db.exec(`PRAGMA application_id = ${applicationId}`)
    db.exec(`PRAGMA user_version = ${schemaVersion}`)
    db.exec(sql.commit)
  } catch (error) {
    if (db.isTransaction) db.exec(sql.rollback)
    throw error
  }
}

const open = (filename: string, busyTimeoutMillis: number): { db: DatabaseSync; location: string } => {
  const isFile = filename !== ":memory:"
  const location = isFile ? path.resolve(filename) : filename
  try {
    if (isFile) fs.mkdirSync(path.dirname(location), { recursive: true })
    const db = new DatabaseSync(location, { timeout: busyTimeoutMillis, enableForeignKeyConstraints: true })
    try {
      inspect(db, location)
      configure(db)
      migrate(db, location)
    } catch (error) {
      db.close()
      throw error
    }
    return { db, location }
  } catch (error) {
    throw storeError(location, busyTimeoutMillis, error)
  }
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

type Outcome<A, E> = Result.Result<A, E>

/** Rows per multi-row insert: a turn fits in one; a big import is split (SQLite caps bound parameters). */
const maximumRowsPerInsert = 64

/** Opens (creating or migrating) the database; it is closed when the scope closes. */
export const make = (options: Options): Effect.Effect<Service, StoreError, Scope.Scope> => {
  const busyTimeoutMillis = Duration.toMillis(options.busyTimeout ?? Duration.seconds(5))
  return Effect.map(
    Effect.acquireRelease(
      Effect.try({
        try: () => open(options.filename, busyTimeoutMillis),
        catch: (error) => storeError(options.filename, busyTimeoutMillis, error)
      }),
      ({ db }) =>
        Effect.sync(() => {
          if (db.isOpen) db.close()
        })
    ),
    ({ db, location }) => makeService(db, location, busyTimeoutMillis)
  )
}

/** The SQLite store as the `SessionStore` service. */
export const layer = (options: Options): Layer.Layer<SessionStore, StoreError> =>
  Layer.effect(SessionStore, make(options))

// ---------------------------------------------------------------------------
// The service over an open database
// ---------------------------------------------------------------------------

const makeService = (db: DatabaseSync, location: string, busyTimeoutMillis: number): Service => {
  // Prepared once: preparing costs about as much as running these small statements.
  const statement = (text: string): StatementSync => db.prepare(text)
  const begin = statement(sql.begin)
  const beginImmediate = statement(sql.beginImmediate)
  const commit = statement(sql.commit)
  const rollback = statement(sql.rollback)
  const insertSession = statement(sql.insertSession)
  const selectSession = statement(sql.selectSession)
  const selectForAppend = statement(sql.selectForAppend)
  selectForAppend.setReturnArrays(true)
  const listSessions = statement(sql.listSessions)
  const selectMessages = statement(sql.selectMessages)
  selectMessages.setReturnArrays(true)
  // One multi-row insert per batch size, prepared the first time a batch of that size is stored.
  const insertStatements: Array<StatementSync | undefined> = []
  const insertStatement = (count: number): StatementSync => {
    let prepared = insertStatements[count]
    if (prepared === undefined) {
      prepared = statement(insertMessages(count))
      insertStatements[count] = prepared
    }
    return prepared
  }
  const updateAfterAppend = statement(sql.updateAfterAppend)
  const updateMetadata = statement(sql.updateMetadata)
  const deleteMessages = statement(sql.deleteMessages)
  const deleteSession = statement(sql.deleteSession)

  const corrupt = (detail: string) => new StoreError({ reason: new CorruptDatabase({ location, detail }) })

  /** Runs `body` in one transaction: committed when it returns a success, rolled back otherwise. */
  const transaction = <A, E>(immediate: boolean, body: () => Outcome<A, E>): Outcome<A, E> => {
    ;(immediate ? beginImmediate : begin).run()
    try {
      const outcome = body()
      if (Result.isSuccess(outcome)) commit.run()
      else rollback.run()
      return outcome
    } catch (error) {
      if (db.isTransaction) rollback.run()
      throw error
    }
  }

  /** Runs synchronous database work now; SQLite and corruption failures become `StoreError`s. */
  const settle = <A, E>(body: () => Outcome<A, E>): Effect.Effect<A, E | StoreError> => {
    let outcome: Outcome<A, E>
    try {
      outcome = body()
    } catch (error) {
      return Effect.fail(storeError(location, busyTimeoutMillis, error))
    }
    return Result.isSuccess(outcome) ? Effect.succeed(outcome.success) : Effect.fail(outcome.failure)
  }

  /** `settle`, when the effect runs. */
  const run = <A, E>(body: () => Outcome<A, E>): Effect.Effect<A, E | StoreError> =>
    Effect.suspend(() => settle(body))

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

  const toInfo = (row: SessionRow): SessionInfo =>
    infoOf(
      row.id,
      row.title,
      row.created_at,
      row.updated_at,
      row.message_count,
      parseMetadata(row.id, row.metadata)
    )

  const notFound = (id: string) => Result.fail(new SessionNotFoundError({ sessionId: id }))

  const readMessages = (id: string, expectedCount: number): Array<Message.Message> => {
    const rows = selectMessages.all(id) as unknown as ReadonlyArray<readonly [number, string]>
    if (rows.length !== expectedCount) {
      throw corrupt(`session "${id}" should hold ${expectedCount} messages but ${rows.length} were found`)
    }
    const messages = new Array<Message.Message>(rows.length)
    for (let i = 0; i < rows.length; i++) {
      const [seq, json] = rows[i] as readonly [number, string]
      if (seq !== i) throw corrupt(`session "${id}" is missing message ${i}`)
      const parsed = parse(json)
      if (typeof parsed === "string") throw corrupt(`session "${id}", message ${seq}: ${parsed}`)
      messages[i] = parsed
    }
    return messages
  }

  return {
    location,

    create: (options) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const id = options?.id ?? crypto.randomUUID()
        const metadata = JSON.stringify(options?.metadata ?? {})
        return run(() => {
          const row = insertSession.get(id, options?.title ?? null, now, now, metadata) as
            | SessionRow
            | undefined
          return row === undefined
            ? Result.fail(new SessionAlreadyExistsError({ sessionId: id }))
            : Result.succeed(toInfo(row))
        })
      }),

    load: (id) =>
      run(() =>
        transaction(false, (): Outcome<StoredSession, SessionNotFoundError> => {
          const row = selectSession.get(id) as SessionRow | undefined
          if (row === undefined) return notFound(id)
          return Result.succeed({ info: toInfo(row), messages: readMessages(id, row.message_count) })
        })
      ),

    append: (id, expectedMessageCount, messages) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        // Validate and serialise before taking the write lock, so the lock is held briefly. The
        // rows' parameters are laid out flat, ready for the multi-row inserts.
        const count = messages.length
        const parameters = new Array<SQLInputValue>(count * parametersPerMessage)
        for (let index = 0; index < count; index++) {
          const message = messages[index] as Message.Message
          const problem = problemOf(message)
          if (problem !== undefined) {
            return Effect.fail(
              new StoreError({
                reason: new InvalidMessage({ location, sessionId: id, index, detail: problem })
              })
            )
          }
          const offset = index * parametersPerMessage
          parameters[offset] = id
          parameters[offset + 1] = expectedMessageCount + index
          parameters[offset + 2] = JSON.stringify(message)
          parameters[offset + 3] = Math.floor(message.createdAt ?? now)
        }
        return settle(() =>
          transaction(true, (): Outcome<SessionInfo, SessionNotFoundError | SessionConflictError> => {
            const row = selectForAppend.get(id) as unknown as AppendRow | undefined
            if (row === undefined) return notFound(id)
            const [actualMessageCount, createdAt, storedTitle, metadataText] = row
            if (actualMessageCount !== expectedMessageCount) {
              return Result.fail(
                new SessionConflictError({ sessionId: id, expectedMessageCount, actualMessageCount })
              )
            }
            const metadata = cachedMetadata(id, metadataText)
            for (let first = 0; first < count; first += maximumRowsPerInsert) {
              const rows = Math.min(maximumRowsPerInsert, count - first)
              const statement = insertStatement(rows)
              if (rows === count) statement.run(...parameters)
              else
                statement.run(
                  ...parameters.slice(first * parametersPerMessage, (first + rows) * parametersPerMessage)
                )
            }
            // Only an untitled session needs a title worked out from the turn.
            const title = storedTitle ?? defaultTitle(messages) ?? null
            const messageCount = expectedMessageCount + count
            updateAfterAppend.run(messageCount, now, title, id)
            return Result.succeed(infoOf(id, title, createdAt, now, messageCount, metadata))
          })
        )
      }),

    list: () =>
      run(() => Result.succeed((listSessions.all() as unknown as ReadonlyArray<SessionRow>).map(toInfo))),

    info: (id) =>
      run(() => {
        const row = selectSession.get(id) as SessionRow | undefined
        return row === undefined ? notFound(id) : Result.succeed(toInfo(row))
      }),

    delete: (id) =>
      run(() =>
        transaction(true, (): Outcome<void, SessionNotFoundError> => {
          deleteMessages.run(id)
          return deleteSession.run(id).changes === 0 ? notFound(id) : Result.succeed(undefined)
        })
      ),

    updateMetadata: (id, update) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        run(() =>
          transaction(true, (): Outcome<SessionInfo, SessionNotFoundError> => {
            const row = selectSession.get(id) as SessionRow | undefined
            if (row === undefined) return notFound(id)
            const current = toInfo(row)
            const metadata = JSON.stringify(mergeMetadata(current.metadata, update.metadata))
            const updated = updateMetadata.get(
              update.title ?? current.title ?? null,
              metadata,
              now,
              id
            ) as unknown as SessionRow
            return Result.succeed(toInfo(updated))
          })
        )
      )
  }
}
