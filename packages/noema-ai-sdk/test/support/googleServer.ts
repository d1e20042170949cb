/**
 * A local server for `@ai-sdk/google` (`baseURL` = `url`): `:generateContent`
 * answers with a JSON body, `:streamGenerateContent?alt=sse` replays lines as
 * SSE `data:` frames byte for byte, both from a queue of replies; requests
 * are recorded. Only what the bridge's tests need.
 */
import * as http from "node:http"

export type Reply =
  | { readonly type: "sse"; readonly lines: ReadonlyArray<string> }
  | { readonly type: "json"; readonly body: string }
  | {
      readonly type: "error"
      readonly status: number
      readonly body: unknown
      readonly headers?: Record<string, string>
    }

export interface Recorded {
  readonly path: string
  readonly body: unknown
}

export interface GoogleServer {
  /** The `baseURL` for `createGoogleGenerativeAI`, e.g. `http://127.0.0.1:4100/v1beta`. */
  readonly url: string
  readonly requests: ReadonlyArray<Recorded>
  enqueue(...replies: ReadonlyArray<Reply>): void
  close(): Promise<void>
}

export const start = (): Promise<GoogleServer> => {
  const queue: Array<Reply> = []
  const requests: Array<Recorded> = []
  const server = http.createServer((req, res) => {
    let raw = ""
    req.setEncoding("utf8")
    req.on("data", (chunk: string) => {
      raw += chunk
    })
    req.on("end", () => {
      requests.push({ path: req.url ?? "", body: raw.length > 0 ? JSON.parse(raw) : undefined })
      const reply = queue.shift()
      if (reply === undefined) {
        res.writeHead(500, { "content-type": "application/json" })
        return res.end(
          JSON.stringify({ error: { code: 500, message: "no scripted reply", status: "INTERNAL" } })
        )
      }
      switch (reply.type) {
        case "sse":
          res.writeHead(200, {
            "content-type": "text/event-stream",
            "x-goog-request-id": `goog_${requests.length}`
          })
          return res.end(reply.lines.map((line) => `data: ${line}\r\n\r\n`).join(""))
        case "json":
          res.writeHead(200, {
            "content-type": "application/json",
            "x-goog-request-id": `goog_${requests.length}`
          })
          return res.end(reply.body)
        case "error":
          res.writeHead(reply.status, { "content-type": "application/json", ...reply.headers })
          return res.end(JSON.stringify(reply.body))
      }
    })
  })
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resolve({
        url: `http://127.0.0.1:${port}/v1beta`,
        requests,
        enqueue: (...replies) => {
          queue.push(...replies)
        },
        close: () =>
          new Promise((done) => {
            server.closeAllConnections()
            server.close(() => done())
          })
      })
    })
  })
}
