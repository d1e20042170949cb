/**
 * PanelApi: the runs panel's JSON API as an `HttpApi`, its one definition:
 * the server's routes and handlers are built from it, and so is the OpenAPI
 * document it serves at `/api/openapi.json`.
 *
 *     GET  /api/threads                         threads, each with the run holding it
 *     POST /api/threads                         { title?, queue_policy? }  -> 201 thread
 *     GET  /api/threads/:id
 *     POST /api/threads/:id/close
 *     POST /api/threads/:id/queue-policy        { queue_policy }: "reject" or "enqueue"
 *     GET  /api/runs[?thread=ID]                runs, newest first
 *     POST /api/runs                            { thread_id, request, pipeline? } or
 *                                               { thread_id, request, plan: true, approve? }  -> 201 run
 *     GET  /api/runs/:id                        { run, events, workflow }
 *     GET  /api/runs/:id/verify                 the artifacts re-hashed against their manifests
 *     GET  /api/runs/:id/stages/:position/attempts/:attempt/artifacts/<path>
 *                                               the artifact's bytes, its sha256 in `X-Sha256`
 *     POST /api/runs/:id/approve|reject|retry|cancel   {} | { reason } | { force? } | { reason? }
 *     GET  /api/events                          Server-Sent Events: every event appended to any run
 *     GET  /api/sessions[?q=&offset=&limit=]    saved conversations, most recent first, a page at a time
 *     GET  /api/sessions/:id[?from_turn=]       a session's turns (a page of them): messages, tool calls,
 *                                               approvals, interruptions, compactions, usage and cost
 *     GET  /api/chat                            what the Chat view talks to (the model and its tools)
 *     POST /api/chat                            {}  -> 201 { session_id }: a new session to chat in
 *     GET  /api/chat/:id/events                 Server-Sent Events: the session's turns as they run (ChatJson)
 *     POST /api/chat/:id/messages               { text, interrupt? }  -> 202: a turn, or queued behind one
 *     POST /api/chat/:id/cancel                 {}: stops the turn under way (what was shown is kept)
 *     POST /api/chat/:id/decisions              { decisions: { CALL_ID: { approved, reason? } } }  -> 202
 *     GET  /api/traces[?session=&seq=&offset=&limit=]  turns' traces kept locally, newest first
 *     GET  /api/traces/:id                      a trace's spans in tree order, as a waterfall's rows
 *     GET  /api/plans[?offset=&limit=]          the plans noema plan stored, with their tasks' states
 *     GET  /api/plans/tree?urn=                 a plan's tree: assignments, scores, evaluations, outputs
 *     GET  /api/routines                        the routines with stored progress
 *     GET  /api/routines/:id                    a routine's goals as noema routine status shows them
 *     GET  /api/resources[?prefix=&offset=&limit=]   resources under a URN prefix (resources ls), with the
 *                                               policy's decision for the server's actor on each
 *     GET  /api/resources/search?q=[&type=&prefix=&limit=]   resources search
 *     GET  /api/resources/show?urn=             a resource (resources show) and the decision per action
 *
 * Bodies are in the runs' JSON style (RunsJson); a refusal is
 * `{ "error": { "code", "message" } }` with the status of its class
 * (ApiError). Each endpoint declares the errors it answers besides those of
 * the checks every request passes (`internal/Gate`).
 */
import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import * as ApiError from "./ApiError.js"
import * as ChatJson from "./ChatJson.js"
import * as PlansJson from "./PlansJson.js"
import * as ResourcesJson from "./ResourcesJson.js"
import * as RoutinesJson from "./RoutinesJson.js"
import * as RunsJson from "./RunsJson.js"
import * as SessionsJson from "./SessionsJson.js"
import * as TracesJson from "./TracesJson.js"

// ---------------------------------------------------------------------------
// Request bodies: their messages name the field as it is sent
// ---------------------------------------------------------------------------

const optional = Schema.optionalKey

/** Bounds on the texts a request may carry (a run's request is bounded by the store, pipelines by Pipeline). */
export const maxTitleLength = 200
export const maxReasonLength = 2000

