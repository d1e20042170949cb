/**
 * What the CLI tests need besides the binary: the session store in a test's
 * NOEMA_HOME, read and written through the session package, and a proxy in
 * front of the wire-format server that lets the test act (e.g. commit from
 * "another noema") while a request is in flight, without relying on timing.
 */
import * as http from "node:http"
import * as path from "node:path"
import type { Message } from "@noema/core"
import { Session, type SessionStore, SqliteStore } from "@noema/session"
import { Effect } from "effect"

/** Runs `effect` against the store in `home`. */
export const withStore = <A, E>(
  home: string,
  effect: Effect.Effect<A, E, SessionStore.SessionStore>
): Promise<A> =>
  Effect.runPromise(Effect.provide(effect, SqliteStore.layer({ filename: path.join(home, "noema.db") })))

/** Commits `messages` to the session `id`, as another noema process would. */
export const commitElsewhere = (home: string, id: string, messages: ReadonlyArray<Message.Message>) =>
  withStore(
    home,
    Effect.gen(function* () {
      const session = yield* Session.open(id)
      const transaction = session.begin()
      transaction.extend(messages)
      yield* session.commit(transaction)
    })
  )

export interface Proxy {
  /** Base URL for `--base-url`. */
  readonly url: string
  close(): Promise<void>
}

/** Forwards every request to `target` (a base URL ending in /v1), running `beforeFirst` before the first one. */
export const proxyAfter = async (target: string, beforeFirst: () => Promise<void>): Promise<Proxy> => {
  const origin = new URL(target).origin
  let first: Promise<void> | undefined
  const proxy = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", async () => {
      try {
        first ??= beforeFirst()
        await first
        const headers: Record<string, string> = {}
        for (const [key, value] of Object.entries(req.headers)) {
          if (typeof value === "string" && key !== "host" && key !== "content-length") headers[key] = value
        }
        const upstream = await fetch(`${origin}${req.url ?? "/"}`, {
          method: req.method ?? "POST",
          headers,
          ...(chunks.length > 0 && { body: Buffer.concat(chunks) })
        })
        const responseHeaders: Record<string, string> = {}
        upstream.headers.forEach((value, key) => {
          if (key !== "content-length" && key !== "content-encoding" && key !== "transfer-encoding")
            responseHeaders[key] = value
        })
        res.writeHead(upstream.status, responseHeaders)
        if (upstream.body !== null) for await (const chunk of upstream.body) res.write(chunk)
        res.end()
      } catch (error) {
        res.writeHead(502).end(String(error))
      }
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve))
  const address = proxy.address()
  const port = typeof address === "object" && address !== null ? address.port : 0
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: () =>
      new Promise((resolve) => {
        proxy.closeAllConnections()
        proxy.close(() => resolve())
      })
  }
}
