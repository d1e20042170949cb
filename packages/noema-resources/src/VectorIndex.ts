/**
 * VectorIndex: similarity search over resources' descriptions.
 *
 * `upsert` embeds what a resource is about (`searchText`: its structured
 * description, else its name and main text) with the index's `Embedder` and
 * keeps only its URN, type and vector; `search` ranks by cosine similarity,
 * best first (ties by URN), with filters by type and URN prefix. Search is
 * exact: every vector that passes the filters is scored.
 *
 * Backends: memory (`makeMemory`) and SQL (`makeSql`, SQLite and PostgreSQL on
 * the shared `SqlClient`; the type filter and the prefix range run in SQL, the
 * scoring in JS over the rows they leave). On SQLite with the sqlite-vec
 * extension (loaded by default from the `sqlite-vec` package), a `vec0` copy of
 * the vectors proposes candidates and the scan is skipped: the candidates are
 * re-scored exactly as the scan scores, and widened until the copy's float error
 * proves that no other row can enter the top (`searchCopy`), so the results are
 * the scan's. Where the extension cannot load, or the copy is stale in a
 * read-only database, the index scans, with one warning. On PostgreSQL with the `pgvector`
 * extension installed, `makeSql({ pgvector: true })` stores `vector(n)` columns
 * and ranks in the database (`<=>`, exact, no approximate index), with the
 * same results.
 *
 * An index remembers which embedder made its vectors (provider, model,
 * dimensions). Opening it with another is refused: vectors from two models
 * cannot be compared. `reset` empties it for the new embedder, explicitly.
 */
import { Embedder } from "@noema/core"
import { Database, DatabaseError, GroupCommit, Migrations, Prepared } from "@noema/sql"
import { Effect, Schema } from "effect"
import { SqlClient, type SqlError, type Statement } from "effect/sql"
import { floatVectorsOf } from "./internal/floatVectors.js"
import * as SearchText from "./internal/searchText.js"
import { upsertBatches } from "./internal/upsertRows.js"
import * as VectorCopy from "./internal/vectorCopy.js"
import type * as Resource from "./Resource.js"
import * as Urn from "./Urn.js"

export class VectorIndexError extends Schema.TaggedError<VectorIndexError>()("VectorIndexError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export interface Hit {
  readonly urn: string
  readonly type: string
  readonly score: number
}

export type Query = { readonly text: string } | { readonly vector: ReadonlyArray<number> }

export interface SearchOptions {
  /** Only resources of this type (`meta.type`). */
  readonly type?: string
  /** Only this URN and what lies under it. */
  readonly prefix?: string
  /** Default 10. */
  readonly limit?: number
}

/** Which embedder made an index's vectors. */
export interface Identity {
  readonly provider: string
  readonly model: string
  readonly dimensions: number
}

export interface Service {
  readonly identity: Identity
  /** Embeds and stores resources (one embedder call for all), replacing earlier vectors of the same URNs. */
  readonly upsert: (
    resources: Resource.Resource | ReadonlyArray<Resource.Resource>
  ) => Effect.Effect<void, VectorIndexError>
  /**
   * Embeds resources now and gives the write that stores their vectors (`upsert` is the two
   * in a row), so that a caller can run the write in its own transaction without holding it
   * while the embedder works. Run inside a transaction, the write is part of it (no savepoint of
   * its own): a failure of the write must fail that transaction's body, as it does when let through.
   */
  readonly prepareUpsert: (
    resources: ReadonlyArray<Resource.Resource>
  ) => Effect.Effect<Effect.Effect<void, VectorIndexError>, VectorIndexError>
  /** Forgets a resource's vector; true when there was one. */
  readonly remove: (urn: string) => Effect.Effect<boolean, VectorIndexError>
  readonly search: (query: Query, options?: SearchOptions) => Effect.Effect<Array<Hit>, VectorIndexError>
  readonly size: Effect.Effect<number, VectorIndexError>
  /** Empties the index (for a new embedder: its identity is recorded). */
  readonly reset: Effect.Effect<void, VectorIndexError>
}

/** What a resource is about, as embedded: its structured description, else its name and main text. */
export const searchText: (resource: Resource.Resource) => string = SearchText.searchText

const indexError = (message: string, cause?: unknown) =>
  new VectorIndexError({ message, ...(cause === undefined ? {} : { cause }) })

// ---------------------------------------------------------------------------
// Scoring
// ---------------------------------------------------------------------------

const normalized = (vector: ArrayLike<number>): Float32Array => {
  const out = copied(vector)
  return toUnit(out, squaredNorm(out))
}

/**
 * `normalized`, or undefined when a value of `vector` is not a finite number. One pass more only
 * when the norm is not finite (a value that is not, or one too large for a float): the values are
 * checked then, as they would have been before.
 */
