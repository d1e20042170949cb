import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import { withoutStamps } from "../src/ResourceStoreConformance.js"

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
