/**
 * Resources: what the resource store, the policy engine and the vector index cost.
 *
 * - `resources.find_prefix_us`: `findByPrefix` of one conversation holding 100
 *   chunks (decoded), in a store of 10,000 and of 1,000,000 resources (100,000
 *   in quick runs), on SQLite and on PostgreSQL: a key range scan, so the time
 *   should not grow with the store.
 * - `resources.get_many_100_us`: `getMany` of 100 URNs spread over the store (SQLite).
 * - `policy.cedar_authorize_us`: one `get` of a resource two levels deep, with
 *   500 Cedar policies loaded from a file (`CedarPolicy.fromFile`, which checks
 *   the file for changes before each decision); beside it
 *   `policy.cedar_authorize_raw_us`, cedar-wasm's `statefulIsAuthorized` alone on
 *   the same preparsed policies (the one policy whose scope matches) with the
 *   request CedarPolicy sends for them: the floor, so the gap is noema's own work.
 *   The two take turns call by call.
 * - `vector.search_100k_ms`: exact search of 100,000 vectors of 384 dimensions
 *   (the memory `VectorIndex`, top 10), next to a plain Float32Array dot-product
 *   loop over the same vectors, the floor; and the SQLite index (through its
 *   sqlite-vec copy) beside the raw node:sqlite scan of the same rows and
 *   sqlite-vec's own vec0 KNN (k = 10) on the same file.
 *
 * The stores are filled straight through SQL in one transaction (the rows are
 * what `put` would write: real resources, decodable), so filling a million
 * takes seconds; every figure is then measured through noema's API.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import type { Embedder } from "@noema/core"
import {
  CedarPolicy,
  Resource,
  type ResourceStore,
  SqlResourceStore,
  Urn,
  VectorIndex
} from "@noema/resources"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { getLoadablePath } from "sqlite-vec"
import { check, median, now, postgresDatabase } from "./Harness.ts"

export interface ResourcesOptions {
  /** The big store's size (1,000,000 in full runs). */
  readonly big: number
  readonly lookups: number
  readonly authorizations: number
  readonly searches: number
  readonly vectors: number
}

const perConversation = 100

/** The resource rows of `conversations` conversations with 100 chunks each, as `put` would store them. */
const rowsOf = (from: number, count: number) => {
  const rows: Array<readonly [string, string, string | null, string]> = []
  for (let c = from; c < from + count; c++) {
    const name = `conversation ${c}`
    const hash = Resource.hashOf(undefined, "conversation", name)
    const urn = Urn.child(undefined, "conversation", hash)
    rows.push([
      urn,
      "conversation",
      null,
      JSON.stringify({ meta: { urn, name, type: "conversation", hash } })
    ])
    for (let k = 0; k < perConversation - 1; k++) {
      const chunkName = `chunk ${k}`
      const chunkHash = Resource.hashOf(urn, "chunk", chunkName)
      const chunkUrn = Urn.child(urn, "chunk", chunkHash)
      rows.push([
        chunkUrn,
        "chunk",
        urn,
        JSON.stringify({
          meta: { urn: chunkUrn, name: chunkName, type: "chunk", parent: urn, hash: chunkHash },
          text: `Chunk ${k} of conversation ${c}.`
        })
      ])
    }
  }
  return rows
}

const conversationUrn = (c: number) =>
  Urn.child(undefined, "conversation", Resource.hashOf(undefined, "conversation", `conversation ${c}`))

/** Fills the store's table with `total` resources (100 per conversation), in one transaction, batched. */
const fill = (total: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const pg = Database.dialectOf(sql) === "pg"
    const conversations = Math.ceil(total / perConversation)
    const perStatement = pg ? 1000 : 200
    const statement = (rows: number) => {
      let index = 0
      const values = Array.from({ length: rows }, () =>
        pg ? `($${++index}, $${++index}, $${++index}, $${++index})` : "(?, ?, ?, ?)"
      ).join(", ")
      return `INSERT INTO ${SqlResourceStore.resourcesTable} (urn, type, parent, body) VALUES ${values}`
    }
    yield* sql.withTransaction(
      Effect.gen(function* () {
        for (let c = 0; c < conversations; c += 100) {
          const rows = rowsOf(c, Math.min(100, conversations - c))
          for (let offset = 0; offset < rows.length; offset += perStatement) {
            const batch = rows.slice(offset, offset + perStatement)
            yield* sql.unsafe(statement(batch.length), batch.flat())
          }
        }
      })
    )
    return conversations
  })

