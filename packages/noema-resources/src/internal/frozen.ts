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
