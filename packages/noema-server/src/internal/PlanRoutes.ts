/**
 * PlanRoutes: the `plans` group of the API (PanelApi): the plans `noema plan`
 * stored in the resource store, and one plan's tree as `noema tasks show`
 * prints it (PlansJson), read as the server's actor through the policy.
 *
 * A plan the actor may not read is listed as denied with nothing of it; in a
 * tree, what lies under the plan that the actor may not read is counted and
 * left out. A server started without resources answers 404 `NoResourceStore`.
 */
import { type Resource, Urn } from "@noema/resources"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as ApiError from "../ApiError.js"
import * as PanelApi from "../PanelApi.js"
import * as PlansJson from "../PlansJson.js"
import { checkedUrn, mayGet, resourcesOf } from "./ResourceAccess.js"
import { answer, type Context, type Resources } from "./Routes.js"

/** The registered assistants' names, by URN: how an assignment is shown. */
const assistantNames = (access: Resources) =>
  Effect.map(
    access.store.findByType("assistant"),
    (assistants) => new Map(assistants.map((assistant) => [assistant.meta.urn, assistant.meta.name]))
  )

/** A plan as listed: its tasks' counts when the actor may read it (`tasks`), else its URN alone. */
const summaryOf = (
  root: string,
  tasks: ReadonlyArray<Resource.Resource> | undefined
): PlansJson.PlanSummary => ({
  urn: root,
  conversation: Urn.parent(root) ?? "",
  // The request is read for the page shown only.
  request: tasks === undefined ? null : "",
  decision: tasks === undefined ? "deny" : "allow",
  ...PlansJson.countsOf(tasks ?? [])
})

/**
 * Every plan, the most recently worked on first (one not worked on yet before them: it is
 * about to be; one the actor may not read after them all), a page at a time. The tasks are
 * read once for all plans, the requests of the page in one read, and the policy asked once
 * per plan: the view reads this every few seconds. A plan's counts are of every task stored
 * under a request the actor may read (how many, in which state; no task's content).
 */
const list = (context: Context, query: { readonly offset?: number; readonly limit?: number }) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const plans = PlansJson.plansOf(yield* access.store.findByType("task"))
    const summaries = yield* Effect.forEach(plans, ([root, tasks]) =>
      Effect.map(mayGet(access, root), (allowed) => summaryOf(root, allowed ? tasks : undefined))
    )
    // Denied ones last: nothing of them can be shown.
    const key = (plan: PlansJson.PlanSummary) => (plan.decision === "deny" ? "" : (plan.updated_at ?? "~"))
    summaries.sort((a, b) => (key(a) === key(b) ? (a.urn < b.urn ? -1 : 1) : key(a) < key(b) ? 1 : -1))
    const offset = query.offset ?? 0
    const limit = query.limit ?? 50
    const shown = summaries.slice(offset, offset + limit)
    const requests = new Map(
      (yield* access.index.getMany(
        access.actor,
        shown.filter((plan) => plan.decision === "allow").map((plan) => plan.urn)
      )).map((request) => [request.meta.urn, request])
    )
    return {
      total: summaries.length,
      offset,
      limit,
      plans: shown.map((plan) => {
        const request = requests.get(plan.urn)
        if (request === undefined) return plan
        return {
          ...plan,
          conversation: request.meta.parent ?? "",
          request: request.meta.type === "message" ? (request as Resource.Message).content : ""
        }
      })
    }
  })

const notAPlan = (urn: string, why: string) =>
  ApiError.make(ApiError.NotFound, "NotAPlan", `${urn} is not a plan: ${why}`)

/** The tree planned under the request `urn`, as the actor may read it. */
const tree = (context: Context, given: string) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const urn = yield* checkedUrn("urn", given)
    const request: Resource.Resource = yield* access.index.get(access.actor, urn)
    if (request.meta.type !== "message")
      return yield* Effect.fail(notAPlan(urn, `it is a ${request.meta.type}, not a request's message`))
    const readable = yield* access.index.findReadable(access.actor, urn)
    const tasks = PlansJson.tasksOf(readable.resources, urn, yield* assistantNames(access))
    if (tasks.length === 0 && readable.withheld.length === 0)
      return yield* Effect.fail(notAPlan(urn, "no tasks are stored under it"))
    return {
      urn,
      conversation: request.meta.parent ?? "",
      request: (request as Resource.Message).content,
      tasks,
      withheld: readable.withheld.length
    } satisfies PlansJson.PlanTree
  })

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "plans", (handlers) =>
    handlers
      .handle("list", ({ query }) => answer(context, list(context, query)))
      .handle("tree", ({ query }) => answer(context, tree(context, query.urn)))
  )
