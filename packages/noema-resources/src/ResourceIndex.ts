/**
 * ResourceIndex: the typed API every access to resources goes through.
 *
 * Each `get` / `getMany` / `findByPrefix` / `put` / `delete` names the acting
 * `actor` and is authorized by the `Policy` first, for every resource it
 * touches; a deny fails with `AccessDeniedError` carrying the reasons, and the
 * store is not touched.
 *
 * Nothing reaches an actor about a resource it may not read: an error names
 * only what the actor asked for (a `findByPrefix` refused for a descendant
 * names the prefix, never the descendant, and leaves the engine's reasons
 * out, since they name it), and `search` filters before it limits, so a
 * hidden better match never shows as a missing result.
 *
 * The index asks the engine through `Policy.remembering`: what it allowed, per (actor, action,
 * URN), is not decided again while the engine's `revision` stays the same (engines that
 * declare one: allow-all, Cedar; a policy file's edit is a new revision), whichever index or
 * event subscription asked first; a denial is always the engine's own.
 *
 * Given `ResourceEvents`, every access that succeeded is published:
 * `RESOURCE_PUT`, `RESOURCE_GET` (the resources returned) and `RESOURCE_DELETE`
 * (when something was deleted), with the actor as the source unless `source`
 * is given. A publish that fails fails the call (the store was changed; the
 * caller learns that the event is missing).
 *
 * Given a `VectorIndex`, `put` also embeds the resource and `delete` forgets
 * its vector, and `search` ranks resources by similarity: the best `limit`
 * of those the actor may `get` (it reads on past the hits it may not until it
 * has `limit` or the index ends), each with its `meta.score`.
 *
 * A `document` put (alone or in a `putMany`) is split into chunks under it (`ResourceProcessor`, unless
 * `chunking: false`): each chunk is put as the same actor (authorized, embedded,
 * published), and the chunks of an earlier, longer version are deleted.
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as SearchText from "./internal/searchText.js"
import * as Policy from "./Policy.js"
import * as Resource from "./Resource.js"
import * as ResourceEvents from "./ResourceEvents.js"
import * as ResourceProcessor from "./ResourceProcessor.js"
import {
  type ResourceNotFoundError,
  ResourceStore,
  ResourceStoreError,
  type Service as Store
} from "./ResourceStore.js"
import * as Urn from "./Urn.js"
import type * as VectorIndex from "./VectorIndex.js"

export class AccessDeniedError extends Schema.TaggedError<AccessDeniedError>()("AccessDeniedError", {
  actor: Schema.String,
  action: Schema.String,
  resources: Schema.Array(Schema.String),
  reasons: Schema.Array(Schema.String),
  message: Schema.String
}) {}

/** A URN whose element is both one resource's id and another's name: which one is meant is not known. */
export class AmbiguousNameError extends Schema.TaggedError<AmbiguousNameError>()("AmbiguousNameError", {
  urn: Schema.String,
  candidates: Schema.Array(Schema.String),
  message: Schema.String
}) {}

export type Failure =
  | AccessDeniedError
  | ResourceStoreError
  | ResourceEvents.ResourceEventsError
  | VectorIndex.VectorIndexError

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
  /**
   * The descendants of `urn` the actor may get, and the URNs of those it may not (`withheld`),
   * for a reader that should see what it is allowed to rather than nothing. A `get` of `urn`
   * itself is still required.
   */
  readonly findReadable: (
    actor: string,
    urn: string
  ) => Effect.Effect<
    { readonly resources: Array<Resource.Resource>; readonly withheld: Array<string> },
    Failure
  >
  /**
   * `findReadable` over `held`, resources the caller holds already (it wrote or read them)
   * and knows to be everything under `urn`: the same decisions, the same `RESOURCE_GET`
   * event, without reading the store again.
   */
  readonly filterReadable: (
    actor: string,
    urn: string,
    held: ReadonlyArray<Resource.Resource>
  ) => Effect.Effect<
    { readonly resources: Array<Resource.Resource>; readonly withheld: Array<string> },
    Failure
  >
  /**
   * Every resource of `type` the actor may get (in URN order), and the URNs of those it may not
   * (`withheld`): a type has no URN of its own to authorize, so each resource is.
   */
  readonly findReadableByType: (
    actor: string,
    type: string
  ) => Effect.Effect<
    { readonly resources: Array<Resource.Resource>; readonly withheld: Array<string> },
    Failure
  >
  /**
   * The stored URN `urn` names, where each element's id may be the resource's name instead
   * (`cld:assistant.analyst`: the assistant named "analyst"; `Resource.namedUrn`). An id that
   * is one resource's and another's name fails with `AmbiguousNameError`; where neither is
   * stored (or the actor may not get it), the element is taken as it is written.
   */
  readonly resolve: (actor: string, urn: string) => Effect.Effect<string, Failure | AmbiguousNameError>
  /** Gives the resource as stored (the store completes `meta.tokens` and `meta.created`). */
  readonly put: (actor: string, resource: Resource.Resource) => Effect.Effect<Resource.Resource, Failure>
  /**
   * Puts several resources as one write: authorized as one `put` of them all, stored (with
   * their vectors) in one transaction where the store has them, embedded in one call, then
   * published as a `RESOURCE_PUT` each, in order. Gives them as stored, in that order.
   */
  readonly putMany: (
    actor: string,
    resources: ReadonlyArray<Resource.Resource>
  ) => Effect.Effect<Array<Resource.Resource>, Failure>
  readonly delete: (actor: string, urn: string) => Effect.Effect<boolean, Failure>
  /**
   * The resources most similar to the query that the actor may get, best first, each with
   * `meta.score`. Fails when the index was made without a `VectorIndex`.
   */
  readonly search: (
    actor: string,
    query: VectorIndex.Query,
    options?: VectorIndex.SearchOptions
  ) => Effect.Effect<Array<Resource.Resource>, Failure>
}

