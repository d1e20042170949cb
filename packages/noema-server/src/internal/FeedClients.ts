/**
 * FeedClients: the clients of the live event feed (Server-Sent Events), each
 * sent the store's feed from its own cursor, no faster than it reads.
 *
 * Memory must not depend on how slow a client is or how far back it starts.
 * So a client's frames are a pull stream: its next page is made only when the
 * HTTP server asks for it, and the server asks only once the connection took
 * the page before (Node's `write` returned true, or 'drain' came). A page is
 * a few items, at most `pageBytes` of them (at least one): a client that stops
 * reading holds one page in its connection and its cursor, whatever it has not
 * read yet stays in the store. A client that starts from an old cursor
 * (`Last-Event-ID: 0`) catches up the same way, a page per pull, and the
 * number of clients is capped (`maxClients`; the server answers 503 past it).
 *
 * The live feed is read once for every client: on each change of the store
 * (`changes`: a NOTIFY on PostgreSQL, a poll elsewhere, see StoreChanges) the
 * follower reads what was appended past `head`, keeps the latest items
 * (`recent`, bounded in bytes) and moves `head`; a client at the head takes
 * its next page from `recent` without reading the store, one behind it reads
 * the store. Nothing is missed or sent twice: a client's page is always the
 * items just past its own cursor.
 */
import type { Run } from "@noema/runs"
import { Cause, Effect, Option, Queue, type Scope, Stream, SubscriptionRef } from "effect"
import * as RunsJson from "../RunsJson.js"

export interface FeedItem {
  readonly cursor: number
  readonly event: Run.Event
}

/** What a client is sent: a run event (its `id` is the cursor to come back with), or a keep-alive. */
export type Frame =
  | { readonly id: string; readonly event: "run-event"; readonly data: RunsJson.FeedFrame }
  | { readonly event: "keep-alive"; readonly data: "" }

export interface Options {
  /** The store's feed: items past `after`, oldest first, at most `limit`. */
  readonly read: (after: number, limit: number) => Effect.Effect<ReadonlyArray<FeedItem>, unknown>
  /** Says the store may have new items (see StoreChanges). */
  readonly changes: Stream.Stream<void>
  /** Most clients at once. Default 64. */
  readonly maxClients?: number
  /** Most items read for one page. Default 100. */
  readonly pageSize?: number
  /** Most bytes of items in one page (a page has at least one item). Default 64 KiB. */
  readonly pageBytes?: number
  /** How often an idle client is sent a keep-alive event, so a gone one is noticed. Default 15 s. */
  readonly keepAliveMs?: number
  /** How soon the follower reads again after the store failed it, changes or not. Default 1 s. */
  readonly retryMs?: number
  /**
   * Told when the store cannot be read (the first failure of a streak, and when it reads
   * again; a client catching up that is dropped for it): an operator should know.
   */
  readonly onReadFailure?: (detail: string) => void
}

export interface Stats {
  readonly clients: number
  /** Bytes of the pages handed to clients' connections and not yet taken, in all. */
  readonly heldBytes: number
  /** The same, for the client with the most. */
  readonly largestHeldBytes: number
}

export interface FeedClients {
  /**
   * The frames for a new client, from the items past `after` (undefined: from now on),
   * holding a client's place until the scope closes; undefined when the clients are
   * already `maxClients`.
   */
  readonly join: (
    after: number | undefined
  ) => Effect.Effect<Stream.Stream<Frame> | undefined, never, Scope.Scope>
  readonly stats: () => Stats
}

/** A cursor from `Last-Event-ID` (or `?cursor=`): a whole number, else undefined. */
export const cursorOf = (text: string | null | undefined): number | undefined =>
  text !== null && text !== undefined && /^\d{1,15}$/.test(text.trim()) ? Number(text.trim()) : undefined

const keepAlive: Frame = { event: "keep-alive", data: "" }

const frameOf = (item: FeedItem): Frame => ({
  id: String(item.cursor),
  event: "run-event",
  data: RunsJson.frameOf(item.cursor, item.event)
})

/** About how many bytes an item takes once framed. */
const sizeOf = (item: FeedItem): number => JSON.stringify(item.event).length + 64

const describe = (error: unknown): string =>
  (error instanceof Error ? error.message : String(error)).replace(/\s+/g, " ").trim()

/** The follower's state: the feed's head and the items just before it. */
interface Hub {
  head: number
  /** Items past `recentFrom`, up to `head`, oldest first. */
  recent: Array<FeedItem>
  recentFrom: number
  recentBytes: number
  /** The average size of an item read lately, to size pages. */
  itemBytes: number
}

interface Client {
  held: number
}

/** The most bytes of items the follower keeps for clients at the head. */
const recentLimit = 1024 * 1024

