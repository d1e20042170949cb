/**
 * The fetch the SDKs noema builds send through (internal/transport.ts): requests go to
 * undici's dispatcher without fetch's WHATWG layer, and every case here answers as
 * `fetch` itself does (each is run through both and compared), streams bodies as they
 * arrive, aborts by closing the connection, and keeps connections alive.
 */
import { execFile } from "node:child_process"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as net from "node:net"
import { setTimeout as sleep } from "node:timers/promises"
import * as zlib from "node:zlib"
import { assert, describe, it } from "@effect/vitest"
import { afterAll, beforeAll } from "vitest"
import { dispatchingFetch } from "../src/internal/transport.js"

interface Seen {
  readonly method: string
  readonly url: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** Larger than the body's queue (64 KiB) many times over, so a slow reader pauses the socket. */
const large = Buffer.alloc(4 * 1024 * 1024, "abcdefghijklmnopqrstuvwxyz")
const seen: Array<Seen> = []
let sockets = 0
let closed = 0
let waiting = 0
/** Each path is one behaviour of a server. */
const routes: Record<string, (request: http.IncomingMessage, response: http.ServerResponse) => void> = {
  "/echo": (request, response) => {
    let body = ""
    request.setEncoding("utf8")
    request.on("data", (chunk) => {
      body += chunk
    })
    request.on("end", () => {
      seen.push({ method: request.method ?? "", url: request.url ?? "", headers: request.headers, body })
      response.writeHead(201, "Made", { "content-type": "application/json", "x-request-id": "req_1" })
      response.end(JSON.stringify({ method: request.method, body }))
    })
  },
  "/large": (_request, response) => {
    response.writeHead(200, { "content-type": "application/octet-stream" })
    response.end(large)
  },
  "/odd": (_request, response) => {
    response.writeHead(600, "Odd", { "content-type": "text/plain" }).end("beyond 599")
  },
  "/empty": (_request, response) => {
    response.writeHead(204).end()
  },
  "/gzip": (_request, response) => {
    response.writeHead(200, { "content-encoding": "gzip", "content-type": "text/plain" })
    response.end(zlib.gzipSync("compressed anyway"))
  },
  "/moved": (_request, response) => {
    response.writeHead(307, { location: "/echo" }).end()
  },
  "/cut": (_request, response) => {
    response.writeHead(200, { "content-type": "text/plain", "content-length": "100" })
    response.write("only part")
    setTimeout(() => response.destroy(), 20)
  },
  "/slow": (request, response) => {
    response.writeHead(200, { "content-type": "text/event-stream" })
    response.write("data: first\n\n")
    // Never ends: the client must close it.
    request.socket.once("close", () => {
      closed++
    })
  },
  "/silent": (request) => {
    waiting++
    request.socket.once("close", () => {
      closed++
    })
  }
}

let server: http.Server
let base = ""
beforeAll(async () => {
  server = http.createServer((request, response) => {
    const route = routes[new URL(request.url ?? "/", "http://x").pathname]
    if (route === undefined) response.writeHead(404).end("no such route")
    else route(request, response)
  })
  server.on("connection", () => {
    sockets++
  })
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  // The first fetch of a process installs the dispatcher the transport then uses.
  await (await fetch(`${base}/empty`)).text()
})
afterAll(() => {
  server.closeAllConnections()
  server.close()
})

const transport = dispatchingFetch(globalThis.fetch)

/** What a caller can observe of a response. */
const observe = async (response: Response) => ({
  status: response.status,
  statusText: response.statusText,
  type: response.headers.get("content-type"),
  requestId: response.headers.get("x-request-id"),
  body: response.body === null ? null : await response.text()
})

const bothAnswer = async (path: string, init?: RequestInit) => {
  const viaFetch = await observe(await fetch(`${base}${path}`, init))
  const viaTransport = await observe(await transport(`${base}${path}`, init))
  assert.deepStrictEqual(viaTransport, viaFetch)
  return viaTransport
}

/** fetch's failure and the transport's, as a caller classifies them. */
const failureOf = async (attempt: () => Promise<unknown>) => {
  try {
    await attempt()
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause
    return { name: (error as Error).name, message: (error as Error).message, code: cause?.code }
  }
  assert.fail("expected a failure")
}

const waitFor = async (condition: () => boolean) => {
  for (let i = 0; i < 500 && !condition(); i++) await sleep(10)
  assert.isTrue(condition())
}

describe("dispatchingFetch", () => {
  it("answers as fetch does: status, status text, headers, body (a POST with its body)", async () => {
    const init = { method: "POST", headers: { "content-type": "application/json" }, body: '{"q":1}' }
    const answer = await bothAnswer("/echo", init)
    assert.strictEqual(answer.status, 201)
    assert.strictEqual(answer.body, JSON.stringify({ method: "POST", body: '{"q":1}' }))
    assert.strictEqual(seen.at(-1)?.headers["content-length"], "7")
  })

  it("sends the caller's headers and none that fetch's WHATWG layer adds", async () => {
    const headers = new Headers({ authorization: "Bearer k", "x-extra": "yes" })
    await (await transport(`${base}/echo`, { method: "POST", headers, body: "{}" })).text()
    const sent = seen.at(-1)?.headers ?? {}
    assert.strictEqual(sent.authorization, "Bearer k")
    assert.strictEqual(sent["x-extra"], "yes")
    assert.isUndefined(sent["sec-fetch-mode"], "fetch's own header: the request did not go through fetch")
  })

  it("a body larger than its queue, read slowly, arrives whole and in order", async () => {
    const reader = ((await transport(`${base}/large`)).body as ReadableStream<Uint8Array>).getReader()
    const chunks: Array<Uint8Array> = []
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      chunks.push(read.value)
      // A reader slower than the socket: the queue fills and undici pauses until the next read.
      if (chunks.length % 16 === 0) await sleep(1)
    }
    assert.isTrue(Buffer.concat(chunks).equals(large))
  })

  it("a GET without a body, a 204 without one, a body fetch would send itself", async () => {
    await bothAnswer("/echo")
    assert.isNull((await bothAnswer("/empty")).body)
    const bytes = new TextEncoder().encode("as bytes")
    assert.strictEqual(
      (await bothAnswer("/echo", { method: "POST", body: bytes })).body,
      '{"method":"POST","body":"as bytes"}'
    )
  })

  it("a status beyond what Response's constructor takes (600) is handed out as fetch does", async () => {
    const response = await transport(`${base}/odd`)
    assert.deepStrictEqual([response.status, response.ok], [600, false])
    assert.strictEqual((await bothAnswer("/odd")).body, "beyond 599")
  })

  it("gives a string body without a content type fetch's (text/plain)", async () => {
    await (await fetch(`${base}/echo`, { method: "POST", body: "plain" })).text()
    const viaFetch = seen.at(-1)?.headers["content-type"]
    await (await transport(`${base}/echo`, { method: "POST", body: "plain" })).text()
    assert.strictEqual(seen.at(-1)?.headers["content-type"], viaFetch)
  })

  it("refuses as fetch does: a GET with a body, a forbidden method, a URL it cannot parse", async () => {
    const cases: Array<[string, RequestInit | undefined]> = [
      [`${base}/echo`, { method: "GET", body: "no" }],
      [`${base}/echo`, { method: "TRACE" }],
      ["/relative", undefined]
    ]
    for (const [url, init] of cases) {
      assert.deepStrictEqual(
        await failureOf(() => transport(url, init)),
        await failureOf(() => fetch(url, init))
      )
    }
  })

  it("follows a redirect as fetch does (a 307 resends the POST and its body)", async () => {
    const answer = await bothAnswer("/moved", { method: "POST", body: "again" })
    assert.strictEqual(answer.body, '{"method":"POST","body":"again"}')
  })

  it("decodes a body the server compressed unasked", async () => {
    assert.strictEqual((await bothAnswer("/gzip")).body, "compressed anyway")
  })

  it("fails as fetch does: a refused connection, a URL with credentials or a port fetch refuses, a body cut short", async () => {
    const refusing = http.createServer()
    await new Promise<void>((listening) => refusing.listen(0, "127.0.0.1", listening))
    const port = (refusing.address() as AddressInfo).port
    await new Promise((done) => refusing.close(done))
    const refused = `http://127.0.0.1:${port}/`
    const viaTransport = await failureOf(() => transport(refused))
    assert.deepStrictEqual(viaTransport, await failureOf(() => fetch(refused)))
    assert.strictEqual(viaTransport.code, "ECONNREFUSED")

    for (const refusedByFetch of [`http://user:secret@127.0.0.1:${port}/`, "http://127.0.0.1:6000/"]) {
      assert.deepStrictEqual(
        await failureOf(() => transport(refusedByFetch)),
        await failureOf(() => fetch(refusedByFetch))
      )
    }

    const cut = await failureOf(async () => (await transport(`${base}/cut`)).text())
    assert.deepStrictEqual(cut, await failureOf(async () => (await fetch(`${base}/cut`)).text()))
    assert.strictEqual(cut.message, "terminated")
  })

  it("streams a body as it arrives, and an abort mid-stream closes the connection", async () => {
    const before = closed
    const controller = new AbortController()
    const response = await transport(`${base}/slow`, { signal: controller.signal })
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    const first = await reader.read()
    assert.strictEqual(new TextDecoder().decode(first.value), "data: first\n\n")
    const reason = new Error("stop")
    controller.abort(reason)
    const failure = await reader.read().then(
      () => undefined,
      (error: unknown) => error
    )
    assert.strictEqual(failure, reason, "the reader fails with the signal's reason, as fetch's")
    await waitFor(() => closed === before + 1)
  })

  it("an abort before the response rejects with the signal's reason and closes the connection", async () => {
    const before = closed
    const arrived = waiting
    const controller = new AbortController()
    const pending = transport(`${base}/silent`, { signal: controller.signal })
    await waitFor(() => waiting === arrived + 1)
    controller.abort()
    const failure = await failureOf(() => pending)
    assert.strictEqual(failure.name, "AbortError")
    await waitFor(() => closed === before + 1)
    const already = await failureOf(() => transport(`${base}/echo`, { signal: AbortSignal.abort() }))
    assert.strictEqual(already.name, "AbortError")
  })

  it("goes through the proxy fetch would use (NODE_USE_ENV_PROXY)", async () => {
    // undici tunnels through a proxy (CONNECT) even to an http target: this one tunnels to the test server.
    const tunnels: Array<string | undefined> = []
    const proxy = http.createServer()
    proxy.on("connect", (request: http.IncomingMessage, client: net.Socket, head: Buffer) => {
      tunnels.push(request.url)
      const upstream = net.connect((server.address() as AddressInfo).port, "127.0.0.1", () => {
        client.write("HTTP/1.1 200 Connection Established\r\n\r\n")
        upstream.write(head)
        upstream.pipe(client)
        client.pipe(upstream)
      })
    })
    await new Promise<void>((listening) => proxy.listen(0, "127.0.0.1", listening))
    const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`
    const module = new URL("../src/internal/transport.ts", import.meta.url).href
    const script = `const { dispatchingFetch } = await import(${JSON.stringify(module)})
const response = await dispatchingFetch(fetch)("http://model.example/echo", { method: "POST", body: "proxied" })
process.stdout.write(await response.text(), () => process.exit(0))`
    try {
      const output = await new Promise<string>((done, fail) =>
        execFile(
          process.execPath,
          ["--input-type=module", "-e", script],
          { timeout: 60_000, env: { ...process.env, NODE_USE_ENV_PROXY: "1", HTTP_PROXY: proxyUrl } },
          (error, stdout, stderr) =>
            error === null ? done(stdout) : fail(new Error(`${error.message} ${stderr}`))
        )
      )
      assert.strictEqual(output, '{"method":"POST","body":"proxied"}')
      assert.deepStrictEqual(tunnels, ["model.example:80"])
      assert.strictEqual(seen.at(-1)?.headers.host, "model.example")
      assert.isUndefined(seen.at(-1)?.headers["sec-fetch-mode"], "sent by the transport, not by fetch")
    } finally {
      proxy.closeAllConnections()
      proxy.close()
    }
  })

  it("leaves a fetch that is not Node's own (a mock, a wrapper) in charge of every request", async () => {
    const mocked = dispatchingFetch(async () => new Response("mocked"))
    assert.strictEqual(await (await mocked(`${base}/echo`)).text(), "mocked")
    const wrapped = dispatchingFetch(new Proxy(globalThis.fetch, {}))
    await (await wrapped(`${base}/echo`, { method: "POST", body: "x" })).text()
    assert.strictEqual(seen.at(-1)?.headers["sec-fetch-mode"], "cors", "sent by fetch itself")
  })

  it("keeps the connection alive across requests", async () => {
    await (await transport(`${base}/echo`)).text()
    const opened = sockets
    for (let i = 0; i < 5; i++) await (await transport(`${base}/echo`, { method: "POST", body: "x" })).text()
    assert.strictEqual(sockets, opened)
  })
})
