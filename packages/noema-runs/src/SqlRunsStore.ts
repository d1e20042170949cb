/**
 * SqlRunsStore: the runs store on effect's `SqlClient`, for SQLite and PostgreSQL.
 *
 * One implementation in effect's tagged templates; the dialects differ only
 * where `onDialectOrElse` says (the event log's serial column, how a writer
 * locks its thread). Tables are prefixed `runs_` and migrated by @noema/sql's
 * `Migrations` with the store's own table `noema_runs_migrations`, so runs
 * share one database with sessions and the other stores (a SQLite file is
 * claimed as noema's first; opened read-only, nothing is migrated). Every write is one transaction that first locks the thread
 * (SQLite: the client's `BEGIN IMMEDIATE`; PostgreSQL: `SELECT ... FOR UPDATE`
 * on the thread row), so a thread's runs are serialised across processes and
 * machines. The log (`runs_events`) is the truth; `runs_runs` (the folded view),
 * `runs_stage_attempts` and `runs_artifacts` are its projections, rewritten in
 * the same transaction and rebuilt from the log by `rebuild`.
 */
import { Database, DatabaseError, Migrations, Prepared } from "@noema/sql"
import { Effect, Layer } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import {
  type ArtifactEntry,
  activeStatuses,
  applyAll,
  type Event,
  IllegalTransition,
  InvalidInput,
  newRunId,
  RunNotFound,
  type RunView,
  type Thread,
  ThreadNotFound
} from "./Run.js"
import {
  appended,
  type Claim,
  type ClaimRequest,
  type ClaimResult,
  createRefusal,
  type ExecutionRecord,
  type ExecutionResult,
  type ExecutionStart,
  type JournalEntry,
  needsThreadRuns,
  newThread,
  queuedRun,
  RunsStore,
  RunsStoreError,
  type Service,
  type WorkflowJournal
} from "./RunsStore.js"

export const migrationsTable = "noema_runs_migrations"

/**
 * The PostgreSQL channel every append NOTIFYs (in its transaction, so it is delivered when
 * the events are committed): a server LISTENs to follow the feed without polling.
 */
export const changesChannel = "noema_runs_events"

/** A serial primary key: the log's order (PostgreSQL's BIGSERIAL, SQLite's AUTOINCREMENT). */
const serialKey = (sql: SqlClient.SqlClient, column: string) =>
  sql.literal(
    sql.onDialectOrElse({
      pg: () => `${column} BIGSERIAL PRIMARY KEY`,
      orElse: () => `${column} INTEGER PRIMARY KEY AUTOINCREMENT`
    })
  )

