/**
 * TraceStore: each turn's spans, kept in the database the sessions live in.
 *
 * Spans come from core's `TraceRecorder` (a turn's spans handed over when the
 * turn ends). `recording` installs that tracer and writes each finished turn
 * in one transaction (its trace row, its spans in one multi-row insert, and the
 * retention's delete), on a fiber of its own: never on the model's path, and
 * with tracing off, so the store's own statements are not traced. A trace
 * names its session and the seq of its turn's first message (the turn span's
 * `noema.session.id` and `noema.session.message_seq`), which is how a
 * session's turn finds its trace.
 *
 * It lives here, beside the session store, because a trace belongs to a
 * session's turn and to its database; core only knows spans, not storage.
 * Its tables have their own migrations (`noema_trace_migrations`), so the
 * session schema's version does not move. Retention is a number of turns
 * (`keep`, default 1000) and, optionally, an age (`maxAgeDays`): each write
 * deletes the traces older than the `keep` newest, and those begun longer ago.
 */
import { TraceRecorder, Tracing } from "@noema/core"
import { Database, DatabaseError, Migrations } from "@noema/sql"
import { type Cause, Clock, Deferred, Effect, Fiber, Layer, Queue, Schema, type Scope, Tracer } from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { fromDatabaseError, type StoreError } from "./SessionStore.js"

export type FinishedSpan = TraceRecorder.FinishedSpan

/** A trace as lists show it. Times are epoch milliseconds. */
export interface TraceSummary {
  readonly traceId: string
  readonly sessionId: string | undefined
  /** The seq of the turn's first message in its session. */
  readonly messageSeq: number | undefined
  /** The root span's name (`noema.turn`). */
  readonly name: string
  readonly start: number
  readonly duration: number
  readonly status: FinishedSpan["status"]
  readonly spanCount: number
  readonly droppedSpans: number
}

export interface StoredTrace extends TraceSummary {
  /** Root first, then by start. */
  readonly spans: ReadonlyArray<FinishedSpan>
}

export interface ListQuery {
  readonly sessionId?: string
  readonly messageSeq?: number
  readonly offset?: number
  readonly limit?: number
}

export interface TracePage {
  readonly total: number
  /** The newest first. */
  readonly traces: ReadonlyArray<TraceSummary>
}

export class TraceNotFoundError extends Schema.TaggedError<TraceNotFoundError>()("TraceNotFoundError", {
  traceId: Schema.String
}) {
  override get message() {
    return `no trace ${this.traceId}`
  }
}

export interface Service {
  /** Writes a finished turn's trace, then deletes those beyond the retention. */
  readonly record: (trace: TraceRecorder.FinishedTrace) => Effect.Effect<void, StoreError>
  /** `record` of several turns' traces, in one transaction (one `fsync` for all). */
  readonly recordAll: (traces: ReadonlyArray<TraceRecorder.FinishedTrace>) => Effect.Effect<void, StoreError>
  readonly list: (query?: ListQuery) => Effect.Effect<TracePage, StoreError>
  readonly get: (traceId: string) => Effect.Effect<StoredTrace, TraceNotFoundError | StoreError>
}

export interface Options {
  readonly location: string
  readonly readonly?: boolean
  /** How many turns' traces are kept (the newest). Default 1000. */
  readonly keep?: number
  /** How many days a turn's trace is kept at most (by when it began); default: no limit. */
  readonly maxAgeDays?: number
}

export const defaultKeep = 1000

/** The table effect's `Migrator` records this store's migrations in. */
const migrationsTable = "noema_trace_migrations"

