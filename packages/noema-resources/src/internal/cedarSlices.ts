/**
 * Policy slicing for CedarPolicy: Cedar's authorizer evaluates every policy of
 * the set it is given (about 1 µs each in cedar-wasm), so a request is
 * evaluated against the slice of the policies whose scope can match it.
 *
 * A policy whose scope says `principal == Noema::Actor::"a"` can only match
 * actor `a`; one whose scope says `resource == | in | is T in
 * Noema::Resource::"r"` can only match `r` or what lies under it (a resource's
 * only parents are its URN's ancestors). Cedar evaluates a policy's scope
 * before its conditions, so a policy left out for its scope would have been
 * neither satisfied nor an error: the slice decides exactly as the whole set,
 * with the same reasons. Every other scope (`principal`, `principal in`, `is`)
 * puts the policy in every slice.
 *
 * Each distinct slice is preparsed once into a Cedar policy set of its own and
 * kept under a reused id (at most `capacity`, 1,024 by default, per engine, least recently used
 * evicted), so memory stays bounded however many actors ask.
 *
 * A slice also says what its policies' conditions can observe of the request's
 * entities, because cedar-wasm parses every entity it is given on every call
 * (most of a decision's time): a condition that reads no attribute (`.`, `has`,
 * tags) cannot tell whether `type` is there, and one that names no
 * `Noema::Resource` literal can observe the resource's ancestors only through
 * `in`, which the resource's own parents answer when they list every ancestor.
 * Scope constraints never read an entity's data: they compare uids and ask `in`
 * of the request's own principal and resource.
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"

export interface NamedPolicy {
  readonly id: string
  readonly text: string
  /** The scope as Cedar's JSON form gives it. */
  readonly json: cedar.PolicyJson | undefined
}

/** A preparsed slice, and what its conditions can observe of the request's entities. */
export interface Slice {
  /** The id of its preparsed Cedar policy set. */
  readonly id: string
  /** Some condition reads an attribute or a tag (of anything). */
  readonly readsAttributes: boolean
  /** Some condition names a `Noema::Resource` entity, whose own data it may then read. */
  readonly namesResources: boolean
}

interface Observes {
  readonly readsAttributes: boolean
  readonly namesResources: boolean
}

const attributeOperators = new Set([".", "has", "getTag", "hasTag"])

/**
 * What a policy's conditions can observe, from Cedar's JSON form: any key that is an
 * attribute operator and any object typed `Noema::Resource` count (a record literal with
 * such a key counts too: erring towards sending more is only slower). A policy without
 * its JSON form observes everything.
 */
const observesOf = (json: cedar.PolicyJson | undefined): Observes => {
  if (json === undefined) return { readsAttributes: true, namesResources: true }
  let readsAttributes = false
  let namesResources = false
  const visit = (node: unknown): void => {
    if (typeof node !== "object" || node === null) return
    if (Array.isArray(node)) {
      for (const item of node) visit(item)
      return
    }
    for (const [key, value] of Object.entries(node)) {
      if (attributeOperators.has(key)) readsAttributes = true
      if (key === "type" && value === "Noema::Resource") namesResources = true
      visit(value)
    }
  }
  visit(json.conditions)
  return { readsAttributes, namesResources }
}

interface Scope {
  readonly actor: string | undefined
  readonly resource: string | undefined
}

const entityOf = (constraint: unknown, type: string): string | undefined => {
  const entity = (constraint as { entity?: unknown } | undefined)?.entity
  if (typeof entity !== "object" || entity === null) return undefined
  const { type: entityType, id } = entity as { type?: unknown; id?: unknown }
  return entityType === type && typeof id === "string" ? id : undefined
}

/** The one actor and the one resource subtree a policy's scope limits it to, where it says so. */
const scopeOf = (json: cedar.PolicyJson | undefined): Scope => {
  if (json === undefined) return { actor: undefined, resource: undefined }
  const principal = json.principal as { op: string }
  const resource = json.resource as { op: string; in?: unknown }
  return {
    actor: principal.op === "==" ? entityOf(principal, "Noema::Actor") : undefined,
    resource:
      resource.op === "==" || resource.op === "in"
        ? entityOf(resource, "Noema::Resource")
        : resource.op === "is"
          ? entityOf(resource.in, "Noema::Resource")
          : undefined
  }
}

// Set ids are process-wide in cedar-wasm: ids of retired engines are handed to new ones.
const freeIds: Array<string> = []
let minted = 0
const takeId = () => freeIds.pop() ?? `noema-slice-${++minted}`

const keyOf = (actor: string, resource: string) => `${actor}\u0000${resource}`

export interface Slices {
  /** The preparsed slice holding every policy that can match this actor and a resource of this chain (root first). */
  readonly sliceFor: (actor: string, chain: ReadonlyArray<string>) => Slice
  /** Frees the engine's preparsed sets for reuse. */
  readonly retire: () => void
}

/** The slices of a parsed and validated policy set. */
export const make = (policies: ReadonlyArray<NamedPolicy>, capacity = 1024): Slices => {
  // Positions of the policies under (actor or "", resource or ""): a request looks up at most
  // 2 x (chain length + 1) keys.
  const index = new Map<string, Array<number>>()
  const observes = policies.map((policy) => observesOf(policy.json))
  for (const [position, policy] of policies.entries()) {
    const scope = scopeOf(policy.json)
    const key = keyOf(scope.actor ?? "", scope.resource ?? "")
    const positions = index.get(key)
    if (positions === undefined) index.set(key, [position])
    else positions.push(position)
  }
  // Slice (its positions, joined) -> preparsed slice; a Map iterates oldest first.
  const sets = new Map<string, Slice>()
  const candidates: Array<number> = []
  const gather = (actor: string, resource: string) => {
    const positions = index.get(keyOf(actor, resource))
    if (positions !== undefined) for (const position of positions) candidates.push(position)
  }
  const preparse = (positions: ReadonlyArray<number>, id: string): Slice => {
    const staticPolicies: Record<string, string> = {}
    let readsAttributes = false
    let namesResources = false
    for (const position of positions) {
      const policy = policies[position] as NamedPolicy
      staticPolicies[policy.id] = policy.text
      readsAttributes ||= (observes[position] as Observes).readsAttributes
      namesResources ||= (observes[position] as Observes).namesResources
    }
    const answer = cedar.preparsePolicySet(id, { staticPolicies })
    // The whole set parsed when it was loaded; a part of it cannot fail to.
    if (answer.type === "failure")
      throw new Error(`cedar: a policy slice does not parse: ${answer.errors[0]?.message}`)
    return { id, readsAttributes, namesResources }
  }
  return {
    sliceFor: (actor, chain) => {
      candidates.length = 0
      for (const principal of [actor, ""]) {
        for (const urn of chain) gather(principal, urn)
        gather(principal, "")
      }
      candidates.sort((a, b) => a - b)
      const key = candidates.join(",")
      const existing = sets.get(key)
      if (existing !== undefined) {
        sets.delete(key)
        sets.set(key, existing)
        return existing
      }
      let id: string
      if (sets.size >= capacity) {
        const [oldestKey, oldest] = sets.entries().next().value as [string, Slice]
        sets.delete(oldestKey)
        id = oldest.id
      } else id = takeId()
      const slice = preparse(candidates, id)
      sets.set(key, slice)
      return slice
    },
    retire: () => {
      for (const { id } of sets.values()) {
        cedar.preparsePolicySet(id, { staticPolicies: {} })
        freeIds.push(id)
      }
      sets.clear()
    }
  }
}
