/**
 * The SQLite vector index with its sqlite-vec copy: the same results as the exact scan (the index
 * opened with `sqliteVec: false` on the same file), whoever wrote the vectors, read-only or not,
 * and the scan with one warning where the extension cannot load.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import type { Embedder } from "@noema/core"
import { Database, GroupCommit } from "@noema/sql"
import { SqliteClient } from "@noema/sql-sqlite"
import { Context, Effect, Layer, Logger } from "effect"
import { SqlClient } from "effect/sql"
import { getLoadablePath } from "sqlite-vec"
import * as VectorCopy from "../src/internal/vectorCopy.js"
import type * as Resource from "../src/Resource.js"
import * as VectorIndex from "../src/VectorIndex.js"

const dimensions = 24
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-sqlite-vec-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
let counter = 0
const freshFile = () => path.join(directory, `vec-${counter++}.db`)

/** A seeded generator, so a failure can be replayed. */
const generator = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0
    return state / 4294967296 - 0.5
  }
}

/** Vectors by name: what the embedder gives for a resource named so (its search text). */
const vectors = new Map<string, ReadonlyArray<number>>()
const embedder: Embedder.Service = {
  provider: "test",
  model: "table",
  dimensions,
  embed: (texts) => Effect.succeed({ vectors: texts.map((text) => vectors.get(text) ?? []) })
}

const resource = (urn: string, type: string, vector: ReadonlyArray<number>): Resource.Resource => {
  const name = `${urn} ${vectors.size}`
  vectors.set(name, vector)
  return { meta: { urn, name, type, hash: name }, text: "" } as unknown as Resource.Resource
}

/**
 * URNs of every length around vec0's 12 bytes (`cld:chunk.v1` is 12), prefixes with lookalikes
 * (`cld:a.1` beside `cld:a.12` and `cld:a.1-x`), exact ties (one vector under two URNs, and under
 * a hundred: more than the first candidates vec0 is asked for), a zero vector, types of 1 to 12 bytes.
 */
const dataSet = (count: number, seed: number) => {
  const next = generator(seed)
  const random = () => Array.from({ length: dimensions }, next)
  const parents = ["cld:a.1", "cld:a.12", "cld:a.1-x", "cld:chunk.v1", "cld:chunk.v12", "cld:b.2"]
  const types = ["chunk", "conversation", "t"]
  const list: Array<Resource.Resource> = parents.map((urn, i) =>
    resource(urn, types[i % 3] as string, random())
  )
  for (let i = 0; list.length < count; i++) {
    const parent = parents[i % parents.length] as string
    const vector =
      i % 50 === 7 || (i > 200 && i < 300)
        ? vectors.get((list[list.length - 1] as Resource.Resource).meta.name)!
        : random()
    list.push(resource(`${parent}/c.${i}`, types[i % 3] as string, vector))
  }
  list.push(resource("cld:z.0", "chunk", new Array(dimensions).fill(0)))
  return { list, random }
}

const open = (
  filename: string,
  options: { readonly sqliteVec?: string | false; readonly readonly?: boolean } = {}
) =>
  Effect.flatMap(
    Layer.build(Database.layer({ kind: "sqlite", filename, readonly: options.readonly === true })),
    (context) =>
      Effect.provideContext(
        VectorIndex.fromDatabase(
          embedder,
          options.sqliteVec === undefined ? {} : { sqliteVec: options.sqliteVec }
        ),
        context
      )
  )

/** `body` on a connection of its own to the file (without sqlite-vec unless it loads it). */
const withSql = <A>(filename: string, body: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) =>
  Effect.scoped(
    Effect.flatMap(Layer.build(Database.layer({ kind: "sqlite", filename })), (context) =>
      Effect.provideContext(Effect.flatMap(SqlClient.SqlClient, body), context)
    )
  ).pipe(Effect.orDie)

