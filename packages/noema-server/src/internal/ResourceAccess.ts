/**
 * ResourceAccess: what the routes over resources (PlanRoutes, ResourceRoutes)
 * share: the server's resources or the reason it has none, the actor's
 * decision on one URN and on many, and a URN from a request checked before anything is
 * read with it.
 */
import { type Resource, ResourceIndex, Urn } from "@noema/resources"
import { Effect } from "effect"
import * as ApiError from "../ApiError.js"
import type { Context, Resources } from "./Routes.js"

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

/** Succeeds when the actor may `get` `urn`; fails as the index does (`AccessDeniedError`, with the reasons) when not. */
export const checkGet = (access: Resources, urn: string) =>
  Effect.flatMap(
    access.policy.authorize({ actor: access.actor, action: "get", resources: [urn] }),
    (decision) =>
      decision.decision === "allow"
        ? Effect.void
        : Effect.fail(
            new ResourceIndex.AccessDeniedError({
              actor: access.actor,
              action: "get",
              resources: [urn],
              reasons: [...decision.reasons],
              message: `${access.actor} may not get ${urn}: ${decision.reasons.join("; ") || "denied"}`
            })
          )
  )

/** A URN from the request, or a 400 saying what is wrong with it. */
export const checkedUrn = (name: string, urn: string) => {
  const problem = Urn.parseEither(urn)
  return problem instanceof Urn.InvalidUrnError
    ? Effect.fail(ApiError.make(ApiError.BadRequest, "InvalidUrn", `${name}: ${problem.message}`))
    : Effect.succeed(urn)
}

/** Those of `resources` the actor may get: one decision when all may be read (the usual case), else one each. */
export const readable = (access: Resources, resources: ReadonlyArray<Resource.Resource>) =>
  resources.length === 0
    ? Effect.succeed([])
    : Effect.flatMap(
        access.policy.authorize({
          actor: access.actor,
          action: "get",
          resources: resources.map((resource) => resource.meta.urn)
        }),
        (all) =>
          all.decision === "allow"
            ? Effect.succeed([...resources])
            : Effect.filter(resources, (resource) => mayGet(access, resource.meta.urn))
      )