const normalizedFinite = (vector: ArrayLike<number>, own: boolean): Float32Array | undefined => {
  // `own`: a fresh Float32Array of the embedder's (`floatVectors`), normalised in place.
  const out = own ? (vector as Float32Array) : copied(vector)
  const norm = squaredNorm(out)
  if (!Number.isFinite(norm) && !allFinite(vector)) return undefined
  return toUnit(out, norm)
}

/** A loop: `Float32Array.from` on a plain array costs several times more. */
const copied = (vector: ArrayLike<number>): Float32Array => {
  const out = new Float32Array(vector.length)
  for (let i = 0; i < out.length; i++) out[i] = vector[i] as number
  return out
}

const squaredNorm = (out: Float32Array): number => {
  let norm = 0
  for (let i = 0; i < out.length; i++) norm += (out[i] as number) ** 2
  return norm
}

const toUnit = (out: Float32Array, norm: number): Float32Array => {
  if (norm > 0) {
    const scale = 1 / Math.sqrt(norm)
    for (let i = 0; i < out.length; i++) out[i] = (out[i] as number) * scale
  }
  return out
}

/**
 * The dot product of `q` with the vector at `base` in `data`. Four running sums instead of one
 * let the CPU overlap the multiply-adds (one sum makes each wait for the previous): about 1.5x
 * faster than the plain loop here. Scores can differ from a one-sum loop in the last bits only.
 */
const dotAt = (q: Float32Array, data: Float32Array, base: number): number => {
  const dimensions = q.length
  const whole = dimensions - (dimensions % 4)
  let s0 = 0
  let s1 = 0
  let s2 = 0
  let s3 = 0
  // Indexed from \`base + d\` (not a second running index): V8 compiles this form faster here.
  for (let d = 0; d < whole; d += 4) {
    s0 += (q[d] as number) * (data[base + d] as number)
    s1 += (q[d + 1] as number) * (data[base + d + 1] as number)
    s2 += (q[d + 2] as number) * (data[base + d + 2] as number)
    s3 += (q[d + 3] as number) * (data[base + d + 3] as number)
  }
  for (let d = whole; d < dimensions; d++) s0 += (q[d] as number) * (data[base + d] as number)
  return s0 + s1 + (s2 + s3)
}

/** Best first, ties by URN; keeps the best `limit` without sorting everything. */
const better = (a: Hit, b: Hit) => b.score - a.score || (a.urn < b.urn ? -1 : a.urn > b.urn ? 1 : 0)

class TopK {
  private readonly hits: Array<Hit> = []
  constructor(private readonly limit: number) {}
  /** Whether a hit with this score could enter (a cheap test before building the hit). */
  admits(score: number): boolean {
    const hits = this.hits
    return hits.length < this.limit || score >= (hits[hits.length - 1] as Hit).score
  }
  offer(hit: Hit) {
    const hits = this.hits
    if (hits.length === this.limit && better(hit, hits[hits.length - 1] as Hit) >= 0) return
    let at = hits.length
    while (at > 0 && better(hit, hits[at - 1] as Hit) < 0) at--
    hits.splice(at, 0, hit)
    if (hits.length > this.limit) hits.pop()
  }
  result(): Array<Hit> {
    return this.hits
  }
}

/**
 * `TopK` over a memory index's slots, in the same order (best first, ties by URN): the kept
 * slots and scores in typed arrays reused by every search of the index, and a hit built only
 * for those that are kept at the end, not for each one that enters and is pushed out.
 */
class SlotTopK {
  private slots = new Int32Array(16)
  private scores = new Float64Array(16)
  private size = 0
  private limit = 0
  private urns: ReadonlyArray<string | undefined> = []

  /** Emptied for a search keeping `limit` over the slots' `urns`. */
  start(limit: number, urns: ReadonlyArray<string | undefined>): void {
    // Never more kept than there are slots, and one place more for the one pushed out.
    const room = Math.min(limit, urns.length) + 1
    if (room > this.slots.length) {
      const grown = Math.max(room, 2 * this.slots.length)
      this.slots = new Int32Array(grown)
      this.scores = new Float64Array(grown)
    }
    this.size = 0
    this.limit = limit
    this.urns = urns
  }

  /** `better` of the hits at two slots with these scores. */
  private better(score: number, slot: number, otherScore: number, other: number): number {
    const urn = this.urns[slot] as string
    const otherUrn = this.urns[other] as string
    return otherScore - score || (urn < otherUrn ? -1 : urn > otherUrn ? 1 : 0)
  }

  /** As `TopK`'s `admits`, then `offer`. */
  offer(slot: number, score: number): void {
    const { slots, scores } = this
    const last = this.size - 1
    if (this.size === this.limit) {
      if (!(score >= (scores[last] as number))) return
      if (this.better(score, slot, scores[last] as number, slots[last] as number) >= 0) return
    }
    let at = this.size
    while (at > 0 && this.better(score, slot, scores[at - 1] as number, slots[at - 1] as number) < 0) {
      slots[at] = slots[at - 1] as number
      scores[at] = scores[at - 1] as number
      at--
    }
    slots[at] = slot
    scores[at] = score
    if (this.size < this.limit) this.size++
  }

