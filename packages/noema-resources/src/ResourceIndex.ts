/**
 * ResourceIndex: the typed API every access to resources goes through.
 *
 * Each `get` / `getMany` / `findByPrefix` / `put` / `delete` names the acting
 * `actor` and is authorized by the `Policy` first, for every resource it
 * touches; a deny fails with `AccessDeniedError` carrying the reasons, and the
 * store is not touched.
 *
 * Given `ResourceEvents`, every access that succeeded is published:
 * `RESOURCE_PUT`, `RESOURCE_GET` (the resources returned) and `RESOURCE_DELETE`
 * (when something was deleted), with the actor as the source unless `source`
 * is given. A publish that fails fails the call (the store was changed; the
 * caller learns that the event is missing).
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as Policy from "./Policy.js"
import type * as Resource from "./Resource.js"
import * as ResourceEvents from "./ResourceEvents.js"
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

type Failure = AccessDeniedError | ResourceStoreError | ResourceEvents.ResourceEventsError

export interface Service {
  readonly get: (
    actor: string,
    urn: string
  ) => Effect.Effect<Resource.Resource, Failure | ResourceNotFoundError>
  readonly getMany: (
    actor: string,
    urns: ReadonlyArray<string>
  ) => Effect.Effect<Array<Resource.Resource>, Failure>
  /** The descendants of `urn`: authorized as a `get` of `urn` and of every resource returned. */
  readonly findByPrefix: (actor: string, urn: string) => Effect.Effect<Array<Resource.Resource>, Failure>
  readonly put: (actor: string, resource: Resource.Resource) => Effect.Effect<void, Failure>
  readonly delete: (actor: string, urn: string) => Effect.Effect<boolean, Failure>
}

export interface Options {
  /** Where accesses are published. */
  readonly events?: ResourceEvents.Service
  /** The events' source; default: the actor. */
  readonly source?: string
}

export class ResourceIndex extends Context.Service<ResourceIndex, Service>()(
  "@noema/resources/ResourceIndex"
) {}

export const make = (store: Store, policy: Policy.Service, options: Options = {}): Service => {
  const events = options.events
  const publish = (
    actor: string,
    detailType: ResourceEvents.DetailType,
    resources: ReadonlyArray<string>
  ): Effect.Effect<void, ResourceEvents.ResourceEventsError> =>
    events === undefined || resources.length === 0
      ? Effect.void
      : Effect.asVoid(events.publish({ source: options.source ?? actor, detailType, resources }))
  const urnsOf = (found: ReadonlyArray<Resource.Resource>) => found.map((resource) => resource.meta.urn)
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
    get: (actor, urn) =>
      Effect.andThen(check(actor, "get", [urn]), store.get(urn)).pipe(
        Effect.tap((found) => publish(actor, "RESOURCE_GET", [found.meta.urn]))
      ),
    getMany: (actor, urns) =>
      urns.length === 0
        ? Effect.succeed([])
        : Effect.andThen(check(actor, "get", urns), store.getMany(urns)).pipe(
            Effect.tap((found) => publish(actor, "RESOURCE_GET", urnsOf(found)))
          ),
    findByPrefix: (actor, urn) =>
      Effect.andThen(check(actor, "get", [urn]), store.findByPrefix(urn)).pipe(
        Effect.tap((found) => (found.length === 0 ? Effect.void : check(actor, "get", urnsOf(found)))),
        Effect.tap((found) => publish(actor, "RESOURCE_GET", urnsOf(found)))
      ),
    put: (actor, resource) =>
      Effect.andThen(check(actor, "put", [resource.meta.urn]), store.put(resource)).pipe(
        Effect.tap(() => publish(actor, "RESOURCE_PUT", [resource.meta.urn]))
      ),
    delete: (actor, urn) =>
      Effect.andThen(check(actor, "delete", [urn]), store.delete(urn)).pipe(
        Effect.tap((deleted) => (deleted ? publish(actor, "RESOURCE_DELETE", [urn]) : Effect.void))
      )
  }
}

export const layer: Layer.Layer<ResourceIndex, never, ResourceStore | Policy.Policy> = Layer.effect(
  ResourceIndex,
  Effect.gen(function* () {
    const events = yield* Effect.serviceOption(ResourceEvents.ResourceEvents)
    return make(
      yield* ResourceStore,
      yield* Policy.Policy,
      Option.isSome(events) ? { events: events.value } : {}
    )
  })
)