const count = (filename: string, table: string) =>
  withSql(filename, (sql) =>
    Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM ${sql(table)}`, (rows) => rows[0]?.n ?? -1)
  )

const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make<unknown, void>(({ message, logLevel }) => {
    lines.push(`${logLevel} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  return { lines, layer: Logger.layer([logger]) }
}

type Search = readonly [VectorIndex.Query, VectorIndex.SearchOptions]

/** Searches that probe the copy: limits up to past vec0's largest k, each filter, ties, zero. */
const searches = (
  random: () => ReadonlyArray<number>,
  list: ReadonlyArray<Resource.Resource>
): Array<Search> => {
  const stored = (i: number) => vectors.get((list[i] as Resource.Resource).meta.name) as ReadonlyArray<number>
  const queries: Array<VectorIndex.Query> = [
    { vector: random() },
    { vector: random() },
    { vector: stored(57) },
    { vector: stored(8) },
    { vector: stored(250) }
  ]
  const options: Array<VectorIndex.SearchOptions> = [
    {},
    { limit: 1 },
    { limit: 37 },
    { limit: 600 },
    { limit: 5000 },
    { type: "conversation", limit: 20 },
    { prefix: "cld:a.1" },
    { prefix: "cld:chunk.v1", limit: 30 },
    { prefix: "cld:a.1", type: "t", limit: 15 },
    { prefix: "cld:a.1/c.0" },
    { prefix: "cld:nothing.here" }
  ]
  return queries.flatMap((query) => options.map((option) => [query, option] as const))
}

const sameAsScan = (index: VectorIndex.Service, scan: VectorIndex.Service, all: ReadonlyArray<Search>) =>
  Effect.forEach(all, ([query, options]) =>
    Effect.gen(function* () {
      const expected = yield* scan.search(query, options)
      const found = yield* index.search(query, options)
      assert.deepStrictEqual(found, expected, JSON.stringify(options))
    })
  )

