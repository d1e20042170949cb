/**
 * ResourceEvents: publish/subscribe of what happens to resources.
 *
 * An event says that `resources` were put, read or deleted (`detailType`), by
 * whom or what (`source`), when (`time`, ISO-8601 in UTC, as the seed's event
 * says), with a unique `id`.
 * Subscribers choose what they hear with a `Filter`: sources, detail types, and
 * a URN prefix (an event matches when one of its resources is that URN or lies
 * under it).
 *
 * A subscriber is an actor, and hears only what the `Policy` lets it `get`:
 * each event is delivered with just the resources the actor may read (none:
 * not delivered), and the filter's prefix is matched against those, so a
 * hidden resource is never named, never makes an event match, and never
 * counts towards a full buffer. The policy is asked once per resource and
 * subscriber (a small cache per subscription), when the event is delivered.
 *
 * Every subscriber has its own bounded buffer, so a slow subscriber never
 * blocks publishers; and it never loses events silently. What happens when its
 * buffer is full is the subscription's explicit `overflow` policy:
 * - `"fail"` (default): the subscriber first receives everything buffered, then
 *   its stream fails with `EventsOverflowError` (how many it missed). It knows
 *   it is behind and can read the current state again and subscribe anew.
 * - `"drop-oldest"`: the oldest buffered event makes room, and the next event
 *   the subscriber receives says how many were dropped before it (`missedBefore`).
 *
 * Two implementations: in-process (`makeMemory`, `layerMemory`), and across
 * processes through PostgreSQL (`makePostgres`, `layerPostgres`): each event is
 * a row of `noema_resource_events`, appended in commit order (publishers take a
 * transaction-scoped advisory lock), and announced with `NOTIFY` carrying only
 * its sequence number (NOTIFY payloads are limited to 8000 bytes; an event
 * naming many resources is not). Each process LISTENs once, reads the new rows
 * after the last sequence it saw, and fans them out to its own subscribers with
 * the same filters and overflow policies. A missed notification costs nothing:
 * the next one reads every row since.
 */
import { DatabaseError, Migrations } from "@noema/sql"
import {
  type Array as Arr,
  Cause,
  Clock,
  Context,
  Effect,
  Layer,
  type Queue,
  type Scheduler,
  Schema,
  type Scope,
  Semaphore,
  Stream
} from "effect"
import { SqlClient, type SqlError } from "effect/sql"
import { isoOfMillis } from "./internal/isoMillis.js"
import * as Policy from "./Policy.js"
import * as Urn from "./Urn.js"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

export const detailTypes = ["RESOURCE_PUT", "RESOURCE_GET", "RESOURCE_DELETE"] as const
export type DetailType = (typeof detailTypes)[number]

export interface ResourceEvent {
  readonly id: string
  readonly source: string
  readonly detailType: DetailType
  /** When, ISO-8601 in UTC (`2026-11-03T09:30:00.000Z`). */
  readonly time: string
  /** The URNs the event is about. */
  readonly resources: ReadonlyArray<string>
}

/** An event as one subscriber receives it: with the count of events dropped just before it, if any. */
export interface Delivered extends ResourceEvent {
  /** Under `"drop-oldest"`: how many events this subscriber missed right before this one. */
  readonly missedBefore?: number
}

/** What a subscriber hears; every field narrows, an empty filter hears everything. */
export interface Filter {
  readonly source?: string | ReadonlyArray<string>
  readonly detailType?: DetailType | ReadonlyArray<DetailType>
  /** A URN: events about it or anything under it. */
  readonly prefix?: string
}

export type Overflow = "fail" | "drop-oldest"

export interface SubscribeOptions {
  /** Events buffered for this subscriber before `overflow` applies. Default 1024. */
  readonly buffer?: number
  /** Default `"fail"`. */
  readonly overflow?: Overflow
}

/** What to publish: `id` and `time` are given when left out. */
export interface Publish {
  readonly id?: string
  readonly source: string
  readonly detailType: DetailType
  /** When: ISO-8601, or epoch milliseconds (said as ISO-8601); default now. */
  readonly time?: string | number
  readonly resources: ReadonlyArray<string>
}