const migrations: Migrations.Record = {
  "1_create_traces": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const float = sql.literal(Database.dialectOf(sql) === "pg" ? "DOUBLE PRECISION" : "REAL")
    yield* sql`CREATE TABLE noema_traces (
      trace_id TEXT PRIMARY KEY NOT NULL,
      session_id TEXT,
      message_seq INTEGER,
      name TEXT NOT NULL,
      started_at ${float} NOT NULL,
      duration ${float} NOT NULL,
      status TEXT NOT NULL,
      span_count INTEGER NOT NULL,
      dropped_spans INTEGER NOT NULL)`
    yield* sql`CREATE INDEX noema_traces_by_start ON noema_traces (started_at)`
    yield* sql`CREATE INDEX noema_traces_by_session ON noema_traces (session_id, message_seq)`
    yield* sql`CREATE TABLE noema_spans (
      trace_id TEXT NOT NULL,
      span_id TEXT NOT NULL,
      parent_span_id TEXT,
      name TEXT NOT NULL,
      kind TEXT NOT NULL,
      started_at ${float} NOT NULL,
      duration ${float} NOT NULL,
      status TEXT NOT NULL,
      error TEXT,
      attributes TEXT NOT NULL,
      events TEXT NOT NULL,
      PRIMARY KEY (trace_id, span_id))`
  })
}

// ---------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------

interface TraceRow {
  readonly trace_id: string
  readonly session_id: string | null
  readonly message_seq: number | string | null
  readonly name: string
  readonly started_at: number
  readonly duration: number
  readonly status: string
  readonly span_count: number | string
  readonly dropped_spans: number | string
}

interface SpanRow {
  readonly span_id: string
  readonly parent_span_id: string | null
  readonly name: string
  readonly kind: string
  readonly started_at: number
  readonly duration: number
  readonly status: string
  readonly error: string | null
  readonly attributes: string
  readonly events: string
}

/** Attribute values as JSON: a bigint (which JSON has not) as a number. */
const json = (value: unknown): string =>
  JSON.stringify(value, (_key, item) => (typeof item === "bigint" ? Number(item) : item))

const statusOf = (text: string): FinishedSpan["status"] =>
  text === "error" || text === "interrupted" ? text : "ok"

const summaryOf = (row: TraceRow): TraceSummary => ({
  traceId: row.trace_id,
  sessionId: row.session_id ?? undefined,
  messageSeq: row.message_seq === null ? undefined : Number(row.message_seq),
  name: row.name,
  start: Number(row.started_at),
  duration: Number(row.duration),
  status: statusOf(row.status),
  spanCount: Number(row.span_count),
  droppedSpans: Number(row.dropped_spans)
})

const spanOf = (row: SpanRow): FinishedSpan => ({
  spanId: row.span_id,
  parentSpanId: row.parent_span_id ?? undefined,
  name: row.name,
  kind: row.kind as Tracer.SpanKind,
  start: Number(row.started_at),
  duration: Number(row.duration),
  status: statusOf(row.status),
  error: row.error ?? undefined,
  attributes: JSON.parse(row.attributes) as Record<string, unknown>,
  events: JSON.parse(row.events) as ReadonlyArray<TraceRecorder.FinishedEvent>
})

/** The root's link to its session's turn, when the turn span carries one. */
const turnOf = (root: FinishedSpan) => {
  const session = root.attributes[Tracing.Attributes.sessionId]
  const seq = root.attributes[Tracing.Attributes.messageSeq]
  return {
    session_id: typeof session === "string" ? session : null,
    message_seq: typeof seq === "number" && Number.isInteger(seq) ? seq : null
  }
}

/** Rows per insert: SQLite binds at most 32766 parameters, and a span takes 11. */
const spansPerInsert = 500

// ---------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------

interface Retention {
  readonly keep: number
  /** Milliseconds; undefined: no limit. */
  readonly maxAge: number | undefined
}

const dayMillis = 24 * 60 * 60 * 1000

