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

/** What is known of a checked resource: itself, and its search text once asked (`searchText`). */
export interface CheckedLink {
  readonly resource: object
  text: string | undefined
}

/**
 * Remembers a resource as checked, by a hidden link from its `meta` (a symbol, not enumerable:
 * no spread, listing, JSON or comparison sees it, nor `deepFreeze`, so its text can be filled in
 * later; a weak map's entry for each put cost more than the check it saves). Call only before
 * freezing a checked resource that `isJsonStable`.
 */
export const rememberChecked = (resource: { readonly meta: object }): void => {
  const link: CheckedLink = { resource, text: undefined }
  Object.defineProperty(resource.meta, owner, { value: link })
}

/** The link of the checked resource whose `meta` this is, if any. */
export const checkedLinkOf = (meta: unknown): CheckedLink | undefined =>
  typeof meta === "object" && meta !== null ? (meta as { readonly [owner]?: CheckedLink })[owner] : undefined

/** The checked resource whose `meta` this is, if any. */
export const checkedOwnerOf = (meta: unknown): object | undefined => checkedLinkOf(meta)?.resource
