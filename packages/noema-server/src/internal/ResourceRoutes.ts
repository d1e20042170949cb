/**
 * ResourceRoutes: the `resources` group of the API (PanelApi), what `noema
 * resources ls|search|show` answer, read as the server's actor through the
 * policy (ResourcesJson).
 *
 * A listing holds everything under the prefix (`ls` semantics; with no prefix,
 * the resources that have no parent), a page at a time, each with the policy's
 * decision: one the actor may not read is listed by its URN as denied, its
 * name and content left out (as `ResourceIndex.findReadable` does, asked of
 * the policy for the page only). A search
 * returns only what the actor may read. A resource shown comes with the
 * decision for each action; its content only when `get` is allowed, and its
 * existence is not even looked up otherwise.
 */
import { Policy, Resource, Urn } from "@noema/resources"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as PanelApi from "../PanelApi.js"
import * as ResourcesJson from "../ResourcesJson.js"
import { checkedUrn, checkGet, readable, resourcesOf } from "./ResourceAccess.js"
import { answer, type Context, type Resources } from "./Routes.js"

/** The resources with no parent. */
const roots = (access: Resources) =>
  Effect.map(
    Effect.forEach(Object.keys(Resource.kinds), (type) => access.store.findByType(type)),
    (found) => found.flat().filter((resource) => resource.meta.parent === undefined)
  )

/** Everything under `prefix` (`resources ls`), once the actor may get the prefix itself. */
const under = (access: Resources, prefix: string) =>
  Effect.andThen(checkGet(access, prefix), access.store.findByPrefix(prefix))

/**
 * A page of `all` in the order `resources ls` prints (`Resource.treeOrder`: a plan's tasks as
 * planned), each with the actor's decision: the policy is asked about
 * the page only, so a prefix with a hundred thousand resources costs a page's decisions; a
 * resource it denies is sent as its URN alone.
 */
const page = (access: Resources, all: ReadonlyArray<Resource.Resource>, offset: number, limit: number) =>
  Effect.gen(function* () {
    const sorted = Resource.treeOrder(all)
    const shown = sorted.slice(offset, offset + limit)
    const allowed = new Set((yield* readable(access, shown)).map((resource) => resource.meta.urn))
    return shown.map((resource) =>
      allowed.has(resource.meta.urn)
        ? ResourcesJson.entryOf(resource)
        : ResourcesJson.withheldEntry(resource.meta.urn)
    )
  })

const list = (
  context: Context,
  query: { readonly prefix?: string; readonly offset?: number; readonly limit?: number }
) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const prefix = query.prefix?.trim() || undefined
    const all =
      prefix === undefined ? yield* roots(access) : yield* under(access, yield* checkedUrn("prefix", prefix))
    const offset = query.offset ?? 0
    const limit = query.limit ?? 100
    return {
      prefix: prefix ?? null,
      actor: access.actor,
      total: all.length,
      offset,
      limit,
      resources: yield* page(access, all, offset, limit)
    } satisfies ResourcesJson.ResourceList
  })

const search = (
  context: Context,
  query: { readonly q: string; readonly type?: string; readonly prefix?: string; readonly limit?: number }
) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const prefix = query.prefix?.trim() || undefined
    if (prefix !== undefined) yield* checkedUrn("prefix", prefix)
    const type = query.type?.trim() || undefined
    const found = yield* access.index.search(
      access.actor,
      { text: query.q },
      {
        limit: query.limit ?? 10,
        ...(type !== undefined && { type }),
        ...(prefix !== undefined && { prefix })
      }
    )
    return {
      actor: access.actor,
      resources: found.map(ResourcesJson.entryOf)
    } satisfies ResourcesJson.SearchResults
  })

const show = (context: Context, given: string) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const urn = yield* checkedUrn("urn", given)
    const decisions = yield* Effect.forEach(Policy.actions, (action) =>
      Effect.map(access.policy.authorize({ actor: access.actor, action, resources: [urn] }), (decision) =>
        ResourcesJson.decisionOf(action, decision)
      )
    )
    const allowed = decisions.find((decision) => decision.action === "get")?.decision === "allow"
    return {
      urn,
      type: Urn.typeOf(urn),
      actor: access.actor,
      decisions,
      resource: allowed ? yield* access.index.get(access.actor, urn) : null
    } satisfies ResourcesJson.ResourceDetail
  })

export const layer = (context: Context) =>
  HttpApiBuilder.group(PanelApi.Api, "resources", (handlers) =>
    handlers
      .handle("list", ({ query }) => answer(context, list(context, query)))
      .handle("search", ({ query }) => answer(context, search(context, query)))
      .handle("show", ({ query }) => answer(context, show(context, query.urn)))
  )