  /** The hits kept, best first. */
  result(types: ReadonlyArray<string>): Array<Hit> {
    const hits: Array<Hit> = []
    for (let i = 0; i < this.size; i++) {
      const slot = this.slots[i] as number
      hits.push({
        urn: this.urns[slot] as string,
        type: types[slot] as string,
        score: this.scores[i] as number
      })
    }
    this.urns = []
    return hits
  }
}

/** Whether a vector passes the filters (the prefix's "/" compared in place, not built per vector). */
const matchesFilters = (urn: string, type: string, options: SearchOptions) =>
  (options.type === undefined || type === options.type) &&
  (options.prefix === undefined ||
    (urn.startsWith(options.prefix) &&
      (urn.length === options.prefix.length || urn.charCodeAt(options.prefix.length) === 47)))

const checkOptions = (options: SearchOptions): VectorIndexError | undefined => {
  if (options.prefix !== undefined) {
    const parsed = Urn.parseEither(options.prefix)
    if (parsed instanceof Urn.InvalidUrnError) return indexError(`search prefix: ${parsed.message}`)
  }
  if (options.limit !== undefined && (!Number.isInteger(options.limit) || options.limit < 1))
    return indexError(`search limit must be a whole number of at least 1, got ${options.limit}`)
  return undefined
}

/** Whether every value is a finite number (a loop: `every(Number.isFinite)` costs ~8x more per vector). */
const allFinite = (vector: ArrayLike<number>): boolean => {
  for (let i = 0; i < vector.length; i++) if (!Number.isFinite(vector[i])) return false
  return true
}

/** Texts whose vectors an index remembers, and the longest text remembered (a long document's chunks are embedded once anyway). */
const cachedTexts = 2048
const cachedTextLength = 4096

/** What both backends share: embedding, checking, the query vector. */
const common = (embedder: Embedder.Service) => {
  const checked = Embedder.make(embedder)
  const floats = floatVectorsOf(embedder.embed)
  /** The embedder's vectors; `Float32Array`s of its own where it offers them (`floatVectors`). */
  const embed = (
    texts: ReadonlyArray<string>
  ): Effect.Effect<ReadonlyArray<ArrayLike<number>>, VectorIndexError> =>
    floats !== undefined
      ? Effect.sync(() => floats(texts))
      : Effect.mapBoth(checked.embed(texts), {
          onFailure: (error) => indexError(`embedding failed: ${error.message}`, error),
          onSuccess: (result) => result.vectors
        })
  /** The embedder's vectors normalised, or why the first that cannot be is not (its size, a value). */
  const unitVectors = (
    vectors: ReadonlyArray<ArrayLike<number>>,
    expected: number
  ): Array<Float32Array> | VectorIndexError => {
    const out: Array<Float32Array> = []
    for (const vector of vectors) {
      if (vector.length !== expected)
        return indexError(`the embedder gave a vector of ${vector.length} dimensions, expected ${expected}`)
      const unit = normalizedFinite(vector, floats !== undefined)
      if (unit === undefined)
        return indexError("the embedder gave a vector with a value that is not a finite number")
      out.push(unit)
    }
    return out
  }
  const queryVector = (query: Query, dimensions: number): Effect.Effect<Float32Array, VectorIndexError> =>
    "vector" in query
      ? query.vector.length === dimensions
        ? Effect.succeed(normalized(query.vector))
        : Effect.fail(
            indexError(`the query vector has ${query.vector.length} dimensions, the index ${dimensions}`)
          )
      : Effect.map(vectorsOfTexts([query.text], dimensions), (vectors) => vectors[0] as Float32Array)
  // The vectors of recent texts: a resource stored again with the same description (a task
  // changing status) and a search for a text just stored do not ask the embedder again.
  const recent = new Map<string, Float32Array>()
  const remember = (text: string, vector: Float32Array) => {
    if (text.length > cachedTextLength) return
    if (recent.size >= cachedTexts) recent.delete(recent.keys().next().value as string)
    recent.set(text, vector)
  }
  /** The normalised vectors of `texts`, embedding (in one call) only those not recently embedded. */
  const vectorsOfTexts = (
    texts: ReadonlyArray<string>,
    dimensions: number
  ): Effect.Effect<Array<Float32Array>, VectorIndexError> => {
    // One pass: most texts were embedded lately (a task stored again, a search for a stored text).
    const known: Array<Float32Array | undefined> = new Array(texts.length)
    let missing: Set<string> | undefined
    for (let i = 0; i < texts.length; i++) {
      const text = texts[i] as string
      const vector = recent.get(text)
      known[i] = vector
      if (vector === undefined) {
        missing ??= new Set()
        missing.add(text)
      }
    }
    if (missing === undefined) return Effect.succeed(known as Array<Float32Array>)
    const asked = [...missing]
    return Effect.flatMap(embed(asked), (vectors) => {
      const units = unitVectors(vectors, dimensions)
      if (units instanceof VectorIndexError) return Effect.fail(units)
      const fresh = new Map<string, Float32Array>()
      for (let i = 0; i < asked.length; i++) {
        const vector = units[i] as Float32Array
        fresh.set(asked[i] as string, vector)
        remember(asked[i] as string, vector)
      }
      for (let i = 0; i < texts.length; i++) known[i] ??= fresh.get(texts[i] as string)
      return Effect.succeed(known as Array<Float32Array>)
    })
  }
  const vectorsOf = (resources: ReadonlyArray<Resource.Resource>, dimensions: number) =>
    vectorsOfTexts(resources.map(searchText), dimensions)
  return { queryVector, vectorsOf }
}

