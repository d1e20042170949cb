/**
 * ChatRoutes: the `chat` group of the API (PanelApi): a session's chat with
 * the agent (ChatHost) driven over HTTP, its turns followed as Server-Sent
 * Events (ChatJson frames).
 *
 * A server started without a chat agent (or without sessions) answers 404
 * `NoChat`, so the page can say why it cannot chat rather than fail later.
 * What the host refuses is answered by its reason: no such session 404, a
 * full queue 409, too many chats or clients 503 with `Retry-After`; a
 * decision that no longer applies 409, as `noema chat` tells it.
 */
import { Runtime as AgentRuntime } from "@noema/runtime"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import { type ChatHost, ChatRefused } from "./ChatHost.js"
import { answer, type Context } from "./Routes.js"

const noChat = ApiError.make(
  ApiError.NotFound,
  "NoChat",
  "this server was started without an agent to chat with (noema serve has one)"
)

const hostOf = (context: Context) =>
  context.chat === undefined ? Effect.fail(noChat) : Effect.succeed(context.chat)

const refusalClass: Record<ChatRefused["reason"], ApiError.Class> = {
  NoSession: ApiError.NotFound,
  QueueFull: ApiError.Conflict,
  TooManyChats: ApiError.ServiceUnavailable,
  TooManyClients: ApiError.ServiceUnavailable
}

/** The host's refusals and the runtime's, as the API's; anything else goes on to the one mapping. */
const refused = <A, R>(effect: Effect.Effect<A, unknown, R>) =>
  Effect.mapError(effect, (error) => {
    if (error instanceof ChatRefused)
      return ApiError.make(refusalClass[error.reason], error.reason, error.message)
    if (error instanceof AgentRuntime.DecisionRefused)
      return ApiError.make(ApiError.Conflict, "DecisionRefused", error.message)
    if (error instanceof AgentRuntime.RuntimeNotRunning)
      return ApiError.make(ApiError.ServiceUnavailable, "ChatStopped", "this chat has stopped; open it again")
    return error
  })

const on = <A, R>(context: Context, run: (host: ChatHost) => Effect.Effect<A, unknown, R>) =>
  answer(context, refused(Effect.flatMap(hostOf(context), run)))

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "chat", (handlers) =>
    handlers
      .handle("info", () =>
        on(context, (host) => Effect.succeed({ agent: host.description, max_queued: host.maxQueued }))
      )
      .handle("create", () => on(context, (host) => Effect.map(host.create, (id) => ({ session_id: id }))))
      .handle("events", ({ params }) => on(context, (host) => host.join(params.id)))
      .handle("send", ({ params, payload }) =>
        on(context, (host) => host.send(params.id, payload.text, payload.interrupt === true))
      )
      .handle("cancel", ({ params }) => on(context, (host) => host.cancel(params.id)))
      .handle("decide", ({ params, payload }) =>
        on(context, (host) =>
          Effect.map(host.decide(params.id, payload.decisions), (decided) => ({ decided }))
        )
      )
  )