export class EventsOverflowError extends Schema.TaggedError<EventsOverflowError>()("EventsOverflowError", {
  /** The subscriber's buffer size. */
  capacity: Schema.Number,
  message: Schema.String
}) {}

export class ResourceEventsError extends Schema.TaggedError<ResourceEventsError>()("ResourceEventsError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export interface Service {
  /**
   * False when no subscriber could receive an event of `detailType` from `source` if it were
   * published now (no filter takes that source and type), so a publisher may leave it unbuilt:
   * nobody would ever see it. Absent (or true): it may be heard; publish it. The in-process
   * hub knows its subscribers; across processes every event is published, others may listen.
   */
  readonly mayHear?: (source: string, detailType: DetailType) => boolean
  /**
   * `publish` as of `now` (epoch milliseconds) without an effect, where the event can be
   * delivered here and now (in process, no delivery under way, every decision known): the event
   * as stored, or why it was refused; otherwise the effect that delivers it in its turn, to run
   * before anything published after it. Absent: use `publish`. (A wrapper of `publish` wraps
   * this too, or leaves it out.)
   */
  readonly publishNow?: (
    event: Publish,
    now: number
  ) => ResourceEvent | ResourceEventsError | Effect.Effect<ResourceEvent, ResourceEventsError>
  /** Publishes an event (checked first: a bad detail type, source or URN is refused) and returns it as stored. */
  readonly publish: (event: Publish) => Effect.Effect<ResourceEvent, ResourceEventsError>
  /**
   * Subscribes `actor` until the scope closes: the stream carries the matching
   * events published from now on that the actor may read, in order, each with
   * only the resources it may read; it fails with `EventsOverflowError` under
   * `"fail"` when the subscriber fell `buffer` events behind.
   */
  readonly subscribe: (
    actor: string,
    filter?: Filter,
    options?: SubscribeOptions
  ) => Effect.Effect<
    Stream.Stream<Delivered, EventsOverflowError | ResourceEventsError>,
    ResourceEventsError,
    Scope.Scope
  >
}

export class ResourceEvents extends Context.Service<ResourceEvents, Service>()(
  "@noema/resources/ResourceEvents"
) {}

// ---------------------------------------------------------------------------
// Filters and checks
// ---------------------------------------------------------------------------

const asList = <A>(value: A | ReadonlyArray<A> | undefined): ReadonlyArray<A> | undefined =>
  value === undefined ? undefined : Array.isArray(value) ? (value as ReadonlyArray<A>) : [value as A]

/** Whether `wanted` (one, several, or any when undefined) takes `value`, with no list built for one. */
const takesOne = <A>(wanted: A | ReadonlyArray<A> | undefined, value: A): boolean =>
  wanted === undefined ||
  (Array.isArray(wanted) ? (wanted as ReadonlyArray<A>).includes(value) : wanted === value)

/** Whether `filter` may take an event of `source` and `detailType` (its prefix aside: that needs the URNs). */
const takesKind = (filter: Filter, source: string, detailType: DetailType): boolean =>
  takesOne(filter.source, source) && takesOne(filter.detailType, detailType)

/** Whether `urn` is `prefix` or under it (`prefix + "/"` compared in place, not built per event). */
const isAtOrUnder = (urn: string, prefix: string): boolean =>
  urn.startsWith(prefix) && (urn.length === prefix.length || urn.charCodeAt(prefix.length) === 47)

/** Whether `event` is one `filter` hears. */
export const matches = (filter: Filter, event: ResourceEvent): boolean => {
  if (!takesKind(filter, event.source, event.detailType)) return false
  const prefix = filter.prefix
  if (prefix === undefined) return true
  const resources = event.resources
  for (let i = 0; i < resources.length; i++) if (isAtOrUnder(resources[i] as string, prefix)) return true
  return false
}

const eventsError = (message: string, cause?: unknown) =>
  new ResourceEventsError({ message, ...(cause === undefined ? {} : { cause }) })

const checkFilter = (actor: string, filter: Filter): ResourceEventsError | undefined => {
  const parsedActor = Urn.parseEither(actor)
  if (parsedActor instanceof Urn.InvalidUrnError) return eventsError(`subscriber: ${parsedActor.message}`)
  for (const type of asList(filter.detailType) ?? []) {
    if (!detailTypes.includes(type))
      return eventsError(`unknown detail type "${type}" (known: ${detailTypes.join(", ")})`)
  }
  if (filter.prefix !== undefined) {
    const parsed = Urn.parseEither(filter.prefix)
    if (parsed instanceof Urn.InvalidUrnError) return eventsError(`filter prefix: ${parsed.message}`)
  }
  return undefined
}

