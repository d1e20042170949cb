/**
 * EventRoutes: `GET /api/events`, the live feed (FeedClients) as Server-Sent
 * Events, from the client's `Last-Event-ID` (or `?cursor=`) on. Past the
 * clients it takes, 503 with `Retry-After`.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as FeedClients from "./FeedClients.js"
import type { Context } from "./Routes.js"

const full = ApiError.response(
  ApiError.make(
    ApiError.ServiceUnavailable,
    "TooManyClients",
    "the live feed has as many clients as it takes; try again shortly"
  ),
  { "retry-after": "5" }
)

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "events", (handlers) =>
    handlers.handle("follow", ({ query, headers }) =>
      Effect.map(
        context.feed.join(FeedClients.cursorOf(headers["last-event-id"] ?? query.cursor)),
        (frames) => frames ?? full
      )
    )
  )
