/**
 * The `fetch` the SDKs `OpenAiClient` builds send their requests through.
 *
 * Node's `fetch` is undici's WHATWG layer over undici's dispatcher: per request it
 * builds a `Request`, a signal following the caller's, a fetch controller and its
 * timing info, and runs the fetch algorithm's steps, about half of a short turn's
 * client CPU (bench `http.concurrent50`: the raw SDK ~230 us a turn, of which
 * this layer ~120). This `fetch` hands the request to the same dispatcher `fetch`
 * uses (the global one, so the same connection pool, keep-alive, proxy from
 * `NODE_USE_ENV_PROXY` or `setGlobalDispatcher`, and undici's header and body
 * timeouts) and answers with a real `Response` whose body streams as the data
 * arrives. An abort destroys the request at once: one listener on the SDK's
 * signal, nothing composed.
 *
 * A `fetch` that is not Node's own (a mock such as MSW's, a polyfill) is used as it is.
 * What it does not do itself it leaves to `fetch`, unchanged: a request it cannot
 * send as it is (a body that is not a string, an option other than method, headers,
 * body and signal, a URL that is not http(s), carries credentials or names a port
 * fetch refuses, what fetch refuses to send, no dispatcher installed yet, which the
 * first `fetch` of the process installs) goes to `fetch`, and so does a redirect
 * (fetch follows it, as it would have from the start). Failures
 * take fetch's shapes: `TypeError("fetch failed", { cause })` before the
 * response, a body erroring with `TypeError("terminated", { cause })` after it,
 * the signal's reason on abort, so the SDK and `errors.ts` classify them as before.
 */
import type OpenAI from "openai"

type Fetch = NonNullable<ConstructorParameters<typeof OpenAI>[0]>["fetch"] & {}

/** What undici calls back: the handler interface every undici version's dispatcher accepts. */
interface Handler {
  onConnect(abort: (reason?: unknown) => void): void
  onHeaders(statusCode: number, rawHeaders: Array<Buffer>, resume: () => void, statusText: string): boolean
  onData(chunk: Buffer): boolean
  onComplete(trailers: unknown): void
  onError(error: Error): void
}

interface DispatchOptions {
  readonly origin: string
  readonly path: string
  readonly method: string
  readonly headers: Array<string>
  readonly body: string | null
}

interface Dispatcher {
  dispatch(options: DispatchOptions, handler: Handler): boolean
}

/**
 * Where undici (Node's own and the npm package alike) keeps the dispatcher `fetch` uses: the
 * key is versioned by undici so that every copy of it in a process shares one pool.
 */
const globalDispatcher = Symbol.for("undici.globalDispatcher.1")

const dispatcherOf = (): Dispatcher | undefined =>
  (globalThis as { readonly [globalDispatcher]?: Dispatcher })[globalDispatcher]

/** The `init` keys this `fetch` honours itself; any other sends the request through `fetch`. */
const ownKeys = new Set(["method", "headers", "body", "signal"])

/** The body's chunks the socket runs ahead of its reader by, at most, before undici pauses it. */
const queued: QueuingStrategy<Uint8Array> = { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength }

const redirects = new Set([301, 302, 303, 307, 308])

/** The Fetch standard's "bad ports", which fetch refuses to connect to: it is left to refuse them. */
const badPorts = new Set(
  (
    "1 7 9 11 13 15 17 19 20 21 22 23 25 37 42 43 53 69 77 79 87 95 101 102 103 104 109 110 111 113 115 " +
    "117 119 123 135 137 139 143 161 179 389 427 465 512 513 514 515 526 530 531 532 540 548 554 556 563 " +
    "587 601 636 989 990 993 995 1719 1720 1723 2049 3659 4045 4190 5060 5061 6000 6566 6665 6666 6667 " +
    "6668 6669 6679 6697 10080"
  ).split(" ")
)

/** Statuses whose response has no body (fetch's "null body status"). */
const nullBody = new Set([101, 103, 204, 205, 304])