/**
 * A time as an event says it: ISO-8601 in UTC. Epoch milliseconds (a number, or digits, as
 * events were stored before) are said the same way; undefined when it is no time.
 */
export const isoTime = (time: string | number): string | undefined => {
  const millis =
    typeof time === "number"
      ? time
      : /^\d+$/.test(time)
        ? Number(time)
        : /^\d{4}-\d{2}-\d{2}T/.test(time)
          ? Date.parse(time)
          : Number.NaN
  return Number.isFinite(millis) ? isoOfMillis(millis) : undefined
}

/** The event to publish, complete and checked. */
const complete = (event: Publish, now: number): ResourceEvent | ResourceEventsError => {
  if (!detailTypes.includes(event.detailType))
    return eventsError(`unknown detail type "${event.detailType}" (known: ${detailTypes.join(", ")})`)
  if (typeof event.source !== "string" || event.source.length === 0)
    return eventsError("an event needs a source")
  if (event.resources.length === 0) return eventsError("an event names at least one resource")
  // An index names the same resources in event after event: `Urn` remembers what parsed.
  for (const urn of event.resources) {
    const parsed = Urn.parseEither(urn)
    if (parsed instanceof Urn.InvalidUrnError) return eventsError(parsed.message)
  }
  const time = isoTime(event.time ?? now)
  if (time === undefined)
    return eventsError(
      `an event's time must be ISO-8601 or epoch milliseconds, got ${JSON.stringify(event.time)}`
    )
  return {
    id: event.id ?? crypto.randomUUID(),
    source: event.source,
    detailType: event.detailType,
    time,
    resources: [...event.resources]
  }
}

// ---------------------------------------------------------------------------
// The hub: fan-out to bounded mailboxes
// ---------------------------------------------------------------------------

const defaultBuffer = 1024
/** Policy decisions each subscription remembers. */
const decisionsRemembered = 1024

/** One subscriber's bounded buffer and overflow policy. */
class Mailbox {
  private buffer: Array<Delivered> = []
  private head = 0
  private waiting:
    | ((pulled: Effect.Effect<Arr.NonEmptyArray<Delivered>, EventsOverflowError>) => void)
    | undefined
  private overflowed: EventsOverflowError | undefined
  private missed = 0

  constructor(
    readonly actor: string,
    readonly filter: Filter,
    readonly capacity: number,
    readonly overflow: Overflow
  ) {}

  /** Decisions already made for this subscriber, by URN (the oldest forgotten first). */
  private readonly decisions = new Map<string, boolean>()

  private remember(urn: string, allowed: boolean): boolean {
    if (this.decisions.size >= decisionsRemembered)
      this.decisions.delete(this.decisions.keys().next().value as string)
    this.decisions.set(urn, allowed)
    return allowed
  }

  /**
   * Whether this subscriber may read `urn`, when that is known without asking the engine: its
   * own decision, or the allow the policy's memo holds (remembered here as `mayGet` would);
   * undefined otherwise.
   */
  knownDecision(policy: Policy.Service, urn: string): boolean | undefined {
    const known = this.decisions.get(urn)
    if (known !== undefined) return known
    return Policy.allowedBefore(policy, { actor: this.actor, action: "get", resources: [urn] })
      ? this.remember(urn, true)
      : undefined
  }

  /** Whether the policy lets this subscriber read `urn`, asking it once per URN while remembered. */
  mayGet(policy: Policy.Service, urn: string): Effect.Effect<boolean> {
    const known = this.decisions.get(urn)
    if (known !== undefined) return Effect.succeed(known)
    return Effect.map(policy.authorize({ actor: this.actor, action: "get", resources: [urn] }), (decision) =>
      this.remember(urn, decision.decision === "allow")
    )
  }

  private get size() {
    return this.buffer.length - this.head
  }

