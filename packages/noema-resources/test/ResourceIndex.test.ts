import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Database } from "@noema/sql"
import { Effect, Layer, Stream } from "effect"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as LocalEmbedder from "../src/LocalEmbedder.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceEvents from "../src/ResourceEvents.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import * as SqlResourceStore from "../src/SqlResourceStore.js"
import * as VectorIndex from "../src/VectorIndex.js"

const owner = "cld:assistant.owner"
const reader = "cld:assistant.reader"

const setup = Effect.gen(function* () {
  const conversation = Resource.make("conversation", { name: "c" })
  const message = Resource.make("message", {
    name: "m",
    parent: conversation.meta.urn,
    role: "user",
    content: "hi"
  })
  const other = Resource.make("conversation", { name: "other" })
  const policy = yield* CedarPolicy.make(`
    permit (principal == Noema::Actor::"${owner}", action, resource in Noema::Resource::"${conversation.meta.urn}");
    permit (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource in Noema::Resource::"${conversation.meta.urn}");
  `)
  const store = MemoryResourceStore.make()
  yield* store.put(other)
  const index = ResourceIndex.make(store, policy)
  return { conversation, message, other, store, index }
})

describe("ResourceIndex", () => {
  it.effect("every get, put and delete is authorized for the actor; a deny leaves the store untouched", () =>
    Effect.gen(function* () {
      const { conversation, message, other, store, index } = yield* setup
      yield* index.put(owner, conversation)
      yield* index.put(owner, message)
      assert.deepEqual(yield* index.get(reader, message.meta.urn), message)
      assert.deepEqual(yield* index.findByPrefix(reader, conversation.meta.urn), [message])

      const denied = yield* Effect.flip(index.put(reader, { ...message, content: "changed" }))
      assert.equal(denied._tag, "AccessDeniedError")
      assert.match(denied.message, /cld:assistant.reader may not put/)
      assert.deepEqual(yield* store.get(message.meta.urn), message)

      assert.equal((yield* Effect.flip(index.delete(reader, message.meta.urn)))._tag, "AccessDeniedError")
      assert.equal((yield* Effect.flip(index.get(reader, other.meta.urn)))._tag, "AccessDeniedError")
      assert.equal(
        (yield* Effect.flip(index.getMany(reader, [message.meta.urn, other.meta.urn])))._tag,
        "AccessDeniedError"
      )
      assert.equal((yield* Effect.flip(index.put(owner, other)))._tag, "AccessDeniedError")

      assert.equal(yield* index.delete(owner, message.meta.urn), true)
      assert.deepEqual(yield* store.getMany([message.meta.urn]), [])
    })
  )

  it.effect("as a layer over a ResourceStore and a Policy", () =>
    Effect.gen(function* () {
      const index = yield* ResourceIndex.ResourceIndex
      const chunk = Resource.make("chunk", { name: "k", text: "text" })
      yield* index.put("cld:user.dev", chunk)
      assert.deepEqual(yield* index.get("cld:user.dev", chunk.meta.urn), chunk)
    }).pipe(
      Effect.provide(
        ResourceIndex.layer.pipe(Layer.provide(Layer.merge(MemoryResourceStore.layer, Policy.layerAllowAll)))
      )
    )
  )
})

describe("ResourceIndex.findReadable", () => {
  it.effect("returns what the actor may get and names what it may not, where findByPrefix refuses all", () =>
    Effect.gen(function* () {
      const conversation = Resource.make("conversation", { name: "c" })
      const [open, secret] = ["open", "secret"].map((name) =>
        Resource.make("message", { name, parent: conversation.meta.urn, role: "user", content: name })
      )
      const policy = yield* CedarPolicy.make(`
        permit (principal, action, resource);
        forbid (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource == Noema::Resource::"${secret!.meta.urn}");
      `)
      const index = ResourceIndex.make(MemoryResourceStore.make(), policy)
      for (const resource of [conversation, open!, secret!]) yield* index.put(owner, resource)
      assert.deepStrictEqual(yield* index.findReadable(owner, conversation.meta.urn), {
        resources: [open!, secret!],
        withheld: []
      })
      assert.deepStrictEqual(yield* index.findReadable(reader, conversation.meta.urn), {
        resources: [open!],
        withheld: [secret!.meta.urn]
      })
      assert.equal(
        (yield* Effect.flip(index.findByPrefix(reader, conversation.meta.urn)))._tag,
        "AccessDeniedError"
      )
      assert.equal(
        (yield* Effect.flip(index.findReadable(reader, secret!.meta.urn)))._tag,
        "AccessDeniedError"
      )
    })
  )
})

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-resources-index-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
let files = 0

