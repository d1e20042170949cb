import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Context, Deferred, Effect, Exit, Fiber, Layer, Scope, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceEvents from "../src/ResourceEvents.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import * as ResourceStore from "../src/ResourceStore.js"

const conversation = "cld:conversation.c1"
const isoTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const put = (resources: ReadonlyArray<string>, source = "cld:assistant.a"): ResourceEvents.Publish => ({
  source,
  detailType: "RESOURCE_PUT",
  resources
})

/** Who subscribes in these tests: the policy allows everyone everything, except where a test says. */
const listener = "cld:assistant.listener"
const memory = Effect.flatMap(Policy.allowAll, ResourceEvents.makeMemory)

/** The first `count` events of the stream. */
const collect = <A, E>(stream: Stream.Stream<A, E>, count: number) =>
  Stream.runCollect(Stream.take(stream, count))

describe("ResourceEvents (in-process)", () => {
  it.effect("filters by source, detail type and URN prefix (the URN itself or under it, not a sibling)", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const events = yield* memory
        const byPrefix = yield* events.subscribe(listener, { prefix: conversation })
        const bySource = yield* events.subscribe(listener, { source: ["cld:assistant.b"] })
        const deletes = yield* events.subscribe(listener, { detailType: "RESOURCE_DELETE" })
        const everything = yield* events.subscribe(listener)
        const published = [
          yield* events.publish(put([conversation])),
          yield* events.publish(put(["cld:conversation.c10"])), // a sibling whose name starts the same
          yield* events.publish(put([`${conversation}/message.m1`], "cld:assistant.b")),
          yield* events.publish({
            source: "cld:assistant.b",
            detailType: "RESOURCE_DELETE",
            resources: ["cld:task.t"]
          })
        ]
        const ids = (list: ReadonlyArray<ResourceEvents.ResourceEvent>) => list.map((event) => event.id)
        assert.deepEqual(ids(yield* collect(byPrefix, 2)), ids([published[0]!, published[2]!]))
        assert.deepEqual(ids(yield* collect(bySource, 2)), ids([published[2]!, published[3]!]))
        assert.deepEqual(ids(yield* collect(deletes, 1)), ids([published[3]!]))
        assert.deepEqual(ids(yield* collect(everything, 4)), ids(published))
        assert.equal(new Set(ids(published)).size, 4)
        assert.ok(published.every((event) => isoTime.test(event.time)))
      })
    )
  )

  it.effect(
    "an event's time is ISO-8601 in UTC: the clock's, or the one given (epoch milliseconds said as ISO)",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const events = yield* memory
          yield* TestClock.setTime(Date.UTC(2026, 10, 3, 9, 30))
          assert.equal((yield* events.publish(put([conversation]))).time, "2026-11-03T09:30:00.000Z")
          const given = yield* events.publish({ ...put([conversation]), time: Date.UTC(2025, 0, 2) })
          assert.equal(given.time, "2025-01-02T00:00:00.000Z")
          const iso = yield* events.publish({ ...put([conversation]), time: "2025-01-02T03:04:05.006Z" })
          assert.equal(iso.time, "2025-01-02T03:04:05.006Z")
          const bad = yield* Effect.flip(events.publish({ ...put([conversation]), time: "yesterday" }))
          assert.match(bad.message, /time must be ISO-8601/)
        })
      )
  )

  it.effect("refuses bad events and filters with a clear error", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const events = yield* memory
        const refusals = [
          yield* Effect.flip(events.publish(put(["not a urn"]))),
          yield* Effect.flip(events.publish(put([]))),
          yield* Effect.flip(
            events.publish({ ...put([conversation]), detailType: "RESOURCE_MOVE" as never })
          ),
          yield* Effect.flip(events.publish(put([conversation], ""))),
          yield* Effect.flip(events.subscribe(listener, { prefix: "nope" })),
          yield* Effect.flip(events.subscribe(listener, {}, { buffer: 0 })),
          yield* Effect.flip(events.subscribe(listener, {}, { overflow: "block" as never })),
          yield* Effect.flip(events.subscribe("listener"))
        ]
        for (const refusal of refusals) {
          assert.equal(refusal._tag, "ResourceEventsError")
          assert.ok(!refusal.message.includes("\n"), refusal.message)
        }
        assert.match(refusals[0]!.message, /not a urn|URN/i)
        assert.match(refusals[2]!.message, /RESOURCE_MOVE/)
        assert.match(refusals[7]!.message, /subscriber: invalid URN "listener"/)
      })
    )
  )

  it.effect(
    "an event whose decisions are known waits behind one still being decided: every subscriber hears them in publishing order",
    () =>
      Effect.gen(function* () {
        const slow = `${conversation}/message.slow`
        const known = `${conversation}/message.known`
        const asked = yield* Deferred.make<void>()
        const answer = yield* Deferred.make<void>()
        // Remembers allows (a revision), and takes its time over `slow` until told to answer.
        const engine: Policy.Service = {
          name: "slow about one URN",
          revision: () => "1",
          authorize: (request) =>
            request.resources.includes(slow)
              ? Effect.andThen(
                  Deferred.succeed(asked, undefined),
                  Effect.as(Deferred.await(answer), Policy.allow())
                )
              : Effect.succeed(Policy.allow())
        }
        const events = yield* ResourceEvents.makeMemory(engine)
        const stream = yield* events.subscribe(listener, { prefix: conversation })
        // `known` decided for the listener once: from then on its events need no decision.
        yield* events.publish(put([known]))
        const publishing = yield* Effect.forkChild(events.publish(put([slow])))
        yield* Deferred.await(asked)
        const publishedSecond = yield* Effect.forkChild(events.publish(put([known])))
        // The second publisher runs as far as it can (to its turn) before the first is answered.
        for (let turn = 0; turn < 10; turn++) yield* Effect.yieldNow
        yield* Deferred.succeed(answer, undefined)
        yield* Fiber.join(publishing)
        yield* Fiber.join(publishedSecond)
        const heard = yield* collect(stream, 3)
        assert.deepStrictEqual(
          heard.map((event) => event.resources),
          [[known], [slow], [known]]
        )
      }).pipe(Effect.scoped)
  )

  it.effect(
    "a waiting subscriber woken by an event hears, in one batch, those published before it runs",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const events = yield* memory
          const pull = yield* Stream.toPull(yield* events.subscribe(listener))
          const waiting = yield* Effect.forkChild(pull)
          // Let the pull start waiting in its mailbox.
          for (let i = 0; i < 10; i++) yield* Effect.yieldNow
          // Published back to back, with no yield between them: the first wakes the subscriber.
          const first = yield* events.publish(put([conversation]))
          const second = yield* events.publish(put([`${conversation}/message.m1`]))
          const batch = yield* Fiber.join(waiting)
          // One wake-up for both, in the order published (a wake-up per event took the first alone).
          assert.deepEqual(
            batch.map((event) => event.id),
            [first.id, second.id]
          )
        })
      )
  )

  it.effect("a subscriber stops hearing when its scope closes", () =>
    Effect.gen(function* () {
      const events = yield* memory
      const scope = yield* Scope.make()
      const stream = yield* Scope.provide(events.subscribe(listener), scope)
      yield* events.publish(put([conversation]))
      yield* Scope.close(scope, Exit.void)
      // Publishing after the subscriber left reaches nobody and does not fail.
      yield* events.publish(put([conversation]))
      assert.equal((yield* collect(stream, 1)).length, 1)
    })
  )

  it.effect(
    '"fail": a slow subscriber never blocks the publisher, gets what was buffered, then EventsOverflowError',
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const events = yield* memory
          const slow = yield* events.subscribe(listener, {}, { buffer: 3 })
          const fast = yield* events.subscribe(listener, {}, { buffer: 3 })
          const fastReader = yield* Effect.forkChild(collect(fast, 10))
          const published: Array<ResourceEvents.ResourceEvent> = []
          for (let i = 0; i < 10; i++) {
            published.push(yield* events.publish(put([`${conversation}/message.m${i}`])))
            yield* Effect.yieldNow // the fast reader keeps up
          }
          assert.deepEqual(
            (yield* Fiber.join(fastReader)).map((event) => event.id),
            published.map((event) => event.id)
          )
          const received: Array<string> = []
          const failure = yield* Effect.flip(
            Stream.runForEach(slow, (event) => Effect.sync(() => received.push(event.id)))
          )
          assert.deepEqual(
            received,
            published.slice(0, 3).map((event) => event.id)
          )
          assert.equal(failure._tag, "EventsOverflowError")
          if (failure._tag === "EventsOverflowError") {
            assert.equal(failure.capacity, 3)
            assert.match(failure.message, /7 missed/)
          }
        })
      )
  )

  it.effect(
    '"drop-oldest": the newest are kept and the first received says how many were dropped before it',
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const events = yield* memory
          const sliding = yield* events.subscribe(listener, {}, { buffer: 3, overflow: "drop-oldest" })
          const published: Array<ResourceEvents.ResourceEvent> = []
          for (let i = 0; i < 10; i++)
            published.push(yield* events.publish(put([`${conversation}/message.m${i}`])))
          const received = yield* collect(sliding, 3)
          assert.deepEqual(
            received.map((event) => event.id),
            published.slice(7).map((event) => event.id)
          )
          assert.deepEqual(
            received.map((event) => event.missedBefore),
            [7, undefined, undefined]
          )
        })
      )
  )

  it("never loses an event silently: whatever the interleaving, received + missed = published, in order", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.constantFrom<ResourceEvents.Overflow>("fail", "drop-oldest"),
        fc.array(fc.oneof(fc.constant("publish" as const), fc.constant("read" as const)), { maxLength: 60 }),
        (buffer, overflow, steps) =>
          Effect.runPromise(
            Effect.scoped(
              Effect.gen(function* () {
                const events = yield* memory
                const stream = yield* events.subscribe(listener, {}, { buffer, overflow })
                // A read pulls everything buffered at that moment; it only happens when something
                // was published since the last one, so it never waits.
                const pull = yield* Stream.toPull(stream)
                const received: Array<ResourceEvents.Delivered> = []
                let published = 0
                let sinceRead = 0
                let failed = false
                for (const step of steps) {
                  if (step === "publish") {
                    yield* events.publish(put([`${conversation}/message.m${published}`]))
                    published++
                    sinceRead++
                  } else if (!failed && sinceRead > 0) {
                    sinceRead = 0
                    const pulled = yield* Effect.result(pull)
                    if (pulled._tag === "Success") received.push(...pulled.success)
                    else failed = true
                  }
                }
                const numbers = received.map((event) => Number(event.resources[0]!.split(".m")[1]))
                // In order, no duplicates.
                assert.deepEqual(
                  numbers,
                  [...numbers].sort((a, b) => a - b)
                )
                assert.equal(new Set(numbers).size, numbers.length)
                if (overflow === "drop-oldest") {
                  // Each gap is announced by the event after it.
                  let expected = 0
                  for (const event of received) {
                    const at = Number(event.resources[0]!.split(".m")[1])
                    assert.equal(event.missedBefore ?? 0, at - expected)
                    expected = at + 1
                  }
                } else {
                  // A prefix of what was published, then (if it fell behind) the failure.
                  assert.deepEqual(
                    numbers,
                    numbers.map((_, i) => i)
                  )
                }
              })
            )
          )
      ),
      { numRuns: 300 }
    )
  })

  it.effect(
    "an event nobody can receive is not published: mayHear follows the subscribers' sources and types, and the index asks it",
    () =>
      Effect.gen(function* () {
        const hub = yield* memory
        const published: Array<ResourceEvents.DetailType> = []
        // The hub, with what reaches its publish (either way) counted.
        const events: ResourceEvents.Service = {
          ...hub,
          publish: (event) =>
            Effect.andThen(
              Effect.sync(() => published.push(event.detailType)),
              hub.publish(event)
            ),
          publishNow: (event, now) => {
            published.push(event.detailType)
            return hub.publishNow!(event, now)
          }
        }
        const actor = "cld:assistant.writer"
        const index = ResourceIndex.make(MemoryResourceStore.make(), yield* Policy.allowAll, { events })
        const parent = Resource.make("conversation", { name: "c" })
        // Nobody listens: nothing is published, the accesses succeed all the same.
        assert.isFalse(hub.mayHear?.(actor, "RESOURCE_PUT"))
        yield* index.put(actor, parent)
        yield* index.get(actor, parent.meta.urn)
        assert.deepStrictEqual(published, [])
        // A subscriber to writes by the actor: its writes are published, its reads still not.
        const writes = yield* hub.subscribe(listener, { detailType: "RESOURCE_PUT", source: actor })
        assert.isTrue(hub.mayHear?.(actor, "RESOURCE_PUT"))
        assert.isFalse(hub.mayHear?.(actor, "RESOURCE_GET"))
        assert.isFalse(hub.mayHear?.("cld:assistant.other", "RESOURCE_PUT"))
        yield* index.put(actor, parent)
        yield* index.findByPrefix(actor, parent.meta.urn)
        yield* index.get(actor, parent.meta.urn)
        assert.deepStrictEqual(published, ["RESOURCE_PUT"])
        assert.deepStrictEqual(
          (yield* collect(writes, 1)).map((event) => event.resources),
          [[parent.meta.urn]]
        )
      }).pipe(Effect.scoped)
  )

  it.effect("ResourceIndex publishes every access that succeeded, with the actor as source", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const events = yield* memory
        const heard = yield* events.subscribe(listener)
        const index = ResourceIndex.make(MemoryResourceStore.make(), yield* Policy.allowAll, { events })
        const actor = "cld:assistant.writer"
        const parent = Resource.make("conversation", { name: "c" })
        const chunk = Resource.make("chunk", { name: "k", parent: parent.meta.urn, text: "t" })
        yield* index.put(actor, parent)
        yield* index.put(actor, chunk)
        yield* index.get(actor, chunk.meta.urn)
        yield* index.findByPrefix(actor, parent.meta.urn)
        yield* index.getMany(actor, [parent.meta.urn, "cld:chunk.missing"])
        assert.isTrue(yield* index.delete(actor, chunk.meta.urn))
        assert.isFalse(yield* index.delete(actor, chunk.meta.urn)) // nothing deleted: nothing published
        const seen = yield* collect(heard, 6)
        assert.deepEqual(
          seen.map((event) => [event.detailType, event.source, event.resources]),
          [
            ["RESOURCE_PUT", actor, [parent.meta.urn]],
            ["RESOURCE_PUT", actor, [chunk.meta.urn]],
            ["RESOURCE_GET", actor, [chunk.meta.urn]],
            ["RESOURCE_GET", actor, [chunk.meta.urn]],
            ["RESOURCE_GET", actor, [parent.meta.urn]],
            ["RESOURCE_DELETE", actor, [chunk.meta.urn]]
          ]
        )
      })
    )
  )

  it.effect(
    "ResourceIndex.putMany publishes a RESOURCE_PUT each, in order and at one time, when one needs the engine for a subscriber",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const parent = Resource.make("conversation", { name: "c" })
          const messages = ["a", "slow", "b"].map((name) =>
            Resource.make("chunk", { name, parent: parent.meta.urn, text: name })
          )
          const slow = messages[1]!.meta.urn
          // Remembers allows, and decides about `slow` for the listener only after a yield.
          const engine: Policy.Service = {
            name: "slow about one URN for the listener",
            revision: () => "1",
            authorize: (request) =>
              request.actor === listener && request.resources.includes(slow)
                ? Effect.as(Effect.yieldNow, Policy.allow())
                : Effect.succeed(Policy.allow())
          }
          const events = yield* ResourceEvents.makeMemory(engine)
          const heard = yield* events.subscribe(listener, { prefix: parent.meta.urn })
          const index = ResourceIndex.make(MemoryResourceStore.make(), engine, { events })
          yield* index.put("cld:assistant.writer", parent)
          yield* index.putMany("cld:assistant.writer", messages)
          const seen = yield* collect(heard, 4)
          assert.deepEqual(
            seen.map((event) => event.resources),
            [[parent.meta.urn], ...messages.map((message) => [message.meta.urn])]
          )
          assert.equal(new Set(seen.slice(1).map((event) => event.time)).size, 1)
        })
      )
  )

  it.effect("ResourceIndex.layer publishes when the context has ResourceEvents", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const events = yield* ResourceEvents.ResourceEvents
        const heard = yield* events.subscribe(listener, { detailType: "RESOURCE_PUT" })
        const index = yield* ResourceIndex.ResourceIndex
        const resource = Resource.make("conversation", { name: "layered" })
        yield* index.put("cld:assistant.a", resource)
        assert.deepEqual((yield* collect(heard, 1))[0]?.resources, [resource.meta.urn])
      })
    ).pipe(
      Effect.provide(
        ResourceIndex.layer.pipe(
          Layer.provideMerge(ResourceEvents.layerMemory),
          Layer.provide(Layer.succeed(ResourceStore.ResourceStore, MemoryResourceStore.make())),
          Layer.provide(Policy.layerAllowAll)
        )
      )
    )
  )
})

