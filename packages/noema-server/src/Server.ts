/**
 * Server: the runs panel (`GET /`, PanelPage) and its JSON API (PanelApi, with
 * its OpenAPI document at `/api/openapi.json`), on effect's `HttpRouter` and
 * Node's HTTP server.
 *
 * Every request needs the server's access token (AccessToken: `Authorization:
 * Bearer`, or the cookie the tokened URL sets); without it the answer is 401
 * and says how to get in. The server listens on 127.0.0.1 only and answers
 * only requests whose Host is that address (no DNS rebinding); a
 * state-changing request whose Origin is another site's is refused
 * (SameOrigin); a POST is taken only as `application/json`, up to
 * `maxBodyBytes`. These checks are one middleware in front of every route
 * (Gate). No CORS header is ever sent, and no page may frame the panel. Feed
 * clients are capped and sent no faster than they read (FeedClients), and the
 * feed follows the store's changes (StoreChanges); artifacts are opened so that
 * a link or a FIFO planted in the workspace gets nowhere (ArtifactFile).
 * Errors are `{ "error": { "code", "message" } }` (ApiError, decided by
 * Failures), and never show where the workspace is.
 */
import * as fs from "node:fs"
import { createServer } from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { NodeHttpServer } from "@effect/platform-node"
import type { Policy, ResourceIndex, ResourceStore } from "@noema/resources"
import type { RoutineStore } from "@noema/routines"
import type { Executor, Pipeline, PlanPipeline, RunsStore } from "@noema/runs"
import type { SessionStore, TraceStore, Usage } from "@noema/session"
import { Context, Effect, Exit, Layer, Schema, Scope } from "effect"
import { HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as AccessToken from "./internal/AccessToken.js"
import * as ChatHost from "./internal/ChatHost.js"
import * as ChatRoutes from "./internal/ChatRoutes.js"
import * as EventRoutes from "./internal/EventRoutes.js"
import * as Failures from "./internal/Failures.js"
import * as FeedClients from "./internal/FeedClients.js"
import * as Gate from "./internal/Gate.js"
import * as PlanRoutes from "./internal/PlanRoutes.js"
import * as ResourceRoutes from "./internal/ResourceRoutes.js"
import type * as Routes from "./internal/Routes.js"
import * as RoutineRoutes from "./internal/RoutineRoutes.js"
import * as RunRoutes from "./internal/RunRoutes.js"
import * as SameOrigin from "./internal/SameOrigin.js"
import * as SessionRoutes from "./internal/SessionRoutes.js"
import * as ThreadRoutes from "./internal/ThreadRoutes.js"
import * as TraceRoutes from "./internal/TraceRoutes.js"
import * as PanelApi from "./PanelApi.js"
import * as PanelPage from "./PanelPage.js"
import * as StoreChanges from "./StoreChanges.js"

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
  /**
   * When the live feed reads the store again: `StoreChanges.fromDatabase` follows the database
   * (LISTEN/NOTIFY on PostgreSQL). Default: a poll every `feedPollMs`.
   */
  readonly changes?: StoreChanges.StoreChanges
  /** How often the store is polled without `changes`. Default 250 ms. */
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
  /** The saved conversations the Sessions view shows (`noema serve` gives the database's). */
  readonly sessions?: SessionStore.Service
  /** The models' prices (US dollars per million tokens), for the cost of a session's turns. */
  readonly prices?: Usage.Prices
  /**
   * The agent the Chat view talks to, on the runtime `noema chat` uses (`noema serve` gives
   * it); needs `sessions`. Without it, the view says the server has none.
   */
  readonly chat?: ChatAgent
  /** Most chats live at once (a runtime each); an idle one makes room. Default 16. */
  readonly maxChats?: number
  /** Most messages waiting behind a session's turn. Default 8. */
  readonly maxQueuedMessages?: number
  /** The turns' traces the Traces view shows (`noema serve` gives the database's). */
  readonly traces?: TraceStore.Service
  /**
   * What the Plans and Resources views read, as one actor under one policy engine (`noema serve`
   * gives the database's resources, as `noema resources` reads them).
   */
  readonly resources?: Resources
  /** What the Routines view reads (`noema serve` gives the database's, named relative to its directory). */
  readonly routines?: Routines
}

