/**
 * TraceRoutes: the `traces` group of the API (PanelApi): the turns' traces
 * kept in the database (`TraceStore`), newest first, for one session or one
 * turn of it; and one trace's spans as a waterfall's rows (TracesJson).
 *
 * A server started without a trace store answers 404 `NoTraceStore`.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as TracesJson from "../TracesJson.js"
import { answer, type Context } from "./Routes.js"

const noStore = ApiError.make(ApiError.NotFound, "NoTraceStore", "this server was started without traces")

const storeOf = (context: Context) =>
  context.traces === undefined ? Effect.fail(noStore) : Effect.succeed(context.traces)

const list = (
  context: Context,
  query: {
    readonly session?: string
    readonly seq?: number
    readonly offset?: number
    readonly limit?: number
  }
) =>
  Effect.gen(function* () {
    const store = yield* storeOf(context)
    const offset = query.offset ?? 0
    const limit = query.limit ?? 50
    const page = yield* store.list({
      ...(query.session !== undefined && { sessionId: query.session }),
      ...(query.seq !== undefined && { messageSeq: query.seq }),
      offset,
      limit
    })
    return { total: page.total, offset, limit, traces: page.traces.map(TracesJson.summaryOf) }
  })

const detail = (context: Context, traceId: string) =>
  Effect.gen(function* () {
    const store = yield* storeOf(context)
    const trace = yield* Effect.catchTag(store.get(traceId), "TraceNotFoundError", () =>
      Effect.fail(ApiError.make(ApiError.NotFound, "TraceNotFound", `no trace ${traceId}`))
    )
    return TracesJson.detailOf(trace)
  })

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "traces", (handlers) =>
    handlers
      .handle("list", ({ query }) => answer(context, list(context, query)))
      .handle("get", ({ params }) => answer(context, detail(context, params.id)))
  )
