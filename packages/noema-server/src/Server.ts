/**
 * Server: the runs panel and the JSON HTTP API behind it, on `node:http`.
 *
 *     GET  /?token=TOKEN                        sets the access cookie, then redirects to /
 *     GET  /                                    the panel (one page, no build step)
 *     GET  /api/threads                         threads, newest last, each with the run holding it
 *     POST /api/threads                         { title?, queue_policy? }  -> 201 thread
 *     GET  /api/threads/:id
 *     POST /api/threads/:id/close
 *     POST /api/threads/:id/queue-policy        { queue_policy }: "reject" or "enqueue"
 *     GET  /api/runs[?thread=ID]                runs, newest first
 *     POST /api/runs                            { thread_id, request, pipeline? }  -> 201 run
 *                                               or { thread_id, request, plan: true, approve?: "none"|"first"|"all" }:
 *                                               the stages from the model's plan (PlanPipeline)
 *     GET  /api/runs/:id                        { run, events, workflow }: a run no live process carries
 *                                               on is shown `interrupted` (Shown)
 *     GET  /api/runs/:id/verify                 the artifacts re-hashed against their manifests
 *     GET  /api/runs/:id/stages/:position/attempts/:attempt/artifacts/<path>
 *                                               the artifact's bytes (text/plain), its sha256 in `X-Sha256`
 *     POST /api/runs/:id/approve|reject|retry|cancel   {} | { reason } | {} | { reason? }
 *     GET  /api/events                          Server-Sent Events: every event appended to any run,
 *                                               from any process (`id:` is the feed's cursor, so a
 *                                               reconnecting client with Last-Event-ID misses nothing)
 *
 * Every request needs the server's access token (AccessToken: `Authorization:
 * Bearer`, or the cookie the tokened URL sets); without it the answer is 401
 * and says how to get in. The server listens on 127.0.0.1 only and answers
 * only requests whose Host is that address (no DNS rebinding); a
 * state-changing request whose Origin is another site's is refused
 * (SameOrigin); a POST is taken only as `application/json`, up to
 * `maxBodyBytes` (JsonBody). No CORS header is ever sent, and no page may
 * frame the panel. Approvals are recorded as `approver`, never as a name the
 * request gives. Feed clients are capped and written no faster than they read
 * (FeedClients); artifacts are opened so that a link or a FIFO planted in the
 * workspace gets nowhere (ArtifactFile). Errors are `{ "error": { "code",
 * "message" } }` (ApiError), and never show where the workspace is. Every body,
 * sent or taken, is in the runs' JSON style (snake_case keys, `Shown.json`).
 *
 * Approve, retry and a new run only record what happened; the worker (`wake`)
 * carries the run on, here or in any other process sharing the store. Each
 * mechanism is a module of its own under `internal/` with a plain interface;
 * this module only wires them to the routes.
 */
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import {
  type Executor,
  Pipeline,
  type PlanPipeline,
  type Run,
  RunFiles,
  RunLease,
  type RunsStore,
  Shown
} from "@noema/runs"
import { Cause, Effect, Exit } from "effect"
import * as AccessToken from "./internal/AccessToken.js"
import * as ApiError from "./internal/ApiError.js"
import * as ArtifactFile from "./internal/ArtifactFile.js"
import * as FeedClients from "./internal/FeedClients.js"
import * as JsonBody from "./internal/JsonBody.js"
import * as SameOrigin from "./internal/SameOrigin.js"
import { page } from "./PanelPage.js"

export interface Options {
  readonly store: RunsStore.Service
  readonly executor: Executor.Executor
  readonly workspace: string
  /** Default 0: a free port. */
  readonly port?: number
  /** Default 127.0.0.1. */
  readonly host?: string
  /** Told when a run may be carried on (a new run, an approval, a retry). */
  readonly wake?: () => void
  /** Plans a request's stages (`"plan": true`); without it such a request is refused. */
  readonly plan?: (
    request: string,
    approval: PlanPipeline.Approval
  ) => Effect.Effect<Pipeline.Pipeline, unknown>
  /** How often the store's feed is read for live updates. Default 250 ms. */
  readonly feedPollMs?: number
  /** The access token every request must carry (see `tokenProblem`). Default: a new random one per start. */
  readonly token?: string
  /** Who an approval made through this server is recorded as. Default `panel (<user the server runs as>)`. */
  readonly approver?: string
  /** Most clients of /api/events at once; past it, 503 with Retry-After. Default 64. */
  readonly maxFeedClients?: number
  /** Largest request body; past it, 413. Default 1 MiB. */
  readonly maxBodyBytes?: number
  /** Where the details of a failure answered 500 are written. Default: standard error. */
  readonly log?: (line: string) => void
}