  offer(event: ResourceEvent): void {
    if (this.overflowed !== undefined) {
      this.missed++
      return
    }
    if (this.size >= this.capacity) {
      if (this.overflow === "fail") {
        this.missed = 1
        this.overflowed = new EventsOverflowError({
          capacity: this.capacity,
          message: `a subscriber fell ${this.capacity} events behind and missed the events after them; read the current state again and subscribe anew`
        })
        this.wake()
        return
      }
      // drop-oldest: the next event still buffered carries the count of those dropped before it.
      const dropped = this.buffer[this.head] as Delivered
      this.buffer[this.head] = undefined as unknown as Delivered
      this.head++
      const next = this.buffer[this.head]
      const carried = 1 + (dropped.missedBefore ?? 0)
      if (next !== undefined) {
        this.buffer[this.head] = { ...next, missedBefore: (next.missedBefore ?? 0) + carried }
      } else {
        this.missed += carried
      }
    }
    const delivered: Delivered =
      this.missed > 0 && this.overflow === "drop-oldest" ? { ...event, missedBefore: this.missed } : event
    if (this.overflow === "drop-oldest") this.missed = 0
    this.buffer.push(delivered)
    this.wake()
  }

  private drain(): Array<Delivered> {
    const out = this.head === 0 ? this.buffer : this.buffer.slice(this.head)
    this.buffer = []
    this.head = 0
    return out
  }

  /**
   * Wakes a waiting pull on its fiber's scheduler, not in the publisher's call (a resume runs
   * the subscriber's fiber there and then), and with the pull itself, not with what is buffered
   * now: the subscriber drains when it runs, so the events published before then (a subtask's
   * "running" then "done") reach it in one batch and one wake-up, in the order published.
   */
  private wake(): void {
    const resume = this.waiting
    if (resume === undefined) return
    this.waiting = undefined
    ;(this.dispatcher as Scheduler.SchedulerDispatcher).scheduleTask(() => resume(this.pull), 0)
  }

  /** What can be pulled now, or undefined to wait. */
  private pullNow(): Effect.Effect<Arr.NonEmptyArray<Delivered>, EventsOverflowError> | undefined {
    if (this.size > 0) return Effect.succeed(this.drain() as Arr.NonEmptyArray<Delivered>)
    if (this.overflowed !== undefined) {
      const error = this.overflowed
      return Effect.fail(
        new EventsOverflowError({
          capacity: error.capacity,
          message: `${error.message} (${this.missed} missed so far)`
        })
      )
    }
    return undefined
  }

  /**
   * Everything buffered (never an empty batch), waiting for the next event when there is none;
   * the overflow error once drained.
   */
  readonly pull: Effect.Effect<Arr.NonEmptyArray<Delivered>, EventsOverflowError> = Effect.withFiber(
    (fiber) => {
      const now = this.pullNow()
      if (now !== undefined) return now
      this.dispatcher = fiber.currentDispatcher
      return this.await
    }
  )

  /** The waiting fiber's dispatcher, where `wake` resumes it. */
  private dispatcher: Scheduler.SchedulerDispatcher | undefined

  private readonly await: Effect.Effect<Arr.NonEmptyArray<Delivered>, EventsOverflowError> = Effect.callback(
    (resume) => {
      this.waiting = resume
      return Effect.sync(() => {
        this.waiting = undefined
      })
    }
  )
}

/** The event with only the `readable` of its resources, if the filter still takes it. */
const viewWith = (
  mailbox: Mailbox,
  event: ResourceEvent,
  readable: ReadonlyArray<string>
): ResourceEvent | undefined => {
  if (readable.length === 0) return undefined
  // All readable: the event itself, which its callers have matched already.
  if (readable.length === event.resources.length) return event
  const view = { ...event, resources: readable }
  // The prefix again, on what the subscriber may read: a hidden resource never makes it match.
  return matches(mailbox.filter, view) ? view : undefined
}

/** The event as `mailbox`'s subscriber may see it, or undefined when it hears nothing of it. */
const viewOf = (
  policy: Policy.Service,
  mailbox: Mailbox,
  event: ResourceEvent
): Effect.Effect<ResourceEvent | undefined> =>
  // The filter on the whole event first: what it leaves out costs no policy decision.
  !matches(mailbox.filter, event)
    ? Effect.succeed(undefined)
    : Effect.map(
        Effect.filter(event.resources, (urn) => mailbox.mayGet(policy, urn)),
        (readable) => viewWith(mailbox, event, readable)
      )

