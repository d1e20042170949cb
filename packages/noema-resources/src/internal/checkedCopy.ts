/**
 * checkedCopy: a put's copy of a resource known to be checked (`frozen.ts`), or of a spread of
 * one, without the JSON copy and the whole Schema decode the put's check is otherwise.
 *
 * A planner stores each task's every change as `{ ...stored, status }`: the same `meta` object,
 * the same frozen fields, one or two new ones. Only those are checked here, each by its kind's
 * Schema for that field alone, after the same JSON copy; the copy is then built in the order the
 * whole decode gives (the kind's fields). Anything else (a field taken away, one the kind does
 * not have, one JSON would change, one the Schema refuses, a stored `meta.score`, whose place
 * the decode would move) gives `undefined`: the whole check decides, as it always did, and says
 * why.
 */
import { Exit, Schema } from "effect"
import * as Resource from "../Resource.js"
import { checkedOwnerOf } from "./frozen.js"
import { isJsonStable, jsonCopy } from "./jsonCopy.js"

type FieldDecoder = (input: unknown) => Exit.Exit<Record<string, unknown>, unknown>

/** One field's decoder per kind and key: that field as a struct of its own, made when first asked. */
const fieldDecoders = new Map<string, Map<string, FieldDecoder>>()

const fieldDecoderOf = (type: Resource.Kind, key: string): FieldDecoder => {
  let byKey = fieldDecoders.get(type)
  if (byKey === undefined) {
    byKey = new Map()
    fieldDecoders.set(type, byKey)
  }
  let decoder = byKey.get(key)
  if (decoder === undefined) {
    const fields = Resource.kinds[type].fields as Schema.Struct.Fields
    const struct = Schema.Struct({ [key]: fields[key] as Schema.Top }) as unknown as Schema.Codec<
      Record<string, unknown>,
      unknown
    >
    decoder = Schema.decodeUnknownExit(struct)
    byKey.set(key, decoder)
  }
  return decoder
}

/** Each kind's fields beside `meta` (whose copy is made apart), in the order the decode gives them. */
const fieldKeys = new Map<string, ReadonlyArray<string>>()

const fieldKeysOf = (type: Resource.Kind): ReadonlyArray<string> => {
  let keys = fieldKeys.get(type)
  if (keys === undefined) {
    keys = Object.keys(Resource.kinds[type].fields).filter((key) => key !== "meta")
    fieldKeys.set(type, keys)
  }
  return keys
}

export const checkedCopy = (resource: Resource.Resource): Resource.Resource | undefined => {
  const meta = resource.meta
  const owner = checkedOwnerOf(meta) as Record<string, unknown> | undefined
  if (owner === undefined) return undefined
  if (owner === resource) return { ...resource, meta: { ...meta } } as Resource.Resource
  if ("score" in meta || Object.getPrototypeOf(resource) !== Object.prototype) return undefined
  const type = meta.type as Resource.Kind
  const input = resource as unknown as Record<string, unknown>
  const out: Record<string, unknown> = { meta: { ...meta } }
  let present = 0
  const keys = fieldKeysOf(type)
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i] as string
    if (!Object.hasOwn(input, key)) continue
    present++
    const value = input[key]
    if (Object.hasOwn(owner, key) && owner[key] === value) {
      out[key] = value
      continue
    }
    if (!isJsonStable(value)) return undefined
    const decoded = fieldDecoderOf(
      type,
      key
    )({
      [key]: typeof value === "object" && value !== null ? jsonCopy(value) : value
    })
    if (Exit.isFailure(decoded)) return undefined
    out[key] = decoded.value[key]
  }
  // Every field is one of the kind's (or `meta`), and every one the stored resource has is still there.
  if (present !== Object.keys(input).length - 1 || !Object.hasOwn(input, "meta")) return undefined
  for (const key in owner) if (key !== "meta" && !Object.hasOwn(input, key)) return undefined
  return out as unknown as Resource.Resource
}