export interface Server {
  /** The server's address, `http://127.0.0.1:PORT`: API clients send the token in a header. */
  readonly url: string
  readonly port: number
  readonly token: string
  /** The address to open in a browser: it carries the token, which the page trades for a cookie. */
  readonly panelUrl: string
  /** What the event feed holds now: its clients and the bytes written to them not yet sent. */
  readonly feed: () => FeedStats
  readonly close: () => Promise<void>
}

export type FeedStats = FeedClients.Stats

/** Why `token` cannot be a server's access token, or undefined when it can. */
export const tokenProblem = AccessToken.problem

const defaultApprover = (): string => {
  try {
    return `panel (${os.userInfo().username})`
  } catch {
    // No user name to be had (a container without a passwd entry).
    return "panel"
  }
}

/** Sent with every answer: nothing is cached, sniffed, framed or sent on as a referrer. */
const commonHeaders = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'"
}

const pagePolicy =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

/** Bounds on the texts a request may carry (a run's request is bounded by the store, pipelines by Pipeline). */
const maxTitleLength = 200
const maxReasonLength = 2000

/** Every JSON answer goes out here, in the runs' JSON style. */
const send = (response: http.ServerResponse, status: number, body: unknown, headers = {}) => {
  const text = Shown.stringify(body)
  response.writeHead(status, {
    ...headers,
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text)
  })
  response.end(text)
}

const field = (body: unknown, name: string): unknown =>
  typeof body === "object" && body !== null ? (body as Record<string, unknown>)[name] : undefined

const optionalString = (body: unknown, name: string, maxLength = Number.POSITIVE_INFINITY) => {
  const value = field(body, name)
  if (value === undefined || value === null) return undefined
  if (typeof value !== "string") throw new ApiError.ApiError(400, "InvalidInput", `${name} must be a string`)
  if (value.length > maxLength)
    throw new ApiError.ApiError(400, "InvalidInput", `${name} must have at most ${maxLength} characters`)
  return value
}

const requiredString = (body: unknown, name: string, maxLength?: number): string => {
  const value = optionalString(body, name, maxLength)
  if (value === undefined || value.trim() === "")
    throw new ApiError.ApiError(400, "InvalidInput", `${name} is required (a non-empty string)`)
  return value
}

