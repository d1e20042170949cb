/**
 * AnthropicTestServer: a local HTTP server that speaks Anthropic's Messages
 * API wire format (`POST /v1/messages`, JSON and SSE) and answers from a
 * script, so adapter tests, CLI end-to-end tests and benchmarks run against
 * the real `@anthropic-ai/sdk` (or any client of the wire format, such as
 * `@ai-sdk/anthropic`) without touching the network.
 *
 * Tests enqueue replies (text with or without thinking, tool calls, refusals,
 * errors, recorded event streams replayed as given, dropped or hanging
 * connections); each request takes the next one. Every request is recorded
 * with its headers and parsed body, and whether the client hung up early, so
 * interruption can be asserted on the server side. Plain Promises, so code
 * that does not use Effect can use it; `scoped` wraps it as an Effect resource.
 */
import { Buffer } from "node:buffer"
import * as http from "node:http"
import { Effect, type Scope } from "effect"
import {
  dropEvents,
  errorJson,
  frame,
  type MessageMeta,
  messageEvents,
  messageJson
} from "./internal/testServerWire.js"

export interface StartOptions {
  /** Interface to listen on; defaults to `127.0.0.1` so nothing is exposed beyond the machine. */
  readonly host?: string
  /** Defaults to 0: the OS picks a free port. */
  readonly port?: number
}

export interface Usage {
  /** Input tokens read neither from nor into the cache (Anthropic's `input_tokens`). */
  readonly inputTokens: number
  readonly outputTokens: number
  readonly cacheReadTokens?: number
  readonly cacheWriteTokens?: number
}

interface Delayed {
  /** Wait this long before sending anything (not even headers): a slow server. */
  readonly delayMs?: number
}

interface Streamed extends Delayed {
  /** Pause between consecutive stream events. */
  readonly chunkDelayMs?: number
  /** Pause between the headers and the first stream event (time to first token). */
  readonly firstChunkDelayMs?: number
  /** Defaults to the request's `model`. */
  readonly model?: string
  readonly usage?: Usage
}

/** A thinking block, streamed before the answer, ending with its signature. */
export interface Thinking {
  readonly text: string
  readonly signature: string
}

export interface TextReply extends Streamed {
  readonly type: "text"
  readonly text: string
  readonly thinking?: Thinking
  /** Default `end_turn`. */
  readonly stopReason?: string
  /** How the text is cut into streamed deltas; by default a word or so each. */
  readonly chunks?: ReadonlyArray<string>
}

export interface ToolCall {
  /** Defaults to `toolu_test<n>`, n counting calls across the server's life (reset by `reset()`). */
  readonly id?: string
  readonly name: string
  /** The JSON input, as text. */
  readonly arguments: string
}

export interface ToolCallsReply extends Streamed {
  readonly type: "tool-calls"
  readonly calls: ReadonlyArray<ToolCall>
  /** Text the model writes before the calls. */
  readonly text?: string
  readonly thinking?: Thinking
}

/** Stop reason `refusal`, with Anthropic's explanation in `stop_details` when given. */
export interface RefusalReply extends Streamed {
  readonly type: "refusal"
  readonly explanation?: string
}

export type MessageReply = TextReply | ToolCallsReply | RefusalReply

export interface ErrorReply extends Delayed {
  readonly type: "error"
  readonly status: number
  readonly message?: string
  /** `error.type`; defaults by status (e.g. `rate_limit_error` for 429, `overloaded_error` for 529). */
  readonly errorType?: string
  /** E.g. `{ "retry-after": "2" }` for 429s. */
  readonly headers?: Readonly<Record<string, string>>
}

/**
 * Events replayed as given, each as one SSE frame (`event:` its type, `data:`
 * the object as JSON, or a string verbatim: a recorded line byte for byte).
 * Answers streamed requests only.
 */
export interface EventsReply extends Delayed {
  readonly type: "events"
  readonly events: ReadonlyArray<unknown>
  readonly chunkDelayMs?: number
}

export interface RawReply extends Delayed {
  readonly type: "raw"
  /** Defaults to 200. */
  readonly status?: number
  /** Defaults to `content-type: application/json`. */
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string
}

/** A text answer whose connection is destroyed after `afterChunks` text deltas (streaming only). */
export interface DropReply extends Delayed {
  readonly type: "drop"
  readonly afterChunks: number
  readonly text?: string
  readonly model?: string
}

/** The request is accepted and never answered. */
export interface HangReply extends Delayed {
  readonly type: "hang"
}

export type ScriptedReply =
  | TextReply
  | ToolCallsReply
  | RefusalReply
  | ErrorReply
  | EventsReply
  | RawReply
  | DropReply
  | HangReply