/** Methods fetch sends upper-cased; any other it sends as given. */
const normalisedMethods = new Set(["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"])
const forbiddenMethods = new Set(["CONNECT", "TRACE", "TRACK"])
const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/** The request as this `fetch` sends it, or `undefined` for one it leaves to `fetch` (see above). */
const requestOf = (
  input: unknown,
  init: RequestInit | undefined
): { readonly url: URL; readonly method: string } | undefined => {
  if (init !== undefined) {
    for (const key in init) if (!ownKeys.has(key)) return undefined
    if (init.body !== undefined && init.body !== null && typeof init.body !== "string") return undefined
  }
  const url = typeof input === "string" ? URL.parse(input) : input instanceof URL ? input : null
  // fetch refuses a URL with credentials or a bad port, with its own message: it says so here too.
  if (url === null || (url.protocol !== "http:" && url.protocol !== "https:")) return undefined
  if (url.username !== "" || url.password !== "" || badPorts.has(url.port)) return undefined
  const method = methodOf(init?.method)
  const hasBody = init?.body !== undefined && init.body !== null
  // fetch refuses these too: a forbidden or malformed method, a GET or HEAD with a body.
  if (method === undefined || (hasBody && (method === "GET" || method === "HEAD"))) return undefined
  return { url, method }
}

const methodOf = (method: string | undefined): string | undefined => {
  if (method === undefined) return "GET"
  const upper = method.toUpperCase()
  if (normalisedMethods.has(upper)) return upper
  return forbiddenMethods.has(upper) || !token.test(method) ? undefined : method
}

/**
 * Node's own `fetch`, recognised by its source (the bootstrap function that loads Node's undici).
 * Anything else in its place (a mock such as MSW's, a polyfill, another runtime's) is kept as it
 * is: requests the application chose to intercept must keep reaching its `fetch`.
 */
const isNodeFetch = (fetch: Fetch): boolean =>
  Function.prototype.toString.call(fetch).includes("internal/deps/undici/undici")

/**
 * `fetch` over undici's dispatcher, falling back to `fallback` for what it leaves to it (see
 * above); `fallback` itself when it is not Node's own `fetch`.
 */
export const dispatchingFetch = (fallback: Fetch): Fetch =>
  isNodeFetch(fallback) ? dispatching(fallback) : fallback

const dispatching =
  (fallback: Fetch): Fetch =>
  (input, init) => {
    const dispatcher = dispatcherOf()
    const request = dispatcher === undefined ? undefined : requestOf(input, init)
    if (dispatcher === undefined || request === undefined) return fallback(input, init)
    const signal = init?.signal ?? undefined
    if (signal?.aborted) return Promise.reject(signal.reason)
    const { url, method } = request
    const body = (init?.body as string | null | undefined) ?? null
    return new Promise<Response>((resolve, reject) => {
      const exchange = new Exchange(method, resolve, reject, () => fallback(input, init), signal)
      try {
        dispatcher.dispatch(
          {
            origin: url.origin,
            path: url.pathname + url.search,
            method,
            headers: flatHeaders(init, body),
            body
          },
          exchange
        )
      } catch (error) {
        reject(new TypeError("fetch failed", { cause: error }))
      }
    })
  }

/**
 * Headers as undici's flat `[name, value, ...]` list, normalised as fetch does (the SDK's are a
 * `Headers`), with the content type fetch gives a string body that has none.
 */
const flatHeaders = (init: RequestInit | undefined, body: string | null): Array<string> => {
  const flat: Array<string> = []
  const headers = init?.headers
  let typed = false
  for (const [name, value] of headers instanceof Headers ? headers : new Headers(headers)) {
    flat.push(name, value)
    if (name === "content-type") typed = true
  }
  if (body !== null && !typed) flat.push("content-type", "text/plain;charset=UTF-8")
  return flat
}

/**
 * One request's handler: settles the `fetch` promise when the response's head arrives, then
 * feeds its body stream; the signal's abort destroys the request whenever it comes.
 */
class Exchange implements Handler {
  #abort: ((reason?: unknown) => void) | undefined
  #aborted: unknown
  #body: ReadableStreamDefaultController<Uint8Array> | undefined
  #resume: (() => void) | undefined
  #settled = false
  readonly #method: string
  readonly #resolve: (response: Response | Promise<Response>) => void
  readonly #reject: (error: unknown) => void
  readonly #redirect: () => Promise<Response>

