/**
 * ThreadRoutes: the `threads` group of the API (PanelApi): threads as shown,
 * each with the run holding it, made, closed and given a queue policy.
 */
import { type Run, Shown } from "@noema/runs"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as PanelApi from "../PanelApi.js"
import { answer, type Context } from "./Routes.js"

/** The thread after `effect`, as shown (with the run holding it). */
const shown = (context: Context, effect: Effect.Effect<Run.Thread, unknown>) =>
  answer(
    context,
    Effect.flatMap(effect, (thread) => Shown.threadOf(context.store, thread))
  )

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "threads", (handlers) =>
    handlers
      .handle("list", () => answer(context, Shown.threads(context.store)))
      .handle("create", ({ payload }) =>
        shown(
          context,
          context.store.createThread({
            ...(payload.title !== undefined && { title: payload.title }),
            queuePolicy: payload.queuePolicy ?? "reject"
          })
        )
      )
      .handle("get", ({ params }) => shown(context, context.store.getThread(params.id)))
      .handle("close", ({ params }) => shown(context, context.store.closeThread(params.id)))
      .handle("setQueuePolicy", ({ params, payload }) =>
        shown(context, context.store.setQueuePolicy(params.id, payload.queuePolicy))
      )
  )
