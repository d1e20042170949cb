/**
 * Server: the runs panel and the JSON HTTP API behind it, on `node:http`.
 *
 *     GET  /                                    the panel (one page, no build step)
 *     GET  /api/threads                         threads, newest last
 *     POST /api/threads                         { title?, queue_policy? }  -> 201 thread
 *     POST /api/threads/:id/close
 *     GET  /api/runs[?thread=ID]                runs, newest first
 *     POST /api/runs                            { thread_id, request, pipeline? }  -> 201 run
 *                                               or { thread_id, request, plan: true, approve?: "none"|"first"|"all" }:
 *                                               the stages from the model's plan (PlanPipeline)
 *     GET  /api/runs/:id                        { run, events, workflow }
 *     GET  /api/runs/:id/verify                 the artifacts re-hashed against their manifests
 *     GET  /api/runs/:id/stages/:position/attempts/:attempt/artifacts/<path>
 *                                               the artifact's bytes (text/plain), its sha256 in `X-Sha256`
 *     POST /api/runs/:id/approve|reject|retry|cancel   { by? } | { reason } | {} | { reason? }
 *     GET  /api/events                          Server-Sent Events: every event appended to any run,
 *                                               from any process (`id:` is the feed's cursor, so a
 *                                               reconnecting client with Last-Event-ID misses nothing)
 *
 * Errors are `{ "error": { "code", "message" } }` with 400 (bad input), 404
 * (unknown thread, run or file), 409 (refused by the run's state or the
 * thread's policy) or 500. The server listens on 127.0.0.1 only, answers only
 * requests whose Host is that address (no DNS rebinding), and takes a POST
 * only as `application/json` (a cross-site form cannot post). Approve, retry
 * and a new run only record what happened; the worker (`wake`) carries the run
 * on, here or in any other process sharing the store.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { Cause, Effect, Exit } from "effect"
import type { Executor } from "./Executor.js"
import { page } from "./PanelPage.js"
import * as Pipeline from "./Pipeline.js"
import type * as PlanPipeline from "./PlanPipeline.js"
import type { Event } from "./Run.js"
import * as RunFiles from "./RunFiles.js"
import type { Service as Store } from "./RunsStore.js"

export interface Options {
  readonly store: Store
  readonly executor: Executor
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
}

export interface Server {
  readonly url: string
  readonly port: number
  readonly close: () => Promise<void>
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string
  ) {
    super(message)
  }
}

const statusOf: Record<string, number> = {
  ThreadNotFound: 404,
  RunNotFound: 404,
  ThreadClosed: 409,
  ThreadBusy: 409,
  IllegalTransition: 409,
  RunBusy: 409,
  InvalidInput: 400,
  PipelineError: 400
}

const send = (response: http.ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body)
  response.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "cache-control": "no-store",
    "content-length": Buffer.byteLength(text)
  })
  response.end(text)
}

const readBody = (request: http.IncomingMessage, limit = 1024 * 1024): Promise<unknown> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        reject(new HttpError(413, "TooLarge", `the body is larger than ${limit} bytes`))
        request.destroy()
      } else chunks.push(chunk)
    })
    request.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8")
      if (text.trim() === "") return resolve({})
      try {
        resolve(JSON.parse(text))
      } catch (error) {
        reject(new HttpError(400, "BadJson", `the body is not JSON: ${(error as Error).message}`))
      }
    })
    request.on("error", reject)
  })

const field = (body: unknown, name: string): unknown =>
  typeof body === "object" && body !== null ? (body as Record<string, unknown>)[name] : undefined

const optionalString = (body: unknown, name: string): string | undefined => {
  const value = field(body, name)
  if (value === undefined || value === null) return undefined
  if (typeof value !== "string") throw new HttpError(400, "InvalidInput", `${name} must be a string`)
  return value
}

const requiredString = (body: unknown, name: string): string => {
  const value = optionalString(body, name)
  if (value === undefined || value.trim() === "")
    throw new HttpError(400, "InvalidInput", `${name} is required (a non-empty string)`)
  return value
}

/** The SSE frame of one feed item. */
const frame = (item: { readonly cursor: number; readonly event: Event }) =>
  `id: ${item.cursor}\nevent: run-event\ndata: ${JSON.stringify({
    cursor: item.cursor,
    event_id: item.event.event_id,
    run_id: item.event.run_id,
    thread_id: item.event.thread_id,
    seq: item.event.seq,
    at: item.event.at,
    ...item.event.data
  })}\n\n`