const identityOf = (embedder: Embedder.Service, dimensions: number): Identity => ({
  provider: embedder.provider,
  model: embedder.model,
  dimensions
})

const asList = (
  resources: Resource.Resource | ReadonlyArray<Resource.Resource>
): ReadonlyArray<Resource.Resource> =>
  Array.isArray(resources) ? resources : [resources as Resource.Resource]

/** The embedder's vector size: declared, or learnt from one embedding. */
const dimensionsOf = (embedder: Embedder.Service): Effect.Effect<number, VectorIndexError> =>
  embedder.dimensions !== undefined
    ? Effect.succeed(embedder.dimensions)
    : Effect.map(
        Effect.mapError(embedder.embed(["dimensions"]), (error) =>
          indexError(`embedding failed: ${error.message}`, error)
        ),
        (result) => result.vectors[0]?.length ?? 0
      )

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/**
 * Slots a memory index starts with (it doubles when full): small, since an index is often made
 * for a few hundred vectors (a planner's world, a test) and 1024 slots of 384 dimensions are 1.5 MB
 * to allocate and collect.
 */
const initialSlots = 64

/**
 * Vectors in memory, in one contiguous Float32Array (a slot per resource; a
 * removed resource's slot is reused), so a search is one pass over memory.
 */
export const makeMemory = (embedder: Embedder.Service): Effect.Effect<Service, VectorIndexError> =>
  Effect.map(dimensionsOf(embedder), (dimensions) => {
    const { queryVector, vectorsOf } = common(embedder)
    const slots = new Map<string, number>()
    let urns: Array<string | undefined> = []
    let types: Array<string> = []
    let data = new Float32Array(initialSlots * dimensions)
    const free: Array<number> = []
    // Every search's top, reused: a search runs start to end in one step, never two at once.
    const top = new SlotTopK()
    const slotFor = (urn: string): number => {
      const existing = slots.get(urn)
      if (existing !== undefined) return existing
      const slot = free.pop() ?? urns.length
      if ((slot + 1) * dimensions > data.length) {
        const grown = new Float32Array(Math.max(data.length * 2, (slot + 1) * dimensions))
        grown.set(data)
        data = grown
      }
      slots.set(urn, slot)
      urns[slot] = urn
      return slot
    }
    const prepareUpsert = (resources: ReadonlyArray<Resource.Resource>) =>
      Effect.map(vectorsOf(resources, dimensions), (vectors) =>
        Effect.sync(() => {
          for (let i = 0; i < resources.length; i++) {
            const meta = (resources[i] as Resource.Resource).meta
            const slot = slotFor(meta.urn)
            types[slot] = meta.type
            data.set(vectors[i] as Float32Array, slot * dimensions)
          }
        })
      )
    return {
      identity: identityOf(embedder, dimensions),
      prepareUpsert,
      upsert: (resources) => Effect.flatten(prepareUpsert(asList(resources))),
      remove: (urn) =>
        Effect.sync(() => {
          const slot = slots.get(urn)
          if (slot === undefined) return false
          slots.delete(urn)
          urns[slot] = undefined
          free.push(slot)
          return true
        }),
      search: (query, options = {}) => {
        const problem = checkOptions(options)
        if (problem !== undefined) return Effect.fail(problem)
        return Effect.map(queryVector(query, dimensions), (q) => {
          top.start(options.limit ?? 10, urns)
          const filtered = options.type !== undefined || options.prefix !== undefined
          for (let slot = 0; slot < urns.length; slot++) {
            const urn = urns[slot]
            if (urn === undefined) continue
            if (filtered && !matchesFilters(urn, types[slot] as string, options)) continue
            top.offer(slot, dotAt(q, data, slot * dimensions))
          }
          return top.result(types)
        })
      },
      size: Effect.sync(() => slots.size),
      reset: Effect.sync(() => {
        slots.clear()
        urns = []
        types = []
        free.length = 0
        data = new Float32Array(initialSlots * dimensions)
      })
    }
  })

// ---------------------------------------------------------------------------
// SQL
// ---------------------------------------------------------------------------

export const vectorsTable = "noema_vectors"
export const identityTable = "noema_vectors_identity"
export const migrationsTable = "noema_vectors_migrations"