/** A scripted reply, or a function choosing one from the request. */
export type Reply = ScriptedReply | ((request: RecordedRequest) => Reply)

export interface RecordedRequest {
  /** Position in `requests`, counted from the last `reset()`. */
  readonly index: number
  readonly method: string
  /** Path without the query string, e.g. `/v1/messages`. */
  readonly path: string
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>
  /** Parsed JSON, the raw string if it was not JSON, or undefined when the body was empty. */
  readonly body: unknown
  /** `body.stream === true`. */
  readonly stream: boolean
  /** Live: becomes true when the client closes the connection before the response is complete. */
  readonly clientClosedEarly: boolean
}

export interface TestServer {
  /** The base URL, e.g. `http://127.0.0.1:41234` (the SDK adds `/v1/messages`). */
  readonly url: string
  readonly port: number
  /** FIFO: each request takes the next reply. */
  enqueue(...replies: ReadonlyArray<Reply>): void
  /** Used when the queue is empty. Default: a 500 saying "no scripted reply for request #N". */
  setFallback(reply: Reply | undefined): void
  /** Every request, in arrival order (the array is replaced by `reset()`). */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Resolves once at least `count` requests were recorded; rejects after `timeoutMs` (default 5000). */
  waitForRequests(count: number, timeoutMs?: number): Promise<void>
  /**
   * Resolves once request `requestIndex` was closed by the client before its response
   * was complete; rejects if it completes normally, on timeout (default 5000 ms) or on `close()`.
   */
  waitForClose(requestIndex: number, timeoutMs?: number): Promise<void>
  /** Clears the queue, the fallback, the recorded requests and the generated ids (request ids count from 0 again). */
  reset(): void
  /** Stops listening and destroys every open socket, including hanging requests. */
  close(): Promise<void>
}

type Outcome = "pending" | "completed" | "client-closed" | "server-closed"