export interface Options {
  /** Where accesses are published. */
  readonly events?: ResourceEvents.Service
  /** The events' source; default: the actor. */
  readonly source?: string
  /** Kept in step with the store (put embeds, delete forgets), and what `search` asks. */
  readonly vectors?: VectorIndex.Service
  /** How a document is split into chunks; `false`: it is not. Default: `ResourceProcessor`'s defaults. */
  readonly chunking?: ResourceProcessor.Options | false
}

export class ResourceIndex extends Context.Service<ResourceIndex, Service>()(
  "@noema/resources/ResourceIndex"
) {}

export const make = (store: Store, policy: Policy.Service, options: Options = {}): Service => {
  const view = Policy.remembering(policy)
  const authorize = view.authorize
  const chunking = options.chunking === false ? undefined : ResourceProcessor.checkOptions(options.chunking)
  if (chunking instanceof ResourceProcessor.ChunkingError) throw chunking
  const events = options.events
  /**
   * Whether an event of `detailType` by `actor` could reach anyone, asked as it would be
   * published: one nobody can receive (a read, where every subscriber listens to writes) is
   * not built at all.
   */
  const heard = (actor: string, detailType: ResourceEvents.DetailType) =>
    events !== undefined && (events.mayHear?.(options.source ?? actor, detailType) ?? true)
  const publish = (
    actor: string,
    detailType: ResourceEvents.DetailType,
    resources: ReadonlyArray<string>
  ): Effect.Effect<void, ResourceEvents.ResourceEventsError> =>
    events === undefined || resources.length === 0 || !heard(actor, detailType)
      ? Effect.void
      : publishAll(events, options.source ?? actor, detailType, [resources])
  const urnsOf = (found: ReadonlyArray<Resource.Resource>) => found.map((resource) => resource.meta.urn)
  /** A `RESOURCE_GET` of what was `found`, its URNs listed only for an event someone may hear. */
  const publishRead = (actor: string, found: ReadonlyArray<Resource.Resource>) =>
    found.length === 0 || !heard(actor, "RESOURCE_GET")
      ? Effect.void
      : publish(actor, "RESOURCE_GET", urnsOf(found))
  const vectors = options.vectors
  /** Authorizes what the actor named itself: the error may name it, with the engine's reasons. */
  const check = (actor: string, action: Policy.Action, resources: ReadonlyArray<string>) =>
    Effect.flatMap(authorize({ actor, action, resources }), (decision) =>
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
  /**
   * `then`, once `check` passes: decided when it runs (a policy's revision may change in
   * between), and without the decision's own steps when the policy allowed it all before.
   */
  const checked = <A, E>(
    actor: string,
    action: Policy.Action,
    resources: ReadonlyArray<string>,
    then: Effect.Effect<A, E>
  ): Effect.Effect<A, E | AccessDeniedError> =>
    Effect.suspend(() =>
      Policy.allowedBefore(view, { actor, action, resources })
        ? then
        : Effect.andThen(check(actor, action, resources), then)
    )
  /** Authorizes what lies under `urn`, which the actor did not name: the error names only `urn`. */
  const checkUnder = (actor: string, urn: string, found: ReadonlyArray<Resource.Resource>) =>
    found.length === 0 || Policy.allowedBefore(view, { actor, action: "get", resources: urnsOf(found) })
      ? Effect.void
      : Effect.flatMap(authorize({ actor, action: "get", resources: urnsOf(found) }), (decision) =>
          decision.decision === "allow"
            ? Effect.void
            : Effect.fail(
                new AccessDeniedError({
                  actor,
                  action: "get",
                  resources: [urn],
                  reasons: ["the policy withholds some of what lies under it"],
                  message: `${actor} may not get everything under ${urn}: the policy withholds some of it`
                })
              )
        )
  /**
   * The store's writes and their vectors as one transaction where the store has them (one
   * commit), embedded before it starts (the embedder may be a remote call). They go through the
   * store's own `putMany`, so their checks and completed meta are the store's.
   */
  const write = (resources: ReadonlyArray<Resource.Resource>) =>
    Effect.flatMap(
      vectors === undefined ? Effect.succeed(Effect.void) : vectors.prepareUpsert(resources),
      (vectorWrite) => {
        const writes = Effect.tap(store.putMany(resources), () => vectorWrite)
        return store.transaction === undefined ? writes : store.transaction(writes)
      }
    )
  const deleteOne = (actor: string, urn: string) =>
    checked(actor, "delete", [urn], store.delete(urn)).pipe(
      Effect.tap(() => (vectors === undefined ? Effect.void : Effect.asVoid(vectors.remove(urn)))),
      Effect.tap((deleted) => (deleted ? publish(actor, "RESOURCE_DELETE", [urn]) : Effect.void))
    )
  /** The document's chunks put, and those of an earlier version that the new one has not, deleted. */
  const putChunks = (
    actor: string,
    document: Resource.Document,
    split: Required<ResourceProcessor.Options>
  ) =>
    Effect.gen(function* () {
      const chunks = ResourceProcessor.chunks(document, split)
      const urns = urnsOf(chunks)
      // One write for the whole document: one transaction, one call to the embedder.
      if (chunks.length > 0) yield* checked(actor, "put", urns, write(chunks))
      yield* publish(actor, "RESOURCE_PUT", urns)
      const current = new Set(urns)
      const stale = (yield* store.findByPrefix(document.meta.urn)).filter(
        (found) =>
          found.meta.parent === document.meta.urn &&
          ResourceProcessor.isChunkOf(found) &&
          !current.has(found.meta.urn)
      )
      for (const chunk of stale) yield* deleteOne(actor, chunk.meta.urn)
    })
  /** A `RESOURCE_PUT` for each resource, in order. */
  const publishPuts = (actor: string, resources: ReadonlyArray<Resource.Resource>) =>
    events === undefined || !heard(actor, "RESOURCE_PUT")
      ? Effect.void
      : publishAll(
          events,
          options.source ?? actor,
          "RESOURCE_PUT",
          resources.map((resource) => [resource.meta.urn])
        )
  /** Authorized, written as one, published in order; then each document's chunks. */
  const putAll = (
    actor: string,
    resources: ReadonlyArray<Resource.Resource>
  ): Effect.Effect<Array<Resource.Resource>, Failure> => {
    if (resources.length === 0) return Effect.succeed([])
    const stored = checked(actor, "put", urnsOf(resources), write(resources))
    const published = events === undefined ? stored : Effect.tap(stored, () => publishPuts(actor, resources))
    const split = chunking
    const documents =
      split === undefined
        ? []
        : (resources.filter((resource) => resource.meta.type === "document") as Array<Resource.Document>)
    if (split === undefined || documents.length === 0) return published
    return Effect.tap(published, () =>
      Effect.forEach(documents, (document) => putChunks(actor, document, split), { discard: true })
    )
  }
  const mayGet = (actor: string, urn: string) =>
    Effect.map(
      authorize({ actor, action: "get", resources: [urn] }),
      (decision) => decision.decision === "allow"
    )
  /**
   * Those of `urns` the actor may get: allowed as a whole (the usual case), one decision; otherwise
   * each on its own. Given as they are, without an effect, when the policy allowed them all
   * before; asked when the access runs (its callers call it from their running effect).
   */
  const gettable = (
    actor: string,
    urns: ReadonlyArray<string>
  ): Array<string> | Effect.Effect<Array<string>> =>
    urns.length === 0 || Policy.allowedBefore(view, { actor, action: "get", resources: urns })
      ? [...urns]
      : Effect.flatMap(authorize({ actor, action: "get", resources: urns }), (all) =>
          all.decision === "allow"
            ? Effect.succeed([...urns])
            : Effect.filter(urns, (urn) => mayGet(actor, urn))
        )
  /** The resources the actor may get of those found, and the URNs of the others; published as read. */
  const readableOf = (actor: string, found: ReadonlyArray<Resource.Resource>) =>
    Effect.gen(function* () {
      if (found.length === 0) return { resources: [], withheld: [] }
      const urns = urnsOf(found)
      const decided = gettable(actor, urns)
      const allowed = Array.isArray(decided) ? decided : yield* decided
      // All readable (the usual case): nothing to sort out.
      const readable = allowed.length === urns.length ? undefined : new Set(allowed)
      const resources =
        readable === undefined ? [...found] : found.filter((resource) => readable.has(resource.meta.urn))
      const withheld = readable === undefined ? [] : urns.filter((urn) => !readable.has(urn))
      yield* publishRead(actor, resources)
      return { resources, withheld }
    })
  return {
    findReadableByType: (actor, type) =>
      Effect.flatMap(store.findByType(type), (found) => readableOf(actor, found)),
    resolve: (actor, urn) => resolveNames(store, (candidate) => mayGet(actor, candidate), urn),
    get: (actor, urn) =>
      checked(actor, "get", [urn], store.get(urn)).pipe(
        Effect.tap((found) => publish(actor, "RESOURCE_GET", [found.meta.urn]))
      ),
    getMany: (actor, urns) =>
      urns.length === 0
        ? Effect.succeed([])
        : checked(actor, "get", urns, store.getMany(urns)).pipe(
            Effect.tap((found) => publishRead(actor, found))
          ),
    findByPrefix: (actor, urn) =>
      checked(actor, "get", [urn], store.findByPrefix(urn)).pipe(
        Effect.tap((found) => checkUnder(actor, urn, found)),
        Effect.tap((found) => publishRead(actor, found))
      ),
    findReadable: (actor, urn) =>
      checked(actor, "get", [urn], store.findByPrefix(urn)).pipe(
        Effect.flatMap((found) => readableOf(actor, found))
      ),
    filterReadable: (actor, urn, held) =>
      checked(
        actor,
        "get",
        [urn],
        // In URN order, as the store lists them.
        readableOf(
          actor,
          [...held].sort((a, b) => (a.meta.urn < b.meta.urn ? -1 : a.meta.urn > b.meta.urn ? 1 : 0))
        )
      ),
    put: (actor, resource) => Effect.map(putAll(actor, [resource]), ([stored]) => stored!),
    putMany: putAll,
    delete: deleteOne,
    search: (actor, query, searchOptions) =>
      vectors === undefined
        ? Effect.fail(
            new ResourceStoreError({
              message: "search needs a vector index (ResourceIndex.make with { vectors })"
            })
          )
        : Effect.tap(
            readableHits(vectors, store, (urns) => gettable(actor, urns), query, searchOptions),
            (results) => publishRead(actor, results)
          )
  }
}

/**
 * An event for each list of URNs, in order. Where the events can be published without an effect
 * (`publishNow`: in process, the usual case) a write's events take one step in all, at one
 * time; from the first that must wait its turn, the rest follow it.
 */
const publishAll = (
  events: ResourceEvents.Service,
  source: string,
  detailType: ResourceEvents.DetailType,
  lists: ReadonlyArray<ReadonlyArray<string>>
): Effect.Effect<void, ResourceEvents.ResourceEventsError> => {
  const publishNow = events.publishNow
  if (publishNow === undefined)
    return Effect.forEach(lists, (resources) => events.publish({ source, detailType, resources }), {
      discard: true
    })
  return Effect.clockWith((clock) => {
    const now = clock.currentTimeMillisUnsafe()
    for (let i = 0; i < lists.length; i++) {
      const published = publishNow({ source, detailType, resources: lists[i] as ReadonlyArray<string> }, now)
      if (published instanceof ResourceEvents.ResourceEventsError) return Effect.fail(published)
      if (Effect.isEffect(published))
        return i === lists.length - 1
          ? Effect.asVoid(published)
          : Effect.andThen(published, publishAll(events, source, detailType, lists.slice(i + 1)))
    }
    return Effect.void
  })
}

/** The URN of the resource named `name`, unless that would be too long to be a URN. */
const namedOrNot = (parent: string | undefined, type: string, name: string): string | undefined => {
  try {
    return Resource.namedUrn(parent, type, name)
  } catch {
    return undefined
  }
}

/**
 * The stored URN `urn` names, element by element from the root: each id is the resource's own
 * or its name (its URN then `Resource.namedUrn`); one lookup of both per element, of those the
 * actor may get. Both stored: ambiguous. Neither: the element as written.
 */
const resolveNames = (
  store: Store,
  readable: (urn: string) => Effect.Effect<boolean>,
  urn: string
): Effect.Effect<string, ResourceStoreError | AmbiguousNameError> =>
  Effect.gen(function* () {
    const parsed = Urn.parseEither(urn)
    if (parsed instanceof Urn.InvalidUrnError)
      return yield* new ResourceStoreError({ message: parsed.message, cause: parsed })
    let resolved: string | undefined
    for (const { type, id } of parsed.elements) {
      const asId = Urn.child(resolved, type, id)
      const asName = namedOrNot(resolved, type, id) ?? asId
      const candidates = asId === asName ? [asId] : [asId, asName]
      const allowed = yield* Effect.filter(candidates, readable)
      const found = allowed.length === 0 ? [] : yield* store.getMany(allowed)
      const byId = found.find((resource) => resource.meta.urn === asId)
      const byName = found.find((resource) => resource.meta.urn === asName && resource.meta.name === id)
      if (byId !== undefined && byName !== undefined && byId !== byName)
        return yield* new AmbiguousNameError({
          urn,
          candidates: [asId, asName],
          message: `${urn}: "${id}" is the id of ${asId} and the name of ${asName}; name one of them by its URN`
        })
      resolved = byName !== undefined && byId === undefined ? asName : asId
    }
    return resolved as string
  })

/**
 * The best `limit` hits the actor may read, as resources with their scores, best first.
 * The index is asked for `limit` hits, then twice as many, and so on, each round reading only
 * the hits it had not seen, until `limit` are readable or the index has no more: the policy
 * filters before the limit applies, so what the actor may not read changes nothing it sees.
 */
const readableHits = (
  vectors: VectorIndex.Service,
  store: Store,
  gettable: (urns: ReadonlyArray<string>) => Array<string> | Effect.Effect<Array<string>>,
  query: VectorIndex.Query,
  options: VectorIndex.SearchOptions = {}
): Effect.Effect<Array<Resource.Resource>, VectorIndex.VectorIndexError | ResourceStoreError> =>
  Effect.gen(function* () {
    const limit = options.limit ?? 10
    // The URNs of earlier rounds (none in the first, which is usually the only one).
    let seen: Set<string> | undefined
    const results: Array<Resource.Resource> = []
    for (let asked = limit; ; asked *= 2) {
      const hits = yield* vectors.search(query, { ...options, limit: asked })
      const fresh = seen === undefined ? hits : hits.filter((hit) => !seen?.has(hit.urn))
      const urns = fresh.map((hit) => hit.urn)
      // A hit the actor may not read is passed over, it does not fail the search. The URNs come
      // back in the order asked: all of them (the usual case), the hits are the ones allowed.
      const decided = gettable(urns)
      const readableUrns = Array.isArray(decided) ? decided : yield* decided
      const readable = readableUrns.length === urns.length ? undefined : new Set(readableUrns)
      const allowed = readable === undefined ? fresh : fresh.filter((hit) => readable.has(hit.urn))
      const stored =
        allowed.length === 0 ? [] : yield* store.getMany(readable === undefined ? urns : readableUrns)
      // Every one found (the usual case): the i-th is the i-th hit's; else found by URN.
      const found =
        stored.length === allowed.length
          ? undefined
          : new Map(stored.map((resource) => [resource.meta.urn, resource] as const))
      for (let i = 0; i < allowed.length && results.length < limit; i++) {
        const hit = allowed[i] as VectorIndex.Hit
        // A vector whose resource is gone (deleted behind the index's back) is skipped.
        const resource = found === undefined ? stored[i] : found.get(hit.urn)
        if (resource !== undefined) results.push(scored(resource, hit.score))
      }
      if (results.length >= limit || hits.length < asked) return results
      seen ??= new Set()
      for (const hit of fresh) seen.add(hit.urn)
    }
  })

/**
 * A hit: the stored resource with its score. A frozen one (a memory or SQL store's) gives a
 * frozen hit that reads its search text from it: a planner's context windows show the same
 * hits again and again, and a copy of its own would render the text again each time.
 */
const scored = (resource: Resource.Resource, score: number): Resource.Resource => {
  const hit = { ...resource, meta: { ...resource.meta, score } } as Resource.Resource
  if (!SearchText.isFrozenText(resource)) return hit
  SearchText.sameTextAs(hit, resource)
  Object.freeze(hit.meta)
  return Object.freeze(hit)
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