export interface SqlOptions {
  /** Where, for messages (a file path or a database name). */
  readonly location: string
  /** PostgreSQL: store `vector(n)` columns and rank with pgvector (refused when the extension is missing). */
  readonly pgvector?: boolean
  /**
   * When another embedder (or storage) built the index: empty it and record this one,
   * instead of refusing. The resources must then be added again.
   */
  readonly reset?: boolean
  /** Write nothing: the tables must be there; searches work, changes fail (`ReadOnly`). Default false. */
  readonly readonly?: boolean
  /**
   * SQLite: the sqlite-vec extension's shared library, for the `vec0` copy that spares a search
   * the scan (same results). Default: the `sqlite-vec` package's build for this platform.
   * `false`: always scan, without the warning a failed load gives.
   */
  readonly sqliteVec?: string | false
}

const toBytes = (vector: Float32Array): Uint8Array =>
  new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength)

const fromBytes = (bytes: Uint8Array): Float32Array => {
  // Aligned views are read in place; a misaligned one is copied first.
  if (bytes.byteOffset % 4 === 0)
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4)
  return new Float32Array(bytes.slice().buffer)
}

const pgvectorLiteral = (vector: Float32Array) => `[${Array.from(vector).join(",")}]`

/** Whether the PostgreSQL server can load pgvector (`CREATE EXTENSION vector`). */
export const pgvectorAvailable: Effect.Effect<boolean, SqlError.SqlError, SqlClient.SqlClient> =
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Database.dialectOf(sql) !== "pg"
      ? Effect.succeed(false)
      : Effect.map(
          sql<{
            n: number | string
          }>`SELECT count(*) AS n FROM pg_available_extensions WHERE name = 'vector'`,
          (rows) => Number(rows[0]?.n ?? 0) > 0
        )
  )

/**
 * Below this many rows (in all, or passing a search's filters) the index scans, and below it in
 * all its writes leave the copy to the change log: the scan of a few hundred rows costs about
 * what the copy's fixed costs do (the KNN statement per search, keeping the copy per write), so
 * a small index (a planner's tasks and assistants) pays nothing for it. The first write past it
 * brings the copy up to date, and from then on the index uses the copy without asking the table's
 * size again (an index that shrank back keeps a copy that is still exact, only not needed).
 */
const copyFrom = 256

/**
 * How far a score can lie above what vec0's L2 distance `d` implies (`1 - d² / 2` for vectors of
 * norm at most 1, which every stored and query vector is, or zero): vec0 sums `dimensions`
 * float32 squares, off by at most about `dimensions` float32 epsilons times the sum (at most 4),
 * and a normalised float32 vector's norm exceeds 1 by a few epsilons. Twice that, to be safe.
 */
const copyErrorMargin = (dimensions: number) => 8 * (dimensions + 8) * 2 ** -24

/**
 * The exact top `limit` from the vec0 copy, undefined when the copy cannot prove it (then the
 * caller scans), or "stale" when writers changed the vectors since it last caught up. Candidates are scored from their `noema_vectors` row with `dotAt`, as the scan
 * scores them; a row vec0 did not return is at least as far as the farthest it did, so its score
 * is at most `1 - farthest² / 2 + margin`. Once the `limit`-th score lies strictly above that, no
 * other row can enter (nor tie) the top; until then, four times more candidates are asked for.
 */
const searchCopy = (
  copy: VectorCopy.Copy,
  q: Float32Array,
  limit: number,
  options: SearchOptions
): Effect.Effect<Array<Hit> | "stale" | undefined, SqlError.SqlError> =>
  Effect.gen(function* () {
    const margin = copyErrorMargin(q.length)
    // The first round's room past `limit` is what lets it prove its top among equal vectors (the
    // same text stored many times): limit + 16 read a third less a search while few were equal,
    // but needed a second round for a third of a planner bench's searches by its median round.
    for (let k = Math.min(VectorCopy.maxK, 2 * limit + 32); ; k = Math.min(VectorCopy.maxK, k * 4)) {
      // Each round stands on its own statement's snapshot: a write between rounds changes nothing
      // a round concludes from.
      const nearest = yield* copy.nearest(q, k, options)
      if (nearest.stale) return "stale"
      const candidates = nearest.candidates
      const top = new TopK(limit)
      let farthest = 0
      for (const candidate of candidates) {
        if (candidate.distance > farthest) farthest = candidate.distance
        // The prefix range may let a lookalike in (`cld:a.1-x` for `cld:a.1`).
        if (!matchesFilters(candidate.urn, candidate.type, options)) continue
        const score = dotAt(q, fromBytes(candidate.vector), 0)
        if (top.admits(score)) top.offer({ urn: candidate.urn, type: candidate.type, score })
      }
      const hits = top.result()
      // Fewer than asked for: every row that passes the filters was a candidate.
      if (candidates.length < k) return hits
      const bound = 1 - (farthest * farthest) / 2 + margin
      if (hits.length === limit && (hits[limit - 1] as Hit).score > bound) return hits
      if (k === VectorCopy.maxK) return undefined
    }
  })