const migrations: Migrations.Record = {
  "1_runs": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE runs_threads (
      id TEXT PRIMARY KEY NOT NULL,
      title TEXT NOT NULL,
      status TEXT NOT NULL,
      queue_policy TEXT NOT NULL,
      created_at TEXT NOT NULL
    )`
    yield* sql`CREATE TABLE runs_events (
      ${serialKey(sql, "id")},
      event_id TEXT NOT NULL UNIQUE,
      run_id TEXT NOT NULL,
      thread_id TEXT NOT NULL REFERENCES runs_threads (id),
      seq INTEGER NOT NULL,
      at TEXT NOT NULL,
      type TEXT NOT NULL,
      data TEXT NOT NULL,
      UNIQUE (run_id, seq)
    )`
    yield* sql`CREATE INDEX runs_events_by_thread ON runs_events (thread_id, id)`
    yield* sql`CREATE TABLE runs_runs (
      run_id TEXT PRIMARY KEY NOT NULL,
      thread_id TEXT NOT NULL REFERENCES runs_threads (id),
      status TEXT NOT NULL,
      created_at TEXT NOT NULL,
      queue_order BIGINT NOT NULL,
      seq INTEGER NOT NULL,
      view TEXT NOT NULL
    )`
    yield* sql`CREATE INDEX runs_runs_by_thread ON runs_runs (thread_id, queue_order)`
    yield* sql`CREATE TABLE runs_stage_attempts (
      run_id TEXT NOT NULL,
      position INTEGER NOT NULL,
      stage_key TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      status TEXT NOT NULL,
      started_at TEXT NOT NULL,
      finished_at TEXT,
      error_code TEXT,
      error_message TEXT,
      retryable INTEGER,
      PRIMARY KEY (run_id, position, attempt)
    )`
    yield* sql`CREATE TABLE runs_artifacts (
      run_id TEXT NOT NULL,
      position INTEGER NOT NULL,
      attempt INTEGER NOT NULL,
      path TEXT NOT NULL,
      kind TEXT NOT NULL,
      sha256 TEXT NOT NULL,
      size INTEGER NOT NULL,
      PRIMARY KEY (run_id, position, attempt, path)
    )`
  }),
  "2_claims": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`CREATE TABLE runs_claims (
      run_id TEXT PRIMARY KEY NOT NULL,
      owner TEXT NOT NULL,
      expires_at BIGINT NOT NULL,
      claimed_at TEXT NOT NULL
    )`
  ),
  "3_workflow": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`CREATE TABLE runs_workflow_executions (
      execution_id TEXT PRIMARY KEY NOT NULL,
      workflow TEXT NOT NULL,
      payload TEXT NOT NULL,
      result TEXT,
      interrupted INTEGER NOT NULL DEFAULT 0,
      created_at TEXT NOT NULL
    )`
    yield* sql`CREATE TABLE runs_workflow_journal (
      ${serialKey(sql, "seq")},
      execution_id TEXT NOT NULL,
      entry_key TEXT NOT NULL,
      value TEXT NOT NULL,
      recorded_at TEXT NOT NULL,
      UNIQUE (execution_id, entry_key)
    )`
  }),
  // A worker lists the runs not finished on every poll: read through this index, the finished
  // ones (all but a few, once a store has been used for a while) are never read.
  "4_runs_by_status": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`CREATE INDEX runs_runs_by_status ON runs_runs (status, queue_order)`
  )
}

interface EventRow {
  readonly id: number | string
  readonly event_id: string
  readonly run_id: string
  readonly thread_id: string
  readonly seq: number | string
  readonly at: string
  readonly data: string
}

const eventOf = (row: EventRow): Event => ({
  event_id: row.event_id,
  run_id: row.run_id,
  thread_id: row.thread_id,
  seq: Number(row.seq),
  at: row.at,
  data: JSON.parse(row.data)
})

/** One artifact entry and another, field by field. */
const sameArtifact = (one: ArtifactEntry, other: ArtifactEntry | undefined): boolean =>
  one === other ||
  (other !== undefined &&
    one.path === other.path &&
    one.kind === other.kind &&
    one.sha256 === other.sha256 &&
    one.size === other.size)

interface ClaimRow {
  readonly run_id: string
  readonly owner: string
  readonly expires_at: number | string
  readonly claimed_at: string
}

const claimOf = (row: ClaimRow): Claim => ({
  runId: row.run_id,
  owner: row.owner,
  expiresAt: Number(row.expires_at),
  claimedAt: row.claimed_at
})

export interface Options {
  /** How messages name the database. */
  readonly location: string
  /** Check the schema, migrate nothing (a database that needs migrating is refused). Default false. */
  readonly readonly?: boolean
}

interface ThreadRow {
  readonly id: string
  readonly title: string
  readonly status: string
  readonly queue_policy: string
  readonly created_at: string
}

interface ExecutionRow {
  readonly execution_id: string
  readonly workflow: string
  readonly payload: string
  readonly result: string | null
  readonly interrupted: number | string | boolean
}

const executionOf = (row: ExecutionRow): ExecutionRecord => ({
  executionId: row.execution_id,
  workflow: row.workflow,
  payload: row.payload,
  ...(row.result !== null && { result: row.result }),
  interrupted: Number(row.interrupted) === 1
})

const threadOf = (row: ThreadRow): Thread => ({
  id: row.id,
  title: row.title,
  status: row.status === "closed" ? "closed" : "open",
  queuePolicy: row.queue_policy === "enqueue" ? "enqueue" : "reject",
  createdAt: row.created_at
})

/** The store over the `SqlClient` in context; migrates its tables first. */
export const make = (options: Options): Effect.Effect<Service, RunsStoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const location = options.location
    const toError = (error: DatabaseError.DatabaseError) => RunsStoreError.fromDatabaseError(location, error)
    yield* Effect.mapError(
      Migrations.run({
        location,
        schema: "runs",
        table: migrationsTable,
        migrations,
        readonly: options.readonly === true
      }),
      toError
    )
    const mapSqlErrors = DatabaseError.mapSqlErrors(location)
    const orStoreError = <A, E>(effect: Effect.Effect<A, E | SqlError.SqlError>) =>
      Effect.mapError(mapSqlErrors(effect), (error) =>
        error instanceof DatabaseError.DatabaseError ? toError(error) : error
      ) as Effect.Effect<A, Exclude<E, SqlError.SqlError> | RunsStoreError>
    // A writer locks its thread: PostgreSQL names READ COMMITTED and locks the row (`FOR UPDATE`);
    // SQLite's client begins IMMEDIATE, one writer at a time, and has no row locks.
    const transaction = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      sql.onDialectOrElse({
        pg: () =>
          sql
            .withTransaction(effect)
            .pipe(Effect.provideService(SqlClient.BeginTransaction, "BEGIN ISOLATION LEVEL READ COMMITTED")),
        orElse: () => sql.withTransaction(effect)
      })
    /**
     * The statements a stage runs, compiled once (`Prepared`): each call then costs the driver's
     * work, not a template's compilation and a statement object.
     */
    const statements = {
      selectRun: Prepared.make(1, ([runId]) => sql`SELECT view FROM runs_runs WHERE run_id = ${runId}`),
      updateRun: Prepared.make(
        4,
        ([status, seq, view, runId]) =>
          sql`UPDATE runs_runs SET status = ${status}, seq = ${seq}, view = ${view} WHERE run_id = ${runId}`
      ),
      insertAttempt: Prepared.make(
        10,
        ([
          status,
          finishedAt,
          errorCode,
          errorMessage,
          retryable,
          runId,
          position,
          attempt,
          key,
          startedAt
        ]) =>
          sql`INSERT INTO runs_stage_attempts
            (run_id, position, stage_key, attempt, status, started_at, finished_at, error_code, error_message, retryable)
            VALUES (${runId}, ${position}, ${key}, ${attempt}, ${status}, ${startedAt}, ${finishedAt}, ${errorCode},
              ${errorMessage}, ${retryable})`
      ),
      updateAttempt: Prepared.make(
        8,
        ([status, finishedAt, errorCode, errorMessage, retryable, runId, position, attempt]) =>
          sql`UPDATE runs_stage_attempts SET status = ${status}, finished_at = ${finishedAt},
            error_code = ${errorCode}, error_message = ${errorMessage}, retryable = ${retryable}
            WHERE run_id = ${runId} AND position = ${position} AND attempt = ${attempt}`
      ),
      insertArtifact: Prepared.make(
        7,
        ([runId, position, attempt, path, kind, sha256, size]) =>
          sql`INSERT INTO runs_artifacts (run_id, position, attempt, path, kind, sha256, size)
            VALUES (${runId}, ${position}, ${attempt}, ${path}, ${kind}, ${sha256}, ${size})`
      ),
      insertEvents: Prepared.perCount((count) =>
        Prepared.make(count * 7, (args) => {
          const [first, ...rest] = Array.from({ length: count }, (_, row) => {
            const [event_id, run_id, thread_id, seq, at, type, data] = args.slice(row * 7, row * 7 + 7)
            return { event_id, run_id, thread_id, seq, at, type, data }
          })
          return sql`INSERT INTO runs_events ${sql.insert([first!, ...rest])}`
        })
      ),
      insertEntry: Prepared.make(
        4,
        ([executionId, key, value, recordedAt]) =>
          sql`INSERT INTO runs_workflow_journal (execution_id, entry_key, value, recorded_at)
            VALUES (${executionId}, ${key}, ${value}, ${recordedAt})
            ON CONFLICT (execution_id, entry_key) DO NOTHING
            RETURNING value`
      ),
      selectEntry: Prepared.make(
        2,
        ([executionId, key]) =>
          sql`SELECT value FROM runs_workflow_journal WHERE execution_id = ${executionId} AND entry_key = ${key}`
      ),
      activeRuns: Prepared.make(
        1,
        ([threadId]) =>
          sql`SELECT view FROM runs_runs
            WHERE thread_id = ${threadId} AND ${sql.in("status", activeStatuses)} ORDER BY queue_order`
      ),
      insertRun: Prepared.make(
        6,
        ([runId, threadId, status, createdAt, seq, view]) =>
          sql`INSERT INTO runs_runs (run_id, thread_id, status, created_at, queue_order, seq, view)
            VALUES (${runId}, ${threadId}, ${status}, ${createdAt},
              (SELECT id FROM runs_events WHERE run_id = ${runId} AND seq = 1), ${seq}, ${view})`
      ),
      selectExecution: Prepared.make(
        1,
        ([executionId]) =>
          sql`SELECT execution_id, workflow, payload, result, interrupted
            FROM runs_workflow_executions WHERE execution_id = ${executionId}`
      ),
      insertExecution: Prepared.make(
        4,
        ([executionId, workflow, payload, createdAt]) =>
          sql`INSERT INTO runs_workflow_executions (execution_id, workflow, payload, interrupted, created_at)
            VALUES (${executionId}, ${workflow}, ${payload}, 0, ${createdAt})
            ON CONFLICT (execution_id) DO NOTHING`
      ),
      updateResult: Prepared.make(
        2,
        ([result, executionId]) =>
          sql`UPDATE runs_workflow_executions SET result = ${result}
            WHERE execution_id = ${executionId} AND result IS NULL`
      ),
      entries: Prepared.make(
        1,
        ([executionId]) =>
          sql`SELECT entry_key, value FROM runs_workflow_journal WHERE execution_id = ${executionId} ORDER BY seq`
      ),
      events: Prepared.make(
        1,
        ([runId]) =>
          sql`SELECT id, event_id, run_id, thread_id, seq, at, data FROM runs_events WHERE run_id = ${runId} ORDER BY seq`
      )
    }
    const forUpdate = sql.literal(sql.onDialectOrElse({ pg: () => "FOR UPDATE", orElse: () => "" }))
    const noLock = sql.literal("")

    const selectThread = (threadId: string, lock: boolean) =>
      Effect.flatMap(
        sql<ThreadRow>`SELECT * FROM runs_threads WHERE id = ${threadId} ${lock ? forUpdate : noLock}`,
        (rows) =>
          rows[0] === undefined
            ? Effect.fail(new ThreadNotFound({ threadId }))
            : Effect.succeed(threadOf(rows[0]))
      )
    const viewsOf = (rows: ReadonlyArray<{ readonly view: string }>) =>
      rows.map((row) => JSON.parse(row.view) as RunView)
    /**
     * The thread's active runs, in creation order: all that a refusal looks at. Finished runs are
     * left out, so a long thread's history is not read back and parsed on every write.
     */
    const activeThreadRuns = (threadId: string) =>
      Effect.map(Prepared.values(sql, statements.activeRuns, [threadId]), (rows) =>
        rows.map((row) => JSON.parse(row[0] as string) as RunView)
      )
    /**
     * The view each run last had here (written by this store, or read), beside its JSON: a read
     * whose row holds that very text gets that view back rather than parsing the text again (a
     * stage reads its run's view three times, each a few KiB). Views are immutable, and a text
     * that differs (another process wrote, or a transaction rolled back) is parsed as before.
     */
    const knownViews = new Map<string, readonly [text: string, view: RunView]>()
    const remember = (text: string, view: RunView) => {
      knownViews.delete(view.runId)
      knownViews.set(view.runId, [text, view])
      // The runs under way are few: the oldest is forgotten first.
      if (knownViews.size > 256) knownViews.delete(knownViews.keys().next().value as string)
    }
    const viewOf = (runId: string, text: string): RunView => {
      const known = knownViews.get(runId)
      if (known !== undefined && known[0] === text) return known[1]
      const view = JSON.parse(text) as RunView
      remember(text, view)
      return view
    }
    const selectRun = (runId: string) =>
      Effect.flatMap(Prepared.values(sql, statements.selectRun, [runId]), (rows) =>
        rows[0] === undefined
          ? Effect.fail(new RunNotFound({ runId }))
          : Effect.succeed(viewOf(runId, rows[0][0] as string))
      )
    const notify = sql.onDialectOrElse({
      pg: () => Effect.asVoid(sql`SELECT pg_notify(${changesChannel}, '')`),
      orElse: () => Effect.void
    })
    /** A batch's events in one statement (its rows take their serial ids in the batch's order). */
    const insertEvents = (events: ReadonlyArray<Event>) =>
      Effect.andThen(
        events.length === 0
          ? Effect.void
          : Prepared.values(
              sql,
              statements.insertEvents(events.length),
              events.flatMap((event) => [
                event.event_id,
                event.run_id,
                event.thread_id,
                event.seq,
                event.at,
                event.data.type,
                JSON.stringify(event.data)
              ])
            ).pipe(Effect.asVoid),
        notify
      )
    /**
     * Rewrites the run's projections from its view: a new run's (`"new"`: it has no rows yet) or
     * a rebuilt one's (`"rebuilt"`: its rows are replaced) whole; an appended run's only where
     * its view changed (`before` is the view it was appended to), so a write costs what it
     * changed, not what the run holds.
     */
    const project = (view: RunView, before: RunView | "new" | "rebuilt") =>
      Effect.gen(function* () {
        const text = JSON.stringify(view)
        if (typeof before === "string") {
          // The FIFO order: the log's serial id of the run's first event.
          yield* Prepared.values(sql, statements.insertRun, [
            view.runId,
            view.threadId,
            view.status,
            view.createdAt,
            view.seq,
            text
          ])
          if (before === "rebuilt") {
            yield* sql`DELETE FROM runs_stage_attempts WHERE run_id = ${view.runId}`
            yield* sql`DELETE FROM runs_artifacts WHERE run_id = ${view.runId}`
          }
        } else yield* Prepared.values(sql, statements.updateRun, [view.status, view.seq, text, view.runId])
        for (const stage of view.stages) {
          const earlier =
            typeof before === "string"
              ? undefined
              : before.stages.find((one) => one.position === stage.position)?.attempts
          for (const attempt of stage.attempts) {
            const was = earlier?.find((one) => one.attempt === attempt.attempt)
            // An attempt the batch left alone is the very object it was (`Run.apply` copies what it changes).
            if (was !== undefined && (was === attempt || JSON.stringify(was) === JSON.stringify(attempt)))
              continue
            const row = [
              attempt.status,
              attempt.finishedAt ?? null,
              attempt.error?.error_code ?? null,
              attempt.error?.error_message ?? null,
              attempt.error === undefined ? null : attempt.error.retryable ? 1 : 0,
              view.runId,
              stage.position,
              attempt.attempt
            ]
            // The projections hold exactly the view's rows: an attempt new in this batch has none yet,
            // one seen before has its row (updated in place) and a row per artifact it had then.
            if (was === undefined)
              yield* Prepared.values(sql, statements.insertAttempt, [...row, stage.key, attempt.startedAt])
            else yield* Prepared.values(sql, statements.updateAttempt, row)
            const published = was === undefined ? [] : was.artifacts
            const kept = published.every((artifact, index) =>
              sameArtifact(artifact, attempt.artifacts[index])
            )
            if (!kept)
              yield* sql`DELETE FROM runs_artifacts
                WHERE run_id = ${view.runId} AND position = ${stage.position} AND attempt = ${attempt.attempt}`
            for (const artifact of kept ? attempt.artifacts.slice(published.length) : attempt.artifacts) {
              yield* Prepared.values(sql, statements.insertArtifact, [
                view.runId,
                stage.position,
                attempt.attempt,
                artifact.path,
                artifact.kind,
                artifact.sha256,
                artifact.size
              ])
            }
          }
        }
        remember(text, view)
      })

    /**
     * One statement: the row is inserted, or updated only where the claim may be taken
     * (PostgreSQL evaluates the condition on the row it has locked; SQLite has one writer).
     */
    const takeClaim = (runId: string, request: ClaimRequest): Effect.Effect<ClaimResult, SqlError.SqlError> =>
      Effect.gen(function* () {
        const now = Date.now()
        const taken = yield* sql<{ owner: string }>`
          INSERT INTO runs_claims (run_id, owner, expires_at, claimed_at)
          VALUES (${runId}, ${request.owner}, ${now + request.ttlMs}, ${new Date(now).toISOString()})
          ON CONFLICT (run_id) DO UPDATE SET
            owner = excluded.owner,
            expires_at = excluded.expires_at,
            claimed_at = CASE WHEN runs_claims.owner = excluded.owner
              THEN runs_claims.claimed_at ELSE excluded.claimed_at END
          WHERE runs_claims.owner = excluded.owner OR runs_claims.expires_at < ${now}
            OR runs_claims.owner = ${request.takeOver ?? null}
          RETURNING owner`
        if (taken.length > 0) return { claimed: true } as const
        const held = yield* sql<ClaimRow>`SELECT * FROM runs_claims WHERE run_id = ${runId}`
        // Released between the two statements: try once more.
        if (held[0] === undefined) return yield* takeClaim(runId, request)
        return { claimed: false, holder: claimOf(held[0]) } as const
      })

    const selectExecution = (executionId: string) =>
      Effect.map(Prepared.values(sql, statements.selectExecution, [executionId]), (rows) => {
        const row = rows[0]
        if (row === undefined) return undefined
        const [execution_id, workflow, payload, result, interrupted] = row
        return executionOf({ execution_id, workflow, payload, result, interrupted } as ExecutionRow)
      })
    const selectEntry = (executionId: string, key: string) =>
      Effect.map(
        Prepared.values(sql, statements.selectEntry, [executionId, key]),
        (rows) => rows[0]?.[0] as string | undefined
      )
    /** Writes the entry unless one is there; the value that stands. */
    const insertEntry = ({ executionId, key, value }: JournalEntry) =>
      Effect.gen(function* () {
        const inserted = yield* Prepared.values(sql, statements.insertEntry, [
          executionId,
          key,
          value,
          new Date().toISOString()
        ])
        // Nothing returned: an entry was there already, and it stands.
        return (inserted[0]?.[0] as string | undefined) ?? (yield* selectEntry(executionId, key)) ?? value
      })
    /** Records the execution unless it is there (the first record stands). */
    const insertExecution = ({ executionId, workflow, payload }: ExecutionStart) =>
      Prepared.values(sql, statements.insertExecution, [
        executionId,
        workflow,
        payload,
        new Date().toISOString()
      ])
    /** Records the execution's result unless one is there (the first result stands). */
    const updateResult = ({ executionId, result }: ExecutionResult) =>
      Effect.asVoid(Prepared.values(sql, statements.updateResult, [result, executionId]))
    const journal: WorkflowJournal = {
      start: (execution) =>
        orStoreError(
          Effect.gen(function* () {
            const { executionId } = execution
            yield* insertExecution(execution)
            const record = yield* selectExecution(executionId)
            if (record === undefined)
              return yield* Effect.fail(
                new RunsStoreError({ location, detail: `workflow execution ${executionId} was not recorded` })
              )
            return record
          })
        ),
      execution: (executionId) => orStoreError(selectExecution(executionId)),
      complete: (executionId, result) => orStoreError(updateResult({ executionId, result })),
      interrupt: (executionId) =>
        orStoreError(
          Effect.asVoid(
            sql`UPDATE runs_workflow_executions SET interrupted = 1 WHERE execution_id = ${executionId}`
          )
        ),
      entry: (executionId, key) => orStoreError(selectEntry(executionId, key)),
      record: (executionId, key, value) => orStoreError(insertEntry({ executionId, key, value })),
      entries: (executionId) =>
        orStoreError(
          Effect.map(Prepared.values(sql, statements.entries, [executionId]), (rows) =>
            rows.map(([key, value]) => ({ key: key as string, value: value as string }))
          )
        )
    }

    const service: Service = {
      location,
      journal,
      createThread: (options) => {
        const thread = newThread(options)
        return orStoreError(
          Effect.as(
            sql`INSERT INTO runs_threads (id, title, status, queue_policy, created_at)
              VALUES (${thread.id}, ${thread.title}, ${thread.status}, ${thread.queuePolicy}, ${thread.createdAt})`,
            thread
          )
        )
      },
      getThread: (threadId) => orStoreError(selectThread(threadId, false)),
      listThreads: () =>
        orStoreError(
          Effect.map(sql<ThreadRow>`SELECT * FROM runs_threads ORDER BY created_at, id`, (rows) =>
            rows.map(threadOf)
          )
        ),
      closeThread: (threadId) =>
        orStoreError(
          transaction(
            Effect.gen(function* () {
              const thread = yield* selectThread(threadId, true)
              yield* sql`UPDATE runs_threads SET status = 'closed' WHERE id = ${threadId}`
              return { ...thread, status: "closed" as const }
            })
          )
        ),
      setQueuePolicy: (threadId, queuePolicy) =>
        orStoreError(
          transaction(
            Effect.gen(function* () {
              const thread = yield* selectThread(threadId, true)
              yield* sql`UPDATE runs_threads SET queue_policy = ${queuePolicy} WHERE id = ${threadId}`
              return { ...thread, queuePolicy }
            })
          )
        ),
      createRun: (options) =>
        orStoreError(
          transaction(
            Effect.gen(function* () {
              const thread = yield* selectThread(options.threadId, true)
              const refused = createRefusal(thread, yield* activeThreadRuns(thread.id), options)
              if (refused !== undefined) return yield* Effect.fail(refused)
              const runId = options.runId ?? newRunId()
              const queued = queuedRun(runId, thread, options)
              if (queued instanceof InvalidInput) return yield* Effect.fail(queued)
              yield* insertEvents(queued.events)
              yield* project(queued.view, "new")
              if (options.claim !== undefined) yield* takeClaim(runId, options.claim)
              return queued.view
            })
          )
        ),
      append: (runId, batch, appendOptions) =>
        orStoreError(
          transaction(
            Effect.gen(function* () {
              const run = yield* sql.onDialectOrElse({
                pg: () =>
                  Effect.gen(function* () {
                    const before = yield* selectRun(runId)
                    yield* selectThread(before.threadId, true)
                    // Read again under the thread's lock: another writer may have appended meanwhile.
                    return yield* selectRun(runId)
                  }),
                // BEGIN IMMEDIATE took the one write lock before this read: what it reads is current.
                orElse: () => selectRun(runId)
              })
              const next = appended(
                run,
                batch,
                needsThreadRuns(batch) ? yield* activeThreadRuns(run.threadId) : []
              )
              if (next instanceof IllegalTransition) return yield* Effect.fail(next)
              yield* insertEvents(next.events)
              yield* project(next.view, run)
              if (appendOptions?.execution !== undefined) yield* insertExecution(appendOptions.execution)
              if (appendOptions?.journal !== undefined) yield* insertEntry(appendOptions.journal)
              if (appendOptions?.result !== undefined) yield* updateResult(appendOptions.result)
              return next.view
            })
          )
        ).pipe(
          Effect.catchTag("ThreadNotFound", (error) =>
            Effect.fail(new RunsStoreError({ location, detail: error.message }))
          )
        ),
      getRun: (runId) => orStoreError(selectRun(runId)),
      listRuns: (filter) =>
        orStoreError(
          Effect.map(
            sql<{ view: string }>`SELECT view FROM runs_runs WHERE ${sql.and([
              ...(filter?.threadId === undefined ? [] : [sql`thread_id = ${filter.threadId}`]),
              ...(filter?.active === true ? [sql.in("status", activeStatuses)] : [])
            ])} ORDER BY queue_order`,
            viewsOf
          )
        ),
      events: (runId) =>
        orStoreError(
          Effect.map(Prepared.values(sql, statements.events, [runId]), (rows) =>
            rows.map(([id, event_id, run_id, thread_id, seq, at, data]) =>
              eventOf({ id, event_id, run_id, thread_id, seq, at, data } as EventRow)
            )
          )
        ),
      feed: (cursor, limit = 500) =>
        orStoreError(
          Effect.map(
            sql<EventRow>`
              SELECT id, event_id, run_id, thread_id, seq, at, data FROM runs_events
              WHERE id > ${cursor} ORDER BY id LIMIT ${limit}`,
            (rows) => rows.map((row) => ({ cursor: Number(row.id), event: eventOf(row) }))
          )
        ),
      rebuild: () =>
        orStoreError(
          transaction(
            Effect.gen(function* () {
              const ids = yield* sql<{
                run_id: string
              }>`SELECT DISTINCT run_id FROM runs_events ORDER BY run_id`
              yield* sql`DELETE FROM runs_runs`
              for (const { run_id } of ids) {
                const events = yield* service.events(run_id)
                const view = applyAll(undefined, events)
                if (view instanceof IllegalTransition)
                  return yield* Effect.fail(
                    new RunsStoreError({
                      location,
                      detail: `run ${run_id}'s log does not fold: ${view.message}`
                    })
                  )
                yield* project(view, "rebuilt")
              }
              return ids.length
            })
          )
        ),
      claim: (runId, request) => orStoreError(takeClaim(runId, request)),
      release: (runId, owner) =>
        orStoreError(
          Effect.asVoid(sql`DELETE FROM runs_claims WHERE run_id = ${runId} AND owner = ${owner}`)
        ),
      claims: () =>
        orStoreError(
          Effect.map(sql<ClaimRow>`SELECT * FROM runs_claims ORDER BY run_id`, (rows) => rows.map(claimOf))
        )
    }
    return service
  })

export const layer = (options: Options): Layer.Layer<RunsStore, RunsStoreError, SqlClient.SqlClient> =>
  Layer.effect(RunsStore, make(options))

/** The store in the shared database the context holds (`Database` from @noema/sql), read-only as it is. */
export const fromDatabase: Effect.Effect<Service, RunsStoreError, SqlClient.SqlClient | Database.Database> =
  Database.store(make)

export const layerFromDatabase: Layer.Layer<
  RunsStore,
  RunsStoreError,
  SqlClient.SqlClient | Database.Database
> = Database.storeLayer(RunsStore, make)
