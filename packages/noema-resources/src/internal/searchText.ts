/**
 * searchText: what a resource is about, as embedded (`VectorIndex.searchText`), remembered for
 * a resource that cannot change. A resource is embedded, searched for and shown in context
 * windows many times; a frozen one (a memory or SQL store's, handed to every reader) cannot say
 * anything else later, and a search hit (`ResourceIndex`: the stored resource with its
 * `meta.score`, frozen as it is) says what its stored resource says, so it reads that one's.
 */
import * as Resource from "../Resource.js"
import { checkedLinkOf } from "./frozen.js"

const texts = new WeakMap<Resource.Resource, string>()
/**
 * A frozen hit's stored resource, whose text is the hit's: a property of the hit itself, hidden
 * (a symbol, not enumerable: no spread, listing, JSON or comparison sees it), cheaper than a
 * second weak map's entry for each of the run's hundreds of hits.
 */
const source: unique symbol = Symbol("@noema/resources/searchText/source")

export const searchText = (resource: Resource.Resource): string => {
  // A checked resource (made, or a memory store's) or a spread of one saying the same: the text
  // is kept on its link, read without a weak map's lookup.
  const link = checkedLinkOf(resource.meta)
  if (link !== undefined && (link.resource === resource || saysTheSame(resource, link.resource))) {
    link.text ??= searchTextOf(link.resource as Resource.Resource)
    return link.text
  }
  const same = (resource as { readonly [source]?: Resource.Resource })[source]
  if (same !== undefined) return searchText(same)
  const known = texts.get(resource)
  if (known !== undefined) return known
  const text = searchTextOf(resource)
  if (isFrozenText(resource)) texts.set(resource, text)
  return text
}

/** The fields `searchTextOf` reads beside `meta.name`. */
const textFields = [
  "purpose",
  "instructions",
  "applicability",
  "evaluation",
  "examples",
  "text",
  "content",
  "title"
]

/**
 * Whether a spread of a checked (frozen) resource says the same: a task stored again with a new
 * status keeps its `meta` and every field its search text reads (compared as values, so a
 * changed one is seen), and is embedded at every state change.
 */
const saysTheSame = (resource: Resource.Resource, checked: object): boolean => {
  const fields = resource as unknown as Record<string, unknown>
  const owner = checked as Record<string, unknown>
  for (let i = 0; i < textFields.length; i++) {
    const key = textFields[i] as string
    if (fields[key] !== owner[key] || Object.hasOwn(fields, key) !== Object.hasOwn(owner, key)) return false
  }
  return true
}

/**
 * Remembers that `copy` says what `stored` (frozen) says: the same fields but `meta.score`, which
 * no search text reads. Call before freezing `copy`, which must then be frozen as `stored` is.
 */
export const sameTextAs = (copy: Resource.Resource, stored: Resource.Resource): void => {
  Object.defineProperty(copy, source, { value: stored })
}

/** Whether what `searchText` reads of the resource can no longer change. */
export const isFrozenText = (resource: Resource.Resource) =>
  Object.isFrozen(resource) &&
  Object.isFrozen(resource.meta) &&
  (!("examples" in resource) || resource.examples === undefined || Object.isFrozen(resource.examples))

const searchTextOf = (resource: Resource.Resource): string => {
  const described = Resource.describe(resource)
  const examples = "examples" in resource && resource.examples !== undefined ? resource.examples : []
  if (described.length > 0)
    return examples.length === 0 ? described : `${described}\n\n**Examples:** ${examples.join("; ")}`
  const main =
    "text" in resource
      ? resource.text
      : "content" in resource
        ? resource.content
        : "title" in resource
          ? resource.title
          : undefined
  return [resource.meta.name, main].filter((part) => typeof part === "string" && part.length > 0).join("\n")
}
