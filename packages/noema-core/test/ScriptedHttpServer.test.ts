/**
 * ScriptedHttpServer with a minimal wire (replies are bodies to echo, SSE
 * frames, hangs or drops), driven by fetch: the recording, queueing, waiting
 * and closing every provider's test server relies on.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { ScriptedHttpServer } from "../src/testing.js"

type Reply =
  | { readonly type: "json"; readonly value: unknown }
  | { readonly type: "failure"; readonly message: string }
  | { readonly type: "frames"; readonly frames: ReadonlyArray<string>; readonly drop?: boolean }
  | { readonly type: "hang" }

let resets = 0

const wire: ScriptedHttpServer.Wire<Reply> = {
  name: "EchoServer",
  basePath: "/api",
  requestIdHeader: "x-echo-id",
  scriptFailure: (message) => ({ type: "failure", message }),
  reset: () => {
    resets++
  },
  answer: (exchange) => {
    const reply = exchange.next()
    switch (reply.type) {
      case "json":
        return exchange.sendJson(200, { reply: reply.value, serial: exchange.serial })
      case "failure":
        return exchange.sendJson(500, { failure: reply.message })
      case "frames":
        return exchange.stream(reply.frames, { thenDrop: reply.drop === true })
      case "hang":
        return
    }
  }
}

let server: ScriptedHttpServer.Server<Reply>

beforeAll(async () => {
  server = await ScriptedHttpServer.start(wire)
})
afterAll(() => server.close())
afterEach(() => server.reset())

const post = (body: unknown, init: RequestInit = {}) =>
  fetch(`${server.url}/chat?mode=fast`, {
    method: "POST",
    headers: { "content-type": "application/json", "X-Custom": "yes" },
    body: JSON.stringify(body),
    ...init
  })

interface Answer {
  readonly reply?: unknown
  readonly failure?: string
}

const answer = async (response: Promise<Response>): Promise<Answer> =>
  (await (await response).json()) as Answer

describe("ScriptedHttpServer", () => {
  it("serves under the wire's base path and records method, path, query, headers and parsed body", async () => {
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/api`)
    server.enqueue({ type: "json", value: "one" })
    const response = await post({ stream: true, text: "hi" })
    expect(response.headers.get("x-echo-id")).toBe("req_test0")
    expect(await response.json()).toEqual({ reply: "one", serial: 0 })
    const [request] = server.requests
    expect(request).toMatchObject({
      index: 0,
      method: "POST",
      path: "/api/chat",
      query: "mode=fast",
      body: { stream: true, text: "hi" },
      stream: true,
      clientClosedEarly: false
    })
    expect(request?.headers["x-custom"]).toBe("yes")
  })

  it("answers in queue order, then from the fallback, then with the wire's script failure", async () => {
    server.enqueue({ type: "json", value: 1 }, (request) => ({ type: "json", value: request.query }))
    server.setFallback({ type: "json", value: "fallback" })
    expect((await answer(post({}))).reply).toBe(1)
    expect((await answer(post({}))).reply).toBe("mode=fast")
    expect((await answer(post({}))).reply).toBe("fallback")
    server.setFallback(undefined)
    const missing = await post({})
    expect(missing.status).toBe(500)
    expect(await missing.json()).toEqual({ failure: "no scripted reply for request #3" })
    server.enqueue(() => {
      throw new Error("boom")
    })
    expect((await answer(post({}))).failure).toMatch(/scripted reply function threw: Error: boom/)
  })

  it("reset clears the script and the records, restarts request ids and resets the wire", async () => {
    server.enqueue({ type: "json", value: 1 })
    await post({})
    server.enqueue({ type: "json", value: 2 })
    const before = resets
    server.reset()
    expect(resets).toBe(before + 1)
    expect(server.requests).toHaveLength(0)
    const response = await post({})
    expect(response.status).toBe(500)
    expect(response.headers.get("x-echo-id")).toBe("req_test0")
  })

  it("writes SSE frames as an event stream, and drops the connection after them when asked", async () => {
    server.enqueue({ type: "frames", frames: ["data: 1\n\n", "data: 2\n\n"] })
    const whole = await post({ stream: true })
    expect(whole.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(await whole.text()).toBe("data: 1\n\ndata: 2\n\n")
    server.enqueue({ type: "frames", frames: ["data: 1\n\n"], drop: true })
    const dropped = await post({ stream: true })
    await expect(dropped.text()).rejects.toThrow()
    expect(server.requests[1]?.clientClosedEarly).toBe(false)
  })

  it("waitForClose resolves when the client hangs up, and rejects for an answer that completed", async () => {
    server.enqueue({ type: "hang" })
    const controller = new AbortController()
    const pending = post({}, { signal: controller.signal }).catch(() => undefined)
    await server.waitForRequests(1)
    const closed = server.waitForClose(0)
    controller.abort()
    await closed
    await pending
    expect(server.requests[0]?.clientClosedEarly).toBe(true)
    server.enqueue({ type: "json", value: "done" })
    await (await post({})).text()
    await expect(server.waitForClose(1, 2000)).rejects.toThrow(/EchoServer: request #1 completed/)
  })

  it("waitForRequests times out with the server's name and the count it saw", async () => {
    await expect(server.waitForRequests(1, 20)).rejects.toThrow(
      /EchoServer: timed out after 20 ms waiting for 1 request\(s\), got 0/
    )
  })

  it("close destroys hanging requests and rejects what still waits", async () => {
    const own = await ScriptedHttpServer.start(wire)
    own.enqueue({ type: "hang" })
    const hanging = fetch(`${own.url}/x`, { method: "POST", body: "{}" })
    await own.waitForRequests(1)
    const waiting = expect(own.waitForRequests(5, 60_000)).rejects.toThrow(/EchoServer: server closed/)
    await own.close()
    await expect(hanging).rejects.toThrow()
    await waiting
  })
})