/** The index's tables: the vector column's type is the embedder's (and pgvector's, when used). */
const migrations = (dimensions: number, pgvector: boolean): Migrations.Record => ({
  "1_vectors": Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const vector = sql.literal(
      pgvector ? `vector(${dimensions})` : sql.onDialectOrElse({ pg: () => "BYTEA", orElse: () => "BLOB" })
    )
    // PostgreSQL compares the key byte-wise, so the prefix range is the URN's characters', as on SQLite.
    const key = sql.literal(sql.onDialectOrElse({ pg: () => `TEXT COLLATE "C"`, orElse: () => "TEXT" }))
    if (pgvector) yield* sql`CREATE EXTENSION IF NOT EXISTS vector`
    yield* sql`CREATE TABLE ${sql(identityTable)} (id INTEGER PRIMARY KEY, provider TEXT NOT NULL,
      model TEXT NOT NULL, dimensions INTEGER NOT NULL, storage TEXT NOT NULL)`
    yield* sql`CREATE TABLE ${sql(vectorsTable)} (urn ${key} NOT NULL PRIMARY KEY, type TEXT NOT NULL,
      vector ${vector} NOT NULL)`
    yield* sql`CREATE INDEX ${sql(`${vectorsTable}_type`)} ON ${sql(vectorsTable)} (type, urn)`
  })
})

/**
 * The index in the shared SQL database (its own tables and migrations table).
 * Refuses a database whose vectors another embedder made.
 */