/** Median µs of `findByPrefix` over random conversations, each returning 100 resources. */
const prefixLookups = (store: ResourceStore.Service, conversations: number, lookups: number) =>
  Effect.gen(function* () {
    const times: Array<number> = []
    for (let i = 0; i < lookups + 20; i++) {
      const urn = conversationUrn((i * 7919) % conversations)
      const started = now()
      const found = yield* store.findByPrefix(urn)
      const elapsed = (now() - started) * 1000
      check(found.length === perConversation - 1, `findByPrefix found ${found.length} resources`)
      if (i >= 20) times.push(elapsed)
    }
    return median(times)
  })

/** A store of `size` resources on the database `layer`, and its prefix lookup time. */
const storeOfSize = (
  layer: Layer.Layer<SqlClient.SqlClient | Database.Database, unknown>,
  size: number,
  lookups: number
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(layer)
      const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
      const conversations = yield* Effect.provideContext(fill(size), context)
      const lookup = yield* prefixLookups(store, conversations, lookups)
      return { store, conversations, lookup }
    })
  )

const sqliteLayer = (directory: string, name: string) =>
  Database.layer({ kind: "sqlite", filename: path.join(directory, `${name}.db`) })

const cedarPolicy = (i: number) =>
  `@id("p${i}") permit (principal == Noema::Actor::"cld:assistant.a${i}", action == Noema::Action::"get", resource in Noema::Resource::"cld:conversation.c${i}");`

const cedarPolicies = (count: number) => Array.from({ length: count }, (_, i) => cedarPolicy(i)).join("\n")

/** The raw call: the policy `p<n>` alone, preparsed, and the request CedarPolicy sends for it. */
const rawCedar = (count: number) => {
  for (let n = 0; n < count; n++) {
    const answer = cedar.preparsePolicySet(`bench-raw-${n}`, {
      staticPolicies: { [`p${n}`]: cedarPolicy(n) }
    })
    check(answer.type === "success", "cedar: the bench policy does not parse")
  }
  return (n: number) => {
    const conversation = `cld:conversation.c${n}`
    const message = `${conversation}/message.m1`
    const urn = `${message}/chunk.k1`
    // Its scope reads no attribute and names no resource in a condition: the resource alone,
    // its ancestors as its parents.
    const answer = cedar.statefulIsAuthorized({
      principal: { type: "Noema::Actor", id: `cld:assistant.a${n}` },
      action: { type: "Noema::Action", id: "get" },
      resource: { type: "Noema::Resource", id: urn },
      context: {},
      preparsedPolicySetId: `bench-raw-${n}`,
      entities: [
        {
          uid: { type: "Noema::Resource", id: urn },
          attrs: {},
          parents: [
            { type: "Noema::Resource", id: conversation },
            { type: "Noema::Resource", id: message }
          ]
        }
      ]
    })
    return answer.type === "success" && answer.response.decision === "allow"
  }
}

/**
 * Cedar with 500 policies, from a file (checked for changes before each decision): a get two
 * levels deep, allowed by one of them; and the raw call on the same policy, taking turns.
 */
const cedarAuthorize = (options: ResourcesOptions, directory: string) =>
  Effect.gen(function* () {
    const count = 500
    const policyFile = path.join(directory, "policy.cedar")
    fs.writeFileSync(policyFile, cedarPolicies(count))
    const policy = yield* CedarPolicy.fromFile(policyFile)
    const raw = rawCedar(count)
    const noemaTimes: Array<number> = []
    const rawTimes: Array<number> = []
    // The first pass over the 500 actors is the warm-up: it preparses each one's slice, as the
    // raw side preparsed its sets before; what is timed is a decision in steady state.
    for (let i = 0; i < options.authorizations + count; i++) {
      const n = i % count
      let started = now()
      const decision = yield* policy.authorize({
        actor: `cld:assistant.a${n}`,
        action: "get",
        resources: [`cld:conversation.c${n}/message.m1/chunk.k1`]
      })
      if (i >= count) noemaTimes.push((now() - started) * 1000)
      check(decision.decision === "allow", `cedar denied: ${decision.reasons.join("; ")}`)
      started = now()
      const allowed = raw(n)
      if (i >= count) rawTimes.push((now() - started) * 1000)
      check(allowed, "raw cedar denied")
    }
    return {
      "policy.cedar_authorize_us": median(noemaTimes),
      "policy.cedar_authorize_raw_us": median(rawTimes)
    }
  })