/** An optional text of at most `maxLength` characters. */
const text = (name: string, maxLength: number) =>
  Schema.String.annotate({ message: `${name} must be a string` }).check(
    Schema.isMaxLength(maxLength, { message: `${name} must have at most ${maxLength} characters` })
  )

/** A text that must be there and not blank (and, given `maxLength`, not longer). */
const required = (name: string, maxLength?: number) => {
  const message = `${name} is required (a non-empty string)`
  const present = Schema.String.annotate({ message }).check(Schema.isPattern(/\S/, { message }))
  return (
    maxLength === undefined
      ? present
      : present.check(
          Schema.isMaxLength(maxLength, { message: `${name} must have at most ${maxLength} characters` })
        )
  ).pipe(Schema.annotateKey({ messageMissingKey: message }))
}

const queuePolicy = RunsJson.QueuePolicy.annotate({ message: 'queue_policy must be "reject" or "enqueue"' })

export const NewThread = RunsJson.snake({
  title: optional(text("title", maxTitleLength)),
  queuePolicy: optional(queuePolicy)
})

export const QueuePolicyChange = RunsJson.snake({
  queuePolicy: queuePolicy.pipe(
    Schema.annotateKey({ messageMissingKey: 'queue_policy must be "reject" or "enqueue"' })
  )
})

export const NewRun = RunsJson.snake({
  threadId: required("thread_id"),
  request: required("request"),
  pipeline: optional(
    Schema.Unknown.annotate({
      description: "The stages: { name, stages: [{ key, instructions, approval?, tools? }] } (docs/runs.md)"
    })
  ),
  plan: optional(Schema.Boolean.annotate({ description: "The stages from the model's plan" })),
  approve: optional(
    Schema.Literals(["none", "first", "all"]).annotate({
      message: 'approve must be "none", "first" or "all"',
      description: "With plan: which planned stages wait for approval"
    })
  )
})

export const Approval = RunsJson.snake({
  by: optional(
    Schema.Unknown.annotate({ description: "Refused: the server records who approved (its approver)" })
  )
})

export const Rejection = RunsJson.snake({ reason: required("reason", maxReasonLength) })

export const Retry = RunsJson.snake({
  force: optional(
    Schema.Boolean.annotate({
      description: "Retry a failure that is not retryable (refused with 409 otherwise)"
    })
  )
})

export const Cancellation = RunsJson.snake({ reason: optional(text("reason", maxReasonLength)) })

// ---------------------------------------------------------------------------
// The live feed's frames
// ---------------------------------------------------------------------------

/** A frame of /api/events: a run event whose `id` is its cursor, or a keep-alive nobody listens to. */
export const FeedEvent = Schema.Union([
  Schema.Struct({
    id: Schema.String,
    event: Schema.Literal("run-event"),
    data: Schema.fromJsonString(RunsJson.FeedFrame)
  }),
  Schema.Struct({ event: Schema.Literal("keep-alive"), data: Schema.Literal("") })
])

// ---------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------

/** The errors an endpoint answers besides those of the checks in front of every route. */
const errors = <const Classes extends ReadonlyArray<(typeof ApiError.all)[number]>>(...classes: Classes) => [
  ApiError.BadRequest,
  ApiError.Unauthorized,
  ApiError.Forbidden,
  ApiError.MisdirectedRequest,
  ApiError.InternalError,
  ...classes
]

/** A POST's too: a body not JSON, or too large. */
const postErrors = <const Classes extends ReadonlyArray<(typeof ApiError.all)[number]>>(
  ...classes: Classes
) => errors(ApiError.UnsupportedMediaType, ApiError.PayloadTooLarge, ...classes)

const id = { id: Schema.String }

