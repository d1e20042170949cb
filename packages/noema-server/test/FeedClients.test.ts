/**
 * The live event feed keeps its memory bounded: a client is sent a page at a
 * time, only when its connection took the page before, so clients that never
 * read, or that start from the beginning of a big feed, hold a page each; the
 * store is read a page per pull, once per change for the clients at the head,
 * and the number of clients is capped. Checked on the feed itself (pages
 * pulled by hand, store reads counted) and through a real server (sockets
 * that never read, the process's memory measured). Nothing here depends on
 * timing: waits are bounded by rounds, and what is measured is bytes.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as vm from "node:vm"
import { type Run, RunsStore } from "@noema/runs"
import { Effect, Exit, Queue, Scope, Stream } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as FeedClients from "../src/internal/FeedClients.js"
import * as Server from "../src/Server.js"
import { idleExecutor } from "./support/executor.js"

/** Waits, a round at a time, until `done` holds; fails after `rounds` rounds (a hang, not a slow machine). */
const eventually = async (done: () => boolean, what: string, rounds = 3000) => {
  for (let round = 0; round < rounds; round++) {
    if (done()) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`never: ${what}`)
}

const item = (cursor: number, size: number): FeedClients.FeedItem => ({
  cursor,
  event: {
    event_id: `evt_${cursor}`,
    run_id: "run_1",
    thread_id: "thr_1",
    seq: cursor,
    at: "2026-01-01T00:00:00.000Z",
    data: { type: "RunCanceled", reason: "r".repeat(size) }
  } satisfies Run.Event
})

/** A feed of `count` items of about `size` bytes, counting reads; it fails while `failures` > 0. */
const makeFeed = (count: number, size: number) => {
  const items = Array.from({ length: count }, (_, index) => item(index + 1, size))
  const feed = {
    items,
    reads: 0,
    failures: 0,
    read: (after: number, limit: number) =>
      Effect.suspend(() => {
        feed.reads++
        if (feed.failures > 0) {
          feed.failures--
          return Effect.fail(new Error("the database is locked"))
        }
        return Effect.succeed(items.filter((entry) => entry.cursor > after).slice(0, limit))
      })
  }
  return feed
}

const cursorsOf = (frames: ReadonlyArray<FeedClients.Frame>) =>
  frames.flatMap((frame) => (frame.event === "run-event" ? [Number(frame.id)] : []))

const bytesOf = (frames: ReadonlyArray<FeedClients.Frame>) =>
  frames.reduce((bytes, frame) => bytes + JSON.stringify(frame.data).length, 0)

/** Runs `f` with a feed over `feed` whose changes are offered by hand. */
const withClients = <A>(
  feed: ReturnType<typeof makeFeed>,
  options: Partial<FeedClients.Options>,
  f: (
    clients: FeedClients.FeedClients,
    change: () => Effect.Effect<void>
  ) => Effect.Effect<A, unknown, Scope.Scope>
) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const changes = yield* Queue.unbounded<void>()
        const clients = yield* FeedClients.make({
          read: feed.read,
          changes: Stream.fromQueue(changes),
          keepAliveMs: 60_000,
          ...options
        })
        return yield* f(clients, () => Effect.asVoid(Queue.offer(changes, undefined)))
      })
    )
  )

