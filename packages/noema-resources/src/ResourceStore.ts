/**
 * ResourceStore: where resources are kept, keyed by URN.
 *
 * The contract every backend implements and `ResourceStoreConformance` checks.
 * `findByPrefix(urn)` returns every descendant of `urn` (not `urn` itself), in URN
 * order, using the backend's own range scan or listing: the keys starting with
 * `urn + "/"`. Stored resources come back rebuilt as their own kind.
 *
 * Every backend's `put` (and `putMany`, several in one go) is the one in
 * `fromBackend`, so each does the same before it writes: the resource is checked
 * against its kind's Schema; its parent must exist; its name must be its own
 * among its siblings of its type (a resource whose URN is not the one its name
 * gives, `Resource.namedUrn`, is refused when that URN holds another); and the
 * store sets `meta.tokens` (the `TokenCounter`'s count of `Resource.textOf`, on
 * every put, so a changed resource is counted again) and `meta.created`
 * (ISO-8601, on the first put of the URN, kept by every later one). A refused put
 * writes nothing.
 */
import { TokenCounter } from "@noema/core"
import { type Clock, Context, Effect, Schema } from "effect"
import { checkedCopy } from "./internal/checkedCopy.js"
import { isoOfMillis } from "./internal/isoMillis.js"
import { jsonCopy } from "./internal/jsonCopy.js"
import * as Resources from "./Resource.js"
import * as Urn from "./Urn.js"

type Resource = Resources.Resource

export class ResourceStoreError extends Schema.TaggedError<ResourceStoreError>()("ResourceStoreError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export class ResourceNotFoundError extends Schema.TaggedError<ResourceNotFoundError>()(
  "ResourceNotFoundError",
  {
    urn: Schema.String,
    message: Schema.String
  }
) {}

export const notFound = (urn: string) =>
  new ResourceNotFoundError({ urn, message: `resource not found: ${urn}` })