/** Marks a view that needs a decision the engine has not made yet. */
const undecided = Symbol("undecided")

/** `viewOf` without an effect, when every decision it needs is known already (`undecided` if not). */
const knownViewOf = (
  policy: Policy.Service,
  mailbox: Mailbox,
  event: ResourceEvent
): ResourceEvent | undefined | typeof undecided => {
  if (!matches(mailbox.filter, event)) return undefined
  // Built only once a resource is hidden: most events are readable whole.
  let readable: Array<string> | undefined
  const resources = event.resources
  for (let i = 0; i < resources.length; i++) {
    const urn = resources[i] as string
    const allowed = mailbox.knownDecision(policy, urn)
    if (allowed === undefined) return undecided
    if (!allowed) readable ??= resources.slice(0, i)
    else if (readable !== undefined) readable.push(urn)
  }
  return viewWith(mailbox, event, readable ?? resources)
}

interface Hub {
  readonly deliver: (event: ResourceEvent) => Effect.Effect<void>
  /**
   * Delivers `event` here and now when it can (no subscriber takes it, or every decision is known
   * and no delivery is under way: the usual case) and says so; false: `deliverInTurn` it.
   */
  readonly deliverNow: (event: ResourceEvent) => boolean
  readonly deliverInTurn: (event: ResourceEvent) => Effect.Effect<void>
  readonly subscribe: Service["subscribe"]
  /** Whether a subscriber's filter takes that source and type (`Service.mayHear`, for this process). */
  readonly mayHear: (source: string, detailType: DetailType) => boolean
}

const someMatch = (mailboxes: ReadonlySet<Mailbox>, event: ResourceEvent): boolean => {
  for (const mailbox of mailboxes) if (matches(mailbox.filter, event)) return true
  return false
}

/**
 * Every subscriber's view of `event` when all are known without an effect (in the order of
 * `mailboxes`; undefined: that one hears nothing), or undefined when one needs the engine.
 */
const knownViews = (
  policy: Policy.Service,
  mailboxes: ReadonlyArray<Mailbox>,
  event: ResourceEvent
): Array<ResourceEvent | undefined> | undefined => {
  const views: Array<ResourceEvent | undefined> = []
  for (const mailbox of mailboxes) {
    const view = knownViewOf(policy, mailbox, event)
    if (view === undecided) return undefined
    views.push(view)
  }
  return views
}

const makeHub = (engine: Policy.Service): Hub => {
  // The engine's shared memo: an access an index allowed is not decided again for a subscriber.
  const policy = Policy.remembering(engine)
  const mailboxes = new Set<Mailbox>()
  // One event delivered at a time, and to every subscriber or none: all receive events in one order.
  const delivering = Semaphore.makeUnsafe(1)
  // Deliveries holding or awaiting `delivering`: while there is one, a later event waits its turn.
  let queued = 0
  const deliverInTurn = (event: ResourceEvent) => {
    queued++
    return delivering
      .withPermits(1)(
        Effect.forEach(
          [...mailboxes],
          (mailbox) =>
            Effect.map(viewOf(policy, mailbox, event), (view) => {
              if (view !== undefined) mailbox.offer(view)
            }),
          { discard: true }
        )
      )
      .pipe(Effect.ensuring(Effect.sync(() => queued--)), Effect.uninterruptible)
  }
  const deliverNow = (event: ResourceEvent): boolean => {
    // An event no subscriber's filter takes (a read, where all listen to writes) reaches no
    // one: it need not wait its turn, nor cost a step per subscriber.
    if (!someMatch(mailboxes, event)) return true
    // With no delivery under way and every decision known (allowed before: the usual case),
    // it is delivered here and now, to all at once: the same views, in the same order,
    // without an effect per subscriber.
    const subscribers = [...mailboxes]
    const views = queued === 0 ? knownViews(policy, subscribers, event) : undefined
    if (views === undefined) return false
    for (let i = 0; i < subscribers.length; i++) {
      const view = views[i]
      if (view !== undefined) (subscribers[i] as Mailbox).offer(view)
    }
    return true
  }
  return {
    mayHear: (source, detailType) => {
      for (const mailbox of mailboxes) if (takesKind(mailbox.filter, source, detailType)) return true
      return false
    },
    deliverNow,
    deliverInTurn,
    deliver: (event) => Effect.suspend(() => (deliverNow(event) ? Effect.void : deliverInTurn(event))),
    subscribe: (actor, filter = {}, options = {}) =>
      Effect.suspend(() => {
        const problem = checkFilter(actor, filter)
        if (problem !== undefined) return Effect.fail(problem)
        const capacity = options.buffer ?? defaultBuffer
        if (!Number.isInteger(capacity) || capacity < 1)
          return Effect.fail(eventsError(`buffer must be a positive integer, got ${capacity}`))
        const overflow = options.overflow ?? "fail"
        if (overflow !== "fail" && overflow !== "drop-oldest")
          return Effect.fail(eventsError(`unknown overflow policy "${overflow}" (known: fail, drop-oldest)`))
        return Effect.acquireRelease(
          Effect.sync(() => {
            const mailbox = new Mailbox(actor, filter, capacity, overflow)
            mailboxes.add(mailbox)
            return mailbox
          }),
          (mailbox) => Effect.sync(() => mailboxes.delete(mailbox))
        ).pipe(
          // The mailbox's pull is the stream's own (it never ends: the scope closing ends it).
          Effect.map((mailbox) => Stream.fromPull(Effect.succeed(mailbox.pull)))
        )
      })
  }
}