/**
 * The resources the Plans and Resources views read, as one actor under one policy engine (the
 * actor and engine `noema resources` uses): every read of a resource goes through `index`.
 */
export interface Resources {
  /** Lists by type (the plans, the resources with no parent); what it finds is authorized before it is sent. */
  readonly store: ResourceStore.Service
  readonly index: ResourceIndex.Service
  /** The engine `index` asks: the decision shown beside each resource. */
  readonly policy: Policy.Service
  /** Who the server reads as (a URN). */
  readonly actor: string
}

/** The routines the Routines view reads: their stored progress, and the directory names are relative to. */
export interface Routines {
  readonly store: RoutineStore.Service
  /** A document under it is named by its path relative to it; one elsewhere, by its file name. */
  readonly root: string
}

export interface Server {
  /** The server's address, `http://127.0.0.1:PORT`: API clients send the token in a header. */
  readonly url: string
  readonly port: number
  readonly token: string
  /** The address to open in a browser: it carries the token, which the page trades for a cookie. */
  readonly panelUrl: string
  /** What the event feed holds now: its clients and the bytes handed to them not yet taken. */
  readonly feed: () => FeedStats
  /** The chats live now, their clients, and the most bytes one client was handed and has not taken. */
  readonly chats: () => ChatStats
}

/** A server started outside an Effect program (`start`): closed with `close`. */
export interface Started extends Server {
  readonly close: () => Promise<void>
}

export type FeedStats = FeedClients.Stats

/** What the Chat view talks to (see `Options.chat`). */
export type ChatAgent = ChatHost.ChatAgent

export type ChatStats = ChatHost.Stats