export const start = (options: Options): Promise<Server> => {
  const { store, executor, workspace } = options
  const wake = options.wake ?? (() => {})
  /** The live clients, each with the last cursor it was sent. */
  const clients = new Map<http.ServerResponse, number>()
  let cursor = 0
  let closed = false

  const run = async <A>(effect: Effect.Effect<A, unknown>): Promise<A> => {
    const exit = await Effect.runPromiseExit(effect)
    if (Exit.isSuccess(exit)) return exit.value
    const error = Cause.squash(exit.cause) as { _tag?: string; message?: string }
    if (error instanceof HttpError) throw error
    const status = error?._tag === undefined ? 500 : (statusOf[error._tag] ?? 500)
    if (error?._tag === "FileError" && /ENOENT/.test(error.message ?? ""))
      throw new HttpError(404, "NotFound", error.message ?? "not found")
    throw new HttpError(status, error?._tag ?? "Error", error?.message ?? String(error))
  }

  /** Reads the feed to its end (every page), from `after`; the last cursor read. */
  const drain = async (after: number, each: (item: { cursor: number; event: Event }) => void) => {
    let at = after
    while (true) {
      const items = await run(store.feed(at, 500))
      for (const item of items) each(item)
      at = items.at(-1)?.cursor ?? at
      if (items.length < 500) return at
    }
  }

  const poll = async () => {
    while (!closed) {
      try {
        cursor = await drain(cursor, (item) => {
          const text = frame(item)
          for (const [client, sent] of clients)
            if (item.cursor > sent) {
              client.write(text)
              clients.set(client, item.cursor)
            }
        })
      } catch {
        // The store failing now and then: the next round reads again from the same cursor.
      }
      await new Promise((resolve) => setTimeout(resolve, options.feedPollMs ?? 250))
    }
  }

  const route = async (request: http.IncomingMessage, response: http.ServerResponse, address: string) => {
    const url = new URL(request.url ?? "/", `http://${address}`)
    const method = request.method ?? "GET"
    let parts: Array<string>
    try {
      parts = url.pathname
        .split("/")
        .filter((part) => part !== "")
        .map(decodeURIComponent)
    } catch {
      throw new HttpError(400, "BadPath", `the path is not valid percent-encoding: ${url.pathname}`)
    }
    if (method === "POST" && !/^application\/json\b/i.test(request.headers["content-type"] ?? ""))
      throw new HttpError(415, "UnsupportedMediaType", "send JSON (Content-Type: application/json)")

    if (method === "GET" && url.pathname === "/") {
      response.writeHead(200, {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-store",
        "content-security-policy":
          "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:"
      })
      response.end(page)
      return
    }
    if (parts[0] !== "api") throw new HttpError(404, "NotFound", `no page ${url.pathname}`)
    const [, resource, id, action, ...rest] = parts

    if (resource === "events" && id === undefined && method === "GET") {
      response.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        connection: "keep-alive"
      })
      response.write("retry: 1000\n\n")
      const last = Number(request.headers["last-event-id"] ?? url.searchParams.get("cursor") ?? Number.NaN)
      // A reconnecting client gets what it missed, then joins the live feed past what it got.
      // Until it has caught up with the live feed's cursor, which may move while it reads;
      // from the check to the registration nothing waits, so nothing falls in between.
      let sent = Number.isFinite(last) ? last : cursor
      while (sent < cursor) {
        const reached = await drain(sent, (item) => {
          response.write(frame(item))
        })
        if (reached === sent) break // nothing more to read (the live feed's cursor is ahead of the store?)
        sent = reached
      }
      clients.set(response, sent)
      const keepAlive = setInterval(() => response.write(": keep-alive\n\n"), 15_000)
      request.on("close", () => {
        clearInterval(keepAlive)
        clients.delete(response)
      })
      return
    }

    if (resource === "threads") {
      if (id === undefined && method === "GET") return send(response, 200, await run(store.listThreads()))
      if (id === undefined && method === "POST") {
        const body = await readBody(request)
        const queue = optionalString(body, "queue_policy") ?? "reject"
        if (queue !== "reject" && queue !== "enqueue")
          throw new HttpError(400, "InvalidInput", 'queue_policy must be "reject" or "enqueue"')
        const title = optionalString(body, "title")
        return send(
          response,
          201,
          await run(store.createThread({ ...(title !== undefined && { title }), queuePolicy: queue }))
        )
      }
      if (id !== undefined && action === undefined && method === "GET")
        return send(response, 200, await run(store.getThread(id)))
      if (id !== undefined && action === "close" && method === "POST")
        return send(response, 200, await run(store.closeThread(id)))
    }

    if (resource === "runs") {
      if (id === undefined && method === "GET") {
        const thread = url.searchParams.get("thread")
        const runs = await run(store.listRuns(thread === null ? {} : { threadId: thread }))
        return send(response, 200, [...runs].reverse())
      }
      if (id === undefined && method === "POST") {
        const body = await readBody(request)
        const threadId = requiredString(body, "thread_id")
        const text = requiredString(body, "request")
        const definition = field(body, "pipeline")
        const planned = field(body, "plan") === true
        const approve = optionalString(body, "approve") ?? "none"
        if (approve !== "none" && approve !== "first" && approve !== "all")
          throw new HttpError(400, "InvalidInput", 'approve must be "none", "first" or "all"')
        if (planned && definition !== undefined && definition !== null)
          throw new HttpError(400, "InvalidInput", "plan and pipeline both choose the stages: give one")
        if (planned && options.plan === undefined)
          throw new HttpError(400, "InvalidInput", "this server cannot plan stages (no model)")
        if (planned) {
          // A closed or unknown thread is refused before the model is asked.
          const thread = await run(store.getThread(threadId))
          if (thread.status === "closed")
            throw new HttpError(409, "ThreadClosed", `Thread ${threadId} is closed: it takes no new runs`)
        }
        const pipeline = planned
          ? await run(
              Effect.mapError(
                (options.plan as NonNullable<Options["plan"]>)(text, approve),
                (error) =>
                  new HttpError(
                    502,
                    "PlanFailed",
                    `the model could not plan the stages: ${(error as { message?: string })?.message ?? String(error)}`
                  )
              )
            )
          : definition === undefined || definition === null
            ? Pipeline.defaultPipeline
            : await run(Pipeline.decode(definition, "the pipeline"))
        const created = await run(executor.create({ threadId, request: text, pipeline }))
        wake()
        return send(response, 201, created)
      }
      if (id === undefined) throw new HttpError(405, "MethodNotAllowed", `${method} ${url.pathname}`)
      if (action === undefined && method === "GET") {
        const view = await run(store.getRun(id))
        return send(response, 200, {
          run: view,
          events: await run(store.events(id)),
          workflow: (await run(executor.workflowOf(id))) ?? null
        })
      }
      if (action === "verify" && method === "GET")
        return send(
          response,
          200,
          await run(Effect.flatMap(store.getRun(id), (view) => RunFiles.verifyRun(workspace, view)))
        )
      if (action === "stages" && method === "GET" && rest[1] === "attempts" && rest[3] === "artifacts") {
        const position = Number(rest[0])
        const attemptNumber = Number(rest[2])
        const relative = rest.slice(4).join("/")
        const view = await run(store.getRun(id))
        const stage = view.stages.find((s) => s.position === position)
        const entry = stage?.attempts
          .find((a) => a.attempt === attemptNumber)
          ?.artifacts.find((a) => a.path === relative)
        if (stage === undefined || entry === undefined)
          throw new HttpError(
            404,
            "NotFound",
            `no artifact ${relative} in stage ${position} attempt ${attemptNumber}`
          )
        const directory = RunFiles.attemptPath(
          workspace,
          id,
          position,
          stage.key,
          attemptNumber,
          stage.attempts.length
        )
        const bytes = await run(RunFiles.readArtifact(directory, relative))
        response.writeHead(200, {
          "content-type":
            entry.kind === "json" ? "application/json; charset=utf-8" : "text/plain; charset=utf-8",
          "x-content-type-options": "nosniff",
          "cache-control": "no-store",
          "x-sha256": entry.sha256,
          "x-sha256-matches": String(RunFiles.sha256(bytes) === entry.sha256),
          "content-length": bytes.length
        })
        response.end(bytes)
        return
      }
      if (method === "POST" && action !== undefined) {
        const body = await readBody(request)
        switch (action) {
          case "approve": {
            const by = optionalString(body, "by")
            const view = await run(executor.approve(id, by ?? "panel"))
            wake()
            return send(response, 200, view)
          }
          case "reject":
            return send(response, 200, await run(executor.reject(id, requiredString(body, "reason"))))
          case "retry": {
            const view = await run(executor.retry(id))
            wake()
            return send(response, 200, view)
          }
          case "cancel":
            return send(
              response,
              200,
              await run(executor.cancel(id, optionalString(body, "reason") ?? "canceled from the panel"))
            )
        }
      }
    }
    throw new HttpError(404, "NotFound", `no route ${method} ${url.pathname}`)
  }

  return new Promise((resolve, reject) => {
    const host = options.host ?? "127.0.0.1"
    let address = ""
    const server = http.createServer((request, response) => {
      const allowed = [address, `localhost:${(server.address() as AddressInfo | null)?.port}`]
      if (!allowed.includes(request.headers.host ?? "")) {
        send(response, 421, {
          error: { code: "MisdirectedRequest", message: `this server answers for ${address} only` }
        })
        return
      }
      route(request, response, address).catch((error: unknown) => {
        if (response.headersSent) {
          response.end()
          return
        }
        const known = error instanceof HttpError ? error : new HttpError(500, "Error", String(error))
        send(response, known.status, { error: { code: known.code, message: known.message } })
      })
    })
    server.on("error", reject)
    server.listen(options.port ?? 0, host, () => {
      const port = (server.address() as AddressInfo).port
      address = `${host}:${port}`
      drain(0, () => {})
        .then((end) => {
          cursor = end
          void poll()
          resolve({
            url: `http://${address}`,
            port,
            close: () =>
              new Promise<void>((done) => {
                closed = true
                for (const client of clients.keys()) client.end()
                clients.clear()
                server.close(() => done())
                server.closeAllConnections()
              })
          })
        })
        .catch((error) => {
          server.close()
          reject(error)
        })
    })
  })
}