const service = (sql: SqlClient.SqlClient, location: string, retention: Retention): Service => {
  /** The database's failures as the store's one error, named by where the database is. */
  const sqlFailure = (error: SqlError.SqlError) =>
    Effect.fail(fromDatabaseError(DatabaseError.fromSqlError(location, error)))

  /** Deletes the traces (and their spans) begun at `cut` or before. */
  const deleteUpTo = (cut: number) =>
    Effect.andThen(
      sql`DELETE FROM noema_spans WHERE trace_id IN
        (SELECT trace_id FROM noema_traces WHERE started_at <= ${cut})`,
      sql`DELETE FROM noema_traces WHERE started_at <= ${cut}`
    )

  const prune = Effect.gen(function* () {
    if (retention.maxAge !== undefined) yield* deleteUpTo((yield* Clock.currentTimeMillis) - retention.maxAge)
    const cut = yield* sql<{
      started_at: number
    }>`SELECT started_at FROM noema_traces ORDER BY started_at DESC LIMIT 1 OFFSET ${retention.keep}`
    const oldest = cut[0]
    if (oldest !== undefined) yield* deleteUpTo(oldest.started_at)
  })

  /** The rows of one trace (nothing for one without spans). */
  const insert = (trace: TraceRecorder.FinishedTrace) => {
    const root = trace.spans[0]
    if (root === undefined) return Effect.void
    const spans = trace.spans.map((span) => ({
      trace_id: trace.traceId,
      span_id: span.spanId,
      parent_span_id: span.parentSpanId ?? null,
      name: span.name,
      kind: span.kind,
      started_at: span.start,
      duration: span.duration,
      status: span.status,
      error: span.error ?? null,
      attributes: json(span.attributes),
      events: json(span.events)
    }))
    return Effect.gen(function* () {
      yield* sql`INSERT INTO noema_traces ${sql.insert({
        trace_id: trace.traceId,
        ...turnOf(root),
        name: root.name,
        started_at: root.start,
        duration: root.duration,
        status: root.status,
        span_count: spans.length,
        dropped_spans: trace.droppedSpans
      })}`
      for (let at = 0; at < spans.length; at += spansPerInsert) {
        const batch = spans.slice(at, at + spansPerInsert) as [(typeof spans)[number]]
        yield* sql`INSERT INTO noema_spans ${sql.insert(batch)}`
      }
    })
  }

  const recordAll = (traces: ReadonlyArray<TraceRecorder.FinishedTrace>) =>
    traces.length === 0
      ? Effect.void
      : sql
          .withTransaction(Effect.andThen(Effect.forEach(traces, insert, { discard: true }), prune))
          .pipe(Effect.catchTag("SqlError", sqlFailure))

  const record = (trace: TraceRecorder.FinishedTrace) => recordAll([trace])

  const list = (query: ListQuery = {}): Effect.Effect<TracePage, StoreError> =>
    Effect.gen(function* () {
      const conditions = [
        ...(query.sessionId === undefined ? [] : [sql`session_id = ${query.sessionId}`]),
        ...(query.messageSeq === undefined ? [] : [sql`message_seq = ${query.messageSeq}`])
      ]
      const where = conditions.length === 0 ? sql`` : sql`WHERE ${sql.and(conditions)}`
      const counted = yield* sql<{
        total: number | string
      }>`SELECT count(*) AS total FROM noema_traces ${where}`
      const rows = yield* sql<TraceRow>`SELECT * FROM noema_traces ${where}
          ORDER BY started_at DESC, trace_id LIMIT ${query.limit ?? 50} OFFSET ${query.offset ?? 0}`
      return { total: Number(counted[0]?.total ?? 0), traces: rows.map(summaryOf) }
    }).pipe(Effect.catchTag("SqlError", sqlFailure))

  const get = (traceId: string): Effect.Effect<StoredTrace, TraceNotFoundError | StoreError> =>
    Effect.gen(function* () {
      const [row] = yield* sql<TraceRow>`SELECT * FROM noema_traces WHERE trace_id = ${traceId}`
      if (row === undefined) return yield* new TraceNotFoundError({ traceId })
      const spans = yield* sql<SpanRow>`SELECT span_id, parent_span_id, name, kind, started_at, duration,
          status, error, attributes, events FROM noema_spans WHERE trace_id = ${traceId} ORDER BY started_at`
      const all = spans.map(spanOf)
      // The root first (it may share its start with its first child).
      const roots = all.filter((span) => span.parentSpanId === undefined)
      const others = all.filter((span) => span.parentSpanId !== undefined)
      return { ...summaryOf(row), spans: [...roots, ...others] } satisfies StoredTrace
    }).pipe(Effect.catchTag("SqlError", sqlFailure))

  return { record, recordAll, list, get }
}