describe("FeedClients: a page at a time, memory bounded by pages, not by the feed", () => {
  it("a client from Last-Event-ID 0 gets the whole feed once, in order, in pages of at most pageBytes (or one item), a store read per page", async () => {
    const feed = makeFeed(2000, 1000)
    const pageBytes = 16 * 1024
    await withClients(feed, { pageBytes }, (clients) =>
      Effect.gen(function* () {
        const readsAtStart = feed.reads
        const frames = yield* clients.join(0)
        const pages = yield* (frames as Stream.Stream<FeedClients.Frame>).pipe(
          Stream.chunks,
          Stream.takeUntil((page) => cursorsOf(page).includes(2000)),
          Stream.runCollect
        )
        expect(cursorsOf(pages.flat())).toEqual(Array.from({ length: 2000 }, (_, index) => index + 1))
        const largestItem = JSON.stringify(feed.items[0]?.event).length
        for (const page of pages) expect(bytesOf(page)).toBeLessThanOrEqual(pageBytes + largestItem)
        // About 15 items a page: the feed is read a page at a time, not all at once nor an item at a time.
        const reads = feed.reads - readsAtStart
        expect(reads).toBeGreaterThanOrEqual(2000 / 16)
        expect(reads).toBeLessThanOrEqual(pages.length + 10)
      })
    )
  })

  it("a client that stops reading holds one page and its cursor; the rest stays in the store", async () => {
    const feed = makeFeed(5000, 1000)
    await withClients(feed, { pageBytes: 8 * 1024 }, (clients) =>
      Effect.gen(function* () {
        const pull = yield* Stream.toPull((yield* clients.join(0)) as Stream.Stream<FeedClients.Frame>)
        const readsBefore = feed.reads
        const opening = yield* pull
        expect(opening.map((frame) => frame.event)).toEqual(["keep-alive"])
        const first = yield* pull
        expect(cursorsOf(first)[0]).toBe(1)
        // Pulled no further: nothing more was read, and what it holds is that one page.
        expect(feed.reads - readsBefore).toBe(1)
        expect(clients.stats().heldBytes).toBeLessThanOrEqual(8 * 1024 + 1100)
        expect(clients.stats().heldBytes).toBeGreaterThan(0)
        const second = yield* pull
        expect(cursorsOf(second)[0]).toBe((cursorsOf(first).at(-1) ?? 0) + 1)
      })
    )
  })

  it("clients at the head share the store's reads: one change, one read for all of them", async () => {
    const feed = makeFeed(10, 100)
    await withClients(feed, {}, (clients, change) =>
      Effect.gen(function* () {
        const received = Array.from({ length: 10 }, () => [] as Array<number>)
        yield* Effect.forEach(received, (into) =>
          Effect.flatMap(clients.join(undefined), (frames) =>
            Effect.forkScoped(
              Stream.runForEach(frames as Stream.Stream<FeedClients.Frame>, (frame) =>
                Effect.sync(() => into.push(...cursorsOf([frame])))
              )
            )
          )
        )
        yield* Effect.yieldNow
        const reads = feed.reads
        for (let cursor = 11; cursor <= 15; cursor++) feed.items.push(item(cursor, 100))
        yield* change()
        yield* Effect.promise(() =>
          eventually(() => received.every((into) => into.length === 5), "every client got the new items")
        )
        for (const into of received) expect(into).toEqual([11, 12, 13, 14, 15])
        // The follower's read of the new items and its read that found the end: not one per client.
        expect(feed.reads - reads).toBeLessThanOrEqual(2)
      })
    )
  })

  it("a store that cannot be read is reported once per streak; the live feed goes on from the same cursor", async () => {
    const feed = makeFeed(3, 10)
    const reported: Array<string> = []
    await withClients(
      feed,
      { retryMs: 5, onReadFailure: (detail) => reported.push(detail) },
      (clients, change) =>
        Effect.gen(function* () {
          const received: Array<number> = []
          const frames = (yield* clients.join(undefined)) as Stream.Stream<FeedClients.Frame>
          yield* Effect.forkScoped(
            Stream.runForEach(frames, (frame) => Effect.sync(() => received.push(...cursorsOf([frame]))))
          )
          feed.failures = 3
          feed.items.push(item(4, 10))
          // One change: the follower reads again by itself after each failure.
          yield* change()
          yield* Effect.promise(() => eventually(() => received.includes(4), "the item after the failures"))
          expect(received).toEqual([4])
          expect(reported).toEqual([
            "the live feed cannot read the store: the database is locked",
            "the live feed reads the store again"
          ])
        })
    )
  })

  it("takes at most maxClients; a client whose request ended makes room", async () => {
    const feed = makeFeed(10, 10)
    await withClients(feed, { maxClients: 2 }, (clients) =>
      Effect.gen(function* () {
        const first = yield* Scope.make()
        expect(yield* Scope.provide(clients.join(undefined), first)).toBeDefined()
        expect(yield* clients.join(undefined)).toBeDefined()
        expect(yield* clients.join(undefined)).toBeUndefined()
        expect(clients.stats().clients).toBe(2)
        yield* Scope.close(first, Exit.void)
        expect(clients.stats().clients).toBe(1)
        expect(yield* clients.join(undefined)).toBeDefined()
      })
    )
  })

  it("an idle client is sent a keep-alive, so a connection that is gone is noticed", async () => {
    const feed = makeFeed(0, 0)
    await withClients(feed, { keepAliveMs: 20 }, (clients) =>
      Effect.gen(function* () {
        const frames = (yield* clients.join(undefined)) as Stream.Stream<FeedClients.Frame>
        const first = yield* frames.pipe(Stream.take(3), Stream.runCollect)
        expect(first.map((frame) => frame.event)).toEqual(["keep-alive", "keep-alive", "keep-alive"])
      })
    )
  })
})