export class Threads extends HttpApiGroup.make("threads")
  .add(
    HttpApiEndpoint.get("list", "/", { success: Schema.Array(RunsJson.Thread), error: errors() }),
    HttpApiEndpoint.post("create", "/", {
      payload: NewThread,
      success: RunsJson.Thread.pipe(HttpApiSchema.status(201)),
      error: postErrors()
    }),
    HttpApiEndpoint.get("get", "/:id", {
      params: id,
      success: RunsJson.Thread,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.post("close", "/:id/close", {
      params: id,
      success: RunsJson.Thread,
      error: postErrors(ApiError.NotFound)
    }),
    HttpApiEndpoint.post("setQueuePolicy", "/:id/queue-policy", {
      params: id,
      payload: QueuePolicyChange,
      success: RunsJson.Thread,
      error: postErrors(ApiError.NotFound)
    })
  )
  .prefix("/api/threads")
  .annotateMerge(
    OpenApi.annotations({ title: "Threads", description: "Threads hold runs, one at a time or queued" })
  ) {}

/** An action on a run: the run after it. */
const action = <const Name extends string, const Path extends `/:id/${string}`, P extends Schema.Top>(
  name: Name,
  path: Path,
  payload: P
) =>
  HttpApiEndpoint.post(name, path, {
    params: id,
    payload,
    success: RunsJson.ShownRun,
    error: postErrors(ApiError.NotFound, ApiError.Conflict)
  })

/** A whole number in the path (a stage's position, an attempt). */
const WholeNumber = Schema.NumberFromString.check(Schema.isInt())

export class Runs extends HttpApiGroup.make("runs")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: { thread: optional(Schema.String) },
      success: Schema.Array(RunsJson.ShownRun),
      error: errors()
    }),
    HttpApiEndpoint.post("create", "/", {
      payload: NewRun,
      success: RunsJson.ShownRun.pipe(HttpApiSchema.status(201)),
      error: postErrors(ApiError.NotFound, ApiError.Conflict, ApiError.BadGateway)
    }),
    HttpApiEndpoint.get("get", "/:id", {
      params: id,
      success: RunsJson.RunDetail,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("verify", "/:id/verify", {
      params: id,
      success: RunsJson.VerifyReport,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("artifact", "/:id/stages/:position/attempts/:attempt/artifacts/*", {
      params: { ...id, position: WholeNumber, attempt: WholeNumber, "*": Schema.String },
      success: Schema.String.pipe(
        HttpApiSchema.asText({ contentType: "text/plain" }),
        Schema.annotate({
          description:
            "The artifact's bytes (application/json for a JSON artifact); X-Sha256 is its manifest's sha256, X-Sha256-Matches whether the bytes have it"
        })
      ),
      error: errors(ApiError.NotFound, ApiError.Unprocessable)
    }),
    action("approve", "/:id/approve", Approval),
    action("reject", "/:id/reject", Rejection),
    action("retry", "/:id/retry", Retry),
    action("cancel", "/:id/cancel", Cancellation)
  )
  .prefix("/api/runs")
  .annotateMerge(
    OpenApi.annotations({
      title: "Runs",
      description: "Runs, their stages, artifacts and timeline, and what a person decides"
    })
  ) {}

export class Events extends HttpApiGroup.make("events")
  .add(
    HttpApiEndpoint.get("follow", "/api/events", {
      query: { cursor: optional(Schema.String) },
      headers: { "last-event-id": optional(Schema.String) },
      success: HttpApiSchema.StreamSse({ events: FeedEvent }),
      error: errors(ApiError.ServiceUnavailable)
    })
  )
  .annotateMerge(
    OpenApi.annotations({
      title: "Events",
      description:
        "Every event appended to any run, from any process; a client that comes back with Last-Event-ID (or ?cursor=) misses nothing"
    })
  ) {}

/** A whole number in the query, at least `min`. */
const queryCount = (name: string, min: number) =>
  Schema.NumberFromString.check(
    Schema.isInt({ message: `${name} must be a whole number` }),
    Schema.isGreaterThanOrEqualTo(min, { message: `${name} must be at least ${min}` })
  )

/** Where a page of a list starts (0: the first item). */
const pageOffset = optional(queryCount("offset", 0))

/** How many items a page of a list (or search) holds: at least 1, at most `max`. */
const pageLimit = (max: number) =>
  optional(
    queryCount("limit", 1).check(Schema.isLessThanOrEqualTo(max, { message: `limit must be at most ${max}` }))
  )

/** Most sessions in one page of the list. */
export const maxSessionPage = 200

export class Sessions extends HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: {
        q: optional(text("q", maxTitleLength)),
        offset: pageOffset,
        limit: pageLimit(maxSessionPage)
      },
      success: SessionsJson.SessionPage,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("get", "/:id", {
      params: id,
      query: { from_turn: optional(queryCount("from_turn", 1)) },
      success: SessionsJson.SessionDetail,
      error: errors(ApiError.NotFound)
    })
  )
  .prefix("/api/sessions")
  .annotateMerge(
    OpenApi.annotations({
      title: "Sessions",
      description: "Saved conversations (noema chat, ask), as noema sessions shows them"
    })
  ) {}

/** Most characters of one chat message (a pasted document fits; a runaway client does not). */
export const maxChatMessageLength = 100_000

export const ChatMessage = RunsJson.snake({
  text: required("text", maxChatMessageLength),
  interrupt: optional(
    Schema.Boolean.annotate({
      description: "Stop the turn under way and answer this instead (noema chat's !text)"
    })
  )
})

export const ChatDecisions = RunsJson.snake({
  decisions: Schema.Record(
    Schema.String,
    Schema.Union([
      Schema.Struct({ approved: Schema.Literal(true) }),
      Schema.Struct({ approved: Schema.Literal(false), reason: optional(text("reason", maxReasonLength)) })
    ])
  ).annotate({
    message: "decisions must map tool call ids to { approved: true } or { approved: false, reason? }"
  })
})

/** A frame of /api/chat/:id/events: a chat frame, or a keep-alive nobody listens to. */
export const ChatEvent = Schema.Union([
  Schema.Struct({ event: Schema.Literal("chat"), data: Schema.fromJsonString(ChatJson.Frame) }),
  Schema.Struct({ event: Schema.Literal("keep-alive"), data: Schema.Literal("") })
])

export class Chat extends HttpApiGroup.make("chat")
  .add(
    HttpApiEndpoint.get("info", "/", { success: ChatJson.ChatInfo, error: errors(ApiError.NotFound) }),
    HttpApiEndpoint.post("create", "/", {
      payload: RunsJson.snake({}),
      success: ChatJson.NewChat.pipe(HttpApiSchema.status(201)),
      error: postErrors(ApiError.NotFound, ApiError.ServiceUnavailable)
    }),
    HttpApiEndpoint.get("events", "/:id/events", {
      params: id,
      success: HttpApiSchema.StreamSse({ events: ChatEvent }),
      error: errors(ApiError.NotFound, ApiError.ServiceUnavailable)
    }),
    HttpApiEndpoint.post("send", "/:id/messages", {
      params: id,
      payload: ChatMessage,
      success: ChatJson.Sent.pipe(HttpApiSchema.status(202)),
      error: postErrors(ApiError.NotFound, ApiError.Conflict, ApiError.ServiceUnavailable)
    }),
    HttpApiEndpoint.post("cancel", "/:id/cancel", {
      params: id,
      payload: RunsJson.snake({}),
      success: ChatJson.Cancelled,
      error: postErrors(ApiError.NotFound)
    }),
    HttpApiEndpoint.post("decide", "/:id/decisions", {
      params: id,
      payload: ChatDecisions,
      success: ChatJson.Decided.pipe(HttpApiSchema.status(202)),
      error: postErrors(ApiError.NotFound, ApiError.Conflict, ApiError.ServiceUnavailable)
    })
  )
  .prefix("/api/chat")
  .annotateMerge(
    OpenApi.annotations({
      title: "Chat",
      description:
        "Talk to the agent noema chat talks to, on the same runtime: one turn at a time per session, messages queued behind it, a cancel, decisions on calls waiting for approval"
    })
  ) {}

export class Traces extends HttpApiGroup.make("traces")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: {
        session: optional(text("session", maxTitleLength)),
        seq: optional(queryCount("seq", 0)),
        offset: pageOffset,
        limit: pageLimit(maxSessionPage)
      },
      success: TracesJson.TracePage,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("get", "/:id", {
      params: id,
      success: TracesJson.TraceDetail,
      error: errors(ApiError.NotFound)
    })
  )
  .prefix("/api/traces")
  .annotateMerge(
    OpenApi.annotations({
      title: "Traces",
      description:
        "Each turn's spans (model calls, tool calls, retries), kept locally, as noema traces shows them"
    })
  ) {}

/** The longest URN taken in a query (the resources' own bound). */
const maxUrnLength = 1024

export class Plans extends HttpApiGroup.make("plans")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: {
        offset: pageOffset,
        limit: pageLimit(maxSessionPage)
      },
      success: PlansJson.PlanList,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("tree", "/tree", {
      query: { urn: required("urn", maxUrnLength) },
      success: PlansJson.PlanTree,
      error: errors(ApiError.NotFound)
    })
  )
  .prefix("/api/plans")
  .annotateMerge(
    OpenApi.annotations({
      title: "Plans",
      description:
        "The task trees noema plan stored (as noema tasks show prints them), read as the server's actor through the policy"
    })
  ) {}