  constructor(
    method: string,
    resolve: (response: Response | Promise<Response>) => void,
    reject: (error: unknown) => void,
    redirect: () => Promise<Response>,
    signal: AbortSignal | undefined
  ) {
    this.#method = method
    this.#resolve = resolve
    this.#reject = reject
    this.#redirect = redirect
    // Removed by nothing: the signal is the SDK's, made for this request, and dies with it.
    signal?.addEventListener("abort", () => this.#cancel(signal.reason))
  }

  onConnect(abort: (reason?: unknown) => void): void {
    this.#abort = abort
    // An abort that came before undici handed out its canceller takes effect now.
    if (this.#aborted !== undefined) abort(this.#aborted)
  }

  onHeaders(statusCode: number, rawHeaders: Array<Buffer>, resume: () => void, statusText: string): boolean {
    // Pairs, not a `Headers`: the `Response` builds its own from them (building two cost ~2 us a turn).
    const headers: Array<[string, string]> = []
    let redirected = false
    let encoding: string | null = null
    for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
      const name = String(rawHeaders[i]?.toString("latin1"))
      const value = String(rawHeaders[i + 1]?.toString("latin1"))
      headers.push([name, value])
      const lower = name.toLowerCase()
      if (lower === "location") redirected = redirects.has(statusCode)
      else if (lower === "content-encoding") encoding = value
    }
    if (redirected) {
      // fetch follows redirects (resending or switching to GET as the status says): it does so from here.
      this.#settled = true
      this.#abort?.(new Error("redirected"))
      this.#resolve(this.#redirect())
      return false
    }
    this.#resume = resume
    const body =
      nullBody.has(statusCode) || this.#method === "HEAD"
        ? null
        : decoded(
            new ReadableStream<Uint8Array>(
              {
                start: (controller) => {
                  this.#body = controller
                },
                pull: () => this.#resume?.(),
                cancel: (reason) => this.#abort?.(reason)
              },
              queued
            ),
            encoding
          )
    this.#settled = true
    try {
      this.#resolve(responseOf(body, statusCode, statusText, headers))
    } catch (error) {
      // A head no `Response` can carry: the request fails, with why, and its connection is closed.
      this.#settled = false
      this.#fail(new TypeError("fetch failed", { cause: error }))
      this.#abort?.(error)
      return false
    }
    return true
  }

  onData(chunk: Buffer): boolean {
    const body = this.#body
    // undici delivers empty chunks when resumed on a socket that is closing: the error follows.
    if (body === undefined || chunk.length === 0) return true
    // A copy, as fetch makes: undici may reuse the socket's buffer.
    body.enqueue(new Uint8Array(chunk))
    // Paused while the reader is behind; its next read resumes the socket (`pull`).
    return (body.desiredSize ?? 0) > 0
  }

  onComplete(): void {
    this.#body?.close()
    this.#body = undefined
  }

  onError(error: Error): void {
    // After an abort, undici reports the request it destroyed: the caller sees the abort's reason.
    if (this.#aborted !== undefined) this.#fail(this.#aborted)
    else if (this.#settled) this.#fail(new TypeError("terminated", { cause: error }))
    else this.#fail(new TypeError("fetch failed", { cause: error }))
  }

  #cancel(reason: unknown): void {
    this.#aborted = reason ?? new DOMException("This operation was aborted", "AbortError")
    // The connection first: the server learns of the abort before the caller's reactions run.
    this.#abort?.(this.#aborted)
    this.#fail(this.#aborted)
  }

  /** Rejects the `fetch` (before the response) or errors its body (after), once. */
  #fail(error: unknown): void {
    if (!this.#settled) {
      this.#settled = true
      this.#reject(error)
      return
    }
    const body = this.#body
    this.#body = undefined
    body?.error(error)
  }
}

/**
 * The `Response` fetch would give. Its constructor takes statuses 200 to 599 only, where fetch
 * hands out any status the server sent (HTTP allows 100 to 999): such a response says its own.
 */
const responseOf = (
  body: ReadableStream<Uint8Array> | null,
  status: number,
  statusText: string,
  headers: Array<[string, string]>
): Response => {
  if (status >= 200 && status <= 599) return new Response(body, { status, statusText, headers })
  const response = new Response(body, { status: 599, statusText, headers })
  return Object.defineProperties(response, { status: { value: status }, ok: { value: false } })
}

/** The body as fetch hands it out: decoded when the server compressed it anyway (none is asked for). */
const decoded = (body: ReadableStream<Uint8Array>, encoding: string | null): ReadableStream<Uint8Array> => {
  const format = encoding?.trim().toLowerCase()
  if (format === undefined || format === "" || format === "identity") return body
  const codec =
    format === "gzip" || format === "x-gzip"
      ? "gzip"
      : format === "deflate"
        ? "deflate"
        : format === "br"
          ? "brotli"
          : undefined
  if (codec === undefined) return body
  return body.pipeThrough(
    new DecompressionStream(
      codec as ConstructorParameters<typeof DecompressionStream>[0]
    ) as ReadableWritablePair<Uint8Array>
  )
}
