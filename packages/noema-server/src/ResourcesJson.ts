/**
 * ResourcesJson: the bodies of the resources API as Schemas, in the panel's
 * one JSON style (snake_case keys).
 *
 * Every resource listed carries the policy's decision for the server's actor
 * (the actor `noema resources` acts as, under the same policy engine). One the
 * actor may not `get` is listed by its URN and type (both in the URN already)
 * and `deny`: its name and content are never sent. A resource shown whole is
 * sent as the store gave it (`resources show` prints the same object), so
 * fields the resources package adds pass through.
 */
import { type Policy, type Resource, Urn } from "@noema/resources"
import { Schema } from "effect"

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

const Verdict = Schema.Literals(["allow", "deny"])

export const ResourceEntry = Schema.Struct({
  urn: Schema.String,
  type: Schema.String,
  /** Null when the actor may not read it. */
  name: Schema.NullOr(Schema.String),
  parent: Schema.NullOr(Schema.String),
  /** The policy's answer to the actor's `get`. */
  decision: Verdict,
  /** Its similarity to a search, in a search's results. */
  score: Schema.NullOr(Schema.Number)
}).annotate({ identifier: "ResourceEntry" })
export type ResourceEntry = typeof ResourceEntry.Type

export const ResourceList = Schema.Struct({
  /** What was listed under (`resources ls PREFIX`), or null for the roots (resources with no parent). */
  prefix: Schema.NullOr(Schema.String),
  actor: Schema.String,
  total: Count,
  offset: Count,
  limit: Count,
  resources: Schema.Array(ResourceEntry)
}).annotate({ identifier: "ResourceList" })
export type ResourceList = typeof ResourceList.Type

export const SearchResults = Schema.Struct({
  actor: Schema.String,
  /** Best first; only what the actor may read (the policy filters before the limit). */
  resources: Schema.Array(ResourceEntry)
}).annotate({ identifier: "ResourceSearchResults" })
export type SearchResults = typeof SearchResults.Type

export const Decision = Schema.Struct({
  action: Schema.String,
  decision: Verdict,
  reasons: Schema.Array(Schema.String)
})

export const ResourceDetail = Schema.Struct({
  urn: Schema.String,
  type: Schema.String,
  actor: Schema.String,
  /** The policy's answer to each action the actor could take on it. */
  decisions: Schema.Array(Decision),
  /** The resource as `noema resources show` prints it; null when the actor may not get it. */
  resource: Schema.NullOr(Schema.Unknown)
}).annotate({ identifier: "ResourceDetail" })
export type ResourceDetail = typeof ResourceDetail.Type

/** A resource the actor may read, as listed. */
export const entryOf = (resource: Resource.Resource): ResourceEntry => ({
  urn: resource.meta.urn,
  type: resource.meta.type,
  name: resource.meta.name,
  parent: resource.meta.parent ?? null,
  decision: "allow",
  score: resource.meta.score ?? null
})

/** A resource the actor may not read: what its URN already says, and no more. */
export const withheldEntry = (urn: string): ResourceEntry => ({
  urn,
  type: Urn.typeOf(urn),
  name: null,
  parent: Urn.parent(urn) ?? null,
  decision: "deny",
  score: null
})

export const decisionOf = (action: Policy.Action, decision: Policy.Decision) => ({
  action,
  decision: decision.decision,
  reasons: [...decision.reasons]
})
