/**
 * jsonCopy: what `JSON.parse(JSON.stringify(value))` gives, without the text in between.
 *
 * A store keeps a resource as JSON would: an `undefined` field gone, a `Date` its ISO text,
 * `NaN` null, a class instance its own fields. Most resources are plain data already (strings,
 * finite numbers, booleans, null, arrays and plain objects), for which the round trip is a
 * copy: those are copied directly. Anything else anywhere in the value (an `undefined`, a
 * function, a `toJSON`, a class instance, a non-finite number, a hole, a structure deeper than
 * `plainDepth`, which is where a cycle ends up) sends the whole value through the round trip
 * itself, so what is odd behaves exactly as before, errors included.
 */

/** Deeper than any resource; a cycle reaches it and gets the round trip's own TypeError. */
const plainDepth = 64

/** Not plain data: the round trip decides what it becomes. */
const odd: unique symbol = Symbol("odd")

export const jsonCopy = (value: unknown): unknown => {
  const copied = plainCopy(value, 0)
  return copied === odd ? JSON.parse(JSON.stringify(value)) : copied
}

const isPlainPrototype = (prototype: unknown) => prototype === Object.prototype || prototype === null

const plainCopy = (value: unknown, depth: number): unknown => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    // -0 is written "0" and read back 0.
    case "number":
      return Number.isFinite(value) ? (value === 0 ? 0 : value) : odd
    case "object": {
      if (value === null) return null
      if (depth >= plainDepth || "toJSON" in value) return odd
      if (Array.isArray(value)) {
        if (Object.getPrototypeOf(value) !== Array.prototype) return odd
        const out = new Array<unknown>(value.length)
        for (let i = 0; i < value.length; i++) {
          const item = plainCopy(value[i], depth + 1)
          if (item === odd) return odd
          out[i] = item
        }
        return out
      }
      if (!isPlainPrototype(Object.getPrototypeOf(value))) return odd
      const out: Record<string, unknown> = {}
      for (const key of Object.keys(value)) {
        const field = plainCopy((value as Record<string, unknown>)[key], depth + 1)
        if (field === odd) return odd
        // JSON.parse makes "__proto__" an own field; an assignment would set the prototype.
        if (key === "__proto__")
          Object.defineProperty(out, key, {
            value: field,
            enumerable: true,
            writable: true,
            configurable: true
          })
        else out[key] = field
      }
      return out
    }
    default:
      return odd
  }
}

/**
 * Whether `jsonCopy(value)` would be `value` again, field for field (the same keys in the same
 * order, the same primitives): plain data only, every number finite and not -0. Looked at
 * without building the copy.
 */
export const isJsonStable = (value: unknown, depth = 0): boolean => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true
    case "number":
      return Number.isFinite(value) && !Object.is(value, -0)
    case "object": {
      if (value === null) return true
      if (depth >= plainDepth || "toJSON" in value) return false
      if (Array.isArray(value)) {
        if (Object.getPrototypeOf(value) !== Array.prototype) return false
        for (let i = 0; i < value.length; i++)
          if (!(i in value) || !isJsonStable(value[i], depth + 1)) return false
        return true
      }
      if (!isPlainPrototype(Object.getPrototypeOf(value))) return false
      for (const key of Object.keys(value))
        if (key === "__proto__" || !isJsonStable((value as Record<string, unknown>)[key], depth + 1))
          return false
      return true
    }
    default:
      return false
  }
}