class Recorded implements RecordedRequest {
  #outcome: Outcome = "pending"
  constructor(
    readonly index: number,
    readonly method: string,
    readonly path: string,
    readonly headers: Readonly<Record<string, string>>,
    readonly body: unknown,
    readonly stream: boolean
  ) {}
  get clientClosedEarly(): boolean {
    return this.#outcome === "client-closed"
  }
  get outcome(): Outcome {
    return this.#outcome
  }
  settle(outcome: Outcome): boolean {
    if (this.#outcome !== "pending") return false
    this.#outcome = outcome
    return true
  }
}

interface Waiter {
  readonly resolve: () => void
  readonly reject: (error: Error) => void
  readonly timer: ReturnType<typeof setTimeout>
  /** A request count, or the index of the request whose close is awaited. */
  readonly target: number
}

interface Exchange {
  readonly record: Recorded
  readonly res: http.ServerResponse
  readonly rawBodyLength: number
  /** Server-wide counter behind `request-id` and the message id. */
  readonly serial: number
}

const defaultWaitMs = 5000

/** Resolves after `ms`, or as soon as the response closes so aborted requests hold no timers. */
const pause = (ms: number, res: http.ServerResponse): Promise<void> =>
  new Promise((resolve) => {
    if (res.destroyed) return resolve()
    const done = () => {
      clearTimeout(timer)
      res.off("close", done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    res.once("close", done)
  })

const lowerCaseKeys = (headers: Readonly<Record<string, string>> | undefined): Record<string, string> => {
  const out: Record<string, string> = {}
  if (headers !== undefined)
    for (const [key, value] of Object.entries(headers)) out[key.toLowerCase()] = value
  return out
}

const flattenHeaders = (headers: http.IncomingHttpHeaders): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(headers)) {
    if (value !== undefined) out[key] = typeof value === "string" ? value : value.join(", ")
  }
  return out
}

const parseBody = (raw: string): unknown => {
  if (raw.length === 0) return undefined
  try {
    return JSON.parse(raw)
  } catch {
    return raw
  }
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

class Server implements TestServer {
  readonly url: string
  readonly port: number
  #recorded: Array<Recorded> = []
  #queue: Array<Reply> = []
  #fallback: Reply | undefined = undefined
  #countWaiters: Array<Waiter> = []
  #closeWaiters: Array<Waiter> = []
  #sockets = new Set<NonNullable<http.IncomingMessage["socket"]>>()
  #served = 0
  #toolCallIds = 0
  #closing: Promise<void> | undefined = undefined
  readonly #http: http.Server

  constructor(server: http.Server, host: string, port: number) {
    this.#http = server
    this.port = port
    this.url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`
    server.on("connection", (socket) => {
      this.#sockets.add(socket)
      socket.once("close", () => this.#sockets.delete(socket))
    })
    server.on("request", (req, res) => this.#receive(req, res))
  }

  get requests(): ReadonlyArray<RecordedRequest> {
    return this.#recorded
  }

  enqueue(...replies: ReadonlyArray<Reply>): void {
    this.#queue.push(...replies)
  }

  setFallback(reply: Reply | undefined): void {
    this.#fallback = reply
  }

  reset(): void {
    this.#queue = []
    this.#fallback = undefined
    this.#recorded = []
    this.#toolCallIds = 0
    this.#served = 0
  }

  waitForRequests(count: number, timeoutMs: number = defaultWaitMs): Promise<void> {
    if (this.#recorded.length >= count) return Promise.resolve()
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        target: count,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#countWaiters = this.#countWaiters.filter((other) => other !== waiter)
          reject(
            new Error(
              `AnthropicTestServer: timed out after ${timeoutMs} ms waiting for ${count} request(s), got ${this.#recorded.length}`
            )
          )
        }, timeoutMs)
      }
      this.#countWaiters.push(waiter)
    })
  }

  waitForClose(requestIndex: number, timeoutMs: number = defaultWaitMs): Promise<void> {
    const record = this.#recorded[requestIndex]
    if (record !== undefined && record.outcome !== "pending") {
      return record.outcome === "client-closed"
        ? Promise.resolve()
        : Promise.reject(notClosedByClient(requestIndex, record.outcome))
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        target: requestIndex,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#closeWaiters = this.#closeWaiters.filter((other) => other !== waiter)
          reject(
            new Error(
              `AnthropicTestServer: timed out after ${timeoutMs} ms waiting for the client to close request #${requestIndex}`
            )
          )
        }, timeoutMs)
      }
      this.#closeWaiters.push(waiter)
    })
  }

  close(): Promise<void> {
    if (this.#closing !== undefined) return this.#closing
    this.#closing = new Promise((resolve) => this.#http.close(() => resolve()))
    const closed = new Error("AnthropicTestServer: server closed")
    for (const waiter of [...this.#countWaiters, ...this.#closeWaiters]) {
      clearTimeout(waiter.timer)
      waiter.reject(closed)
    }
    this.#countWaiters = []
    this.#closeWaiters = []
    for (const socket of this.#sockets) socket.destroy()
    return this.#closing
  }

  #receive(req: http.IncomingMessage, res: http.ServerResponse): void {
    let raw = ""
    req.setEncoding("utf8")
    req.on("data", (chunk: string) => {
      raw += chunk
    })
    req.on("end", () => this.#dispatch(req, res, raw))
  }

  #dispatch(req: http.IncomingMessage, res: http.ServerResponse, raw: string): void {
    const url = req.url ?? "/"
    const query = url.indexOf("?")
    const path = query === -1 ? url : url.slice(0, query)
    const method = req.method ?? "GET"
    const body = parseBody(raw)
    const record = new Recorded(
      this.#recorded.length,
      method,
      path,
      flattenHeaders(req.headers),
      body,
      isRecord(body) && body.stream === true
    )
    this.#recorded.push(record)
    const exchange: Exchange = { record, res, rawBodyLength: raw.length, serial: this.#served++ }
    res.once("finish", () => this.#settle(record, "completed"))
    res.once("close", () =>
      this.#settle(record, this.#closing === undefined ? "client-closed" : "server-closed")
    )
    this.#notifyCount()
    if (method === "POST" && path === "/v1/messages") void this.#respond(exchange, this.#next(record))
    else sendJson(exchange, 404, errorJson(404, `Not found (${method} ${path})`))
  }

  #settle(record: Recorded, outcome: Outcome): void {
    if (!record.settle(outcome)) return
    // A request from before reset() must not satisfy a waiter for the new request with its index.
    if (this.#recorded[record.index] !== record) return
    this.#closeWaiters = this.#closeWaiters.filter((waiter) => {
      if (waiter.target !== record.index) return true
      clearTimeout(waiter.timer)
      if (outcome === "client-closed") waiter.resolve()
      else waiter.reject(notClosedByClient(record.index, outcome))
      return false
    })
  }

  #notifyCount(): void {
    const count = this.#recorded.length
    this.#countWaiters = this.#countWaiters.filter((waiter) => {
      if (count < waiter.target) return true
      clearTimeout(waiter.timer)
      waiter.resolve()
      return false
    })
  }

  #next(record: Recorded): ScriptedReply {
    let reply: Reply | undefined = this.#queue.shift() ?? this.#fallback
    if (reply === undefined)
      return { type: "error", status: 500, message: `no scripted reply for request #${record.index}` }
    try {
      while (typeof reply === "function") reply = reply(record)
    } catch (cause) {
      return { type: "error", status: 500, message: `scripted reply function threw: ${String(cause)}` }
    }
    return reply
  }

  async #respond(exchange: Exchange, reply: ScriptedReply): Promise<void> {
    const { res, record } = exchange
    if (reply.delayMs !== undefined && reply.delayMs > 0) {
      await pause(reply.delayMs, res)
      if (res.destroyed) return
    }
    switch (reply.type) {
      case "hang":
        return
      case "error":
        return sendJson(
          exchange,
          reply.status,
          errorJson(reply.status, reply.message, reply.errorType),
          reply.headers
        )
      case "raw":
        res.writeHead(reply.status ?? 200, {
          "content-type": "application/json",
          "request-id": requestId(exchange),
          ...lowerCaseKeys(reply.headers)
        })
        res.end(reply.body)
        return
      case "events":
        if (!record.stream) {
          return sendJson(
            exchange,
            500,
            errorJson(500, "AnthropicTestServer: an events reply answers only streamed requests")
          )
        }
        return this.#stream(exchange, reply.events.map(frame), 0, reply.chunkDelayMs ?? 0, false)
      case "drop":
        if (!record.stream) return this.#destroy(exchange)
        return this.#stream(exchange, dropEvents(reply, this.#meta(exchange)), 0, 0, true)
      default: {
        const meta = this.#meta(exchange)
        const ids =
          reply.type === "tool-calls"
            ? reply.calls.map((call) => call.id ?? `toolu_test${this.#toolCallIds++}`)
            : []
        if (!record.stream) return sendJson(exchange, 200, messageJson(reply, meta, ids))
        const events = messageEvents(reply, meta, ids)
        return this.#stream(exchange, events, reply.firstChunkDelayMs ?? 0, reply.chunkDelayMs ?? 0, false)
      }
    }
  }

  #meta(exchange: Exchange): MessageMeta {
    const body = exchange.record.body
    return {
      id: `msg_test${exchange.serial}`,
      model: isRecord(body) && typeof body.model === "string" ? body.model : "claude-test",
      inputTokens: Math.max(1, Math.ceil(exchange.rawBodyLength / 4))
    }
  }

  #destroy(exchange: Exchange): void {
    this.#settle(exchange.record, "server-closed")
    exchange.res.destroy()
  }

  async #stream(
    exchange: Exchange,
    events: ReadonlyArray<string>,
    firstDelayMs: number,
    chunkDelayMs: number,
    thenDrop: boolean
  ): Promise<void> {
    const { res } = exchange
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      "request-id": requestId(exchange)
    })
    if (firstDelayMs <= 0 && chunkDelayMs <= 0) {
      // One write for the whole stream keeps benchmarks cheap; SSE clients cannot tell the difference.
      const all = events.join("")
      if (!thenDrop) return void res.end(all)
      // Waiting for the flush makes sure the client received the partial stream before the reset.
      res.write(all, () => this.#destroy(exchange))
      return
    }
    res.flushHeaders()
    for (let i = 0; i < events.length; i++) {
      const wait = i === 0 ? firstDelayMs : chunkDelayMs
      if (wait > 0) {
        await pause(wait, res)
        if (res.destroyed) return
      }
      res.write(events[i])
    }
    if (thenDrop) this.#destroy(exchange)
    else res.end()
  }
}

const requestId = (exchange: Exchange): string => `req_test${exchange.serial}`

const notClosedByClient = (index: number, outcome: Outcome): Error =>
  new Error(
    outcome === "completed"
      ? `AnthropicTestServer: request #${index} completed before the client closed it`
      : `AnthropicTestServer: request #${index} was closed by the server, not the client`
  )

const sendJson = (
  exchange: Exchange,
  status: number,
  value: unknown,
  headers?: Readonly<Record<string, string>>
): void => {
  const body = JSON.stringify(value)
  exchange.res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    "request-id": requestId(exchange),
    ...lowerCaseKeys(headers)
  })
  exchange.res.end(body)
}

export const start = (options: StartOptions = {}): Promise<TestServer> => {
  const host = options.host ?? "127.0.0.1"
  const server = http.createServer()
  return new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject)
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : (options.port ?? 0)
      resolve(new Server(server, host, port))
    })
  })
}

export const scoped = (options?: StartOptions): Effect.Effect<TestServer, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (server) => Effect.promise(() => server.close())
  )
