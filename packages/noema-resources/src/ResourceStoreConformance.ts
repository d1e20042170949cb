/**
 * ResourceStoreConformance: the behaviour every resource store must show.
 *
 * ```ts
 * for (const testCase of ResourceStoreConformance.cases) {
 *   it.effect(testCase.name, () => testCase.run(Effect.sync(MemoryResourceStore.make)))
 * }
 * ```
 */
import assert from "node:assert/strict"
import { TokenCounter } from "@noema/core"
import { Clock, Effect, type Scope } from "effect"
import * as Resource from "./Resource.js"
import type { Service } from "./ResourceStore.js"

export type MakeStore = Effect.Effect<Service, unknown, Scope.Scope>

export interface Case {
  readonly name: string
  readonly run: (make: MakeStore) => Effect.Effect<void, unknown, Scope.Scope>
}

/** A conversation with two messages, a task under the first and a subtask under that. */
export const tree = () => {
  const conversation = Resource.make("conversation", {
    name: "c1",
    title: "Planning",
    purpose: "plan a trip"
  })
  const m1 = Resource.make("message", {
    name: "m1",
    parent: conversation.meta.urn,
    role: "user",
    content: "hi"
  })
  const m2 = Resource.make("message", {
    name: "m2",
    parent: conversation.meta.urn,
    role: "assistant",
    content: "hello"
  })
  const task = Resource.make("task", { name: "t1", parent: m1.meta.urn, status: "pending" })
  const subtask = Resource.make("task", { name: "t2", parent: task.meta.urn, status: "done", output: "ok" })
  const other = Resource.make("conversation", { name: "c2" })
  const otherMessage = Resource.make("message", {
    name: "m1",
    parent: other.meta.urn,
    role: "user",
    content: "x"
  })
  return { conversation, m1, m2, task, subtask, other, otherMessage }
}

/** A resource without what the store sets on put (`meta.tokens`, `meta.created`). */
export const withoutStamps = <R extends Resource.Resource>(resource: R): R => {
  const { tokens: _tokens, created: _created, ...meta } = resource.meta
  return { ...resource, meta } as R
}

/** `effect` with the clock standing at `millis` (epoch ms): a put's time, whatever clock the test runs on. */
const at = <A, E, R>(millis: number, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Clock.clockWith(Effect.succeed), (clock) =>
    Effect.provideService(effect, Clock.Clock, {
      ...clock,
      currentTimeMillisUnsafe: () => millis,
      currentTimeMillis: Effect.succeed(millis),
      currentTimeNanosUnsafe: () => BigInt(millis) * 1_000_000n,
      currentTimeNanos: Effect.succeed(BigInt(millis) * 1_000_000n)
    })
  )

const isoTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

const urns = (resources: ReadonlyArray<Resource.Resource>) => resources.map((r) => r.meta.urn)
const sorted = (values: Array<string>) => [...values].sort()

const fill = (store: Service) =>
  Effect.gen(function* () {
    const t = tree()
    for (const r of Object.values(t)) yield* store.put(r)
    return t
  })

