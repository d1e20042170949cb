/**
 * The live event feed keeps its memory bounded: clients that never read, or
 * that start from the beginning of a big feed, cost the server at most their
 * connection's high-water mark plus one frame each, and the number of clients
 * is capped. Checked on the registry itself (sinks that never drain, counted
 * bytes and store reads) and through a real server (sockets that never read).
 * Nothing here depends on timing: waits are bounded by rounds, and what is
 * measured is bytes the server holds.
 */
import { EventEmitter } from "node:events"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { getDefaultHighWaterMark } from "node:stream"
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, type Run, RunsStore } from "@noema/runs"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as FeedClients from "../src/internal/FeedClients.js"
import * as Server from "../src/Server.js"

/** Waits, a round at a time, until `done` holds; fails after `rounds` rounds (a hang, not a slow machine). */
const eventually = async (done: () => boolean, what: string, rounds = 3000) => {
  for (let round = 0; round < rounds; round++) {
    if (done()) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`never: ${what}`)
}

/** A connection that takes `highWaterMark` bytes and then nothing until `drain()`, counting what it holds. */
class Connection extends EventEmitter implements FeedClients.Sink {
  writableLength = 0
  text = ""
  ended = false
  constructor(readonly highWaterMark = 16 * 1024) {
    super()
  }
  write(chunk: string) {
    this.writableLength += Buffer.byteLength(chunk)
    this.text += chunk
    return this.writableLength < this.highWaterMark
  }
  end() {
    this.ended = true
  }
  /** The client read everything sent so far. */
  drain() {
    this.writableLength = 0
    this.emit("drain")
  }
  cursors() {
    return [...this.text.matchAll(/^id: (\d+)$/gm)].map((match) => Number(match[1]))
  }
}

const item = (cursor: number, size: number): FeedClients.FeedItem => ({
  cursor,
  event: {
    event_id: `evt_${cursor}`,
    run_id: "run_1",
    thread_id: "thr_1",
    seq: cursor,
    at: "2026-01-01T00:00:00.000Z",
    data: { type: "RunCancelled", reason: "r".repeat(size) }
  } as unknown as Run.Event
})

/** A feed of `count` items of about `size` bytes, counting reads. */
const makeFeed = (count: number, size: number) => {
  const items = Array.from({ length: count }, (_, index) => item(index + 1, size))
  const feed = {
    items,
    reads: 0,
    read: async (after: number, limit: number) => {
      feed.reads++
      return items.filter((entry) => entry.cursor > after).slice(0, limit)
    }
  }
  return feed
}

