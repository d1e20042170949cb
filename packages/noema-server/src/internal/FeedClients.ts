/**
 * FeedClients: the clients of the live event feed (Server-Sent Events), each
 * sent the store's feed from its own cursor, no faster than it reads.
 *
 * Memory must not depend on how slow a client is or how far back it starts.
 * So nothing is queued for a client: it is written to only while its
 * connection takes more (`write` returned true). When a write says the
 * connection is full, the client is paused and remembers only its cursor;
 * on 'drain' it reads the store from that cursor a page at a time, writing
 * until the connection is full again or it has caught up with the live feed.
 * A client that starts from an old cursor (`Last-Event-ID: 0`) catches up the
 * same way. What the server holds for one client is thus at most its
 * connection's high-water mark plus one frame, and the number of clients is
 * capped (`maxClients`; the server answers 503 past it).
 *
 * The live feed is read once for every client: a poll reads what the store
 * appended past `head` and writes it to each client that is live (caught up
 * and not paused). The check that a catching-up client has reached `head`
 * and its joining the live clients happen without a wait in between, and the
 * poll writes a client only the items past its own cursor, so nothing is
 * missed or sent twice.
 */
import { type Run, Shown } from "@noema/runs"

export interface FeedItem {
  readonly cursor: number
  readonly event: Run.Event
}

/** Where a client's frames go: a Node `ServerResponse` is one. */
export interface Sink {
  /** Writes a chunk; false when the connection is full (wait for 'drain'). */
  write(chunk: string): boolean
  once(event: "drain", listener: () => void): unknown
  end(): void
  /** Bytes written but not yet handed to the operating system. */
  readonly writableLength: number
}

const describe = (error: unknown): string =>
  (error instanceof Error ? error.message : String(error)).replace(/\s+/g, " ").trim()

export interface Options {
  /** The store's feed: items past `after`, oldest first, at most `limit`. */
  readonly read: (after: number, limit: number) => Promise<ReadonlyArray<FeedItem>>
  /** Most clients at once. Default 64. */
  readonly maxClients?: number
  /** Items read per page when a client catches up. Default 100. */
  readonly pageSize?: number
  /** How often the store is read for new items. Default 250 ms. */
  readonly pollMs?: number
  /** How often an idle client is sent a comment, so proxies keep the connection. Default 15 s. */
  readonly keepAliveMs?: number
  /**
   * Told when the store cannot be read (the first failure of a streak, and when it reads
   * again): the feed goes on from the same cursor, but an operator should know.
   */
  readonly onReadFailure?: (detail: string) => void
}

export interface Stats {
  readonly clients: number
  /** Clients waiting for their connection to drain. */
  readonly paused: number
  /** Bytes written to clients and not yet taken by the operating system, in all. */
  readonly bufferedBytes: number
  /** The same, for the client with the most. */
  readonly largestBufferedBytes: number
}

export interface Client {
  /** The client is gone (its connection closed). */
  readonly leave: () => void
}

export interface FeedClients {
  /** Whether one more client may join. */
  readonly hasRoom: () => boolean
  /**
   * Starts sending to `sink` the items past `after` (undefined: only what comes from
   * now on); undefined when the clients are already `maxClients`.
   */
  readonly admit: (sink: Sink, after: number | undefined) => Client | undefined
  readonly stats: () => Stats
  /** Ends every client's stream and stops reading the store. */
  readonly close: () => void
}

/** The SSE frame of one feed item (`id:` is the cursor a reconnecting client sends back). */
export const frame = (item: FeedItem): string =>
  `id: ${item.cursor}\nevent: run-event\ndata: ${Shown.stringify({
    cursor: item.cursor,
    event_id: item.event.event_id,
    run_id: item.event.run_id,
    thread_id: item.event.thread_id,
    seq: item.event.seq,
    at: item.event.at,
    ...item.event.data
  })}\n\n`

/** A cursor from `Last-Event-ID` (or `?cursor=`): a whole number, else undefined. */
export const cursorOf = (text: string | null | undefined): number | undefined =>
  text !== null && text !== undefined && /^\d{1,15}$/.test(text.trim()) ? Number(text.trim()) : undefined

