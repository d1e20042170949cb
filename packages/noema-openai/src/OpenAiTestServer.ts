/**
 * OpenAiTestServer: a local HTTP server that speaks OpenAI's wire format
 * (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/models`) and answers from a
 * script, so adapter tests, CLI end-to-end tests and benchmarks can run against
 * the real `openai` SDK without touching the network.
 *
 * Tests enqueue replies (text, tool calls, refusals, errors, raw bodies, dropped
 * or hanging connections, embeddings); each chat/embeddings request takes the
 * next one. Every request is recorded with its parsed body, and whether the
 * client hung up early, so interruption can be asserted on the server side.
 *
 * The API is plain Promises so non-Effect code can use it; `scoped` wraps it as
 * an Effect resource.
 */
import { Buffer } from "node:buffer"
import * as http from "node:http"
import type { Scope } from "effect"
import { Effect } from "effect"
import {
  chatCompletionEvents,
  chatCompletionJson,
  dropEvents,
  deterministicEmbedding as embed,
  embeddingsJson,
  errorJson,
  modelsJson,
  type StreamMeta,
  sseEvents
} from "./internal/testServerWire.js"

export interface StartOptions {
  /** Interface to listen on; defaults to `127.0.0.1` so nothing is exposed beyond the machine. */
  readonly host?: string
  /** Defaults to 0: the OS picks a free port, which lets test files run in parallel. */
  readonly port?: number
}

export interface Usage {
  readonly promptTokens: number
  readonly completionTokens: number
  readonly cachedTokens?: number
  readonly reasoningTokens?: number
}

interface Delayed {
  /** Wait this long before sending anything (not even headers): a slow server. */
  readonly delayMs?: number
}

export interface TextReply extends Delayed {
  readonly type: "text"
  readonly text: string
  /** Reasoning sent before the text as `reasoning_content`, the way DeepSeek and Qwen send it. */
  readonly reasoning?: string
  readonly finishReason?: "stop" | "length" | "content_filter"
  readonly usage?: Usage
  /** How the text is cut into streamed deltas; by default a few characters/words each. */
  readonly chunks?: ReadonlyArray<string>
  /** Pause between consecutive stream events. */
  readonly chunkDelayMs?: number
  /** Pause between the headers and the first stream event (time to first token). */
  readonly firstChunkDelayMs?: number
  /** Defaults to the request's `model`. */
  readonly model?: string
}

export interface ToolCall {
  /** Defaults to `call_<n>`, n counting calls across the server's life (reset by `reset()`). */
  readonly id?: string
  readonly name: string
  /** The JSON arguments, verbatim (need not be valid JSON, for malformed-arguments tests). */
  readonly arguments: string
}

export interface ToolCallsReply extends Delayed {
  readonly type: "tool-calls"
  readonly calls: ReadonlyArray<ToolCall>
  /** Content the model emits before the calls. */
  readonly text?: string
  readonly usage?: Usage
  readonly chunkDelayMs?: number
  readonly firstChunkDelayMs?: number
  readonly model?: string
}

export interface RefusalReply extends Delayed {
  readonly type: "refusal"
  readonly refusal: string
  readonly usage?: Usage
  readonly chunkDelayMs?: number
  readonly firstChunkDelayMs?: number
  readonly model?: string
}

export interface ErrorReply extends Delayed {
  readonly type: "error"
  readonly status: number
  readonly message?: string
  /** `error.type`; defaults by status (e.g. `invalid_request_error`, `server_error`). */
  readonly errorType?: string
  /** `error.code`; defaults to `invalid_api_key` for 401, `rate_limit_exceeded` for 429, else null. */
  readonly code?: string
  /** E.g. `{ "retry-after": "2", "retry-after-ms": "2000" }` for 429s. */
  readonly headers?: Readonly<Record<string, string>>
}

