/**
 * ResourceRoutes: the `resources` group of the API (PanelApi), what `noema
 * resources ls|search|show` answer, read as the server's actor through the
 * policy (ResourcesJson).
 *
 * A listing holds everything under the prefix (`ls` semantics; with no prefix,
 * the resources that have no parent), each with the policy's decision: one the
 * actor may not read is listed by its URN as denied, its name and content left
 * out (`ResourceIndex.findReadable` never reads them for the actor). A search
 * returns only what the actor may read. A resource shown comes with the
 * decision for each action; its content only when `get` is allowed, and its
 * existence is not even looked up otherwise.
 */
import { Policy, Resource, Urn } from "@noema/resources"
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as PanelApi from "../PanelApi.js"
import * as ResourcesJson from "../ResourcesJson.js"
import { checkedUrn, readable, resourcesOf } from "./ResourceAccess.js"
import { answer, type Context, type Resources } from "./Routes.js"

/** The resources with no parent, each with the actor's decision, in URN order. */
const roots = (access: Resources) =>
  Effect.gen(function* () {
    const found = yield* Effect.forEach(Object.keys(Resource.kinds), (type) => access.store.findByType(type))
    const all = found.flat().filter((resource) => resource.meta.parent === undefined)
    const allowed = new Set((yield* readable(access, all)).map((resource) => resource.meta.urn))
    return all.map((resource) =>
      allowed.has(resource.meta.urn)
        ? ResourcesJson.entryOf(resource)
        : ResourcesJson.withheldEntry(resource.meta.urn)
    )
  })

/** Everything under `prefix` the actor may read, and, as denied, what it may not. */
const under = (access: Resources, prefix: string) =>
  Effect.map(access.index.findReadable(access.actor, prefix), ({ resources, withheld }) => [
    ...resources.map(ResourcesJson.entryOf),
    ...withheld.map(ResourcesJson.withheldEntry)
  ])

const list = (
  context: Context,
  query: { readonly prefix?: string; readonly offset?: number; readonly limit?: number }
) =>
  Effect.gen(function* () {
    const access = yield* resourcesOf(context)
    const prefix = query.prefix?.trim() || undefined
    const entries =
      prefix === undefined ? yield* roots(access) : yield* under(access, yield* checkedUrn("prefix", prefix))
    entries.sort((a, b) => (a.urn < b.urn ? -1 : a.urn > b.urn ? 1 : 0))
    const offset = query.offset ?? 0
    const limit = query.limit ?? 100
    return {
      prefix: prefix ?? null,
      actor: access.actor,
      total: entries.length,
      offset,
      limit,
      resources: entries.slice(offset, offset + limit)
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