/** Follows the store's feed from its current end. */
export const make = Effect.fnUntraced(function* (options: Options) {
  const maxClients = options.maxClients ?? 64
  const pageSize = options.pageSize ?? 100
  const pageBytes = options.pageBytes ?? 64 * 1024
  const hub: Hub = { head: 0, recent: [], recentFrom: 0, recentBytes: 0, itemBytes: 1024 }
  const clients = new Set<Client>()
  const limit = () => Math.max(1, Math.min(pageSize, Math.floor(pageBytes / hub.itemBytes)))

  /** Items past `after` from the store, learning their size. */
  const read = (after: number) =>
    Effect.map(options.read(after, limit()), (items) => {
      for (const item of items) hub.itemBytes = Math.round(hub.itemBytes * 0.8 + sizeOf(item) * 0.2)
      return items
    })

  /** The feed's end when the server starts: clients joining "from now on" start there. */
  const end = Effect.gen(function* () {
    let at = 0
    while (true) {
      const items = yield* read(at)
      if (items.length === 0) return at
      at = items.at(-1)?.cursor ?? at
    }
  })
  // A store that cannot be read now fails the start: the feed would not know where "now" is.
  const start = yield* end
  hub.head = start
  hub.recentFrom = start
  const head = yield* SubscriptionRef.make(start)

  /** Reads what was appended past `head`, keeps it in `recent` and moves `head`. */
  const advance = Effect.gen(function* () {
    while (true) {
      const items = yield* read(hub.head)
      if (items.length === 0) return
      for (const item of items) {
        hub.recent.push(item)
        hub.recentBytes += sizeOf(item)
      }
      while (hub.recentBytes > recentLimit && hub.recent.length > 1) {
        const dropped = hub.recent.shift() as FeedItem
        hub.recentBytes -= sizeOf(dropped)
        hub.recentFrom = dropped.cursor
      }
      hub.head = items.at(-1)?.cursor ?? hub.head
      yield* SubscriptionRef.set(head, hub.head)
    }
  })

  // Changes that come while the follower reads are one more read, not one each.
  const changed = yield* Queue.sliding<void>(1)
  yield* Effect.forkScoped(Stream.runForEach(options.changes, () => Queue.offer(changed, undefined)))
  let failing = false
  yield* Effect.forkScoped(
    Effect.forever(
      Effect.andThen(
        Queue.take(changed),
        advance.pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              if (failing) options.onReadFailure?.("the live feed reads the store again")
              failing = false
            })
          ),
          // The store failing now and then: read again from the same cursor soon, even if nothing
          // changes meanwhile (a NOTIFY already taken would not come again).
          Effect.catch((error) =>
            Effect.andThen(
              Effect.sync(() => {
                if (!failing)
                  options.onReadFailure?.(`the live feed cannot read the store: ${describe(error)}`)
                failing = true
              }),
              Effect.andThen(Effect.sleep(options.retryMs ?? 1000), Queue.offer(changed, undefined))
            )
          )
        )
      )
    )
  )

  /** The items just past `cursor`, at most a page: from `recent` when it holds them, else from the store. */
  const itemsAfter = (cursor: number) => {
    if (cursor >= hub.recentFrom) {
      const items: Array<FeedItem> = []
      for (const item of hub.recent) if (item.cursor > cursor && items.length < limit()) items.push(item)
      return Effect.succeed(items)
    }
    return read(cursor)
  }

  /** At most `pageBytes` of `items`, and at least one. */
  const page = (items: ReadonlyArray<FeedItem>) => {
    let bytes = 0
    const taken: Array<FeedItem> = []
    for (const item of items) {
      bytes += sizeOf(item)
      if (taken.length > 0 && bytes > pageBytes) break
      taken.push(item)
    }
    return taken
  }

  /** Waits until the head is past `cursor`; false when `keepAliveMs` went by first. */
  const moved = (cursor: number) =>
    SubscriptionRef.changes(head).pipe(
      Stream.filter((at) => at > cursor),
      Stream.runHead,
      Effect.timeoutOption(options.keepAliveMs ?? 15_000),
      Effect.map(Option.isSome)
    )

  /** The client's next frames and its cursor after them. */
  const next = (
    client: Client,
    cursor: number
  ): Effect.Effect<readonly [ReadonlyArray<Frame>, number], unknown> =>
    Effect.gen(function* () {
      client.held = 0
      if (cursor < hub.head) {
        const items = page(yield* itemsAfter(cursor))
        // Nothing past its cursor although the head is further (a late commit): wait for the next change.
        if (items.length > 0) {
          client.held = items.reduce((bytes, item) => bytes + sizeOf(item), 0)
          return [items.map(frameOf), items.at(-1)?.cursor ?? cursor] as const
        }
      }
      return (yield* moved(Math.max(cursor, hub.head)))
        ? ([[], cursor] as const)
        : ([[keepAlive], cursor] as const)
    })

  const frames = (client: Client, after: number) =>
    Stream.paginate(after, (cursor) =>
      Effect.map(next(client, cursor), ([items, at]) => [items, Option.some(at)] as const)
    ).pipe(
      // A first frame at once: the response's headers go with it, so the client knows it is in.
      Stream.prepend([keepAlive]),
      // The client reconnects with its Last-Event-ID and tries again.
      Stream.catchCause((cause) => {
        // The client is gone (its request interrupted): that goes on as it is, it carries no error.
        if (Cause.hasInterruptsOnly(cause)) return Stream.failCause(cause as Cause.Cause<never>)
        options.onReadFailure?.(`a client catching up was dropped: ${describe(Cause.squash(cause))}`)
        return Stream.empty
      })
    )

  return {
    join: (after) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          if (clients.size >= maxClients) return undefined
          const client: Client = { held: 0 }
          clients.add(client)
          return client
        }),
        (client) => Effect.sync(() => client !== undefined && clients.delete(client))
      ).pipe(Effect.map((client) => (client === undefined ? undefined : frames(client, after ?? hub.head)))),
    stats: () => {
      let heldBytes = 0
      let largestHeldBytes = 0
      for (const client of clients) {
        heldBytes += client.held
        largestHeldBytes = Math.max(largestHeldBytes, client.held)
      }
      return { clients: clients.size, heldBytes, largestHeldBytes }
    }
  } satisfies FeedClients
})
