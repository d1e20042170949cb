/**
 * ScriptedHttpServer: the part of a provider's local test server that does not
 * depend on the provider's wire format. It listens on a local port, records
 * every request (method, path, lower-cased headers, parsed body, and whether
 * the client hung up before the answer was complete), hands each request the
 * next scripted reply (a queue, then a fallback), and writes answers: JSON,
 * raw bodies, SSE streams with delays, dropped and hanging connections.
 *
 * What a reply means, and how it is written in a provider's format, is the
 * provider's `Wire` (e.g. `OpenAiTestServer`, `AnthropicTestServer`): one wire
 * per server, so its own counters (generated tool-call ids) live with it.
 * Plain Promises, so tests that do not use Effect can drive it; `scoped` wraps
 * one as an Effect resource.
 */
import { Buffer } from "node:buffer"
import * as http from "node:http"
import { Effect, type Scope } from "effect"

export interface StartOptions {
  /** Interface to listen on; defaults to `127.0.0.1` so nothing is exposed beyond the machine. */
  readonly host?: string
  /** Defaults to 0: the OS picks a free port, which lets test files run in parallel. */
  readonly port?: number
}

export interface RecordedRequest {
  /** Position in `requests`, counted from the last `reset()`. */
  readonly index: number
  readonly method: string
  /** Path without the query string, e.g. `/v1/messages`. */
  readonly path: string
  /** The query string without its `?`, e.g. `alt=sse`; empty when there is none. */
  readonly query: string
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>
  /** Parsed JSON, the raw string if it was not JSON, or undefined when the body was empty. */
  readonly body: unknown
  /** `body.stream === true`. */
  readonly stream: boolean
  /** Live: becomes true when the client closes the connection before the response is complete. */
  readonly clientClosedEarly: boolean
}

/** A scripted reply, or a function choosing one from the request (e.g. to echo or branch on it). */
export type Reply<Scripted> = Scripted | ((request: RecordedRequest) => Reply<Scripted>)

