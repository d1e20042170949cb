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