/** The process's memory in use (heap and buffers), after a full collection. */
const memoryInUse = (() => {
  v8.setFlagsFromString("--expose-gc")
  const gc = vm.runInNewContext("gc") as () => void
  return () => {
    for (let round = 0; round < 3; round++) gc()
    const usage = process.memoryUsage()
    return usage.heapUsed + usage.external
  }
})()

describe("the server's event feed (real sockets)", () => {
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-server-feed-"))
  let store: RunsStore.Service
  let server: Server.Started
  let largestFrame = 0
  let feedLength = 0

  beforeAll(async () => {
    store = await Effect.runPromise(RunsStore.makeMemory())
    const thread = await Effect.runPromise(store.createThread({ queuePolicy: "enqueue" }))
    // About 12 MiB of events: more than the operating system's socket buffers take for a client that never reads.
    for (let index = 0; index < 200; index++)
      await Effect.runPromise(
        store.createRun({
          threadId: thread.id,
          request: `${index} ${"x".repeat(60_000)}`,
          pipeline: "p",
          stages: [{ key: "s", position: 1, needsApproval: false }]
        })
      )
    const items = await Effect.runPromise(store.feed(0, 1000))
    feedLength = items.length
    largestFrame = Math.max(...items.map((entry) => JSON.stringify(entry.event).length + 64))
    const executor = idleExecutor(store, workspace)
    server = await Server.start({ store, executor, workspace, feedPollMs: 20, maxFeedClients: 24 })
  })
  afterAll(async () => {
    await server?.close()
    fs.rmSync(workspace, { recursive: true, force: true })
  })

  /** Opens /api/events from `lastEventId`; the response is paused (nothing read) until resumed. */
  const open = (lastEventId?: string) =>
    new Promise<{ request: http.ClientRequest; response: http.IncomingMessage }>((resolve, reject) => {
      const request = http.get(
        `${server.url}/api/events`,
        {
          headers: {
            authorization: `Bearer ${server.token}`,
            ...(lastEventId !== undefined && { "last-event-id": lastEventId })
          }
        },
        (response) => {
          response.pause()
          resolve({ request, response })
        }
      )
      request.on("error", reject)
    })

  /** Waits until the clients' pages stop moving for a while: every connection is full. */
  const settled = async () => {
    let last = -1
    let quiet = 0
    for (let round = 0; round < 3000 && quiet < 30; round++) {
      const held = server.feed().heldBytes
      quiet = held === last ? quiet + 1 : 0
      last = held
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }

  /**
   * `count` clients of /api/events from Last-Event-ID 0 that never read, in a process of their
   * own: what they are sent piles up there (and in the kernel), so what is measured here is the
   * server's. Stopped with `kill`.
   */
  const idleClients = async (count: number) => {
    const script = `
      const http = require("node:http")
      // Paused sockets keep no event loop alive: this does, until the test kills the process.
      setInterval(() => {}, 1 << 30)
      let open = 0
      for (let index = 0; index < ${count}; index++)
        http.get(process.argv[1], { headers: { authorization: process.argv[2], "last-event-id": "0" } }, (response) => {
          response.pause()
          if (response.statusCode === 200 && ++open === ${count}) console.log("open")
        })`
    const child = spawn(
      process.execPath,
      ["-e", script, `${server.url}/api/events`, `Bearer ${server.token}`],
      {
        stdio: ["ignore", "pipe", "inherit"]
      }
    )
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (chunk: Buffer) => chunk.toString().includes("open") && resolve())
      child.on("exit", (code) => reject(new Error(`the clients' process exited with ${code}`)))
    })
    return child
  }

  it("20 clients from Last-Event-ID 0 that never read cost the server a page each, a few MB in all; one that reads gets every event once, in order", async () => {
    // One client in and out first: what the first request sets up once is not a client's cost.
    const warmUp = await open("0")
    warmUp.request.destroy()
    await eventually(() => server.feed().clients === 0, "the first client gone")
    const before = memoryInUse()
    const clients = await idleClients(20)
    try {
      await eventually(() => server.feed().clients === 20, "every client in")
      await settled()
      const grown = memoryInUse() - before
      // What a client's stream holds is a page: at most pageBytes (64 KiB), or one frame when a frame is larger.
      expect(server.feed().largestHeldBytes).toBeLessThanOrEqual(64 * 1024 + largestFrame)
      // Sending each the feed would be 20 times the feed; a page and a connection's buffer each is a few MB.
      process.stdout.write(
        `20 idle clients from Last-Event-ID 0 on a ${((feedLength * largestFrame) / 2 ** 20).toFixed(1)} MiB feed: the server grew ${(grown / 2 ** 20).toFixed(2)} MiB (heap and buffers)\n`
      )
      expect(grown).toBeLessThan(6 * 1024 * 1024)
    } finally {
      clients.kill()
    }
    await eventually(() => server.feed().clients === 0, "the idle clients gone")

    // A client that reads is sent a page each time its connection takes one, and gets the whole feed.
    const { request, response } = await open("0")
    const cursors: Array<number> = []
    let buffer = ""
    response.setEncoding("utf8")
    await new Promise<void>((resolve) => {
      response.on("data", (chunk: string) => {
        buffer += chunk
        let end = buffer.indexOf("\n\n")
        while (end >= 0) {
          const id = /^id: (\d+)$/m.exec(buffer.slice(0, end))?.[1]
          if (id !== undefined) cursors.push(Number(id))
          buffer = buffer.slice(end + 2)
          end = buffer.indexOf("\n\n")
        }
        if (cursors.length >= feedLength) resolve()
      })
      response.resume()
    })
    expect(cursors).toEqual(Array.from({ length: feedLength }, (_, index) => index + 1))
    request.destroy()
    await eventually(() => server.feed().clients === 0, "the client gone")
  })

  it("past maxFeedClients a client gets 503 with Retry-After, and room again when one leaves", async () => {
    const clients = await Promise.all(Array.from({ length: 24 }, () => open()))
    const refused = await open()
    expect(refused.response.statusCode).toBe(503)
    expect(refused.response.headers["retry-after"]).toBe("5")
    refused.response.resume()
    clients[0]!.request.destroy()
    await eventually(() => server.feed().clients === 23, "one client gone")
    const admitted = await open()
    expect(admitted.response.statusCode).toBe(200)
    for (const { request } of [...clients, admitted]) request.destroy()
  })
})