/** The store over the `SqlClient` in context; migrates its tables first (or, read-only, checks them). */
export const make = (options: Options): Effect.Effect<Service, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* Effect.mapError(
      Migrations.run({
        location: options.location,
        schema: "trace",
        table: migrationsTable,
        migrations,
        ...(options.readonly === true && { readonly: true })
      }),
      fromDatabaseError
    )
    return service(sql, options.location, {
      keep: Math.max(1, options.keep ?? defaultKeep),
      maxAge: options.maxAgeDays === undefined ? undefined : options.maxAgeDays * dayMillis
    })
  })

/** The store in the shared database the context holds, keeping the default number of turns. */
export const fromDatabase = Database.store(make)

// ---------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------

export interface RecordingOptions {
  /** Told when a trace could not be written (the turn itself went on); default: a warning in the log. */
  readonly onFailure?: (error: StoreError) => Effect.Effect<void>
  /** Finished turns waiting to be written; past it, newer ones are dropped. Default 256. */
  readonly backlog?: number
  /** Milliseconds between two writes: the turns that finish meanwhile are written together. Default 50. */
  readonly interval?: number
  /**
   * The tracer every span is also passed on to (see `TraceRecorder`'s `forward`). Default: the
   * tracer already installed where the recording starts, if any (an exporter's keeps its spans).
   */
  readonly forward?: Tracer.Tracer
  /** Whether content attributes are passed on to `forward` too. Default false. */
  readonly forwardContent?: boolean
}

/**
 * The tracer that keeps turns' spans in `store`: a finished turn is written at once, and the
 * turns that finish in the `interval` after a write go together in the next (one transaction,
 * one `fsync`: `node:sqlite` is synchronous, so a write per turn would stall turns that come
 * fast), on a fiber of its own, with tracing off. Closing the scope writes what is still waiting. A tracer
 * already installed (an OTLP exporter's) goes on getting every span: both are kept.
 */
export const recording = (
  store: Service,
  options: RecordingOptions = {}
): Effect.Effect<Tracer.Tracer, never, Scope.Scope> =>
  Effect.gen(function* () {
    const queue = yield* Queue.dropping<TraceRecorder.FinishedTrace, Cause.Done>(options.backlog ?? 256)
    const onFailure =
      options.onFailure ??
      ((error: StoreError) => Effect.logWarning(`a turn's trace was not kept: ${error.message}`))
    const closing = yield* Deferred.make<void>()
    // The pause after a write, cut short when the scope closes (what waits is written at once).
    const pause = Effect.raceFirst(Effect.sleep(options.interval ?? 50), Deferred.await(closing))
    const writer = yield* Effect.forkDetach(
      Effect.forever(
        Effect.flatMap(Queue.takeAll(queue), (traces) =>
          // A batch that fails is written again one trace at a time: one bad trace loses only itself.
          Effect.catch(store.recordAll(traces), (error) =>
            traces.length === 1
              ? onFailure(error)
              : Effect.forEach(traces, (trace) => Effect.catch(store.record(trace), onFailure), {
                  discard: true
                })
          ).pipe(Effect.andThen(pause))
        )
      ).pipe(
        Effect.withTracerEnabled(false),
        Effect.catchTag("Done", () => Effect.void)
      )
    )
    yield* Effect.addFinalizer(() =>
      Deferred.succeed(closing, undefined).pipe(
        Effect.andThen(Queue.end(queue)),
        Effect.andThen(Fiber.await(writer))
      )
    )
    const installed = yield* Effect.tracer
    const forward = options.forward ?? (installed === Tracer.nativeTracer ? undefined : installed)
    return TraceRecorder.make({
      onTrace: (trace) => void Queue.offerUnsafe(queue, trace),
      ...(forward !== undefined && { forward }),
      ...(options.forwardContent === true && { forwardContent: true })
    })
  })