export interface RawReply extends Delayed {
  readonly type: "raw"
  /** Defaults to 200. */
  readonly status?: number
  /** Defaults to `content-type: application/json`; pass `text/event-stream` for hand-written SSE. */
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * A stream replayed as given: each event is one `data:` frame (objects as JSON,
 * strings verbatim), for chunks shaped like a particular provider's. Answers
 * streamed requests only.
 */
export interface SseReply extends Delayed {
  readonly type: "sse"
  readonly events: ReadonlyArray<unknown>
  /** End with `data: [DONE]`. Default true. */
  readonly done?: boolean
  readonly chunkDelayMs?: number
}

export interface DropReply extends Delayed {
  readonly type: "drop"
  /** Streaming: content deltas sent before the socket is destroyed. Ignored when not streaming. */
  readonly afterChunks: number
  readonly text?: string
  readonly chunkDelayMs?: number
}

export interface HangReply extends Delayed {
  readonly type: "hang"
}

export interface EmbeddingsUsage {
  readonly promptTokens: number
  /** Defaults to `promptTokens`. */
  readonly totalTokens?: number
}

export interface EmbeddingsReply extends Delayed {
  readonly type: "embeddings"
  /** Sent as given (through float32 when the client asks for base64). Default: `deterministicEmbedding` of each input. */
  readonly vectors?: ReadonlyArray<ReadonlyArray<number>>
  /** Length of generated vectors; defaults to the request's `dimensions`, else 8. */
  readonly dimensions?: number
  readonly usage?: EmbeddingsUsage
  readonly model?: string
}

export type ScriptedReply =
  | TextReply
  | ToolCallsReply
  | RefusalReply
  | ErrorReply
  | RawReply
  | SseReply
  | DropReply
  | HangReply
  | EmbeddingsReply

/** A scripted reply, or a function choosing one from the request (e.g. to echo or branch on it). */
export type Reply = ScriptedReply | ((request: RecordedRequest) => Reply)

export interface RecordedRequest {
  /** Position in `requests`, counted from the last `reset()`. */
  readonly index: number
  readonly method: string
  /** Path without the query string, e.g. `/v1/chat/completions`. */
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
  /** Base URL including `/v1`, e.g. `http://127.0.0.1:41234/v1`: pass it as the SDK's `baseURL`. */
  readonly url: string
  readonly port: number
  /** FIFO: each chat/embeddings request takes the next reply. */
  enqueue(...replies: ReadonlyArray<Reply>): void
  /** Used when the queue is empty. Default: a 500 saying "no scripted reply for request #N". */
  setFallback(reply: Reply | undefined): void
  /** Every request, in arrival order (the array is replaced by `reset()`). */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Resolves once at least `count` requests were recorded; rejects after `timeoutMs` (default 5000). */
  waitForRequests(count: number, timeoutMs?: number): Promise<void>
  /**
   * Resolves once request `requestIndex` was closed by the client before its response
   * was complete; rejects if it completes normally, on timeout (default 5000ms) or on `close()`.
   */
  waitForClose(requestIndex: number, timeoutMs?: number): Promise<void>
  /** Clears the queue, the fallback, the recorded requests and the generated-id counters. */
  reset(): void
  /** Stops listening and destroys every open socket, including hanging requests. */
  close(): Promise<void>
}

/**
 * The vector the server returns for `text` when an embeddings reply has no `vectors`:
 * seeded by a hash of the text, unit length, and exactly representable as float32 so
 * the float and base64 encodings decode to the same numbers.
 */
export const deterministicEmbedding: (text: string, dimensions?: number) => ReadonlyArray<number> = embed

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
}
interface CountWaiter extends Waiter {
  readonly count: number
}
interface CloseWaiter extends Waiter {
  readonly index: number
}

/** Per-request state shared by the response writers. */
interface Exchange {
  readonly record: Recorded
  readonly res: http.ServerResponse
  readonly rawBodyLength: number
  /** Server-wide counter behind `x-request-id` and the completion id. */
  readonly serial: number
}

const DEFAULT_WAIT_MS = 5000

const JSON_TYPE = "application/json"

/** Resolves after `ms`, or as soon as the response closes so aborted requests don't hold timers. */
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
  if (headers !== undefined) for (const [k, v] of Object.entries(headers)) out[k.toLowerCase()] = v
  return out
}

