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
 * Resources known to be what a store's check would make of them (`ResourceStore`'s
 * `copyChecked`: a JSON copy, decoded): `Resource.make`'s own, built by the Schema from fresh
 * objects, frozen all the way down and holding only what JSON keeps as it is. A put of one
 * needs no copy through JSON nor a second decode: it cannot have changed since.
 */
const checked = new WeakSet<object>()

/** Remembers a resource as checked: call only with a deep-frozen decode result that `isJsonStable`. */
export const rememberChecked = (resource: object): void => {
  checked.add(resource)
}

export const isChecked = (resource: object): boolean => checked.has(resource)