export interface Service {
  /**
   * Stores a resource under its `meta.urn`, replacing what was there, with `meta.tokens`
   * and `meta.created` set; refused when its parent does not exist or its name is taken.
   * Gives the resource as stored (completed), for a caller that keeps what it wrote.
   */
  readonly put: (resource: Resource) => Effect.Effect<Resource, ResourceStoreError>
  /**
   * Puts resources in order, as `put` one after another would (a later one sees the earlier
   * ones: as its parent, as its name's holder, its `created`), all checked before any is
   * written (one refused: none is written), with one read for all their checks. Gives them as
   * stored, in that order.
   */
  readonly putMany: (resources: ReadonlyArray<Resource>) => Effect.Effect<Array<Resource>, ResourceStoreError>
  readonly get: (urn: string) => Effect.Effect<Resource, ResourceNotFoundError | ResourceStoreError>
  /** The resources that exist, in the order asked; missing URNs are left out. */
  readonly getMany: (urns: ReadonlyArray<string>) => Effect.Effect<Array<Resource>, ResourceStoreError>
  /** Every descendant of `urn`, in URN order. */
  readonly findByPrefix: (urn: string) => Effect.Effect<Array<Resource>, ResourceStoreError>
  /** Every resource of a type, in URN order. */
  readonly findByType: (type: string) => Effect.Effect<Array<Resource>, ResourceStoreError>
  /** Removes a resource; true when it existed. Its descendants stay. */
  readonly delete: (urn: string) => Effect.Effect<boolean, ResourceStoreError>
  /**
   * Runs `effect` as one transaction of the store's database (committed when it succeeds,
   * rolled back when it fails), so several writes cost one commit; it succeeds once that
   * commit returned. Stores on a SQL database offer it (a vector index on the same database
   * joins the transaction; on SQLite, transactions that arrive together share one commit,
   * each rolled back alone when it fails); others leave it out and their writes stand one
   * by one.
   */
  readonly transaction?: <A, E, R>(
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | ResourceStoreError, R>
}

export class ResourceStore extends Context.Service<ResourceStore, Service>()(
  "@noema/resources/ResourceStore"
) {}

/**
 * The resources at `keys` (a file or object listing), read `concurrency` at a
 * time, in URN order; keys whose object is gone (`read` gives `undefined`) are
 * left out. For the backends that list, then read (filesystem, S3).
 */
export const readListed = <E, R>(
  keys: Effect.Effect<ReadonlyArray<string>, E, R>,
  read: (key: string) => Effect.Effect<Resource | undefined, E, R>
): Effect.Effect<Array<Resource>, E, R> =>
  keys.pipe(
    Effect.flatMap((found) => Effect.forEach(found, read, { concurrency: 16 })),
    Effect.map((found) =>
      found
        .filter((resource): resource is Resource => resource !== undefined)
        .sort((a, b) => (a.meta.urn < b.meta.urn ? -1 : a.meta.urn > b.meta.urn ? 1 : 0))
    )
  )

const invalid = (error: unknown) =>
  new ResourceStoreError({ message: error instanceof Error ? error.message : String(error), cause: error })

/** `read` run now, anything it throws the store's error (a URN that is not one, a resource that does not decode). */
export const tryNow = <A>(read: () => A): Effect.Effect<A, ResourceStoreError> =>
  Effect.try({ try: read, catch: invalid })

/** The URN in its one spelling, or the reason it is not one, as a value (for code that does not wait). */
export const urnOrError = (urn: string): string | ResourceStoreError => {
  try {
    return Urn.check(urn)
  } catch (error) {
    return invalid(error)
  }
}

/** The URN in its one spelling, or the reason it is not one. */
export const checkUrn = (urn: string): Effect.Effect<string, ResourceStoreError> =>
  tryNow(() => Urn.check(urn))

/** The URNs in their one spelling, or the reason the first that is not one is not (one check for them all). */
export const checkUrns = (urns: ReadonlyArray<string>): Effect.Effect<Array<string>, ResourceStoreError> =>
  Effect.try({ try: () => urns.map(Urn.check), catch: invalid })

/**
 * The resource as its kind's Schema and its URN say it must be: a copy, as it would be stored
 * as JSON and read back (`jsonCopy`: plain data copied directly, anything odd through the
 * round trip itself).
 */
const copyChecked = (resource: Resource): Resource => Resources.decode(jsonCopy(resource))

/**
 * `copyChecked` for a put, which completes its copy's meta in place and then stores it (frozen):
 * of a resource known checked (`Resource.make`'s, a memory store's), or a spread of one that
 * keeps its `meta`, only what changed is checked (`checkedCopy`); anything else as a whole.
 */
const copyForPut = (resource: Resource): Resource => checkedCopy(resource) ?? copyChecked(resource)

/** The resource as its kind's Schema and its URN say it must be (a copy), or the reason it is not. */
export const checkResource = (resource: Resource): Effect.Effect<Resource, ResourceStoreError> =>
  Effect.try({ try: () => copyChecked(resource), catch: invalid })

/** A backend: the reads, and `write`, which stores a resource `fromBackend` has checked and completed. */
export interface Backend extends Omit<Service, "put" | "putMany"> {
  readonly write: (resource: Resource) => Effect.Effect<void, ResourceStoreError>
  /** Writes a put's resources in order, as `write` one after another would (a SQL store: in one statement). */
  readonly writeMany?: (resources: ReadonlyArray<Resource>) => Effect.Effect<void, ResourceStoreError>
  /**
   * A backend that reads and writes without waiting (memory) may say so: a put is then its checks,
   * its read and its write as plain code in one effect, not an effect each (a put is the most
   * frequent write of a planner run). Its `getMany` and `writeMany` must do what these do.
   */
  readonly now?: Immediate
}

/** The reads and writes a put needs, done at once (`Backend.now`); a failure is thrown. */
export interface Immediate {
  /** As `getMany`: the resources that exist, in the order asked. */
  readonly getMany: (urns: ReadonlyArray<string>) => Array<Resource>
  /** As `writeMany`. */
  readonly writeMany: (resources: ReadonlyArray<Resource>) => void
}

export interface BackendOptions {
  /** What counts `meta.tokens`; default `TokenCounter.estimate`. */
  readonly tokenCounter?: TokenCounter.TokenCounter
}

const refused = (urn: string, why: string) => new ResourceStoreError({ message: `cannot put ${urn}: ${why}` })

/** Resources checked for a put, with the URNs their checks look up. */
interface Checked {
  readonly resources: Array<Resource>
  /** Each one's URN by its name (`slotOf`). */
  readonly named: Array<string>
  /** Their own URNs, their parents and their names' URNs: read once for them all. */
  readonly lookups: Array<string>
}

/** One check for them all: the first refused fails the put, as one by one. */
const checkAll = (resources: ReadonlyArray<Resource>): Checked => {
  const checked = resources.map(copyForPut)
  // The URN its name gives: held by another resource of that name, the name is taken.
  const named = checked.map((resource) => slotOf(resource.meta))
  const lookups = new Set<string>()
  checked.forEach(({ meta }, i) => {
    lookups.add(meta.urn)
    if (meta.parent !== undefined) lookups.add(meta.parent)
    lookups.add(named[i] as string)
  })
  return { resources: checked, named, lookups: [...lookups] }
}

/**
 * The checks and the completed meta every put goes through (see the header), for resources put
 * in order: the URNs their checks look up are read once, and each one completed stands in that
 * reading for the ones after it, as its own write would have. Three steps whatever the count
 * (check, read, complete): a put is the most frequent write of a planner run.
 */
const completeForPut = (
  backend: Backend,
  counter: TokenCounter.TokenCounter,
  resources: ReadonlyArray<Resource>
): Effect.Effect<Array<Resource>, ResourceStoreError> =>
  Effect.flatMap(Effect.try({ try: () => checkAll(resources), catch: invalid }), (checked) =>
    Effect.flatMap(backend.getMany(checked.lookups), (stored) =>
      Effect.clockWith((clock) => {
        const completed = completeAll(checked, stored, counter, clock)
        return completed instanceof ResourceStoreError ? Effect.fail(completed) : Effect.succeed(completed)
      })
    )
  )

/** The same put, done at once by a backend that does not wait (`Backend.now`): one step. */
const putNow = (
  now: Immediate,
  counter: TokenCounter.TokenCounter,
  resources: ReadonlyArray<Resource>
): Effect.Effect<Array<Resource>, ResourceStoreError> =>
  Effect.clockWith((clock) => {
    let completed: Array<Resource> | ResourceStoreError
    try {
      const checked = checkAll(resources)
      completed = completeAll(checked, now.getMany(checked.lookups), counter, clock)
      if (!(completed instanceof ResourceStoreError)) now.writeMany(completed)
    } catch (error) {
      completed = error instanceof ResourceStoreError ? error : invalid(error)
    }
    return completed instanceof ResourceStoreError ? Effect.fail(completed) : Effect.succeed(completed)
  })

/**
 * Each checked resource completed (`tokens`, `created`), or the first refused, why. The time is
 * read once, and only for a URN stored the first time (a state change keeps its `created`).
 */
const completeAll = (
  checked: Checked,
  stored: ReadonlyArray<Resource>,
  counter: TokenCounter.TokenCounter,
  clock: Clock.Clock
): Array<Resource> | ResourceStoreError => {
  let time: string | undefined
  const now = () => {
    time ??= isoOfMillis(clock.currentTimeMillisUnsafe())
    return time
  }
  const found = new Map<string, Resource>()
  for (let i = 0; i < stored.length; i++) found.set((stored[i] as Resource).meta.urn, stored[i] as Resource)
  const completed: Array<Resource> = []
  for (let i = 0; i < checked.resources.length; i++) {
    const resource = checked.resources[i] as Resource
    const { urn, parent, type, name } = resource.meta
    if (parent !== undefined && !found.has(parent))
      return refused(urn, `its parent ${parent} does not exist (put the parent first)`)
    const slot = checked.named[i] as string
    const holder = slot === urn ? undefined : found.get(slot)
    if (holder !== undefined && holder.meta.name === name)
      return refused(
        urn,
        `the name "${name}" is taken: ${slot} is the ${type} of that name (a name is unique among a parent's resources of a type)`
      )
    const created = resource.meta.created ?? found.get(urn)?.meta.created ?? now()
    const tokens = counter.countText(Resources.textOf(resource))
    // The checked resource is the put's own copy (`copyChecked`): completed in place, its fields
    // in the order a spread would give (`tokens` and `created` kept where they were, else last).
    const meta = resource.meta as { -readonly [K in keyof Resources.Meta]: Resources.Meta[K] }
    meta.tokens = tokens
    meta.created = created
    found.set(urn, resource)
    completed.push(resource)
  }
  return completed
}

/** The URN the resource's name gives it; its own when that one would be too long to be a URN. */
const slotOf = (meta: Resources.Meta): string => {
  // Named by its own hash (the usual case): decoded, its URN is that name's, nothing to build.
  if (Resources.hashOf(meta.parent, meta.type, meta.name) === meta.hash) return meta.urn
  try {
    return Resources.namedUrn(meta.parent, meta.type, meta.name)
  } catch {
    return meta.urn
  }
}

/** A store from a backend: its reads as they are, and the one `put` every store shares. */
export const fromBackend = (backend: Backend, options: BackendOptions = {}): Service => {
  const counter = options.tokenCounter ?? TokenCounter.estimate
  const { write, writeMany, now, ...reads } = backend
  const writeAll =
    writeMany ??
    ((completed: ReadonlyArray<Resource>) =>
      completed.length === 1
        ? write(completed[0] as Resource)
        : Effect.forEach(completed, write, { discard: true }))
  const putMany = (resources: ReadonlyArray<Resource>) =>
    resources.length === 0
      ? Effect.succeed([])
      : now !== undefined
        ? putNow(now, counter, resources)
        : Effect.tap(completeForPut(backend, counter, resources), writeAll)
  return {
    ...reads,
    put: (resource) => Effect.map(putMany([resource]), ([stored]) => stored as Resource),
    putMany
  }
}