const flattenHeaders = (headers: http.IncomingHttpHeaders): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(headers)) {
    if (v !== undefined) out[k] = typeof v === "string" ? v : v.join(", ")
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

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

class Server implements TestServer {
  readonly url: string
  readonly port: number
  #recorded: Array<Recorded> = []
  #queue: Array<Reply> = []
  #fallback: Reply | undefined = undefined
  #countWaiters: Array<CountWaiter> = []
  #closeWaiters: Array<CloseWaiter> = []
  #sockets = new Set<NonNullable<http.IncomingMessage["socket"]>>()
  #served = 0
  #toolCallIds = 0
  #closing: Promise<void> | undefined = undefined

  readonly #http: http.Server

  constructor(server: http.Server, host: string, port: number) {
    this.#http = server
    this.port = port
    this.url = `http://${host.includes(":") ? `[${host}]` : host}:${port}/v1`
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
  }

  waitForRequests(count: number, timeoutMs: number = DEFAULT_WAIT_MS): Promise<void> {
    if (this.#recorded.length >= count) return Promise.resolve()
    return new Promise((resolve, reject) => {
      const waiter: CountWaiter = {
        count,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#countWaiters = this.#countWaiters.filter((w) => w !== waiter)
          reject(
            new Error(
              `OpenAiTestServer: timed out after ${timeoutMs}ms waiting for ${count} request(s), got ${this.#recorded.length}`
            )
          )
        }, timeoutMs)
      }
      this.#countWaiters.push(waiter)
    })
  }

  waitForClose(requestIndex: number, timeoutMs: number = DEFAULT_WAIT_MS): Promise<void> {
    const record = this.#recorded[requestIndex]
    if (record !== undefined && record.outcome !== "pending") {
      return record.outcome === "client-closed"
        ? Promise.resolve()
        : Promise.reject(notClosedByClient(requestIndex, record.outcome))
    }
    return new Promise((resolve, reject) => {
      const waiter: CloseWaiter = {
        index: requestIndex,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#closeWaiters = this.#closeWaiters.filter((w) => w !== waiter)
          reject(
            new Error(
              `OpenAiTestServer: timed out after ${timeoutMs}ms waiting for the client to close request #${requestIndex}`
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
    const closed = new Error("OpenAiTestServer: server closed")
    for (const w of [...this.#countWaiters, ...this.#closeWaiters]) {
      clearTimeout(w.timer)
      w.reject(closed)
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
    const q = url.indexOf("?")
    const path = q === -1 ? url : url.slice(0, q)
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

    if (this.#countWaiters.length > 0) this.#notifyCount()

    if (method === "POST" && path === "/v1/chat/completions") {
      void this.#respond(exchange, this.#next(record), "chat")
    } else if (method === "POST" && path === "/v1/responses") {
      // The Responses API: answered by `sse` (recorded event streams), `raw`, `error`, `hang` and `drop` replies.
      void this.#respond(exchange, this.#next(record), "responses")
    } else if (method === "POST" && path === "/v1/embeddings") {
      void this.#respond(exchange, this.#next(record), "embeddings")
    } else if (method === "GET" && path === "/v1/models") {
      sendJson(exchange, 200, modelsJson())
    } else {
      sendJson(exchange, 404, errorJson(404, `Invalid URL (${method} ${path})`))
    }
  }

  #settle(record: Recorded, outcome: Outcome): void {
    if (!record.settle(outcome)) return
    // A request from before reset() must not satisfy a waiter for the new request with its index.
    if (this.#closeWaiters.length === 0 || this.#recorded[record.index] !== record) return
    const remaining: Array<CloseWaiter> = []
    for (const w of this.#closeWaiters) {
      if (w.index !== record.index) {
        remaining.push(w)
        continue
      }
      clearTimeout(w.timer)
      if (outcome === "client-closed") w.resolve()
      else w.reject(notClosedByClient(record.index, outcome))
    }
    this.#closeWaiters = remaining
  }

  #notifyCount(): void {
    const n = this.#recorded.length
    this.#countWaiters = this.#countWaiters.filter((w) => {
      if (n < w.count) return true
      clearTimeout(w.timer)
      w.resolve()
      return false
    })
  }

  #next(record: Recorded): ScriptedReply {
    let reply: Reply | undefined = this.#queue.shift() ?? this.#fallback
    if (reply === undefined) {
      return { type: "error", status: 500, message: `no scripted reply for request #${record.index}` }
    }
    try {
      while (typeof reply === "function") reply = reply(record)
    } catch (cause) {
      return { type: "error", status: 500, message: `scripted reply function threw: ${String(cause)}` }
    }
    return reply
  }

  async #respond(
    exchange: Exchange,
    reply: ScriptedReply,
    route: "chat" | "responses" | "embeddings"
  ): Promise<void> {
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
          errorJson(reply.status, reply.message, reply.errorType, reply.code),
          reply.headers
        )
      case "raw": {
        const headers = {
          "content-type": JSON_TYPE,
          "x-request-id": `req_test${exchange.serial}`,
          ...lowerCaseKeys(reply.headers)
        }
        res.writeHead(reply.status ?? 200, headers)
        res.end(reply.body)
        return
      }
      case "sse":
        if (route === "embeddings") return mismatch(exchange, reply.type)
        if (!record.stream) {
          return sendJson(
            exchange,
            500,
            errorJson(500, "OpenAiTestServer: an sse reply answers only streamed requests")
          )
        }
        return this.#stream(exchange, sseEvents(reply), 0, reply.chunkDelayMs ?? 0, false)
      case "drop":
        if (!record.stream) return this.#destroy(exchange)
        return this.#stream(
          exchange,
          dropEvents(reply, this.#streamMeta(exchange)),
          0,
          reply.chunkDelayMs ?? 0,
          true
        )
      case "embeddings":
        if (route !== "embeddings") return mismatch(exchange, reply.type)
        return sendJson(exchange, 200, embeddingsJson(reply, record.body))
      default: {
        if (route !== "chat") return mismatch(exchange, reply.type)
        const meta = this.#streamMeta(exchange)
        const ids =
          reply.type === "tool-calls" ? reply.calls.map((c) => c.id ?? `call_${this.#toolCallIds++}`) : []
        if (!record.stream) return sendJson(exchange, 200, chatCompletionJson(reply, meta, ids))
        const events = chatCompletionEvents(reply, meta, ids)
        return this.#stream(exchange, events, reply.firstChunkDelayMs ?? 0, reply.chunkDelayMs ?? 0, false)
      }
    }
  }

  #streamMeta(exchange: Exchange): StreamMeta {
    const body = exchange.record.body
    const model = isRecord(body) && typeof body.model === "string" ? body.model : "gpt-4o-mini"
    const options = isRecord(body) ? body.stream_options : undefined
    return {
      id: `chatcmpl-test${exchange.serial}`,
      created: Math.floor(Date.now() / 1000),
      model,
      includeUsage: isRecord(options) && options.include_usage === true,
      promptTokens: Math.max(1, Math.ceil(exchange.rawBodyLength / 4))
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
      "x-request-id": `req_test${exchange.serial}`
    })
    if (firstDelayMs <= 0 && chunkDelayMs <= 0) {
      // One write for the whole stream keeps benchmarks cheap; SSE clients can't tell the difference.
      const all = events.join("")
      if (!thenDrop) return void res.end(all)
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
      if (thenDrop && i === events.length - 1) {
        // Waiting for the flush makes sure the client really received the partial stream before the reset.
        res.write(events[i], () => this.#destroy(exchange))
        return
      }
      res.write(events[i])
    }
    if (thenDrop) this.#destroy(exchange)
    else res.end()
  }
}

const notClosedByClient = (index: number, outcome: Outcome): Error =>
  new Error(
    outcome === "completed"
      ? `OpenAiTestServer: request #${index} completed before the client closed it`
      : `OpenAiTestServer: request #${index} was closed by the server, not the client`
  )

const sendJson = (
  exchange: Exchange,
  status: number,
  value: unknown,
  headers?: Readonly<Record<string, string>>
): void => {
  const body = JSON.stringify(value)
  exchange.res.writeHead(status, {
    "content-type": JSON_TYPE,
    "content-length": Buffer.byteLength(body),
    "x-request-id": `req_test${exchange.serial}`,
    ...lowerCaseKeys(headers)
  })
  exchange.res.end(body)
}

const mismatch = (exchange: Exchange, type: string): void =>
  sendJson(
    exchange,
    500,
    errorJson(500, `OpenAiTestServer: a "${type}" reply cannot answer ${exchange.record.path}`)
  )

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