/** The server could not start: a weak token, or the port taken. */
export class ServerError extends Schema.TaggedError<ServerError>()("ServerError", {
  detail: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {
  override get message() {
    return `cannot start the runs server: ${this.detail}`
  }
}

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

/** The paths no error message may show: the workspace, as given and as resolved. */
const hiddenPaths = (workspace: string): ReadonlyArray<string> => {
  const resolved = path.resolve(workspace)
  try {
    return [...new Set([fs.realpathSync(resolved), resolved])]
  } catch {
    return [resolved]
  }
}

/** The page at `/` and its modules and style under `/app/` (PanelPage), served with the page's policy. */
const pageRoutes = (files: ReadonlyMap<string, PanelPage.AppFile>) =>
  Layer.mergeAll(
    HttpRouter.add(
      "GET",
      "/",
      HttpServerResponse.text(PanelPage.page, {
        contentType: "text/html; charset=utf-8",
        headers: { "content-security-policy": PanelPage.policy }
      })
    ),
    ...[...files].map(([name, file]) =>
      HttpRouter.add(
        "GET",
        `/app/${name}`,
        HttpServerResponse.uint8Array(file.body, {
          contentType: file.contentType,
          headers: { "content-security-policy": PanelPage.policy }
        })
      )
    )
  )

/** The gate in front of every route, once the port (which the token's cookie names) is known. */
const gateLayer = (token: string, host: string, failures: Failures.Failures, maxBodyBytes: number) =>
  HttpRouter.middleware(
    Effect.map(HttpServer.HttpServer, (server) => {
      const port = (server.address as { readonly port: number }).port
      const origin = SameOrigin.make(host, port)
      return Gate.middleware({
        access: AccessToken.make(token, port),
        origin,
        base: `http://${origin.hosts[0]}`,
        failures,
        maxBodyBytes
      })
    }),
    { global: true }
  )

/** The routes: the API from its definition (and its OpenAPI document), the page, behind the gate. */
const app = (
  context: Routes.Context,
  gate: Layer.Layer<never, never, HttpRouter.HttpRouter | HttpServer.HttpServer>
) =>
  Layer.mergeAll(
    HttpApiBuilder.layer(PanelApi.Api, { openapiPath: PanelApi.openApiPath }),
    pageRoutes(PanelPage.appFiles()),
    gate
  ).pipe(
    Layer.provide([
      ThreadRoutes.layer(context),
      RunRoutes.layer(context),
      EventRoutes.layer(context),
      SessionRoutes.layer(context),
      ChatRoutes.layer(context),
      TraceRoutes.layer(context),
      PlanRoutes.layer(context),
      RoutineRoutes.layer(context),
      ResourceRoutes.layer(context)
    ])
  )

/** Serves `routes` on Node's HTTP server at `address` until the scope closes; the port it is bound to. */
const listen = (routes: ReturnType<typeof app>, address: { readonly port: number; readonly host: string }) =>
  Effect.gen(function* () {
    let node: ReturnType<typeof createServer> | undefined
    const served = yield* Layer.build(
      HttpRouter.serve(routes, { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provideMerge(NodeHttpServer.layer(() => (node = createServer()), address))
      )
    ).pipe(
      Effect.mapError(
        (error) =>
          new ServerError({
            detail: error.cause instanceof Error ? error.cause.message : error.message,
            cause: error
          })
      )
    )
    // Closing ends every connection at once, a live feed's too, rather than waiting for clients to leave.
    yield* Effect.addFinalizer(() => Effect.sync(() => node?.closeAllConnections()))
    return (Context.get(served, HttpServer.HttpServer).address as { readonly port: number }).port
  })

/** Starts the server; it stops when the scope closes. */
export const make = Effect.fnUntraced(function* (options: Options) {
  const token = options.token ?? AccessToken.generate()
  const problem = AccessToken.problem(token)
  if (problem !== undefined) return yield* new ServerError({ detail: problem })
  const host = options.host ?? "127.0.0.1"
  const log = options.log ?? ((line: string) => void process.stderr.write(line))
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024
  const failures = Failures.make({ hidden: hiddenPaths(options.workspace), log, maxBodyBytes })
  const feed = yield* FeedClients.make({
    read: (after, limit) => options.store.feed(after, limit),
    changes: options.changes ?? StoreChanges.polling(options.feedPollMs ?? 250),
    ...(options.maxFeedClients !== undefined && { maxClients: options.maxFeedClients }),
    onReadFailure: (detail) => log(`noema server: ${detail}\n`)
  }).pipe(
    Effect.mapError(
      (error) =>
        new ServerError({
          detail: `cannot read the runs store: ${error instanceof Error ? error.message : String(error)}`,
          cause: error
        })
    )
  )
  const approver = options.approver ?? defaultApprover()
  const chat =
    options.chat === undefined || options.sessions === undefined
      ? undefined
      : yield* ChatHost.make({
          agent: options.chat,
          sessions: options.sessions,
          approver,
          ...(options.maxChats !== undefined && { maxChats: options.maxChats }),
          ...(options.maxQueuedMessages !== undefined && { maxQueued: options.maxQueuedMessages }),
          log
        })
  const context: Routes.Context = {
    store: options.store,
    executor: options.executor,
    workspace: options.workspace,
    wake: options.wake ?? (() => {}),
    approver,
    plan: options.plan,
    feed,
    failures,
    sessions: options.sessions,
    prices: options.prices,
    chat,
    traces: options.traces,
    resources: options.resources,
    routines: options.routines
  }
  const port = yield* listen(app(context, gateLayer(token, host, failures, maxBodyBytes)), {
    port: options.port ?? 0,
    host
  })
  const url = `http://${SameOrigin.make(host, port).hosts[0]}`
  return {
    url,
    port,
    token,
    panelUrl: `${url}/?token=${encodeURIComponent(token)}`,
    feed: feed.stats,
    chats: () => chat?.stats() ?? { chats: 0, clients: 0, largestHeldBytes: 0 }
  } satisfies Server
})

/** Starts the server outside an Effect program; `close` stops it. */
export const start = async (options: Options): Promise<Started> => {
  const scope = Effect.runSync(Scope.make())
  const server = await Effect.runPromise(
    make(options).pipe(
      Scope.provide(scope),
      Effect.onError((cause) => Scope.close(scope, Exit.failCause(cause)))
    )
  )
  return { ...server, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