export const makeSql = (
  embedder: Embedder.Service,
  options: SqlOptions
): Effect.Effect<Service, VectorIndexError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const pg = Database.dialectOf(sql) === "pg"
    const location = options.location
    const mapSqlErrors = DatabaseError.mapSqlErrors(location)
    const failure = (what: string) => (error: unknown) =>
      error instanceof VectorIndexError
        ? error
        : indexError(`${location}: ${what}: ${DatabaseError.describe(error)}`, error)
    /** `effect` with its SQL failures mapped once (`DatabaseError`), then said as what the index was doing. */
    const doing =
      (what: string) =>
      <A, E, R>(effect: Effect.Effect<A, E | SqlError.SqlError, R>) =>
        Effect.mapError(mapSqlErrors(effect), failure(what))
    const dimensions = yield* dimensionsOf(embedder)
    const identity = identityOf(embedder, dimensions)
    const pgvector = options.pgvector === true
    if (pgvector) {
      if (!pg) return yield* Effect.fail(indexError(`${location}: pgvector needs PostgreSQL`))
      const available = yield* doing("checking for pgvector")(pgvectorAvailable)
      if (!available)
        return yield* Effect.fail(
          indexError(`${location}: the pgvector extension is not installed on this PostgreSQL server`)
        )
    }
    yield* Effect.mapError(
      Migrations.run({
        location,
        schema: "vector index",
        table: migrationsTable,
        migrations: migrations(dimensions, pgvector),
        readonly: options.readonly === true
      }),
      failure("preparing the vector tables")
    )
    const identities = sql(identityTable)
    const vectors = sql(vectorsTable)
    const storage = pgvector ? "pgvector" : "bytes"
    const recorded = yield* doing("reading the index's embedder")(
      sql<{ provider: string; model: string; dimensions: number | string; storage: string }>`
        SELECT provider, model, dimensions, storage FROM ${identities} WHERE id = 1`
    )
    const writeIdentity = sql`INSERT INTO ${identities} ${sql.insert({ id: 1, ...identity, storage })}
      ON CONFLICT (id) DO UPDATE SET provider = excluded.provider, model = excluded.model,
        dimensions = excluded.dimensions, storage = excluded.storage`
    const existing = recorded[0]
    // The vec0 copy, once opened (below): every write brings it along in the write's transaction.
    let copy: VectorCopy.Copy | undefined
    const alongCopy = <A, E, R>(
      write: Effect.Effect<A, E, R>,
      copyStep: (copy: VectorCopy.Copy) => Effect.Effect<void, SqlError.SqlError>
    ) =>
      Effect.suspend(() =>
        copy === undefined ? write : Effect.tap(write, () => copyStep(copy as VectorCopy.Copy))
      )
    /**
     * `write` as one transaction; inside one already open (a store's transaction holding the
     * resources' own writes) it joins that one, whose body fails with it, rather than open a
     * savepoint of its own (two statements more per write).
     */
    const atomically = <A, E, R>(write: Effect.Effect<A, E, R>) =>
      Effect.withFiber((fiber) =>
        Prepared.openTransaction(sql, fiber.context) === undefined ? sql.withTransaction(write) : write
      )
    const emptyForThisEmbedder = doing("resetting the index")(
      sql.withTransaction(
        alongCopy(Effect.andThen(sql`DELETE FROM ${vectors}`, writeIdentity), (copy) => copy.rebuild)
      )
    ).pipe(Effect.asVoid)
    // Read-only, an index no embedder has written to yet stays unrecorded (and empty).
    if (existing === undefined) {
      if (options.readonly !== true) yield* doing("recording the index's embedder")(writeIdentity)
    } else if (
      existing.provider !== identity.provider ||
      existing.model !== identity.model ||
      Number(existing.dimensions) !== identity.dimensions ||
      existing.storage !== storage
    ) {
      if (options.reset === true && options.readonly !== true) yield* emptyForThisEmbedder
      else
        return yield* Effect.fail(
          indexError(
            `${location}: the vector index was built with ${existing.provider}/${existing.model} (${existing.dimensions} dimensions, ${existing.storage}), not ${identity.provider}/${identity.model} (${identity.dimensions}, ${storage}); vectors of two models cannot be compared: use that embedder, or reset the index and add the resources again`
          )
        )
    }

    let warned = false
    /** Says once per index why it scans where the copy would have spared it. */
    const fallBack = (reason: string) =>
      Effect.suspend(() => {
        if (warned) return Effect.void
        warned = true
        return Effect.logWarning(`${location}: vector search reads every row (no sqlite-vec): ${reason}`)
      })
    if (!pg && options.sqliteVec !== false) {
      const opened = yield* doing("preparing the vec0 copy")(
        VectorCopy.open(sql, {
          vectors: vectorsTable,
          dimensions,
          readonly: options.readonly === true,
          extension: options.sqliteVec
        })
      )
      if (VectorCopy.isUnavailable(opened)) yield* fallBack(opened.reason)
      else copy = opened
    }

    /** Whether the index has been seen past `copyFrom` rows: then its copy is kept and searched. */
    let copyInUse = false
    const inUse = (copy: VectorCopy.Copy) =>
      copyInUse
        ? Effect.succeed(true)
        : Effect.map(copy.state, ({ extent }) => {
            copyInUse = extent >= copyFrom
            return copyInUse
          })
    /**
     * After a write, in its transaction: the copy caught up, once the index is worth searching
     * through it. In a group commit's transaction (the store's on SQLite) once, before its COMMIT,
     * for every write the transaction holds: the log then holds them all, and one fill copies them.
     */
    const keepCopy = (copy: VectorCopy.Copy) =>
      Effect.flatMap(inUse(copy), (used) =>
        used ? GroupCommit.beforeCommit(sql, copy, copy.catchUp) : Effect.void
      )

    const { queryVector, vectorsOf } = common(embedder)
    /** A vector as its column's parameter: pgvector's text form (cast in the statement), else its bytes. */
    const stored = (vector: Float32Array) => (pgvector ? pgvectorLiteral(vector) : toBytes(vector))
    // The multi-row upsert, compiled once per row count (`Prepared`) and run straight on the
    // connection: `urn, type, vector` a row.
    const upsertStatement = Prepared.perCount((count) =>
      Prepared.make(
        count * 3,
        (parameters) => sql`INSERT INTO ${vectors} (urn, type, vector) VALUES ${sql.join(
          ", ",
          false
        )(
          Array.from({ length: count }, (_, row) => {
            const [urn, type, vector] = parameters.slice(row * 3, row * 3 + 3)
            return sql`(${urn}, ${type}, ${pgvector ? sql`${vector}::vector` : vector})`
          })
        )}
        ON CONFLICT (urn) DO UPDATE SET type = excluded.type, vector = excluded.vector
        WHERE ${vectors}.type <> excluded.type OR ${vectors}.vector <> excluded.vector
        RETURNING urn`
      )
    )
    const filters = (options: SearchOptions) => {
      const where: Array<Statement.Fragment> = []
      if (options.type !== undefined) where.push(sql`type = ${options.type}`)
      if (options.prefix !== undefined) {
        // The URN itself, or the key range of its descendants ('0' follows '/').
        const prefix = options.prefix
        where.push(sql`(urn = ${prefix} OR (urn >= ${`${prefix}/`} AND urn < ${`${prefix}0`}))`)
      }
      return where.length === 0 ? sql.literal("") : sql`WHERE ${sql.and(where)}`
    }
    /** The rows passing `where`, all of them or the first `atMost`. */
    const rowsPassing = (where: Statement.Fragment, atMost?: number) =>
      sql<{
        urn: string
        type: string
        vector: Uint8Array
      }>`SELECT urn, type, vector FROM ${vectors} ${where}${
        atMost === undefined ? sql.literal("") : sql` LIMIT ${atMost}`
      }`
    /** The scan's top: every row given scored in JS. */
    const ranked =
      (q: Float32Array, limit: number) =>
      (rows: ReadonlyArray<{ urn: string; type: string; vector: Uint8Array }>) => {
        const top = new TopK(limit)
        for (const row of rows)
          top.offer({ urn: row.urn, type: row.type, score: dotAt(q, fromBytes(row.vector), 0) })
        return top.result()
      }
    /**
     * The copy's exact top, or undefined to scan (a small index). A stale copy (another process
     * wrote without the extension) is caught up in a write transaction and asked again;
     * read-only, it cannot be: scan.
     */
    const fromCopy = (
      copy: VectorCopy.Copy,
      q: Float32Array,
      limit: number,
      filters: SearchOptions,
      where: Statement.Fragment
    ) =>
      Effect.gen(function* () {
        if (!(yield* inUse(copy))) return undefined
        // A filter that lets few rows through (an election's few assistants): those rows are the
        // answer, read on the table's indexes, where the copy's KNN would go through every vector.
        // Read up to `copyFrom`: fewer came, so all that pass did, and they are the scan's.
        if (filters.type !== undefined || filters.prefix !== undefined) {
          const few = yield* rowsPassing(where, copyFrom)
          if (few.length < copyFrom) return ranked(q, limit)(few)
        }
        const found = yield* searchCopy(copy, q, limit, filters)
        if (found !== "stale") return found
        if (options.readonly === true) {
          yield* fallBack("the vec0 copy is behind the vectors and the database is read-only")
          return undefined
        }
        yield* sql.withTransaction(copy.catchUp)
        const again = yield* searchCopy(copy, q, limit, filters)
        return again === "stale" ? undefined : again
      })
    // A vector written again unchanged (a task stored at each state change) leaves its row as it
    // is: no update, so no change logged, and the vec0 copy is not rewritten for nothing. The rows
    // go in multi-row statements (`upsertBatches`).
    /** How many rows the write inserted or changed (an unchanged vector is not one). */
    const writeVectors = (list: ReadonlyArray<Resource.Resource>, computed: ReadonlyArray<Float32Array>) =>
      Effect.map(
        Effect.forEach(
          upsertBatches(
            list.map((resource, i) => ({ resource, vector: computed[i] as Float32Array })),
            (row) => row.resource.meta.urn
          ),
          (rows) =>
            Prepared.values(
              sql,
              upsertStatement(rows.length),
              rows.flatMap(({ resource, vector }) => [resource.meta.urn, resource.meta.type, stored(vector)])
            )
        ),
        (written) => written.reduce((sum, rows) => sum + rows.length, 0)
      )
    // A write that changed nothing leaves the copy be: what it could catch up with is another
    // writer's, which a search finds in the log and catches up with anyway.
    const prepareUpsert = (list: ReadonlyArray<Resource.Resource>) =>
      list.length === 0
        ? Effect.succeed(Effect.void)
        : Effect.map(vectorsOf(list, dimensions), (computed) =>
            doing("storing vectors")(
              atomically(
                Effect.flatMap(writeVectors(list, computed), (changed) =>
                  changed === 0 ? Effect.void : alongCopy(Effect.void, keepCopy)
                )
              )
            )
          )
    const service: Service = {
      identity,
      prepareUpsert,
      upsert: (resources) => Effect.flatten(prepareUpsert(asList(resources))),
      remove: (urn) =>
        Effect.map(
          doing("removing a vector")(
            sql.withTransaction(
              alongCopy(
                sql<{ urn: string }>`DELETE FROM ${vectors} WHERE urn = ${urn} RETURNING urn`,
                keepCopy
              )
            )
          ),
          (rows) => rows.length > 0
        ),
      search: (query, options = {}) => {
        const problem = checkOptions(options)
        if (problem !== undefined) return Effect.fail(problem)
        const limit = options.limit ?? 10
        const where = filters(options)
        return Effect.flatMap(queryVector(query, dimensions), (q) => {
          if (pgvector) {
            // Exact: no approximate index, every filtered row is ranked by cosine distance.
            const target = sql`${pgvectorLiteral(q)}::vector`
            return Effect.map(
              doing("searching")(
                sql<{ urn: string; type: string; score: number | string }>`
                  SELECT urn, type, 1 - (vector <=> ${target}) AS score FROM ${vectors} ${where}
                  ORDER BY vector <=> ${target}, urn LIMIT ${limit}`
              ),
              (rows) => rows.map((row) => ({ urn: row.urn, type: row.type, score: Number(row.score) }))
            )
          }
          const scan = Effect.map(doing("searching")(rowsPassing(where)), ranked(q, limit))
          if (copy === undefined) return scan
          return Effect.flatMap(doing("searching")(fromCopy(copy, q, limit, options, where)), (hits) =>
            hits === undefined ? scan : Effect.succeed(hits)
          )
        })
      },
      size: Effect.map(
        doing("counting")(sql<{ n: number | string }>`SELECT count(*) AS n FROM ${vectors}`),
        (rows) => Number(rows[0]?.n ?? 0)
      ),
      reset: emptyForThisEmbedder
    }
    return service
  })

/** The index in the command's `Database`. */
export const fromDatabase = (
  embedder: Embedder.Service,
  options: Omit<SqlOptions, "location"> = {}
): Effect.Effect<Service, VectorIndexError, SqlClient.SqlClient | Database.Database> =>
  Database.store((database) => makeSql(embedder, { ...options, ...database }))
