/**
 * SqlCounter: a TCP proxy in front of PostgreSQL that counts the statements its
 * clients execute, by statement text, whatever process or driver sends them.
 *
 * It reads the frontend side of the wire protocol only: a simple query (`Q`)
 * counts its text; the extended protocol counts one per `Execute` (`E`), under
 * the text that the bound statement was parsed from (`P`, then `B` names it), so
 * a prepared statement run a thousand times counts a thousand. Everything is
 * forwarded unchanged; TLS is not supported (the bench's servers are local and
 * plain).
 */
import * as net from "node:net"

export interface Counter {
  /** `postgres://...` of the proxy for a URL of the server it fronts. */
  readonly url: (serverUrl: string) => string
  /** Statements executed since the last `reset`, by text (whitespace folded). */
  readonly counts: () => ReadonlyMap<string, number>
  readonly reset: () => void
  readonly close: () => Promise<void>
}

const fold = (text: string) => text.replace(/\s+/g, " ").trim()

/** Reads a NUL-terminated string at `offset`: the string and the offset after its NUL. */
const cstring = (buffer: Buffer, offset: number): [string, number] => {
  const end = buffer.indexOf(0, offset)
  return [buffer.toString("utf8", offset, end), end + 1]
}

/** One client connection's frontend stream: statements parsed, the one bound, and the bytes not yet a message. */
const frontend = (count: (text: string) => void) => {
  const statements = new Map<string, string>()
  let bound = ""
  let pending: Buffer = Buffer.alloc(0)
  let started = false
  return (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
    while (true) {
      // The startup (and SSL request) messages have no type byte.
      if (!started) {
        if (pending.length < 8) return
        const length = pending.readInt32BE(0)
        if (pending.length < length) return
        const code = pending.readInt32BE(4)
        pending = pending.subarray(length)
        if (code !== 80877103 && code !== 80877104) started = true
        continue
      }
      if (pending.length < 5) return
      const length = pending.readInt32BE(1)
      if (pending.length < length + 1) return
      const type = String.fromCharCode(pending[0]!)
      const body = pending.subarray(5, length + 1)
      if (type === "Q") count(cstring(body, 0)[0])
      else if (type === "P") {
        const [name, next] = cstring(body, 0)
        statements.set(name, cstring(body, next)[0])
      } else if (type === "B") {
        const [, next] = cstring(body, 0)
        bound = cstring(body, next)[0]
      } else if (type === "E") count(statements.get(bound) ?? "<unknown statement>")
      pending = pending.subarray(length + 1)
    }
  }
}

/** Starts the proxy in front of `target` (host and port of the server). */
export const start = async (target: { readonly host: string; readonly port: number }): Promise<Counter> => {
  let counts = new Map<string, number>()
  const count = (text: string) => {
    const key = fold(text)
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host)
    // Small messages go at once both ways, as the drivers send them (Nagle would hold each one).
    client.setNoDelay(true)
    upstream.setNoDelay(true)
    sockets.add(client).add(upstream)
    const read = frontend(count)
    client.on("data", (chunk: Buffer) => {
      read(chunk)
      upstream.write(chunk)
    })
    upstream.pipe(client)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on("close", end).on("error", end)
    upstream.on("close", end).on("error", end)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as net.AddressInfo
  return {
    url: (serverUrl) => {
      const url = new URL(serverUrl)
      url.hostname = "127.0.0.1"
      url.port = String(port)
      return url.toString()
    },
    counts: () => counts,
    reset: () => {
      counts = new Map()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      })
  }
}