/** A store and a vector index on one SQLite file, as the CLI makes them. */
const onSqlite = Effect.gen(function* () {
  const context = yield* Layer.build(
    Database.layer({ kind: "sqlite", filename: path.join(directory, `index-${files++}.db`) })
  )
  const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
  const vectors = yield* Effect.provideContext(VectorIndex.fromDatabase(LocalEmbedder.make()), context)
  return { store, vectors }
})

describe("ResourceIndex.filterReadable", () => {
  it.effect("decides and publishes over resources the caller holds as findReadable does over the store", () =>
    Effect.gen(function* () {
      const conversation = Resource.make("conversation", { name: "c" })
      const [open, secret] = ["open", "secret"].map((name) =>
        Resource.make("message", { name, parent: conversation.meta.urn, role: "user", content: name })
      )
      const policy = yield* CedarPolicy.make(`
        permit (principal, action, resource);
        forbid (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource == Noema::Resource::"${secret!.meta.urn}");
      `)
      const events = yield* ResourceEvents.makeMemory(policy)
      const heard = yield* events.subscribe(owner, { detailType: "RESOURCE_GET" })
      const index = ResourceIndex.make(MemoryResourceStore.make(), policy, { events })
      yield* index.putMany(owner, [conversation, open!, secret!])
      const held = [secret!, open!]
      for (const actor of [owner, reader])
        assert.deepStrictEqual(
          yield* index.filterReadable(actor, conversation.meta.urn, held),
          yield* index.findReadable(actor, conversation.meta.urn)
        )
      const denied = yield* Effect.flip(index.filterReadable(reader, secret!.meta.urn, []))
      assert.equal(denied._tag, "AccessDeniedError")
      const published = yield* heard.pipe(Stream.take(4), Stream.runCollect)
      const [heldByOwner, foundByOwner, heldByReader, foundByReader] = Array.from(published, (event) => [
        event.source,
        event.resources
      ])
      assert.deepStrictEqual(heldByOwner, foundByOwner)
      assert.deepStrictEqual(heldByReader, foundByReader)
      assert.deepStrictEqual(heldByReader, [reader, [open!.meta.urn]])
    }).pipe(Effect.scoped)
  )
})

describe("ResourceIndex decisions", () => {
  /** An engine that allows everything but `denied`, counting the resources it is asked about. */
  const counting = (revision?: () => string) => {
    const asked: Array<string> = []
    const engine = Policy.failClosed(
      "counting",
      (request) =>
        Effect.sync(() => {
          asked.push(...request.resources.map((urn) => `${request.action} ${urn}`))
          return request.resources.some((urn) => urn.endsWith(".denied"))
            ? Policy.deny("counting: denied")
            : Policy.allow("counting: allowed")
        }),
      revision
    )
    return { asked, engine }
  }
  const conversation = Resource.make("conversation", { name: "c" })
  const [first, second] = ["first", "second"].map((name) =>
    Resource.make("message", { name, parent: conversation.meta.urn, role: "user", content: name })
  )

  it.effect("what the engine allowed is not asked again while its revision stays; denials always are", () =>
    Effect.gen(function* () {
      let revision = "1"
      const { asked, engine } = counting(() => revision)
      const index = ResourceIndex.make(MemoryResourceStore.make(), engine)
      yield* index.putMany(owner, [conversation, first!, second!])
      asked.length = 0
      // Allowed as a whole: each resource is remembered as allowed.
      yield* index.findReadable(owner, conversation.meta.urn)
      yield* index.get(owner, first!.meta.urn)
      yield* index.getMany(owner, [second!.meta.urn, first!.meta.urn])
      yield* index.findReadable(owner, conversation.meta.urn)
      assert.deepStrictEqual(asked, [
        `get ${conversation.meta.urn}`,
        `get ${first!.meta.urn}`,
        `get ${second!.meta.urn}`
      ])
      // Another actor, another action: decided on their own.
      yield* index.get(reader, first!.meta.urn)
      yield* index.delete(owner, second!.meta.urn)
      assert.strictEqual(asked.length, 5)
      // A denial carries the engine's reasons, every time.
      const hidden = "cld:conversation.denied"
      for (let i = 0; i < 2; i++) {
        const refused = yield* Effect.flip(index.get(owner, hidden))
        assert.match(refused.message, /counting: denied/)
      }
      assert.strictEqual(asked.length, 7)
      // A request about some resources allowed before: only the others are asked about.
      const third = Resource.make("message", {
        name: "third",
        parent: conversation.meta.urn,
        role: "user",
        content: "third"
      })
      yield* index.put(owner, third)
      yield* index.findReadable(owner, conversation.meta.urn)
      assert.deepStrictEqual(asked.splice(7), [`put ${third.meta.urn}`, `get ${third.meta.urn}`])
      // A new revision (the policies changed): nothing allowed before is taken as allowed.
      revision = "2"
      yield* index.get(owner, first!.meta.urn)
      assert.deepStrictEqual(asked.slice(7), [`get ${first!.meta.urn}`])
    })
  )

  it.effect("an engine without a revision is asked every time", () =>
    Effect.gen(function* () {
      const { asked, engine } = counting()
      const index = ResourceIndex.make(MemoryResourceStore.make(), engine)
      yield* index.put(owner, conversation)
      for (let i = 0; i < 3; i++) yield* index.get(owner, conversation.meta.urn)
      assert.strictEqual(asked.length, 4)
    })
  )

  it.effect("a policy file's edit is followed at the next access", () =>
    Effect.gen(function* () {
      const file = path.join(directory, `policy-${files++}.cedar`)
      const grant = (action: string) =>
        `permit (principal, action == Noema::Action::"put", resource);\npermit (principal == Noema::Actor::"${reader}", action == Noema::Action::"${action}", resource);\n`
      fs.writeFileSync(file, grant("get"))
      const index = ResourceIndex.make(MemoryResourceStore.make(), yield* CedarPolicy.fromFile(file))
      yield* index.put(owner, conversation)
      assert.deepStrictEqual(yield* index.get(reader, conversation.meta.urn), conversation)
      fs.writeFileSync(file, `// reading taken back\n${grant("delete")}`)
      assert.equal((yield* Effect.flip(index.get(reader, conversation.meta.urn)))._tag, "AccessDeniedError")
    })
  )
})

