/**
 * RunRoutes: the `runs` group of the API (PanelApi): runs as shown, made from
 * a pipeline or the model's plan, their files, and what a person decides
 * (approve, reject, retry, cancel).
 *
 * Approve, retry and a new run only record what happened; the worker
 * (`wake`) carries the run on, here or in any other process sharing the
 * store. Approvals are recorded as the server's `approver`, never as a name
 * the request gives. A retry of a failure that is not retryable is refused
 * (409, `NotRetryable`, saying why) unless the request forces it, as the CLI's
 * `runs retry --force`: the panel shows the reason and offers "retry anyway".
 */
import { Pipeline, Run, RunFiles, RunLease, Shown } from "@noema/runs"
import { Effect } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as ArtifactFile from "./ArtifactFile.js"
import { answer, type Context } from "./Routes.js"

type NewRun = typeof PanelApi.NewRun.Type

const invalid = (message: string) => ApiError.make(ApiError.BadRequest, "InvalidInput", message)

/** The stages of the model's plan for `request`, on an open thread. */
const planned = (context: Context, payload: NewRun) =>
  Effect.gen(function* () {
    const plan = context.plan
    if (plan === undefined) return yield* invalid("this server cannot plan stages (no model)")
    // A closed or unknown thread is refused before the model is asked.
    const thread = yield* context.store.getThread(payload.threadId)
    if (thread.status === "closed") return yield* new Run.ThreadClosed({ threadId: thread.id })
    return yield* Effect.mapError(plan(payload.request, payload.approve ?? "none"), (error) =>
      ApiError.make(
        ApiError.BadGateway,
        "PlanFailed",
        `the model could not plan the stages: ${(error as { message?: string })?.message ?? String(error)}`
      )
    )
  })

/** The pipeline of a new run: the one given, the model's plan, or the default. */
const pipelineOf = (context: Context, payload: NewRun) => {
  if (payload.plan === true)
    return payload.pipeline === undefined
      ? planned(context, payload)
      : Effect.fail(invalid("plan and pipeline both choose the stages: give one"))
  return payload.pipeline === undefined
    ? Effect.succeed(Pipeline.defaultPipeline)
    : Pipeline.decode(payload.pipeline, "the pipeline")
}

const create = (context: Context, payload: NewRun) =>
  Effect.gen(function* () {
    const pipeline = yield* pipelineOf(context, payload)
    const created = yield* Effect.catchTag(
      context.executor.create({ threadId: payload.threadId, request: payload.request, pipeline }),
      "ThreadBusy",
      (busy) => Effect.flatMap(RunLease.explainBusy(context.store, busy), Effect.fail)
    )
    context.wake()
    return created
  })

const detail = (context: Context, runId: string) =>
  Effect.gen(function* () {
    return {
      run: yield* Shown.runOf(context.store, runId),
      events: yield* context.store.events(runId),
      workflow: (yield* context.executor.workflowOf(runId)) ?? null
    }
  })

/** The artifact's bytes, its sha256 (the manifest's) in `X-Sha256` and whether the bytes have it. */
const artifact = (
  context: Context,
  params: { readonly id: string; readonly position: number; readonly attempt: number; readonly "*": string }
) =>
  Effect.gen(function* () {
    const { id: runId, position, attempt } = params
    const relative = params["*"]
    const view = yield* context.store.getRun(runId)
    const stage = view.stages.find((s) => s.position === position)
    const entry = stage?.attempts
      .find((a) => a.attempt === attempt)
      ?.artifacts.find((a) => a.path === relative)
    if (stage === undefined || entry === undefined)
      return yield* ApiError.make(
        ApiError.NotFound,
        "NotFound",
        `no artifact ${relative} in stage ${position} attempt ${attempt}`
      )
    const attemptDirectory = RunFiles.attemptPath(
      context.workspace,
      runId,
      position,
      stage.key,
      attempt,
      stage.attempts.length
    )
    const bytes = yield* ArtifactFile.read({ workspace: context.workspace, attemptDirectory, relative })
    return HttpServerResponse.uint8Array(bytes, {
      contentType: entry.kind === "json" ? "application/json; charset=utf-8" : "text/plain; charset=utf-8",
      headers: {
        "x-sha256": entry.sha256,
        "x-sha256-matches": String(RunFiles.sha256(bytes) === entry.sha256)
      }
    })
  })

/** `effect`, then the worker told the run may be carried on. */
const thenWake = <A, E>(context: Context, effect: Effect.Effect<A, E>) =>
  Effect.tap(effect, () => Effect.sync(context.wake))

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "runs", (handlers) =>
    handlers
      .handle("list", ({ query }) =>
        answer(
          context,
          Effect.map(
            Shown.runs(context.store, query.thread === undefined ? {} : { threadId: query.thread }),
            (runs) => [...runs].reverse()
          )
        )
      )
      .handle("create", ({ payload }) => answer(context, create(context, payload)))
      .handle("get", ({ params }) => answer(context, detail(context, params.id)))
      .handle("verify", ({ params }) =>
        answer(
          context,
          Effect.flatMap(context.store.getRun(params.id), (view) =>
            RunFiles.verifyRun(context.workspace, view)
          )
        )
      )
      .handle("artifact", ({ params }) => answer(context, artifact(context, params)))
      .handle("approve", ({ params, payload }) =>
        answer(
          context,
          payload.by !== undefined
            ? Effect.fail(
                invalid(
                  `by is not taken from the request: this server records approvals as "${context.approver}"`
                )
              )
            : thenWake(context, context.executor.approve(params.id, context.approver))
        )
      )
      .handle("reject", ({ params, payload }) =>
        answer(context, context.executor.reject(params.id, payload.reason))
      )
      .handle("retry", ({ params, payload }) =>
        answer(
          context,
          thenWake(context, context.executor.retry(params.id, { force: payload.force === true }))
        )
      )
      .handle("cancel", ({ params, payload }) =>
        answer(context, context.executor.cancel(params.id, payload.reason ?? "canceled from the panel"))
      )
  )
