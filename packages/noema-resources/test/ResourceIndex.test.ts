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
import { withoutStamps } from "../src/ResourceStoreConformance.js"
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
      assert.deepEqual(withoutStamps(yield* index.get(reader, message.meta.urn)), message)
      assert.deepEqual((yield* index.findByPrefix(reader, conversation.meta.urn)).map(withoutStamps), [
        message
      ])

      const denied = yield* Effect.flip(index.put(reader, { ...message, content: "changed" }))
      assert.equal(denied._tag, "AccessDeniedError")
      assert.match(denied.message, /cld:assistant.reader may not put/)
      assert.deepEqual(withoutStamps(yield* store.get(message.meta.urn)), message)

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
      assert.deepEqual(withoutStamps(yield* index.get("cld:user.dev", chunk.meta.urn)), chunk)
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
      const readable = (actor: string) =>
        Effect.map(index.findReadable(actor, conversation.meta.urn), ({ resources, withheld }) => ({
          resources: resources.map(withoutStamps),
          withheld
        }))
      assert.deepStrictEqual(yield* readable(owner), {
        resources: [open!, secret!],
        withheld: []
      })
      assert.deepStrictEqual(yield* readable(reader), {
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

describe("ResourceIndex.resolve: a URN may name its resources", () => {
  const setup = Effect.gen(function* () {
    const index = ResourceIndex.make(MemoryResourceStore.make(), yield* Policy.allowAll)
    const analyst = Resource.make("assistant", { name: "analyst", purpose: "analyse numbers" })
    const conversation = Resource.make("conversation", { name: "c1" })
    const message = Resource.make("message", {
      name: "m1",
      parent: conversation.meta.urn,
      role: "user",
      content: "hi"
    })
    for (const resource of [analyst, conversation, message]) yield* index.put(owner, resource)
    return { index, analyst, conversation, message }
  })

  it.effect("an element's id may be the resource's name, at any depth; a URN resolves to itself", () =>
    Effect.gen(function* () {
      const { index, analyst, conversation, message } = yield* setup
      assert.equal(yield* index.resolve(owner, "cld:assistant.analyst"), analyst.meta.urn)
      assert.equal(yield* index.resolve(owner, "cld:conversation.c1/message.m1"), message.meta.urn)
      assert.equal(yield* index.resolve(owner, `${conversation.meta.urn}/message.m1`), message.meta.urn)
      assert.equal(yield* index.resolve(owner, message.meta.urn), message.meta.urn)
      // Nothing of that name: the URN as written (a get then says it is not there).
      assert.equal(yield* index.resolve(owner, "cld:assistant.nobody"), "cld:assistant.nobody")
    })
  )

  it.effect("an id that is one resource's and another's name is ambiguous, said with both URNs", () =>
    Effect.gen(function* () {
      const { index, analyst } = yield* setup
      const literal = Resource.decode({
        meta: { urn: "cld:assistant.analyst", name: "other", type: "assistant", hash: "analyst" }
      })
      yield* index.put(owner, literal)
      const error = yield* Effect.flip(index.resolve(owner, "cld:assistant.analyst"))
      assert.equal(error._tag, "AmbiguousNameError")
      assert.deepEqual((error as ResourceIndex.AmbiguousNameError).candidates, [
        "cld:assistant.analyst",
        analyst.meta.urn
      ])
    })
  )

  it.effect("a name the actor may not get is not resolved", () =>
    Effect.gen(function* () {
      const analyst = Resource.make("assistant", { name: "analyst" })
      const policy = yield* CedarPolicy.make(`
        permit (principal, action, resource);
        forbid (principal == Noema::Actor::"${reader}", action, resource == Noema::Resource::"${analyst.meta.urn}");
      `)
      const index = ResourceIndex.make(MemoryResourceStore.make(), policy)
      yield* index.put(owner, analyst)
      assert.equal(yield* index.resolve(owner, "cld:assistant.analyst"), analyst.meta.urn)
      assert.equal(yield* index.resolve(reader, "cld:assistant.analyst"), "cld:assistant.analyst")
    })
  )
})

describe("ResourceIndex.findReadableByType", () => {
  it.effect("every resource of a type the actor may get, and the URNs of the others", () =>
    Effect.gen(function* () {
      const [open, secret] = ["open", "secret"].map((name) => Resource.make("assistant", { name }))
      const policy = yield* CedarPolicy.make(`
        permit (principal, action, resource);
        forbid (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource == Noema::Resource::"${secret!.meta.urn}");
      `)
      const index = ResourceIndex.make(MemoryResourceStore.make(), policy)
      for (const resource of [open!, secret!, Resource.make("conversation", { name: "c" })])
        yield* index.put(owner, resource)
      const mine = yield* index.findReadableByType(owner, "assistant")
      assert.deepEqual(
        mine.resources.map((r) => r.meta.urn).sort(),
        [open!.meta.urn, secret!.meta.urn].sort()
      )
      const theirs = yield* index.findReadableByType(reader, "assistant")
      assert.deepEqual(
        theirs.resources.map((r) => r.meta.urn),
        [open!.meta.urn]
      )
      assert.deepEqual(theirs.withheld, [secret!.meta.urn])
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
      const store = MemoryResourceStore.make()
      const index = ResourceIndex.make(store, policy, { events })
      yield* index.putMany(owner, [conversation, open!, secret!])
      // As the caller holds them: as stored (tokens, created), in another order.
      const held = yield* store.getMany([secret!.meta.urn, open!.meta.urn])
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
      // Decided when it runs, not when it is built: an access built before an edit asks anew after it.
      const built = index.get(owner, first!.meta.urn)
      revision = "3"
      yield* built
      assert.deepStrictEqual(asked.slice(7), [`get ${first!.meta.urn}`, `get ${first!.meta.urn}`])
    })
  )

  it.effect(
    "indexes and event subscribers on one engine share what it allowed: one decision per access",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { asked, engine } = counting(() => "1")
          const events = yield* ResourceEvents.makeMemory(engine)
          const store = MemoryResourceStore.make()
          const index = ResourceIndex.make(store, engine, { events })
          yield* index.put(owner, conversation)
          const heard = yield* events.subscribe(reader, { prefix: conversation.meta.urn })
          yield* index.put(owner, first!)
          // The subscriber was told of the message: the engine decided `reader` may get it.
          const delivered = yield* Stream.runHead(heard)
          assert.deepStrictEqual(delivered._tag === "Some" ? delivered.value.resources : [], [
            first!.meta.urn
          ])
          assert.include(asked, `get ${first!.meta.urn}`)
          asked.length = 0
          // The same access through this index, and through another one on the same engine.
          yield* index.get(reader, first!.meta.urn)
          yield* ResourceIndex.make(store, engine).get(reader, first!.meta.urn)
          assert.deepStrictEqual(asked, [])
          assert.strictEqual(Policy.remembering(engine), Policy.remembering(Policy.remembering(engine)))
        })
      )
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
      assert.deepStrictEqual(withoutStamps(yield* index.get(reader, conversation.meta.urn)), conversation)
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
          assert.deepStrictEqual((yield* store.getMany([conversation.meta.urn])).map(withoutStamps), [
            conversation
          ])
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
          assert.deepStrictEqual((yield* store.findByPrefix(conversation.meta.urn)).map(withoutStamps), [
            first!,
            second!
          ])
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