describe("ResourceIndex writes", () => {
  it.effect(
    "on a SQL store, a put and its vector are one transaction: a failed vector write stores nothing",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { store, vectors } = yield* onSqlite
          const failing: VectorIndex.Service = {
            ...vectors,
            prepareUpsert: (resources) =>
              Effect.map(vectors.prepareUpsert(resources), (write) =>
                Effect.andThen(write, Effect.fail(new VectorIndex.VectorIndexError({ message: "disk full" })))
              )
          }
          const index = ResourceIndex.make(store, yield* Policy.allowAll, { vectors: failing })
          const conversation = Resource.make("conversation", { name: "kitchen" })
          const refused = yield* Effect.flip(index.put(owner, conversation))
          assert.match(refused.message, /disk full/)
          assert.deepStrictEqual(yield* store.getMany([conversation.meta.urn]), [])
          assert.deepStrictEqual(yield* vectors.search({ text: "kitchen" }), [])
          // The same index with a working vector index stores both.
          yield* ResourceIndex.make(store, yield* Policy.allowAll, { vectors }).put(owner, conversation)
          assert.deepStrictEqual(yield* store.getMany([conversation.meta.urn]), [conversation])
          assert.deepStrictEqual(
            (yield* vectors.search({ text: "kitchen" })).map((hit) => hit.urn),
            [conversation.meta.urn]
          )
        })
      )
  )

  it.effect(
    "putMany stores all or none, as one authorized write, and publishes a RESOURCE_PUT each, in order",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { store, vectors } = yield* onSqlite
          const conversation = Resource.make("conversation", { name: "c" })
          const [first, second] = ["first", "second"].map((name) =>
            Resource.make("message", { name, parent: conversation.meta.urn, role: "user", content: name })
          )
          const policy = yield* CedarPolicy.make(`
          permit (principal == Noema::Actor::"${owner}", action, resource);
          permit (principal == Noema::Actor::"${reader}", action, resource == Noema::Resource::"${first!.meta.urn}");
        `)
          const events = yield* ResourceEvents.makeMemory(policy)
          const heard = yield* events.subscribe(owner, { detailType: "RESOURCE_PUT" })
          const index = ResourceIndex.make(store, policy, { events, vectors })
          const denied = yield* Effect.flip(index.putMany(reader, [first!, second!]))
          assert.equal(denied._tag, "AccessDeniedError")
          assert.deepStrictEqual(yield* store.getMany([first!.meta.urn, second!.meta.urn]), [])

          yield* index.putMany(owner, [conversation, first!, second!])
          assert.deepStrictEqual(yield* store.findByPrefix(conversation.meta.urn), [first!, second!])
          assert.deepStrictEqual(
            (yield* vectors.search({ text: "second" }, { prefix: conversation.meta.urn, limit: 1 })).map(
              (hit) => hit.urn
            ),
            [second!.meta.urn]
          )
          const published = yield* heard.pipe(Stream.take(3), Stream.runCollect)
          assert.deepStrictEqual(
            Array.from(published, (event) => event.resources),
            [[conversation.meta.urn], [first!.meta.urn], [second!.meta.urn]]
          )
        })
      )
  )
})
