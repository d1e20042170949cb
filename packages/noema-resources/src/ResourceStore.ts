/**
 * ResourceStore: where resources are kept, keyed by URN.
 *
 * The contract every backend implements and `ResourceStoreConformance` checks.
 * `findByPrefix(urn)` returns every descendant of `urn` (not `urn` itself), in URN
 * order, using the backend's own range scan or listing: the keys starting with
 * `urn + "/"`. Stored resources come back rebuilt as their own kind.
 */
import { Context, Effect, Schema } from "effect"
import type { Resource } from "./Resource.js"

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
  /** Stores a resource under its `meta.urn`, replacing what was there. */
  readonly put: (resource: Resource) => Effect.Effect<void, ResourceStoreError>
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
   * rolled back when it fails), so several writes cost one commit. Stores on a SQL
   * database offer it (a vector index on the same database joins the transaction);
   * others leave it out and their writes stand one by one.
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