// ---------------------------------------------------------------------------
// In-process
// ---------------------------------------------------------------------------

/** Events within this process; each subscriber hears what `policy` lets it read. */
export const makeMemory = (policy: Policy.Service): Effect.Effect<Service> =>
  Effect.sync(() => {
    const hub = makeHub(policy)
    const publishNow = (event: Publish, now: number) => {
      const completed = complete(event, now)
      if (completed instanceof ResourceEventsError) return completed
      return hub.deliverNow(completed) ? completed : Effect.as(hub.deliverInTurn(completed), completed)
    }
    return {
      publishNow,
      // Completed and, in the usual case, delivered in one step.
      publish: (event) =>
        Effect.clockWith((clock) => {
          const published = publishNow(event, clock.currentTimeMillisUnsafe())
          return published instanceof ResourceEventsError
            ? Effect.fail(published)
            : Effect.isEffect(published)
              ? published
              : Effect.succeed(published)
        }),
      subscribe: hub.subscribe,
      mayHear: hub.mayHear
    }
  })

export const layerMemory: Layer.Layer<ResourceEvents, never, Policy.Policy> = Layer.effect(
  ResourceEvents,
  Effect.gen(function* () {
    return yield* makeMemory(yield* Policy.Policy)
  })
)

// ---------------------------------------------------------------------------
// Across processes: PostgreSQL
// ---------------------------------------------------------------------------

export const eventsTable = "noema_resource_events"
export const migrationsTable = "noema_resource_events_migrations"
/** The NOTIFY channel. */
export const channel = "noema_resource_events"
/** The advisory lock key publishers hold while appending, so sequence order is commit order. */
const appendLock = 0x6e6f656d61 // "noema"

interface Listener {
  readonly listen: (
    channel: string
  ) => Effect.Effect<Queue.Dequeue<unknown, SqlError.SqlError>, SqlError.SqlError, Scope.Scope>
}

/** The PostgreSQL client's `listen`, when the `SqlClient` is one (`@effect/sql-pg`'s `PgClient`). */
const pgListen = (sql: SqlClient.SqlClient) => {
  const listen = (sql as unknown as Partial<Listener>).listen
  return typeof listen === "function" ? listen.bind(sql) : undefined
}