describe("VectorIndex on SQLite with sqlite-vec", () => {
  it.effect(
    "gives exactly the scan's hits (URNs, types, scores, ties by URN) for every limit and filter",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const log = capture()
        const { list, random } = dataSet(3000, 1)
        const index = yield* open(file).pipe(Effect.provide(log.layer))
        yield* index.upsert(list)
        const scan = yield* open(file, { sqliteVec: false })
        yield* sameAsScan(index, scan, searches(random, list))
        assert.deepStrictEqual(log.lines, [])
        assert.equal(yield* count(file, `noema_vectors_vec0_${dimensions}_rowids`), list.length)
        assert.equal(yield* count(file, "noema_vectors_changes"), 0)
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "the copy packs chunkSize vectors a chunk, not vec0's 1024: a KNN reads a small index's few, not a 1024-vector blob",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        // Past copyFrom (the copy is kept from then on) and one chunk.
        const { list } = dataSet(VectorCopy.chunkSize + 40, 2)
        const index = yield* open(file)
        yield* index.upsert(list)
        assert.isBelow(VectorCopy.chunkSize, 1024)
        assert.equal(
          yield* count(file, `noema_vectors_vec0_${dimensions}_chunks`),
          Math.ceil(list.length / VectorCopy.chunkSize)
        )
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "writes gathered into a group commit's transaction bring the copy along before its COMMIT, once for all",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: file }))
        const index = yield* Effect.provideContext(VectorIndex.fromDatabase(embedder), context)
        const sql = Context.get(context, SqlClient.SqlClient)
        const { list, random } = dataSet(VectorCopy.chunkSize + 200, 3)
        // Past copyFrom first: from then on every write keeps the copy.
        yield* index.upsert(list.slice(0, 300))
        const grouped = GroupCommit.make(sql, { gather: true, beforeCommit: true })
        const rest = list.slice(300)
        const batches = Array.from({ length: 8 }, (_, i) => rest.filter((_, j) => j % 8 === i))
        yield* Effect.all(
          batches.map((batch) => grouped(() => index.upsert(batch))),
          { concurrency: "unbounded" }
        )
        // Right after the COMMIT: nothing left in the log, every vector in the copy.
        assert.equal(yield* count(file, "noema_vectors_changes"), 0)
        assert.equal(yield* count(file, `noema_vectors_vec0_${dimensions}_rowids`), list.length)
        const scan = yield* open(file, { sqliteVec: false })
        yield* sameAsScan(index, scan, searches(random, list).slice(0, 11))
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "catches up with writes made without the extension (new, replaced, removed vectors)",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const { list, random } = dataSet(1500, 2)
        const index = yield* open(file)
        yield* index.upsert(list.slice(0, 1000))
        // Another process, without sqlite-vec: its writes reach only the table (and the change log).
        yield* Effect.scoped(
          Effect.gen(function* () {
            const other = yield* open(file, { sqliteVec: false })
            yield* other.upsert(list.slice(1000))
            const replaced = list.slice(0, 40).map((old) => resource(old.meta.urn, "t", random()))
            yield* other.upsert(replaced)
            for (const gone of list.slice(100, 130)) yield* other.remove(gone.meta.urn)
          })
        )
        assert.isAbove(yield* count(file, "noema_vectors_changes"), 0)
        const scan = yield* open(file, { sqliteVec: false })
        yield* sameAsScan(index, scan, searches(random, list))
        assert.equal(yield* count(file, "noema_vectors_changes"), 0)
        assert.equal(
          yield* count(file, `noema_vectors_vec0_${dimensions}_rowids`),
          yield* count(file, "noema_vectors")
        )
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "a vector written again unchanged is no change: the log stays empty, a changed one is logged",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const { list, random } = dataSet(400, 6)
        const index = yield* open(file)
        yield* index.upsert(list)
        assert.equal(yield* count(file, "noema_vectors_changes"), 0)
        // Written again without the extension: every real change would reach the log and stay there.
        const other = yield* open(file, { sqliteVec: false })
        yield* other.upsert(list)
        assert.equal(yield* count(file, "noema_vectors_changes"), 0)
        yield* other.upsert([resource(list[0]!.meta.urn, list[0]!.meta.type, random())])
        yield* other.upsert([resource(list[1]!.meta.urn, "another", vectors.get(list[1]!.meta.name)!)])
        assert.equal(yield* count(file, "noema_vectors_changes"), 2)
        const scan = yield* open(file, { sqliteVec: false })
        yield* sameAsScan(index, scan, searches(random, list))
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "searches through the copy: a row taken from it behind the log's back is missing from the hits",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const { list } = dataSet(400, 3)
        const index = yield* open(file)
        yield* index.upsert(list)
        const best = (yield* index.search({ vector: vectors.get(list[0]!.meta.name)! }, { limit: 1 }))[0]
        assert.equal(best?.urn, list[0]!.meta.urn)
        // A test-only tamper (with the extension, straight in SQL, then the log cleared): the copy
        // alone loses the row, so a search that still finds it never asked the copy.
        yield* withSql(file, (sql) =>
          Effect.gen(function* () {
            assert.isTrue(SqliteClient.isSqliteClient(sql))
            if (SqliteClient.isSqliteClient(sql)) yield* sql.loadExtension(getLoadablePath())
            yield* sql`DELETE FROM ${sql(`noema_vectors_vec0_${dimensions}`)} WHERE urn = ${list[0]!.meta.urn}`
            yield* sql`DELETE FROM noema_vectors_changes`
          })
        )
        const after = (yield* index.search({ vector: vectors.get(list[0]!.meta.name)! }, { limit: 1 }))[0]
        assert.notEqual(after?.urn, list[0]!.meta.urn)
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "a filter that lets few rows through is scanned, not asked of the copy",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const { list, random } = dataSet(400, 7)
        const rare = resource("cld:r.1", "rare", random())
        const index = yield* open(file)
        yield* index.upsert([...list, rare])
        const query = { vector: vectors.get(rare.meta.name)! }
        // The copy alone loses the rare row (a test-only tamper, as above).
        yield* withSql(file, (sql) =>
          Effect.gen(function* () {
            if (SqliteClient.isSqliteClient(sql)) yield* sql.loadExtension(getLoadablePath())
            yield* sql`DELETE FROM ${sql(`noema_vectors_vec0_${dimensions}`)} WHERE urn = ${rare.meta.urn}`
            yield* sql`DELETE FROM noema_vectors_changes`
          })
        )
        // Unfiltered, the copy is asked (and misses it); by its type or prefix, the few rows are read.
        assert.notEqual((yield* index.search(query, { limit: 1 }))[0]?.urn, rare.meta.urn)
        assert.equal((yield* index.search(query, { type: "rare", limit: 1 }))[0]?.urn, rare.meta.urn)
        assert.equal((yield* index.search(query, { prefix: "cld:r.1", limit: 1 }))[0]?.urn, rare.meta.urn)
      }).pipe(Effect.scoped),
    60_000
  )

  it.effect(
    "with the copy, the connection reads the file through mmap; without it, as it was opened",
    () =>
      Effect.gen(function* () {
        const mmapOf = (sqliteVec: string | false | undefined) =>
          Effect.scoped(
            Effect.gen(function* () {
              const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: freshFile() }))
              yield* Effect.provideContext(
                VectorIndex.fromDatabase(embedder, sqliteVec === undefined ? {} : { sqliteVec }),
                context
              )
              const sql = Context.get(context, SqlClient.SqlClient)
              return (yield* sql<{ mmap_size: number }>`PRAGMA mmap_size`)[0]?.mmap_size
            })
          )
        assert.equal(yield* mmapOf(undefined), VectorCopy.mmapBytes)
        assert.equal(yield* mmapOf(false), 0)
      }),
    60_000
  )

  it.effect(
    "where sqlite-vec cannot load, scans with one warning and the same hits",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const log = capture()
        const { list, random } = dataSet(600, 4)
        const index = yield* open(file, { sqliteVec: path.join(directory, "no-such-vec0.so") }).pipe(
          Effect.provide(log.layer)
        )
        yield* index.upsert(list)
        const scan = yield* open(file, { sqliteVec: false })
        yield* sameAsScan(index, scan, searches(random, list)).pipe(Effect.provide(log.layer))
        assert.equal(log.lines.length, 1)
        assert.match(log.lines[0] ?? "", /^Warn .*reads every row.*could not be loaded.*no-such-vec0/)
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "read-only: searches a fresh copy; a stale one is scanned, with one warning, and nothing written",
    () =>
      Effect.gen(function* () {
        const file = freshFile()
        const { list, random } = dataSet(800, 5)
        yield* Effect.scoped(Effect.flatMap(open(file), (index) => index.upsert(list.slice(0, 700))))
        const scan = yield* open(file, { sqliteVec: false })
        const all = searches(random, list)
        const fresh = capture()
        yield* Effect.scoped(
          Effect.flatMap(open(file, { readonly: true }), (index) => sameAsScan(index, scan, all))
        ).pipe(Effect.provide(fresh.layer))
        assert.deepStrictEqual(fresh.lines, [])
        yield* scan.upsert(list.slice(700))
        const before = fs.readFileSync(file)
        const stale = capture()
        yield* Effect.scoped(
          Effect.flatMap(open(file, { readonly: true }), (index) => sameAsScan(index, scan, all))
        ).pipe(Effect.provide(stale.layer))
        assert.equal(stale.lines.length, 1)
        assert.match(stale.lines[0] ?? "", /^Warn .*behind the vectors and the database is read-only/)
        assert.isTrue(fs.readFileSync(file).equals(before))
      }).pipe(Effect.scoped),
    120_000
  )
})
