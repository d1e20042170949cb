/**
 * SessionRoutes: the `sessions` group of the API (PanelApi): the session
 * store's conversations, listed a page at a time with a search, and one
 * session's turns as `noema sessions show` shows them (SessionsJson).
 *
 * A server started without a session store answers 404 `NoSessionStore`, so
 * the page can say why there is nothing rather than show an empty list.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as SessionsJson from "../SessionsJson.js"
import { answer, type Context } from "./Routes.js"

const noStore = ApiError.make(ApiError.NotFound, "NoSessionStore", "this server was started without sessions")

const storeOf = (context: Context) =>
  context.sessions === undefined ? Effect.fail(noStore) : Effect.succeed(context.sessions)

/** A page of the sessions matching `q`, in the store's order (the most recent first). */
const list = (
  context: Context,
  query: { readonly q?: string; readonly offset?: number; readonly limit?: number }
) =>
  Effect.gen(function* () {
    const store = yield* storeOf(context)
    const all = yield* store.list()
    const search = query.q?.trim() ?? ""
    const found = search === "" ? all : all.filter((info) => SessionsJson.matches(info, search))
    const offset = query.offset ?? 0
    const limit = query.limit ?? 50
    return {
      total: found.length,
      offset,
      limit,
      sessions: found.slice(offset, offset + limit).map(SessionsJson.summaryOf)
    }
  })

const detail = (context: Context, id: string, fromTurn: number | undefined) =>
  Effect.gen(function* () {
    const store = yield* storeOf(context)
    const stored = yield* Effect.catchTag(store.load(id), "SessionNotFoundError", () =>
      Effect.fail(ApiError.make(ApiError.NotFound, "SessionNotFound", `no session ${id}`))
    )
    return SessionsJson.detailOf(stored, {
      prices: context.prices,
      ...(fromTurn !== undefined && { fromTurn })
    })
  })

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "sessions", (handlers) =>
    handlers
      .handle("list", ({ query }) => answer(context, list(context, query)))
      .handle("get", ({ params, query }) => answer(context, detail(context, params.id, query.from_turn)))
  )