const migrations: Migrations.Record = {
  "1_events": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`CREATE TABLE ${sql(eventsTable)} (
      seq BIGSERIAL PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      source TEXT NOT NULL,
      detail_type TEXT NOT NULL,
      time BIGINT NOT NULL,
      resources TEXT NOT NULL)`
  ),
  // The time as the seed's event says it, ISO-8601 in UTC; the rows stored before are converted.
  "2_time_iso": Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`ALTER TABLE ${sql(eventsTable)} ALTER COLUMN time TYPE TEXT
      USING to_char(to_timestamp(time / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
  )
}

interface EventRow {
  readonly seq: string | number
  readonly id: string
  readonly source: string
  readonly detail_type: DetailType
  /** ISO-8601; epoch milliseconds in a row a process from before wrote. */
  readonly time: string | number
  readonly resources: string
}

const fromRow = (row: EventRow): ResourceEvent => ({
  id: row.id,
  source: row.source,
  detailType: row.detail_type,
  time: isoTime(row.time) ?? String(row.time),
  resources: JSON.parse(row.resources) as Array<string>
})

/**
 * Events shared by every process on one PostgreSQL database (the `SqlClient`
 * in context must be `@effect/sql-pg`'s, as `Database.layer` gives for a
 * `postgres://` URL); each subscriber here hears what `policy` lets it read.
 * Listens until the scope closes.
 */
export const makePostgres = (
  policy: Policy.Service
): Effect.Effect<Service, ResourceEventsError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const listen = pgListen(sql)
    if (listen === undefined)
      return yield* Effect.fail(
        eventsError("cross-process events need PostgreSQL (LISTEN/NOTIFY); this database is not")
      )
    const location = "the events log"
    const mapSqlErrors = DatabaseError.mapSqlErrors(location)
    const failure = (what: string) => (cause: unknown) =>
      eventsError(`${what}: ${DatabaseError.describe(cause)}`, cause)
    /** `effect` with its SQL failures mapped once (`DatabaseError`), then said as what it was doing. */
    const doing =
      (what: string) =>
      <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.mapError(mapSqlErrors(effect), failure(what))
    yield* doing("preparing the events table")(
      Migrations.run({ location, schema: "resource events", table: migrationsTable, migrations })
    )
    const events = sql(eventsTable)
    const hub = makeHub(policy)
    // LISTEN first, then read where the log stands: nothing committed in between is missed.
    const notifications = yield* doing("listening for events")(listen(channel))
    const start = yield* doing("reading the events log")(
      sql<{ seq: string | number | null }>`SELECT max(seq) AS seq FROM ${events}`
    )
    let lastSeq = Number(start[0]?.seq ?? 0)
    // Suspended: each read asks for the rows after the sequence seen by then.
    const catchUp = Effect.suspend(() =>
      Effect.flatMap(
        sql<EventRow>`SELECT seq, id, source, detail_type, time, resources FROM ${events}
          WHERE seq > ${lastSeq} ORDER BY seq`,
        (rows) =>
          Effect.forEach(
            rows,
            (row) =>
              Effect.suspend(() => {
                lastSeq = Math.max(lastSeq, Number(row.seq))
                return hub.deliver(fromRow(row))
              }),
            { discard: true }
          )
      )
    )
    // One reader at a time: a notification arriving while rows are read is covered by the next read.
    yield* Stream.fromQueue(notifications).pipe(
      Stream.runForEach(() => catchUp),
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.void
          : Effect.logError("resource events: the listener stopped", Cause.pretty(cause))
      ),
      Effect.forkScoped
    )
    return {
      publish: (event) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          const completed = complete(event, now)
          if (completed instanceof ResourceEventsError) return Effect.fail(completed)
          return sql
            .withTransaction(
              Effect.gen(function* () {
                yield* sql`SELECT pg_advisory_xact_lock(${appendLock})`
                const rows = yield* sql<{ seq: string | number }>`INSERT INTO ${events} ${sql.insert({
                  id: completed.id,
                  source: completed.source,
                  detail_type: completed.detailType,
                  time: completed.time,
                  resources: JSON.stringify(completed.resources)
                })} RETURNING seq`
                // Delivered at commit; the payload is only the sequence number.
                yield* sql`SELECT pg_notify(${channel}, ${String(rows[0]?.seq ?? "")})`
              })
            )
            .pipe(doing("publishing an event"), Effect.as(completed))
        }),
      subscribe: hub.subscribe
    }
  })

export const layerPostgres: Layer.Layer<
  ResourceEvents,
  ResourceEventsError,
  SqlClient.SqlClient | Policy.Policy
> = Layer.effect(
  ResourceEvents,
  Effect.gen(function* () {
    return yield* makePostgres(yield* Policy.Policy)
  })
)