/** An embedder of fixed random unit vectors: the text is the vector's index. */
const fixedEmbedder = (vectors: ReadonlyArray<Float32Array>, dimensions: number): Embedder.Service => ({
  provider: "bench",
  model: "fixed",
  dimensions,
  embed: (texts) =>
    Effect.succeed({
      vectors: texts.map((text) => Array.from(vectors[Number(text.split("\n")[0])] as Float32Array))
    })
})

const randomUnit = (dimensions: number, seed: number): Float32Array => {
  let state = seed * 2654435761 + 1
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0
    return state / 4294967296 - 0.5
  }
  const vector = new Float32Array(dimensions)
  let norm = 0
  for (let i = 0; i < dimensions; i++) {
    vector[i] = next()
    norm += (vector[i] as number) ** 2
  }
  for (let i = 0; i < dimensions; i++) vector[i] = (vector[i] as number) / Math.sqrt(norm)
  return vector
}

export const vectorSearch = (options: ResourcesOptions, directory: string) =>
  Effect.gen(function* () {
    const dimensions = 384
    const count = options.vectors
    const vectors = Array.from({ length: count + options.searches }, (_, i) => randomUnit(dimensions, i + 1))
    const embedder = fixedEmbedder(vectors, dimensions)
    // Resources named by their vector's index (what the fixed embedder reads back).
    const resources = Array.from(
      { length: count },
      (_, i) =>
        ({
          meta: { urn: `cld:chunk.v${i}`, name: String(i), type: "chunk", hash: `v${i}` },
          text: ""
        }) as unknown as Resource.Resource
    )
    const memory = yield* VectorIndex.makeMemory(embedder)
    for (let offset = 0; offset < count; offset += 5000)
      yield* memory.upsert(resources.slice(offset, offset + 5000))
    // The floor: one contiguous Float32Array, a dot product per row, the best 10 kept.
    const flat = new Float32Array(count * dimensions)
    for (let i = 0; i < count; i++) flat.set(vectors[i] as Float32Array, i * dimensions)
    const rawSearch = (query: Float32Array) => {
      const best: Array<{ index: number; score: number }> = []
      for (let i = 0; i < count; i++) {
        let score = 0
        const base = i * dimensions
        for (let d = 0; d < dimensions; d++) score += (query[d] as number) * (flat[base + d] as number)
        if (best.length < 10 || score > (best[9] as { score: number }).score) {
          best.push({ index: i, score })
          best.sort((a, b) => b.score - a.score)
          if (best.length > 10) best.pop()
        }
      }
      return best
    }
    const noemaTimes: Array<number> = []
    const rawTimes: Array<number> = []
    for (let s = 0; s < options.searches; s++) {
      const query = vectors[count + s] as Float32Array
      let started = now()
      const hits = yield* memory.search({ vector: Array.from(query) }, { limit: 10 })
      noemaTimes.push(now() - started)
      started = now()
      const raw = rawSearch(query)
      rawTimes.push(now() - started)
      check(
        hits[0]?.urn === `cld:chunk.v${raw[0]?.index}`,
        "noema's and the raw search agree on the best hit"
      )
    }
    // The same vectors in SQLite, beside two raw references on the same file, taking turns:
    // the exact scan as node:sqlite alone does it (every row read, a dot product each) and
    // sqlite-vec's own vec0 KNN over noema's copy (k = 10, the distances only, not exact).
    const sqlite = yield* Effect.scoped(
      Effect.gen(function* () {
        const filename = path.join(directory, "vectors.db")
        const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename }))
        const index = yield* Effect.provideContext(VectorIndex.fromDatabase(embedder), context)
        for (let offset = 0; offset < count; offset += 5000)
          yield* index.upsert(resources.slice(offset, offset + 5000))
        const raw = new DatabaseSync(filename, { readOnly: true, allowExtension: true })
        yield* Effect.addFinalizer(() => Effect.sync(() => raw.close()))
        raw.loadExtension(getLoadablePath())
        const scan = raw.prepare(`SELECT urn, vector FROM ${VectorIndex.vectorsTable}`)
        const knn = raw.prepare(
          `SELECT urn, distance FROM ${VectorIndex.vectorsTable}_vec0_${dimensions} WHERE vector MATCH ? AND k = 10`
        )
        const rawScan = (query: Float32Array) => {
          const best: Array<{ urn: string; score: number }> = []
          for (const row of scan.iterate() as Iterable<{ urn: string; vector: Uint8Array }>) {
            const vector = new Float32Array(row.vector.buffer, row.vector.byteOffset, dimensions)
            let score = 0
            for (let d = 0; d < dimensions; d++) score += (query[d] as number) * (vector[d] as number)
            if (best.length < 10 || score > (best[9] as { score: number }).score) {
              best.push({ urn: row.urn, score })
              best.sort((a, b) => b.score - a.score)
              if (best.length > 10) best.pop()
            }
          }
          return best
        }
        const rawKnn = (query: Float32Array) =>
          knn.all(new Uint8Array(query.buffer, query.byteOffset, query.byteLength)) as Array<{ urn: string }>
        const times = { noema: [] as Array<number>, scan: [] as Array<number>, knn: [] as Array<number> }
        const rounds = Math.min(options.searches, 9)
        // One untimed round first (statements prepared, pages cached), then the contenders in turn.
        for (let s = -1; s < rounds; s++) {
          const query = vectors[count + Math.max(s, 0)] as Float32Array
          const turns = [
            Effect.map(
              index.search({ vector: Array.from(query) }, { limit: 10 }),
              (hits) => ["noema", hits] as const
            ),
            Effect.sync(() => ["scan", rawScan(query)] as const),
            Effect.sync(() => ["knn", rawKnn(query)] as const)
          ]
          const order = [0, 1, 2].map((i) => turns[(i + Math.max(s, 0)) % 3] as (typeof turns)[number])
          const urns: Record<string, Array<string>> = {}
          for (const turn of order) {
            const started = now()
            const [name, hits] = yield* turn
            if (s >= 0) times[name].push(now() - started)
            urns[name] = hits.map((hit) => hit.urn)
          }
          check(
            JSON.stringify(urns.noema) === JSON.stringify(urns.scan),
            "noema's SQLite search and the raw scan agree on the top 10"
          )
        }
        return {
          "vector.search_100k_sqlite_ms": median(times.noema),
          "vector.search_100k_sqlite_raw_ms": median(times.scan),
          "vector.search_100k_sqlite_vec0_raw_ms": median(times.knn)
        }
      })
    )
    return {
      "vector.search_100k_ms": median(noemaTimes),
      "vector.search_100k_raw_ms": median(rawTimes),
      ...sqlite
    }
  })