// ---------------------------------------------------------------------------
// PostgreSQL: LISTEN/NOTIFY between processes
// ---------------------------------------------------------------------------

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_resource_events" })
})
afterAll(() => database?.drop())

const script = fileURLToPath(new URL("./fixtures/events-process.mjs", import.meta.url))

/** Runs the fixture; resolves with its stdout lines once it exits 0. `onLine` sees each line as it comes. */
const runProcess = (args: ReadonlyArray<string>, onLine: (line: string) => void = () => {}) =>
  new Promise<Array<string>>((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    const lines: Array<string> = []
    let partial = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      const parts = (partial + chunk).split("\n")
      partial = parts.pop() ?? ""
      for (const line of parts) {
        lines.push(line)
        onLine(line)
      }
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
    })
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
    child.on("close", (code) => {
      clearTimeout(timer)
      code === 0
        ? resolve(lines)
        : reject(new Error(`events process ${args[1]} exited with ${code}: ${stderr}`))
    })
  })

describe("ResourceEvents across processes (PostgreSQL LISTEN/NOTIFY)", () => {
  it("a subscriber in one process hears, in order, every event another process publishes, and only those it asked for", async () => {
    const url = await database.schema("events_two_processes")
    const parent = Resource.make("conversation", { name: "shared" }).meta.urn
    const other = Resource.make("conversation", { name: "elsewhere" }).meta.urn
    let ready!: () => void
    const listening = new Promise<void>((resolve) => {
      ready = resolve
    })
    const subscriber = runProcess([url, "subscribe", parent, "25"], (line) => {
      if (line === "ready") ready()
    })
    await listening
    // Events elsewhere first (the subscriber's filter leaves them out), then 25 under its prefix.
    const [elsewhere, published] = await Promise.all([
      runProcess([url, "publish", other, "5"]),
      runProcess([url, "publish", parent, "25"])
    ])
    // (allow-all also logs its warning.)
    assert.include(elsewhere, "published 5")
    assert.include(published, "published 25")
    const received = (await subscriber).filter((line) => line.startsWith("{")).map((line) => JSON.parse(line))
    assert.equal(received.length, 25)
    assert.ok(received.every((event) => event.detailType === "RESOURCE_PUT" && event.source === "publisher"))
    assert.ok(received.every((event) => event.resources[0].startsWith(`${parent}/chunk.`)))
    assert.equal(new Set(received.map((event) => event.id)).size, 25)
    // In the order they were published (one publisher, one after the other).
    assert.deepEqual(
      received.map((event) => event.resources[0]),
      Array.from(
        { length: 25 },
        (_, i) => Resource.make("chunk", { name: `chunk ${i}`, parent, text: `text ${i}` }).meta.urn
      )
    )

    // This process, on the same database, reads the same log, and its subscriber hears only
    // what its policy lets it read (the hidden chunk: neither its event nor its name).
    const hidden = `${parent}/chunk.hidden`
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const context = yield* Layer.build(Database.layer({ kind: "postgres", url }))
          const policy = yield* CedarPolicy.make(`
            forbid (principal, action, resource == Noema::Resource::"${hidden}");
            permit (principal, action, resource);`)
          const events = yield* Effect.provideContext(ResourceEvents.makePostgres(policy), context)
          const heard = yield* events.subscribe(listener, { prefix: parent })
          yield* events.publish(put([hidden], "cld:assistant.local"))
          const both = yield* events.publish(put([hidden, `${parent}/chunk.local`], "cld:assistant.local"))
          const [first] = yield* collect(heard, 1)
          assert.equal(first?.id, both.id)
          assert.deepEqual(first?.resources, [`${parent}/chunk.local`])
        })
      )
    )
  })

  it.effect(
    "stores the time as ISO-8601; a row stored before, in epoch milliseconds, still reads (as ISO-8601)",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const url = yield* Effect.promise(() => database.schema("events_time"))
          const context = yield* Layer.build(Database.layer({ kind: "postgres", url }))
          const events = yield* Effect.provideContext(
            ResourceEvents.makePostgres(yield* Policy.allowAll),
            context
          )
          const heard = yield* events.subscribe(listener, { prefix: conversation })
          const published = yield* events.publish({
            ...put([conversation]),
            time: "2026-11-03T09:30:00.000Z"
          })
          const sql = Context.get(context, SqlClient.SqlClient)
          const stored = yield* sql<{ time: string }>`SELECT time FROM ${sql(ResourceEvents.eventsTable)}`
          assert.deepEqual(
            stored.map((row) => row.time),
            ["2026-11-03T09:30:00.000Z"]
          )
          // As an older process writes it: epoch milliseconds.
          yield* sql`INSERT INTO ${sql(ResourceEvents.eventsTable)} ${sql.insert({
            id: "old",
            source: "cld:assistant.old",
            detail_type: "RESOURCE_PUT",
            time: 1_700_000_000_000,
            resources: JSON.stringify([conversation])
          })}`
          yield* sql`SELECT pg_notify(${ResourceEvents.channel}, 'old')`
          const [first, second] = yield* collect(heard, 2)
          assert.equal(first?.id, published.id)
          assert.equal(first?.time, "2026-11-03T09:30:00.000Z")
          assert.equal(second?.id, "old")
          assert.equal(second?.time, "2023-11-14T22:13:20.000Z")
        })
      )
  )

  it.effect("refuses to run cross-process on SQLite, with a clear error", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename: ":memory:" }))
        const error = yield* Effect.flip(
          Effect.provideContext(ResourceEvents.makePostgres(yield* Policy.allowAll), context)
        )
        assert.match(error.message, /PostgreSQL/)
      })
    )
  )
})
