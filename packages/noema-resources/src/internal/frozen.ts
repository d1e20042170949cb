/**
 * Frozen resources: a store that decodes a resource once and hands the same object to every
 * reader freezes it first, all the way down, so no reader can change what another reader (or
 * the store) holds. Resources are immutable values; freezing makes that hold at run time too.
 */
export const deepFreeze = <A>(value: A): A => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key])
  }
  return value
}

/**
 * Resources known to be what a store's check would make of them (`ResourceStore`'s put: a JSON
 * copy, decoded), by their `meta` object: `Resource.make`'s own and a memory store's, built by
 * the Schema (or the put) from fresh objects, frozen all the way down and holding only what JSON
 * keeps as it is. A put of one needs no copy through JSON nor a second decode: it cannot have
 * changed since; a put of a spread of one (`{ ...stored, status }`, which keeps its `meta`)
 * needs only its changed fields checked.
 */
const owner: unique symbol = Symbol("@noema/resources/checked")

/**
 * Remembers a resource as checked, by a hidden link from its `meta` (a symbol, not enumerable:
 * no spread, listing, JSON or comparison sees it; a weak map's entry for each put cost more than
 * the check it saves). Call only before freezing a checked resource that `isJsonStable`.
 */
export const rememberChecked = (resource: { readonly meta: object }): void => {
  Object.defineProperty(resource.meta, owner, { value: resource })
}

/** The checked resource whose `meta` this is, if any. */
export const checkedOwnerOf = (meta: unknown): object | undefined =>
  typeof meta === "object" && meta !== null ? (meta as { readonly [owner]?: object })[owner] : undefined
