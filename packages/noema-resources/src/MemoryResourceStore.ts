/**
 * MemoryResourceStore: resources in a sorted in-memory map. The prefix lookup
 * binary-searches the sorted keys for `urn + "/"` and walks forward while keys
 * share the prefix: a range scan, not a full scan. A resource is checked and
 * copied when it is put, then kept frozen and handed out as it is: a read costs
 * no decoding, and no reader can change what the store holds.
 */
import { Effect, Layer } from "effect"
import { deepFreeze, rememberChecked } from "./internal/frozen.js"
import type * as Resource from "./Resource.js"
import {
  type BackendOptions,
  checkUrn,
  fromBackend,
  notFound,
  type ResourceNotFoundError,
  ResourceStore,
  ResourceStoreError,
  type Service,
  tryNow,
  urnOrError
} from "./ResourceStore.js"
import * as Urn from "./Urn.js"

/** Kept here too, where they were first: `ResourceStore` is their home. */
export { checkResource, checkUrn } from "./ResourceStore.js"

const lowerBound = (keys: Array<string>, key: string): number => {
  let lo = 0
  let hi = keys.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (keys[mid]! < key) lo = mid + 1
    else hi = mid
  }
  return lo
}

export const make = (options: BackendOptions = {}): Service => {
  const values = new Map<string, Resource.Resource>()
  const keys: Array<string> = []
  const read = (urn: string) => values.get(urn)
  // `fromBackend` hands over a checked copy, completed: kept frozen, read as it is.
  const writeOne = (checked: Resource.Resource) => {
    const urn = checked.meta.urn
    if (!values.has(urn)) keys.splice(lowerBound(keys, urn), 0, urn)
    // Checked: a later put of it, or of a spread of it, checks only what changed. A token count
    // JSON would not keep (a counter's NaN) leaves it to the whole check.
    const tokens = checked.meta.tokens
    if (tokens === undefined || (Number.isFinite(tokens) && !Object.is(tokens, -0))) rememberChecked(checked)
    values.set(urn, deepFreeze(checked))
  }
  /** The resources that exist, in the order asked (each URN checked: `Urn.check` throws). */
  const readMany = (urns: ReadonlyArray<string>) => {
    const out: Array<Resource.Resource> = []
    for (let i = 0; i < urns.length; i++) {
      const found = read(Urn.check(urns[i] as string))
      if (found !== undefined) out.push(found)
    }
    return out
  }
  return fromBackend(
    {
      write: (checked) => Effect.sync(() => writeOne(checked)),
      // Nothing here waits: a put is done as plain code in one step (`Backend.now`).
      now: {
        getMany: readMany,
        writeMany: (resources) => {
          for (let i = 0; i < resources.length; i++) writeOne(resources[i] as Resource.Resource)
        }
      },
      get: (urn) =>
        Effect.suspend((): Effect.Effect<Resource.Resource, ResourceStoreError | ResourceNotFoundError> => {
          const key = urnOrError(urn)
          if (key instanceof ResourceStoreError) return Effect.fail(key)
          const found = read(key)
          return found === undefined ? Effect.fail(notFound(key)) : Effect.succeed(found)
        }),
      getMany: (urns) => tryNow(() => readMany(urns)),
      findByPrefix: (urn) =>
        Effect.map(checkUrn(urn), (key) => {
          const prefix = `${key}/`
          const out: Array<Resource.Resource> = []
          for (let i = lowerBound(keys, prefix); i < keys.length && keys[i]!.startsWith(prefix); i++)
            out.push(read(keys[i]!)!)
          return out
        }),
      findByType: (type) => Effect.sync(() => keys.map((k) => read(k)!).filter((r) => r.meta.type === type)),
      delete: (urn) =>
        Effect.map(checkUrn(urn), (key) => {
          if (!values.delete(key)) return false
          keys.splice(lowerBound(keys, key), 1)
          return true
        })
    },
    options
  )
}

export const layer: Layer.Layer<ResourceStore> = Layer.sync(ResourceStore, () => make())