interface State {
  readonly sink: Sink
  /** The cursor of the last item written to it. */
  sent: number
  mode: "live" | "catching-up" | "paused"
  gone: boolean
}

/** The live page: how many new items one poll reads at most before writing them. */
const livePage = 500

/** Follows the store's feed from its current end. */
export const start = async (options: Options): Promise<FeedClients> => {
  const maxClients = options.maxClients ?? 64
  const pageSize = options.pageSize ?? 100
  const clients = new Set<State>()
  let head = await end(options.read)
  let closed = false

  /** Writes `items` past the client's cursor until its connection is full; whether it took them all. */
  const write = (client: State, items: ReadonlyArray<FeedItem>): boolean => {
    for (const item of items) {
      if (item.cursor <= client.sent) continue
      const more = client.sink.write(frame(item))
      client.sent = item.cursor
      if (!more) {
        pause(client)
        return false
      }
    }
    return true
  }

  const pause = (client: State) => {
    client.mode = "paused"
    client.sink.once("drain", () => void catchUp(client))
  }

  const drop = (client: State) => {
    client.gone = true
    clients.delete(client)
    client.sink.end()
  }

  /** Reads the store from the client's cursor, page by page, while its connection takes more. */
  const catchUp = async (client: State) => {
    client.mode = "catching-up"
    while (!client.gone && !closed) {
      if (client.sent >= head) {
        client.mode = "live"
        return
      }
      let items: ReadonlyArray<FeedItem>
      try {
        items = await options.read(client.sent, pageSize)
      } catch (error) {
        // The client reconnects with its Last-Event-ID and tries again.
        options.onReadFailure?.(`a client catching up was dropped: ${describe(error)}`)
        return drop(client)
      }
      if (client.gone) return
      if (items.length === 0) {
        // The store has nothing past its cursor although the live feed does (a late commit): go live.
        client.mode = "live"
        return
      }
      if (!write(client, items)) return
    }
  }

  /** Reads what was appended past `head` and writes it to the live clients. */
  const advance = async () => {
    while (!closed) {
      const items = await options.read(head, livePage)
      if (closed) return
      for (const client of clients) if (client.mode === "live") write(client, items)
      head = items.at(-1)?.cursor ?? head
      if (items.length < livePage) return
    }
  }

  let failing = false
  const poll = async () => {
    while (!closed) {
      try {
        await advance()
        if (failing) options.onReadFailure?.("the live feed reads the store again")
        failing = false
      } catch (error) {
        // The store failing now and then: the next round reads again from the same cursor.
        if (!failing) options.onReadFailure?.(`the live feed cannot read the store: ${describe(error)}`)
        failing = true
      }
      await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 250).unref())
    }
  }
  void poll()

  const keepAlive = setInterval(() => {
    for (const client of clients)
      if (client.mode === "live" && !client.sink.write(": keep-alive\n\n")) pause(client)
  }, options.keepAliveMs ?? 15_000)
  keepAlive.unref()

  return {
    hasRoom: () => clients.size < maxClients,
    admit: (sink, after) => {
      if (clients.size >= maxClients) return undefined
      const client: State = { sink, sent: after ?? head, mode: "live", gone: false }
      clients.add(client)
      if (!sink.write("retry: 1000\n\n")) pause(client)
      else if (client.sent < head) void catchUp(client)
      return {
        leave: () => {
          client.gone = true
          clients.delete(client)
        }
      }
    },
    stats: () => {
      let bufferedBytes = 0
      let largestBufferedBytes = 0
      let paused = 0
      for (const client of clients) {
        bufferedBytes += client.sink.writableLength
        largestBufferedBytes = Math.max(largestBufferedBytes, client.sink.writableLength)
        if (client.mode === "paused") paused++
      }
      return { clients: clients.size, paused, bufferedBytes, largestBufferedBytes }
    },
    close: () => {
      closed = true
      clearInterval(keepAlive)
      for (const client of [...clients]) drop(client)
    }
  }
}

/** The cursor of the feed's last item, read page by page. */
const end = async (read: Options["read"]): Promise<number> => {
  let at = 0
  while (true) {
    const items = await read(at, livePage)
    at = items.at(-1)?.cursor ?? at
    if (items.length < livePage) return at
  }
}