export const cases: ReadonlyArray<Case> = [
  {
    name: "put then get rebuilds the resource as its own kind",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const { task, m1 } = yield* fill(store)
        const got = yield* store.get(task.meta.urn)
        assert.deepEqual(withoutStamps(got), task)
        assert.equal(got.meta.type, "task")
        assert.deepEqual(withoutStamps(yield* store.get(m1.meta.urn)), m1)
      })
  },
  {
    name: "get of a missing URN fails with ResourceNotFoundError",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const error = yield* Effect.flip(store.get("cld:conversation.nothere"))
        assert.equal(error._tag, "ResourceNotFoundError")
      })
  },
  {
    name: "an invalid URN is refused with a clear error",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        for (const bad of ["conversation.x", "cld:", "cld:conversation", "cld:a.b//c.d", "cld:a.b/../c.d"]) {
          const error = yield* Effect.flip(store.get(bad))
          assert.equal(error._tag, "ResourceStoreError", bad)
          assert.match(error.message, /invalid URN/)
        }
        const prefixError = yield* Effect.flip(store.findByPrefix("nope"))
        assert.match(prefixError.message, /invalid URN/)
      })
  },
  {
    name: "put replaces; a resource that fails its schema is refused and nothing is stored",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const { task } = yield* fill(store)
        const updated = { ...task, status: "done" as const }
        yield* store.put(updated)
        assert.deepEqual(withoutStamps(yield* store.get(task.meta.urn)), updated)
        const broken = { ...task, status: "unknown" } as unknown as Resource.Resource
        const error = yield* Effect.flip(store.put(broken))
        assert.equal(error._tag, "ResourceStoreError")
        assert.deepEqual(withoutStamps(yield* store.get(task.meta.urn)), updated)
        const misfiled = { ...task, meta: { ...task.meta, urn: "cld:task.0000000000000000" } }
        yield* Effect.flip(store.put(misfiled))
        assert.equal((yield* store.getMany(["cld:task.0000000000000000"])).length, 0)
      })
  },
  {
    name: "getMany returns existing resources in the order asked",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = yield* fill(store)
        const got = yield* store.getMany([
          t.subtask.meta.urn,
          "cld:conversation.missing",
          t.conversation.meta.urn
        ])
        assert.deepEqual(urns(got), [t.subtask.meta.urn, t.conversation.meta.urn])
        assert.deepEqual(yield* store.getMany([]), [])
      })
  },
  {
    name: "findByPrefix returns all descendants, in URN order, and nothing else",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = yield* fill(store)
        const below = yield* store.findByPrefix(t.conversation.meta.urn)
        assert.deepEqual(
          urns(below),
          sorted([t.m1.meta.urn, t.m2.meta.urn, t.task.meta.urn, t.subtask.meta.urn])
        )
        assert.deepEqual(
          urns(yield* store.findByPrefix(t.m1.meta.urn)),
          sorted([t.task.meta.urn, t.subtask.meta.urn])
        )
        assert.deepEqual(urns(yield* store.findByPrefix(t.subtask.meta.urn)), [])
        assert.deepEqual(urns(yield* store.findByPrefix(t.other.meta.urn)), [t.otherMessage.meta.urn])
      })
  },
  {
    name: "findByPrefix does not match a sibling whose id starts with the same characters",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const a = Resource.decode({ meta: Resource.makeMeta({ name: "a", type: "conversation" }) })
        const idA = a.meta.urn
        const longer = Resource.make("message", { name: "x", parent: idA, role: "user", content: "c" })
        const siblingUrn = `${idA}0`
        yield* store.put(a)
        yield* store.put(longer)
        const sibling = {
          meta: { urn: siblingUrn, name: "s", type: "conversation", hash: `${a.meta.hash}0` }
        }
        yield* store.put(Resource.decode(sibling))
        yield* store.put(
          Resource.make("message", { name: "y", parent: siblingUrn, role: "user", content: "d" })
        )
        assert.deepEqual(urns(yield* store.findByPrefix(idA)), [longer.meta.urn])
      })
  },
  {
    name: "findByType returns every resource of a type",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = yield* fill(store)
        assert.deepEqual(urns(yield* store.findByType("task")), sorted([t.task.meta.urn, t.subtask.meta.urn]))
        assert.deepEqual(
          urns(yield* store.findByType("conversation")),
          sorted([t.conversation.meta.urn, t.other.meta.urn])
        )
        assert.deepEqual(yield* store.findByType("tool"), [])
      })
  },
  {
    name: "delete removes one resource and keeps its descendants",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = yield* fill(store)
        assert.equal(yield* store.delete(t.task.meta.urn), true)
        assert.equal(yield* store.delete(t.task.meta.urn), false)
        assert.equal((yield* Effect.flip(store.get(t.task.meta.urn)))._tag, "ResourceNotFoundError")
        assert.deepEqual(urns(yield* store.findByPrefix(t.m1.meta.urn)), [t.subtask.meta.urn])
        assert.deepEqual(urns(yield* store.findByType("task")), [t.subtask.meta.urn])
      })
  },
  {
    name: "put counts meta.tokens from what the resource says, again on every put",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const { m1 } = yield* fill(store)
        const counted = (yield* store.get(m1.meta.urn)).meta.tokens
        assert.equal(counted, TokenCounter.estimate.countText(Resource.textOf(m1)))
        const longer = { ...m1, content: "a much longer message than before, with many more words in it" }
        yield* store.put({ ...longer, meta: { ...longer.meta, tokens: 1 } })
        const recounted = (yield* store.get(m1.meta.urn)).meta.tokens
        assert.equal(recounted, TokenCounter.estimate.countText(Resource.textOf(longer)))
        assert.ok(recounted! > counted!)
      })
  },
  {
    name: "put sets meta.created (ISO-8601) on the first put of a URN and keeps it on every later one",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const { task } = yield* fill(store)
        const first = Resource.make("task", { name: "timed", parent: task.meta.urn, status: "pending" })
        yield* at(Date.UTC(2026, 10, 3, 9, 30), store.put(first))
        const created = (yield* store.get(first.meta.urn)).meta.created
        assert.equal(created, "2026-11-03T09:30:00.000Z")
        assert.match((yield* store.get(task.meta.urn)).meta.created ?? "", isoTime)
        yield* at(Date.UTC(2026, 10, 4), store.put({ ...first, status: "done" }))
        assert.equal((yield* store.get(first.meta.urn)).meta.created, created)
      })
  },
  {
    name: "a put whose parent does not exist is refused and writes nothing",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const orphan = Resource.make("task", { name: "t", parent: "cld:message.nothere", status: "pending" })
        const error = yield* Effect.flip(store.put(orphan))
        assert.equal(error._tag, "ResourceStoreError")
        assert.match(error.message, /parent cld:message\.nothere does not exist/)
        assert.deepEqual(yield* store.getMany([orphan.meta.urn]), [])
        assert.deepEqual(yield* store.findByType("task"), [])
      })
  },
  {
    name: "a name is a resource's own among its parent's resources of its type: another of that name is refused",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const { conversation, m1 } = yield* fill(store)
        // Complete meta with a hash of its own, and the name of a conversation that exists.
        const twin = Resource.decode({
          meta: {
            urn: "cld:conversation.twin",
            name: conversation.meta.name,
            type: "conversation",
            hash: "twin"
          }
        })
        const error = yield* Effect.flip(store.put(twin))
        assert.match(
          error.message,
          /the name "c1" is taken: cld:conversation\.[0-9a-f]{16} is the conversation of that name/
        )
        assert.deepEqual(yield* store.getMany([twin.meta.urn]), [])
        // The same name of another type, or under another parent, is another name.
        const message = Resource.make("message", {
          name: "c1",
          parent: conversation.meta.urn,
          role: "user",
          content: "x"
        })
        yield* store.put(message)
        const elsewhere = Resource.decode({
          meta: {
            urn: `${m1.meta.urn}/message.x1`,
            name: "m1",
            type: "message",
            parent: m1.meta.urn,
            hash: "x1"
          },
          role: "user",
          content: "y"
        })
        yield* store.put(elsewhere)
        assert.equal((yield* store.getMany([message.meta.urn, elsewhere.meta.urn])).length, 2)
      })
  },
  {
    name: "putMany puts in order as puts one after another would, and writes nothing when one is refused",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = tree()
        // Parents before their children in one batch; the task twice: the second replaces the first.
        const done = { ...t.task, status: "done" } as Resource.Resource
        const stored = yield* at(
          Date.UTC(2026, 10, 5),
          store.putMany([t.conversation, t.m1, t.task, t.subtask, done])
        )
        assert.deepEqual(urns(stored), urns([t.conversation, t.m1, t.task, t.subtask, t.task]))
        assert.deepEqual(withoutStamps(yield* store.get(t.task.meta.urn)), done)
        assert.equal((yield* store.get(t.task.meta.urn)).meta.created, "2026-11-05T00:00:00.000Z")
        assert.equal(stored[4]?.meta.tokens, TokenCounter.estimate.countText(Resource.textOf(done)))
        // A later one of the same name (the first holds it), or an orphan: nothing of the batch is written.
        const fresh = Resource.make("message", {
          name: "m9",
          parent: t.conversation.meta.urn,
          role: "user",
          content: "a"
        })
        const twin = Resource.decode({
          meta: {
            urn: `${t.conversation.meta.urn}/message.twin`,
            name: "m9",
            type: "message",
            parent: t.conversation.meta.urn,
            hash: "twin"
          },
          role: "user",
          content: "b"
        })
        const taken = yield* Effect.flip(store.putMany([fresh, twin]))
        assert.match(taken.message, /the name "m9" is taken/)
        const orphan = Resource.make("task", { name: "t", parent: "cld:message.nothere", status: "pending" })
        const error = yield* Effect.flip(store.putMany([fresh, orphan]))
        assert.match(error.message, /parent cld:message\.nothere does not exist/)
        assert.deepEqual(yield* store.getMany([fresh.meta.urn, twin.meta.urn, orphan.meta.urn]), [])
        assert.deepEqual(yield* store.putMany([]), [])
      })
  },
  {
    name: "putMany of hundreds stores every one, the last of each URN (a SQL store writes them in several statements)",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = tree()
        yield* store.put(t.conversation)
        const messages = Array.from({ length: 450 }, (_, i) =>
          Resource.make("message", {
            name: `m${i % 420}`,
            parent: t.conversation.meta.urn,
            role: "user",
            content: `message ${i}`
          })
        )
        assert.equal((yield* store.putMany(messages)).length, 450)
        const found = yield* store.findByPrefix(t.conversation.meta.urn)
        assert.equal(found.length, 420)
        const seven = found.find((resource) => resource.meta.name === "m7")
        assert.equal(seven !== undefined && "content" in seven ? seven.content : undefined, "message 427")
      })
  },
  {
    name: "what a reader changes in a resource it read (or in one it put) never changes what the store holds",
    run: (make) =>
      Effect.gen(function* () {
        const store = yield* make
        const t = yield* fill(store)
        // A store hands out copies, or one frozen resource: a change fails or stays the reader's.
        const tamper = (resource: Resource.Resource) => {
          try {
            ;(resource as { status?: string }).status = "tampered"
            ;(resource.meta as { name: string }).name = "tampered"
          } catch {}
        }
        tamper(yield* store.get(t.task.meta.urn))
        for (const found of yield* store.getMany([t.task.meta.urn])) tamper(found)
        for (const found of yield* store.findByPrefix(t.m1.meta.urn)) tamper(found)
        for (const found of yield* store.findByType("task")) tamper(found)
        const put = Resource.make("task", { name: "t3", parent: t.m1.meta.urn, status: "pending" })
        yield* store.put(put)
        tamper(put)
        const untouched = tree()
        assert.deepEqual(withoutStamps(yield* store.get(t.task.meta.urn)), untouched.task)
        const expected = [
          untouched.task,
          untouched.subtask,
          Resource.make("task", { name: "t3", parent: t.m1.meta.urn, status: "pending" })
        ].sort((a, b) => (a.meta.urn < b.meta.urn ? -1 : 1))
        assert.deepEqual((yield* store.findByPrefix(t.m1.meta.urn)).map(withoutStamps), expected)
      })
  }
]