export const run = async (options: ResourcesOptions): Promise<Record<string, number>> => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-resources-"))
  const results: Record<string, number> = {}
  const { url: pgUrl, release } = await postgresDatabase({ prefix: "noema_bench_resources" })
  try {
    await Effect.runPromise(
      Effect.gen(function* () {
        // SQLite: 10k, then the big store; getMany in the big one.
        const small = yield* storeOfSize(sqliteLayer(directory, "small"), 10_000, options.lookups)
        results["resources.find_prefix_10k.sqlite_us"] = small.lookup
        const big = yield* Effect.scoped(
          Effect.gen(function* () {
            const context = yield* Layer.build(sqliteLayer(directory, "big"))
            const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
            const conversations = yield* Effect.provideContext(fill(options.big), context)
            const lookup = yield* prefixLookups(store, conversations, options.lookups)
            const times: Array<number> = []
            for (let i = 0; i < options.lookups + 10; i++) {
              const urns = Array.from({ length: 100 }, (_, k) =>
                conversationUrn((i * 104729 + k * 7919) % conversations)
              )
              const started = now()
              const found = yield* store.getMany(urns)
              if (i >= 10) times.push((now() - started) * 1000)
              check(found.length === 100, `getMany found ${found.length} of 100`)
            }
            return { lookup, getMany: median(times) }
          })
        )
        results["resources.find_prefix_big.sqlite_us"] = big.lookup
        results["resources.get_many_100_us"] = big.getMany

        // PostgreSQL: the same two sizes, each in its own schema.
        const pgLayer = (schema: string) =>
          Layer.unwrap(
            Effect.promise(async () => {
              const { default: pg } = await import("pg")
              const client = new pg.Client({ connectionString: pgUrl })
              await client.connect()
              await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`)
              await client.end()
              return Database.layer({ kind: "postgres", url: TestDatabase.withSearchPath(pgUrl, schema) })
            })
          )
        results["resources.find_prefix_10k.pg_us"] = (yield* storeOfSize(
          pgLayer("res_small"),
          10_000,
          options.lookups
        )).lookup
        results["resources.find_prefix_big.pg_us"] = (yield* storeOfSize(
          pgLayer("res_big"),
          options.big,
          options.lookups
        )).lookup
        results["resources.big_size"] = options.big

        Object.assign(results, yield* cedarAuthorize(options, directory))

        Object.assign(results, yield* vectorSearch(options, directory))
      })
    )
  } finally {
    await release()
    fs.rmSync(directory, { recursive: true, force: true })
  }
  return results
}
