/**
 * ResourceIndex: the typed API every access to resources goes through.
 *
 * Each `get` / `getMany` / `findByPrefix` / `put` / `delete` names the acting
 * `actor` and is authorized by the `Policy` first, for every resource it
 * touches; a deny fails with `AccessDeniedError` carrying the reasons, and the
 * store is not touched.
 */
import { Context, Effect, Layer, Schema } from "effect"
import * as Policy from "./Policy.js"
import type * as Resource from "./Resource.js"
import {
  type ResourceNotFoundError,
  ResourceStore,
  type ResourceStoreError,
  type Service as Store
} from "./ResourceStore.js"

export class AccessDeniedError extends Schema.TaggedError<AccessDeniedError>()("AccessDeniedError", {
  actor: Schema.String,
  action: Schema.String,
  resources: Schema.Array(Schema.String),
  reasons: Schema.Array(Schema.String),
  message: Schema.String
}) {}

export interface Service {
  readonly get: (
    actor: string,
    urn: string
  ) => Effect.Effect<Resource.Resource, AccessDeniedError | ResourceNotFoundError | ResourceStoreError>
  readonly getMany: (
    actor: string,
    urns: ReadonlyArray<string>
  ) => Effect.Effect<Array<Resource.Resource>, AccessDeniedError | ResourceStoreError>
  /** The descendants of `urn`: authorized as a `get` of `urn` and of every resource returned. */
  readonly findByPrefix: (
    actor: string,
    urn: string
  ) => Effect.Effect<Array<Resource.Resource>, AccessDeniedError | ResourceStoreError>
  readonly put: (
    actor: string,
    resource: Resource.Resource
  ) => Effect.Effect<void, AccessDeniedError | ResourceStoreError>
  readonly delete: (
    actor: string,
    urn: string
  ) => Effect.Effect<boolean, AccessDeniedError | ResourceStoreError>
}

export class ResourceIndex extends Context.Service<ResourceIndex, Service>()(
  "@noema/resources/ResourceIndex"
) {}

export const make = (store: Store, policy: Policy.Service): Service => {
  const check = (actor: string, action: Policy.Action, resources: ReadonlyArray<string>) =>
    Effect.flatMap(policy.authorize({ actor, action, resources }), (decision) =>
      decision.decision === "allow"
        ? Effect.void
        : Effect.fail(
            new AccessDeniedError({
              actor,
              action,
              resources: [...resources],
              reasons: [...decision.reasons],
              message: `${actor} may not ${action} ${resources.join(", ")}: ${decision.reasons.join("; ") || "denied"}`
            })
          )
    )
  return {
    get: (actor, urn) => Effect.andThen(check(actor, "get", [urn]), store.get(urn)),
    getMany: (actor, urns) =>
      urns.length === 0 ? Effect.succeed([]) : Effect.andThen(check(actor, "get", urns), store.getMany(urns)),
    findByPrefix: (actor, urn) =>
      Effect.andThen(check(actor, "get", [urn]), store.findByPrefix(urn)).pipe(
        Effect.tap((found) =>
          found.length === 0
            ? Effect.void
            : check(
                actor,
                "get",
                found.map((r) => r.meta.urn)
              )
        )
      ),
    put: (actor, resource) => Effect.andThen(check(actor, "put", [resource.meta.urn]), store.put(resource)),
    delete: (actor, urn) => Effect.andThen(check(actor, "delete", [urn]), store.delete(urn))
  }
}

export const layer: Layer.Layer<ResourceIndex, never, ResourceStore | Policy.Policy> = Layer.effect(
  ResourceIndex,
  Effect.gen(function* () {
    return make(yield* ResourceStore, yield* Policy.Policy)
  })
)