/** Runs `effect`, throwing its failure as it is (ApiError.fromFailure sorts it out). */
const run = async <A>(effect: Effect.Effect<A, unknown>): Promise<A> => {
  const exit = await Effect.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/** What the routes share. */
interface Context {
  readonly options: Options
  readonly store: RunsStore.Service
  readonly executor: Executor.Executor
  readonly wake: () => void
  readonly approver: string
  readonly maxBodyBytes: number
  readonly feed: FeedClients.FeedClients
}

interface Route {
  readonly method: string
  readonly url: URL
  /** The path's segments after `/api`, decoded. */
  readonly parts: ReadonlyArray<string>
}

const readBody = (context: Context, request: http.IncomingMessage) =>
  JsonBody.read(request, { limit: context.maxBodyBytes })

const queuePolicyOf = (body: unknown, fallback?: Run.QueuePolicy): Run.QueuePolicy => {
  const queue = optionalString(body, "queue_policy") ?? fallback
  if (queue !== "reject" && queue !== "enqueue")
    throw new ApiError.ApiError(400, "InvalidInput", 'queue_policy must be "reject" or "enqueue"')
  return queue
}

const threads = async (
  context: Context,
  route: Route,
  request: http.IncomingMessage,
  response: http.ServerResponse
): Promise<boolean> => {
  const { store } = context
  const [id, action] = route.parts.slice(1)
  /** The thread after `effect`, as shown (with the run holding it). */
  const shown = (effect: Effect.Effect<Run.Thread, unknown>) =>
    run(Effect.flatMap(effect, (thread) => Shown.threadOf(store, thread)))
  if (id === undefined && route.method === "GET") {
    send(response, 200, await run(Shown.threads(store)))
    return true
  }
  if (id === undefined && route.method === "POST") {
    const body = await readBody(context, request)
    const queuePolicy = queuePolicyOf(body, "reject")
    const title = optionalString(body, "title", maxTitleLength)
    send(
      response,
      201,
      await shown(store.createThread({ ...(title !== undefined && { title }), queuePolicy }))
    )
    return true
  }
  if (id !== undefined && action === undefined && route.method === "GET") {
    send(response, 200, await shown(store.getThread(id)))
    return true
  }
  if (id !== undefined && action === "close" && route.method === "POST") {
    send(response, 200, await shown(store.closeThread(id)))
    return true
  }
  if (id !== undefined && action === "queue-policy" && route.method === "POST") {
    const queuePolicy = queuePolicyOf(await readBody(context, request))
    send(response, 200, await shown(store.setQueuePolicy(id, queuePolicy)))
    return true
  }
  return false
}

/** The pipeline of a new run: the one given, the model's plan, or the default. */
const pipelineOf = async (context: Context, body: unknown, threadId: string, text: string) => {
  const definition = field(body, "pipeline")
  const planned = field(body, "plan") === true
  const approve = optionalString(body, "approve") ?? "none"
  if (approve !== "none" && approve !== "first" && approve !== "all")
    throw new ApiError.ApiError(400, "InvalidInput", 'approve must be "none", "first" or "all"')
  if (planned && definition !== undefined && definition !== null)
    throw new ApiError.ApiError(400, "InvalidInput", "plan and pipeline both choose the stages: give one")
  if (!planned)
    return definition === undefined || definition === null
      ? Pipeline.defaultPipeline
      : await run(Pipeline.decode(definition, "the pipeline"))
  const plan = context.options.plan
  if (plan === undefined)
    throw new ApiError.ApiError(400, "InvalidInput", "this server cannot plan stages (no model)")
  // A closed or unknown thread is refused before the model is asked.
  const thread = await run(context.store.getThread(threadId))
  if (thread.status === "closed")
    throw new ApiError.ApiError(409, "ThreadClosed", `Thread ${threadId} is closed: it takes no new runs`)
  return run(
    Effect.mapError(
      plan(text, approve),
      (error) =>
        new ApiError.ApiError(
          502,
          "PlanFailed",
          `the model could not plan the stages: ${(error as { message?: string })?.message ?? String(error)}`
        )
    )
  )
}

const createRun = async (context: Context, request: http.IncomingMessage, response: http.ServerResponse) => {
  const body = await readBody(context, request)
  const threadId = requiredString(body, "thread_id")
  const text = requiredString(body, "request")
  const pipeline = await pipelineOf(context, body, threadId, text)
  const created = await run(
    Effect.catchTag(context.executor.create({ threadId, request: text, pipeline }), "ThreadBusy", (busy) =>
      Effect.flatMap(RunLease.explainBusy(context.store, busy), Effect.fail)
    )
  )
  context.wake()
  send(response, 201, created)
}

const artifact = async (
  context: Context,
  runId: string,
  rest: ReadonlyArray<string>,
  response: http.ServerResponse
) => {
  const position = Number(rest[0])
  const attemptNumber = Number(rest[2])
  const relative = rest.slice(4).join("/")
  const view = await run(context.store.getRun(runId))
  const stage = view.stages.find((s) => s.position === position)
  const entry = stage?.attempts
    .find((a) => a.attempt === attemptNumber)
    ?.artifacts.find((a) => a.path === relative)
  if (stage === undefined || entry === undefined)
    throw new ApiError.ApiError(
      404,
      "NotFound",
      `no artifact ${relative} in stage ${position} attempt ${attemptNumber}`
    )
  const workspace = context.options.workspace
  const attemptDirectory = RunFiles.attemptPath(
    workspace,
    runId,
    position,
    stage.key,
    attemptNumber,
    stage.attempts.length
  )
  const bytes = await run(ArtifactFile.read({ workspace, attemptDirectory, relative }))
  response.writeHead(200, {
    "content-type": entry.kind === "json" ? "application/json; charset=utf-8" : "text/plain; charset=utf-8",
    "x-sha256": entry.sha256,
    "x-sha256-matches": String(RunFiles.sha256(bytes) === entry.sha256),
    "content-length": bytes.length
  })
  response.end(bytes)
}

/** approve, reject, retry, cancel: the run after it. */
const act = async (context: Context, runId: string, action: string, body: unknown) => {
  const { executor, wake } = context
  switch (action) {
    case "approve": {
      if (field(body, "by") !== undefined)
        throw new ApiError.ApiError(
          400,
          "InvalidInput",
          `by is not taken from the request: this server records approvals as "${context.approver}"`
        )
      const view = await run(executor.approve(runId, context.approver))
      wake()
      return view
    }
    case "reject":
      return run(executor.reject(runId, requiredString(body, "reason", maxReasonLength)))
    case "retry": {
      // A person's retry from the panel, which shows whether the failure is retryable: forced.
      const view = await run(executor.retry(runId, { force: true }))
      wake()
      return view
    }
    case "cancel":
      return run(
        executor.cancel(runId, optionalString(body, "reason", maxReasonLength) ?? "canceled from the panel")
      )
    default:
      return undefined
  }
}

const runs = async (
  context: Context,
  route: Route,
  request: http.IncomingMessage,
  response: http.ServerResponse
): Promise<boolean> => {
  const { store, executor } = context
  const { method } = route
  const [id, action, ...rest] = route.parts.slice(1)
  if (id === undefined && method === "GET") {
    const thread = route.url.searchParams.get("thread")
    send(
      response,
      200,
      [...(await run(Shown.runs(store, thread === null ? {} : { threadId: thread })))].reverse()
    )
    return true
  }
  if (id === undefined && method === "POST") {
    await createRun(context, request, response)
    return true
  }
  if (id === undefined) return false
  if (action === undefined && method === "GET") {
    send(response, 200, {
      run: await run(Shown.runOf(store, id)),
      events: await run(store.events(id)),
      workflow: (await run(executor.workflowOf(id))) ?? null
    })
    return true
  }
  if (action === "verify" && method === "GET") {
    send(
      response,
      200,
      await run(
        Effect.flatMap(store.getRun(id), (view) => RunFiles.verifyRun(context.options.workspace, view))
      )
    )
    return true
  }
  if (action === "stages" && method === "GET" && rest[1] === "attempts" && rest[3] === "artifacts") {
    await artifact(context, id, rest, response)
    return true
  }
  if (action !== undefined && method === "POST") {
    const view = await act(context, id, action, await readBody(context, request))
    if (view === undefined) return false
    send(response, 200, view)
    return true
  }
  return false
}

const events = (
  context: Context,
  route: Route,
  request: http.IncomingMessage,
  response: http.ServerResponse
) => {
  if (!context.feed.hasRoom())
    throw new ApiError.ApiError(
      503,
      "TooManyClients",
      "the live feed has as many clients as it takes; try again shortly",
      { "retry-after": "5" }
    )
  const header = request.headers["last-event-id"]
  const after = FeedClients.cursorOf(
    typeof header === "string" ? header : route.url.searchParams.get("cursor")
  )
  response.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", connection: "keep-alive" })
  const client = context.feed.admit(response, after)
  response.on("close", () => client?.leave())
}

/** The API's routes; false when none matched. */
const api = async (
  context: Context,
  route: Route,
  request: http.IncomingMessage,
  response: http.ServerResponse
): Promise<boolean> => {
  const [resource, id] = route.parts
  if (resource === "events" && id === undefined && route.method === "GET") {
    events(context, route, request, response)
    return true
  }
  if (resource === "threads") return threads(context, route, request, response)
  if (resource === "runs") return runs(context, route, request, response)
  return false
}

const routeOf = (request: http.IncomingMessage, base: string): Route => {
  try {
    const url = new URL(request.url ?? "/", base)
    const parts = url.pathname
      .split("/")
      .filter((part) => part !== "")
      .map(decodeURIComponent)
    return { method: request.method ?? "GET", url, parts }
  } catch {
    throw new ApiError.ApiError(
      400,
      "BadPath",
      "the path is not a valid URL path (or not valid percent-encoding)"
    )
  }
}

/** What a request must show before anything else: the right host, the token, its own origin. */
interface Gate {
  readonly access: AccessToken.AccessToken
  readonly origin: SameOrigin.SameOrigin
  readonly base: string
}

const unauthorized = (base: string) =>
  new ApiError.ApiError(
    401,
    "Unauthorized",
    `this server needs its access token: open the address noema serve printed (${base}/?token=…), or send the header "Authorization: Bearer <token>"`,
    { "www-authenticate": 'Bearer realm="noema runs"' }
  )

/** Answers a request, or throws why not. */
const answer = async (
  context: Context,
  gate: Gate,
  request: http.IncomingMessage,
  response: http.ServerResponse
) => {
  if (!gate.origin.hostAllowed(request.headers.host))
    throw new ApiError.ApiError(
      421,
      "MisdirectedRequest",
      `this server answers for ${gate.origin.hosts.join(" and ")} only`
    )
  const route = routeOf(request, gate.base)
  if (route.method === "GET" && route.url.pathname === "/" && route.url.searchParams.has("token")) {
    // The tokened address: trade the token for the cookie, and take it out of the address bar.
    if (!gate.access.matches(route.url.searchParams.get("token"))) throw unauthorized(gate.base)
    response.writeHead(303, { location: "/", "set-cookie": gate.access.cookie })
    response.end()
    return
  }
  if (!gate.access.admits(request.headers)) throw unauthorized(gate.base)
  if (SameOrigin.changesState(route.method) && !gate.origin.originAllowed(request.headers.origin))
    throw new ApiError.ApiError(403, "ForeignOrigin", "a page of another site cannot change anything here")
  if (route.method === "POST" && !/^application\/json\b/i.test(request.headers["content-type"] ?? ""))
    throw new ApiError.ApiError(415, "UnsupportedMediaType", "send JSON (Content-Type: application/json)")
  if (route.method === "GET" && route.url.pathname === "/") {
    response.writeHead(200, {
      "content-type": "text/html; charset=utf-8",
      "content-security-policy": pagePolicy
    })
    response.end(page)
    return
  }
  const matched =
    route.parts[0] === "api" &&
    (await api(context, { ...route, parts: route.parts.slice(1) }, request, response))
  if (!matched) throw new ApiError.ApiError(404, "NotFound", `no route ${route.method} ${route.url.pathname}`)
}

/** The paths no error message may show: the workspace, as given and as resolved. */
const hiddenPaths = (workspace: string): ReadonlyArray<string> => {
  const resolved = path.resolve(workspace)
  try {
    return [...new Set([fs.realpathSync(resolved), resolved])]
  } catch {
    return [resolved]
  }
}

const listen = (server: http.Server, port: number, host: string) =>
  new Promise<number>((resolve, reject) => {
    server.once("error", reject)
    server.listen(port, host, () => {
      server.off("error", reject)
      resolve((server.address() as AddressInfo).port)
    })
  })

export const start = async (options: Options): Promise<Server> => {
  const token = options.token ?? AccessToken.generate()
  const problem = AccessToken.problem(token)
  if (problem !== undefined) throw new Error(`cannot start the runs server: ${problem}`)
  const host = options.host ?? "127.0.0.1"
  const log = options.log ?? ((line: string) => void process.stderr.write(line))
  const hidden = hiddenPaths(options.workspace)
  const feed = await FeedClients.start({
    read: (after, limit) => run(options.store.feed(after, limit)),
    ...(options.maxFeedClients !== undefined && { maxClients: options.maxFeedClients }),
    ...(options.feedPollMs !== undefined && { pollMs: options.feedPollMs }),
    onReadFailure: (detail) => log(`noema runs server: ${detail}\n`)
  })
  const context: Context = {
    options,
    store: options.store,
    executor: options.executor,
    wake: options.wake ?? (() => {}),
    approver: options.approver ?? defaultApprover(),
    maxBodyBytes: options.maxBodyBytes ?? 1024 * 1024,
    feed
  }
  // Set once the port is known: the listen callback and this assignment run before any request is read.
  let gate: Gate | undefined
  const server = http.createServer((request, response) => {
    for (const [name, value] of Object.entries(commonHeaders)) response.setHeader(name, value)
    answer(context, gate as Gate, request, response).catch((error: unknown) => {
      if (response.headersSent) return void response.end()
      const failure = ApiError.fromFailure(error, hidden, log)
      send(response, failure.status, ApiError.body(failure), failure.headers)
    })
  })
  let port: number
  try {
    port = await listen(server, options.port ?? 0, host)
  } catch (error) {
    feed.close()
    throw error
  }
  const origin = SameOrigin.make(host, port)
  const base = `http://${origin.hosts[0]}`
  gate = { access: AccessToken.make(token, port), origin, base }
  return {
    url: base,
    port,
    token,
    panelUrl: `${base}/?token=${encodeURIComponent(token)}`,
    feed: feed.stats,
    close: () =>
      new Promise<void>((done) => {
        feed.close()
        server.close(() => done())
        server.closeAllConnections()
      })
  }
}