describe("FeedClients: memory bounded by connections, not by the feed", () => {
  it("50 clients from Last-Event-ID 0 that never read hold at most a high-water mark and a frame each; the store is read a page per drain", async () => {
    const feed = makeFeed(5000, 1000)
    const largestFrame = Math.max(...feed.items.map((entry) => Buffer.byteLength(FeedClients.frame(entry))))
    const clients = await FeedClients.start({ read: feed.read, pollMs: 5, maxClients: 50, pageSize: 100 })
    try {
      const readsAtStart = feed.reads
      const connections = Array.from({ length: 50 }, () => new Connection())
      for (const connection of connections) expect(clients.admit(connection, 0)).toBeDefined()
      await eventually(() => clients.stats().paused === 50, "every client paused")
      const bound = 16 * 1024 + largestFrame
      for (const connection of connections) {
        expect(connection.writableLength).toBeLessThanOrEqual(bound)
        expect(Math.max(...connection.cursors())).toBeLessThan(100)
      }
      expect(clients.stats().bufferedBytes).toBeLessThanOrEqual(50 * bound)
      expect(clients.stats().largestBufferedBytes).toBeLessThanOrEqual(bound)
      // One page each to fill the connection; the feed is 50 pages long.
      expect(feed.reads - readsAtStart).toBeLessThanOrEqual(50 + 5)

      // One client reads, a connection-full at a time: it gets the whole feed, in order, once.
      const reader = connections[0]!
      const seen: Array<number> = []
      for (let round = 0; round < 10_000 && seen.at(-1) !== 5000; round++) {
        seen.push(...reader.cursors())
        reader.text = ""
        reader.drain()
        // The page is read and written within a few turns of the event loop.
        for (let turn = 0; turn < 10_000 && reader.writableLength === 0; turn++)
          await new Promise((resolve) => setImmediate(resolve))
      }
      expect(seen).toEqual(Array.from({ length: 5000 }, (_, index) => index + 1))
      // Caught up, it is live: new items reach it, while the others still hold no more than before.
      feed.items.push(item(5001, 10))
      await eventually(() => reader.cursors().includes(5001), "the new item sent")
      for (const connection of connections.slice(1))
        expect(connection.writableLength).toBeLessThanOrEqual(bound)
    } finally {
      clients.close()
    }
  })

  it("a store that cannot be read is reported once per streak; the live feed goes on from the same cursor", async () => {
    const feed = makeFeed(3, 10)
    let failures = 0
    const reported: Array<string> = []
    const read = async (after: number, limit: number) => {
      if (failures > 0) {
        failures--
        throw new Error("the database is locked")
      }
      return feed.read(after, limit)
    }
    const clients = await FeedClients.start({
      read,
      pollMs: 5,
      onReadFailure: (detail) => reported.push(detail)
    })
    try {
      const connection = new Connection()
      expect(clients.admit(connection, undefined)).toBeDefined()
      failures = 5
      feed.items.push(item(4, 10))
      await eventually(() => connection.cursors().includes(4), "the item after the failures")
      expect(reported).toEqual([
        "the live feed cannot read the store: the database is locked",
        "the live feed reads the store again"
      ])
    } finally {
      clients.close()
    }
  })

  it("takes at most maxClients; a client that leaves makes room", async () => {
    const feed = makeFeed(10, 10)
    const clients = await FeedClients.start({ read: feed.read, pollMs: 5, maxClients: 2 })
    try {
      const first = clients.admit(new Connection(), undefined)
      expect(clients.admit(new Connection(), undefined)).toBeDefined()
      expect(clients.hasRoom()).toBe(false)
      expect(clients.admit(new Connection(), undefined)).toBeUndefined()
      first?.leave()
      expect(clients.hasRoom()).toBe(true)
      expect(clients.admit(new Connection(), undefined)).toBeDefined()
    } finally {
      clients.close()
    }
  })

  it("a live client that stops reading is paused, not buffered for", async () => {
    const feed = makeFeed(0, 0)
    const clients = await FeedClients.start({ read: feed.read, pollMs: 5 })
    try {
      const slow = new Connection()
      clients.admit(slow, undefined)
      for (let cursor = 1; cursor <= 400; cursor++) feed.items.push(item(cursor, 1000))
      await eventually(() => clients.stats().paused === 1, "the slow client paused")
      const held = slow.writableLength
      for (let cursor = 401; cursor <= 800; cursor++) feed.items.push(item(cursor, 1000))
      // Rounds of polling go by (the feed is read past the new items) and the paused client is not written.
      const reads = feed.reads
      await eventually(() => feed.reads > reads + 5, "polls")
      expect(slow.writableLength).toBe(held)
      // On drain it carries on from the item after the last one it was sent: nothing skipped.
      const last = Math.max(...slow.cursors())
      expect(last).toBeLessThan(400)
      slow.text = ""
      slow.drain()
      await eventually(() => slow.cursors().length > 0, "resumed on drain")
      expect(slow.cursors()[0]).toBe(last + 1)
    } finally {
      clients.close()
    }
  })
})

describe("the server's event feed (real sockets)", () => {
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-feed-"))
  let store: RunsStore.Service
  let server: Server.Server
  /** The feed's items, as the server sends them. */
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
    largestFrame = Math.max(...items.map((entry) => Buffer.byteLength(FeedClients.frame(entry))))
    const executor = Executor.make({
      store,
      workspace,
      model: ScriptedChatModel.make({ fallback: () => "x" })
    })
    server = await Server.start({ store, executor, workspace, feedPollMs: 20, maxFeedClients: 6 })
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

  it("clients from Last-Event-ID 0 that never read cost the server a bounded number of bytes; one that reads gets every event once, in order", async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, () => open("0")))
    for (const { response } of clients) expect(response.statusCode).toBe(200)
    await eventually(() => server.feed().clients === 4 && server.feed().paused === 4, "every client paused")
    // What a connection holds past its high-water mark (Node's default for sockets) is at most one frame.
    const bound = getDefaultHighWaterMark(false) + largestFrame
    expect(server.feed().largestBufferedBytes).toBeLessThanOrEqual(bound)
    expect(server.feed().bufferedBytes).toBeLessThanOrEqual(4 * bound)

    // One client starts reading: it is resumed on each drain and gets the whole feed.
    const { response } = clients[0]!
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
    for (const { request } of clients) request.destroy()
    await eventually(() => server.feed().clients === 0, "the clients gone")
  })

  it("past maxFeedClients a client gets 503 with Retry-After, and room again when one leaves", async () => {
    const clients = await Promise.all(Array.from({ length: 6 }, () => open()))
    const refused = await open()
    expect(refused.response.statusCode).toBe(503)
    expect(refused.response.headers["retry-after"]).toBe("5")
    refused.response.resume()
    clients[0]!.request.destroy()
    await eventually(() => server.feed().clients === 5, "one client gone")
    const admitted = await open()
    expect(admitted.response.statusCode).toBe(200)
    for (const { request } of [...clients, admitted]) request.destroy()
  })
})