/**
 * `recording` as a layer: every effect under it has its turns' traces kept in `store`, with
 * the tool calls' arguments and results (`Tracing.RecordToolContent`: the session's own
 * messages hold them already, in the same database), not the model calls' messages.
 */
export const layerRecording = (store: Service, options?: RecordingOptions): Layer.Layer<never> =>
  Layer.unwrap(
    Effect.map(recording(store, options), (tracer) =>
      Layer.mergeAll(Layer.succeed(Tracer.Tracer, tracer), Layer.succeed(Tracing.RecordToolContent, true))
    )
  )

// ---------------------------------------------------------------------------
// In words: one line per span, as `noema traces show` and the Traces view say it
// ---------------------------------------------------------------------------

/** A duration in milliseconds as people read it: `0.4 ms`, `27 ms`, `1.20 s`. */
export const formatDuration = (value: number): string =>
  value < 10
    ? `${value.toFixed(1)} ms`
    : value < 1000
      ? `${Math.round(value)} ms`
      : `${(value / 1000).toFixed(2)} s`

/**
 * What a span did, in one line: its duration, then tokens and the time to the first
 * token (a model call), retries, the tool's failure, the span's own error.
 */
export const describeSpan = (span: FinishedSpan): string => {
  const attributes = span.attributes
  const parts = [formatDuration(span.duration)]
  const input = attributes[Tracing.Attributes.usageInputTokens]
  const output = attributes[Tracing.Attributes.usageOutputTokens]
  if (typeof input === "number" || typeof output === "number")
    parts.push(`${input ?? "?"} in, ${output ?? "?"} out tokens`)
  const firstToken = attributes[Tracing.Attributes.timeToFirstToken]
  if (typeof firstToken === "number") parts.push(`first token ${formatDuration(firstToken)}`)
  const retries = span.events.filter((event) => event.name === Tracing.EventNames.retry)
  if (retries.length > 0) parts.push(`${retries.length} ${retries.length === 1 ? "retry" : "retries"}`)
  if (attributes[Tracing.Attributes.errorType] === "tool_error") parts.push("tool error")
  if (span.status === "error") parts.push(`failed: ${span.error ?? "unknown"}`)
  if (span.status === "interrupted") parts.push("interrupted")
  return parts.join(" · ")
}

/** How deep each span sits under the trace's root (0 for the root), by span id. */
export const depths = (spans: ReadonlyArray<FinishedSpan>): ReadonlyMap<string, number> => {
  const parents = new Map(spans.map((span) => [span.spanId, span.parentSpanId]))
  const depth = new Map<string, number>()
  const of = (id: string, seen: number): number => {
    const known = depth.get(id)
    if (known !== undefined) return known
    const parent = parents.get(id)
    // A parent not in the trace (or a loop, which a bad row could make) ends the walk.
    const value =
      parent === undefined || !parents.has(parent) || seen > spans.length ? 0 : of(parent, seen + 1) + 1
    depth.set(id, value)
    return value
  }
  for (const span of spans) of(span.spanId, 0)
  return depth
}

/** The trace's spans in tree order (each followed by those it holds, by start). */
export const treeOrder = (spans: ReadonlyArray<FinishedSpan>): ReadonlyArray<FinishedSpan> => {
  const ids = new Set(spans.map((span) => span.spanId))
  const children = new Map<string | undefined, Array<FinishedSpan>>()
  for (const span of spans) {
    const parent =
      span.parentSpanId !== undefined && ids.has(span.parentSpanId) ? span.parentSpanId : undefined
    const list = children.get(parent) ?? []
    list.push(span)
    children.set(parent, list)
  }
  const ordered: Array<FinishedSpan> = []
  const visit = (parent: string | undefined) => {
    for (const span of (children.get(parent) ?? []).sort((a, b) => a.start - b.start)) {
      ordered.push(span)
      visit(span.spanId)
    }
  }
  visit(undefined)
  return ordered
}
