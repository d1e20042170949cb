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
import { answer, type Context, type Resources } from "./Routes.js"

const noStore = ApiError.make(
  ApiError.NotFound,
  "NoResourceStore",
  "this server was started without resources"
)

export const resourcesOf = (context: Context) =>
  context.resources === undefined ? Effect.fail(noStore) : Effect.succeed(context.resources)

/** Whether the actor may `get` `urn`. */
export const mayGet = (access: Resources, urn: string) =>
  Effect.map(
    access.policy.authorize({ actor: access.actor, action: "get", resources: [urn] }),
    (decision) => decision.decision === "allow"
  )

/** A URN from the request, or a 400 saying what is wrong with it. */
export const checkedUrn = (name: string, urn: string) => {
  const problem = Urn.parseEither(urn)
  return problem instanceof Urn.InvalidUrnError
    ? Effect.fail(ApiError.make(ApiError.BadRequest, "InvalidUrn", `${name}: ${problem.message}`))
    : Effect.succeed(urn)
}

/** The registered assistants' names, by URN: how an assignment is shown. */
const assistantNames = (access: Resources) =>
  Effect.map(
    access.store.findByType("assistant"),
    (assistants) => new Map(assistants.map((assistant) => [assistant.meta.urn, assistant.meta.name]))
  )

const denied = (root: string): PlansJson.PlanSummary => ({
  urn: root,
  conversation: Urn.parent(root) ?? "",
  request: null,
  decision: "deny",
  tasks: 0,
  done: 0,
  failed: 0,
  running: 0,
  pending: 0,
  updated_at: null
})

const summaryOf = (access: Resources, root: string) =>
  Effect.gen(function* () {
    if (!(yield* mayGet(access, root))) return denied(root)
    const request = yield* access.index.get(access.actor, root)
    const { resources } = yield* access.index.findReadable(access.actor, root)
    return {
      urn: root,
      conversation: request.meta.parent ?? "",
      request: request.meta.type === "message" ? (request as Resource.Message).content : "",
      decision: "allow",
      ...PlansJson.countsOf(resources)
    } satisfies PlansJson.PlanSummary
  })

/** Every plan, the most recently worked on first (one not worked on yet before them: it is about to be). */
const list = (context: Context) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const roots = PlansJson.rootsOf(yield* access.store.findByType("task"))
    const plans = yield* Effect.forEach(roots, (root) => summaryOf(access, root))
    const key = (plan: PlansJson.PlanSummary) => plan.updated_at ?? "~"
    return {
      plans: plans.sort((a, b) => (key(a) === key(b) ? (a.urn < b.urn ? -1 : 1) : key(a) < key(b) ? 1 : -1))
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
      .handle("list", () => answer(context, list(context)))
      .handle("tree", ({ query }) => answer(context, tree(context, query.urn)))
  )