export class Routines extends HttpApiGroup.make("routines")
  .add(
    HttpApiEndpoint.get("list", "/", { success: RoutinesJson.RoutineList, error: errors(ApiError.NotFound) }),
    HttpApiEndpoint.get("get", "/:id", {
      params: id,
      success: RoutinesJson.RoutineDetail,
      error: errors(ApiError.NotFound)
    })
  )
  .prefix("/api/routines")
  .annotateMerge(
    OpenApi.annotations({
      title: "Routines",
      description: "Work breakdown documents and each goal's progress, as noema routine status shows it"
    })
  ) {}

/** Most resources in one page of a listing, and most results of a search. */
export const maxResourcePage = 500
export const maxSearchResults = 50

export class Resources extends HttpApiGroup.make("resources")
  .add(
    HttpApiEndpoint.get("list", "/", {
      query: {
        prefix: optional(text("prefix", maxUrnLength)),
        offset: pageOffset,
        limit: pageLimit(maxResourcePage)
      },
      success: ResourcesJson.ResourceList,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("search", "/search", {
      query: {
        q: required("q", maxReasonLength),
        type: optional(text("type", maxTitleLength)),
        prefix: optional(text("prefix", maxUrnLength)),
        limit: pageLimit(maxSearchResults)
      },
      success: ResourcesJson.SearchResults,
      error: errors(ApiError.NotFound)
    }),
    HttpApiEndpoint.get("show", "/show", {
      query: { urn: required("urn", maxUrnLength) },
      success: ResourcesJson.ResourceDetail,
      error: errors(ApiError.NotFound)
    })
  )
  .prefix("/api/resources")
  .annotateMerge(
    OpenApi.annotations({
      title: "Resources",
      description:
        "Resources by URN prefix, search and one resource, with the policy's decision for the server's actor on each; a denied resource's content is never sent"
    })
  ) {}

/**
 * The document says once that every route needs the token: the gate in front of the routes
 * checks it, not a middleware of the API's, so no endpoint carries its own (empty) list.
 */
type Spec = Readonly<Record<string, unknown>>

const secured = (spec: Spec): Spec => {
  const paths = (spec.paths ?? {}) as Readonly<Record<string, Readonly<Record<string, Spec>>>>
  return {
    ...spec,
    components: {
      ...(spec.components as Spec | undefined),
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "The token noema serve printed" },
        cookie: {
          type: "apiKey",
          in: "cookie",
          name: "noema-token-PORT",
          description:
            "Set (HttpOnly, SameSite=Strict) when the tokened address /?token= is opened; PORT is the server's"
        }
      }
    },
    security: [{ bearer: [] }, { cookie: [] }],
    paths: Object.fromEntries(
      Object.entries(paths).map(([route, item]) => [
        route,
        Object.fromEntries(
          Object.entries(item).map(([method, { security: _, ...operation }]) => [method, operation])
        )
      ])
    )
  }
}

export class Api extends HttpApi.make("noema-panel")
  .add(Threads, Runs, Events, Sessions, Chat, Traces, Plans, Routines, Resources)
  .annotateMerge(
    OpenApi.annotations({
      title: "noema panel API",
      description:
        "The runs panel's API, on 127.0.0.1: every request needs the server's access token; a state-changing one from a browser, the panel's own origin",
      transform: secured
    })
  ) {}

/** Where the OpenAPI document is served. */
export const openApiPath = "/api/openapi.json"