export interface Server<Scripted> {
  /** The base URL to give the provider's SDK (the origin plus the wire's `basePath`). */
  readonly url: string
  readonly port: number
  /** FIFO: each request the wire answers from the script takes the next reply. */
  enqueue(...replies: ReadonlyArray<Reply<Scripted>>): void
  /** Used when the queue is empty. Default: the wire's error saying "no scripted reply for request #N". */
  setFallback(reply: Reply<Scripted> | undefined): void
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

/** How one event stream is paced, and whether the connection is destroyed after its last event. */
export interface Pacing {
  /** Pause between the headers and the first event (time to first token). */
  readonly firstDelayMs?: number
  /** Pause between consecutive events. */
  readonly chunkDelayMs?: number
  /** Destroy the socket once the events were flushed: a connection lost mid-stream. */
  readonly thenDrop?: boolean
}

/** One request being answered: what the wire reads of it, and the ways it can answer. */
export interface Exchange<Scripted> {
  readonly request: RecordedRequest
  /** Length of the raw body, for wires that estimate prompt tokens from it. */
  readonly rawBodyLength: number
  /** Counts requests since the last `reset()`: behind the request id and the wire's response ids. */
  readonly serial: number
  /** `req_test<serial>`, sent in the wire's request-id header with every answer. */
  readonly requestId: string
  /** Takes the next scripted reply (the queue, else the fallback), calling reply functions. */
  next(): Scripted
  /** Waits `ms`; resolves early when the client hangs up. False when the connection is gone by then. */
  pause(ms: number): Promise<boolean>
  sendJson(status: number, value: unknown, headers?: Readonly<Record<string, string>>): void
  /** A body sent as given; `content-type` defaults to JSON. */
  sendRaw(status: number, body: string, headers?: Readonly<Record<string, string>>): void
  /** Writes SSE frames (already framed) as an event stream, paced as asked. */
  stream(frames: ReadonlyArray<string>, pacing?: Pacing): Promise<void>
  /** Destroys the connection without an answer. */
  destroy(): void
}

/** A provider's wire format over the shared server. */
export interface Wire<Scripted> {
  /** Names the server in its error messages, e.g. `"OpenAiTestServer"`. */
  readonly name: string
  /** Appended to the origin to make `url`, e.g. `"/v1"` for SDKs that expect it in the base URL. */
  readonly basePath: string
  /** The header carrying the request id, e.g. `"x-request-id"`. */
  readonly requestIdHeader: string
  /** The reply for a failure of the script itself (none left, a reply function threw). */
  readonly scriptFailure: (message: string) => Scripted
  /** Answers one request. */
  readonly answer: (exchange: Exchange<Scripted>) => void | Promise<void>
  /** Clears the wire's own counters on `reset()`. */
  readonly reset?: () => void
}

const defaultWaitMs = 5000

type Outcome = "pending" | "completed" | "client-closed" | "server-closed"

class Recorded implements RecordedRequest {
  #outcome: Outcome = "pending"
  constructor(
    readonly index: number,
    readonly method: string,
    readonly path: string,
    readonly query: string,
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

const isStreamed = (body: unknown): boolean =>
  typeof body === "object" && body !== null && (body as { readonly stream?: unknown }).stream === true

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

class Listening<Scripted> implements Server<Scripted> {
  readonly url: string
  readonly port: number
  #recorded: Array<Recorded> = []
  #queue: Array<Reply<Scripted>> = []
  #fallback: Reply<Scripted> | undefined = undefined
  #countWaiters: Array<Waiter> = []
  #closeWaiters: Array<Waiter> = []
  #sockets = new Set<NonNullable<http.IncomingMessage["socket"]>>()
  #served = 0
  #closing: Promise<void> | undefined = undefined
  readonly #http: http.Server
  readonly #wire: Wire<Scripted>

  constructor(server: http.Server, wire: Wire<Scripted>, host: string, port: number) {
    this.#http = server
    this.#wire = wire
    this.port = port
    this.url = `http://${host.includes(":") ? `[${host}]` : host}:${port}${wire.basePath}`
    server.on("connection", (socket) => {
      this.#sockets.add(socket)
      socket.once("close", () => this.#sockets.delete(socket))
    })
    server.on("request", (req, res) => this.#receive(req, res))
  }

  get requests(): ReadonlyArray<RecordedRequest> {
    return this.#recorded
  }

  enqueue(...replies: ReadonlyArray<Reply<Scripted>>): void {
    this.#queue.push(...replies)
  }

  setFallback(reply: Reply<Scripted> | undefined): void {
    this.#fallback = reply
  }

  reset(): void {
    this.#queue = []
    this.#fallback = undefined
    this.#recorded = []
    this.#served = 0
    this.#wire.reset?.()
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
            this.#error(
              `timed out after ${timeoutMs} ms waiting for ${count} request(s), got ${this.#recorded.length}`
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
        : Promise.reject(this.#notClosedByClient(requestIndex, record.outcome))
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        target: requestIndex,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#closeWaiters = this.#closeWaiters.filter((other) => other !== waiter)
          reject(
            this.#error(
              `timed out after ${timeoutMs} ms waiting for the client to close request #${requestIndex}`
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
    const closed = this.#error("server closed")
    for (const waiter of [...this.#countWaiters, ...this.#closeWaiters]) {
      clearTimeout(waiter.timer)
      waiter.reject(closed)
    }
    this.#countWaiters = []
    this.#closeWaiters = []
    for (const socket of this.#sockets) socket.destroy()
    return this.#closing
  }

  #error(message: string): Error {
    return new Error(`${this.#wire.name}: ${message}`)
  }

  #notClosedByClient(index: number, outcome: Outcome): Error {
    return this.#error(
      outcome === "completed"
        ? `request #${index} completed before the client closed it`
        : `request #${index} was closed by the server, not the client`
    )
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
    const body = parseBody(raw)
    const record = new Recorded(
      this.#recorded.length,
      req.method ?? "GET",
      query === -1 ? url : url.slice(0, query),
      query === -1 ? "" : url.slice(query + 1),
      flattenHeaders(req.headers),
      body,
      isStreamed(body)
    )
    this.#recorded.push(record)
    res.once("finish", () => this.#settle(record, "completed"))
    res.once("close", () =>
      this.#settle(record, this.#closing === undefined ? "client-closed" : "server-closed")
    )
    this.#notifyCount()
    void this.#wire.answer(this.#exchange(record, res, raw.length))
  }

  #exchange(record: Recorded, res: http.ServerResponse, rawBodyLength: number): Exchange<Scripted> {
    const serial = this.#served++
    const requestId = `req_test${serial}`
    const idHeader = this.#wire.requestIdHeader
    const destroy = () => {
      this.#settle(record, "server-closed")
      res.destroy()
    }
    const sendRaw = (status: number, body: string, headers?: Readonly<Record<string, string>>) => {
      res.writeHead(status, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(body),
        [idHeader]: requestId,
        ...lowerCaseKeys(headers)
      })
      res.end(body)
    }
    return {
      request: record,
      rawBodyLength,
      serial,
      requestId,
      next: () => this.#next(record),
      pause: async (ms) => {
        if (ms > 0) await pause(ms, res)
        return !res.destroyed
      },
      sendJson: (status, value, headers) => sendRaw(status, JSON.stringify(value), headers),
      sendRaw,
      stream: (frames, pacing = {}) => writeStream(res, frames, pacing, { [idHeader]: requestId }, destroy),
      destroy
    }
  }

  #settle(record: Recorded, outcome: Outcome): void {
    if (!record.settle(outcome)) return
    // A request from before reset() must not satisfy a waiter for the new request with its index.
    if (this.#closeWaiters.length === 0 || this.#recorded[record.index] !== record) return
    this.#closeWaiters = this.#closeWaiters.filter((waiter) => {
      if (waiter.target !== record.index) return true
      clearTimeout(waiter.timer)
      if (outcome === "client-closed") waiter.resolve()
      else waiter.reject(this.#notClosedByClient(record.index, outcome))
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

  #next(record: Recorded): Scripted {
    let reply: Reply<Scripted> | undefined = this.#queue.shift() ?? this.#fallback
    if (reply === undefined) return this.#wire.scriptFailure(`no scripted reply for request #${record.index}`)
    try {
      while (typeof reply === "function")
        reply = (reply as (request: RecordedRequest) => Reply<Scripted>)(record)
    } catch (cause) {
      return this.#wire.scriptFailure(`scripted reply function threw: ${String(cause)}`)
    }
    return reply
  }
}

const writeStream = async (
  res: http.ServerResponse,
  frames: ReadonlyArray<string>,
  pacing: Pacing,
  headers: Readonly<Record<string, string>>,
  destroy: () => void
): Promise<void> => {
  const firstDelayMs = pacing.firstDelayMs ?? 0
  const chunkDelayMs = pacing.chunkDelayMs ?? 0
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    ...headers
  })
  if (firstDelayMs <= 0 && chunkDelayMs <= 0) {
    // One write for the whole stream keeps benchmarks cheap; SSE clients cannot tell the difference.
    const all = frames.join("")
    if (pacing.thenDrop !== true) return void res.end(all)
    // Waiting for the flush makes sure the client received the partial stream before the reset.
    res.write(all, destroy)
    return
  }
  res.flushHeaders()
  for (let i = 0; i < frames.length; i++) {
    const wait = i === 0 ? firstDelayMs : chunkDelayMs
    if (wait > 0) {
      await pause(wait, res)
      if (res.destroyed) return
    }
    if (pacing.thenDrop === true && i === frames.length - 1) return void res.write(frames[i], destroy)
    res.write(frames[i])
  }
  if (pacing.thenDrop === true) destroy()
  else res.end()
}

/** Starts a server speaking `wire`; resolves once it listens. */
export const start = <Scripted>(
  wire: Wire<Scripted>,
  options: StartOptions = {}
): Promise<Server<Scripted>> => {
  const host = options.host ?? "127.0.0.1"
  const server = http.createServer()
  return new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject)
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : (options.port ?? 0)
      resolve(new Listening(server, wire, host, port))
    })
  })
}

/** A started server, closed with the scope. */
export const scoped = <Scripted>(
  start: (options?: StartOptions) => Promise<Server<Scripted>>,
  options?: StartOptions
): Effect.Effect<Server<Scripted>, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (server) => Effect.promise(() => server.close())
  )

/**
 * Text cut into stream deltas of a word or so (long words in pieces of at most
 * 6 characters), so clients are exercised on many small, irregular fragments.
 */
export const splitText = (text: string): Array<string> => {
  const out: Array<string> = []
  for (const token of text.match(/\s*\S+\s*|\s+/g) ?? []) {
    if (token.length <= 8) out.push(token)
    else for (let i = 0; i < token.length; i += 6) out.push(token.slice(i, i + 6))
  }
  return out
}

/** Tool arguments (JSON text) in fragments of 5 characters, as real models stream them. */
export const splitArguments = (json: string): Array<string> => {
  const out: Array<string> = []
  for (let i = 0; i < json.length; i += 5) out.push(json.slice(i, i + 5))
  return out
}
