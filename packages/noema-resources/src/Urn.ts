/**
 * Urn: the name of a resource, `cld:<type>.<id>/<type>.<id>...`.
 *
 * A URN is the parent's path plus the resource's own element, joined by "/".
 * Each element is a type and an id joined by the element's LAST "." (a type may
 * be namespaced, `plan.task`; an id holds no "."). The namespace is always `cld`.
 * Descendants of a URN are exactly the URNs starting with `urn + "/"`, which is
 * what every store's prefix lookup uses.
 *
 * A URN is bounded: at most `maxElements` elements and `maxLength` characters.
 * Every path (the CLI, the stores, the policy engines, the events) parses URNs
 * here, so none of them ever works on a deeper one: a policy check builds an
 * entity per ancestor, and a 3,000-element URN once took 48 s and 1.1 GB there.
 */
import { Schema } from "effect"

export const NAMESPACE = "cld"

/** The most elements a URN may have: far deeper than any tree noema builds (a plan is a few levels). */
export const maxElements = 32
/** The most characters a URN may have. */
export const maxLength = 1024

const TYPE = /^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*$/i
const ID = /^[A-Za-z0-9_-]+$/

export class InvalidUrnError extends Schema.TaggedError<InvalidUrnError>()("InvalidUrnError", {
  urn: Schema.String,
  message: Schema.String
}) {}

export interface Element {
  readonly type: string
  readonly id: string
}

/** A parsed URN: its elements from the root down. */
export interface Urn {
  readonly elements: ReadonlyArray<Element>
}

/** The URN as a message quotes it: a long one cut short, so the message stays readable. */
const shown = (urn: string) => (urn.length > 120 ? `${urn.slice(0, 120)}...` : urn)

const fail = (urn: string, reason: string) =>
  new InvalidUrnError({ urn, message: `invalid URN "${shown(urn)}": ${reason}` })

/** Why a URN of this many elements and characters is too big, or undefined. */
const checkBounds = (elements: number, length: number): string | undefined => {
  if (elements > maxElements) return `has ${elements} elements, at most ${maxElements} are allowed`
  if (length > maxLength) return `has ${length} characters, at most ${maxLength} are allowed`
  return undefined
}

/** The elements of a path, counted without splitting it. */
const countElements = (path: string) => {
  let count = 1
  for (let at = path.indexOf("/"); at !== -1; at = path.indexOf("/", at + 1)) count++
  return count
}

/** Checks one element's type and id. */
export const checkElement = (type: string, id: string): string | undefined => {
  if (!TYPE.test(type)) return `type "${type}" must be letters, digits and "_", namespaced with "."`
  if (!ID.test(id)) return `id "${id}" must be letters, digits, "_" and "-"`
  return undefined
}

/**
 * URNs already parsed, by their string (bounded; past that it starts afresh). A URN is checked
 * over and over on its way (the store, the policy, the events, the Schema of every resource
 * that names it), and a string's parse never changes: parsed once, frozen, shared.
 */
const parsedUrns = new Map<string, Urn>()
const parsedRemembered = 8192

/** Parses a URN, or returns the reason it is not one. */
export const parseEither = (urn: string): Urn | InvalidUrnError => {
  const known = parsedUrns.get(urn)
  if (known !== undefined) return known
  const parsed = parseFresh(urn)
  if (parsed instanceof InvalidUrnError) return parsed
  remember(urn, parsed)
  return parsed
}

const remember = (urn: string, parsed: Urn) => {
  if (parsedUrns.size >= parsedRemembered) parsedUrns.clear()
  parsedUrns.set(urn, parsed)
}

const parseFresh = (urn: string): Urn | InvalidUrnError => {
  if (typeof urn !== "string") return fail(String(urn), "not a string")
  const prefix = `${NAMESPACE}:`
  if (!urn.startsWith(prefix)) return fail(urn, `must start with "${prefix}"`)
  const path = urn.slice(prefix.length)
  if (path.length === 0) return fail(urn, "has no path")
  const tooBig = checkBounds(countElements(path), urn.length)
  if (tooBig !== undefined) return fail(urn, tooBig)
  const elements: Array<Element> = []
  for (const part of path.split("/")) {
    if (part.length === 0) return fail(urn, "has an empty path element")
    const dot = part.lastIndexOf(".")
    if (dot <= 0) return fail(urn, `element "${part}" must be <type>.<id>`)
    const type = part.slice(0, dot)
    const id = part.slice(dot + 1)
    const reason = checkElement(type, id)
    if (reason !== undefined) return fail(urn, reason)
    elements.push(Object.freeze({ type, id }))
  }
  return Object.freeze({ elements: Object.freeze(elements) })
}

/** Parses a URN; throws InvalidUrnError. */
export const parse = (urn: string): Urn => {
  const result = parseEither(urn)
  if (result instanceof InvalidUrnError) throw result
  return result
}

export const isValid = (urn: string): boolean => !(parseEither(urn) instanceof InvalidUrnError)

export const format = (urn: Urn): string => {
  if (urn.elements.length === 0) throw fail("", "has no path")
  for (const element of urn.elements) {
    const reason = checkElement(element.type, element.id)
    if (reason !== undefined) throw fail(`${NAMESPACE}:${element.type}.${element.id}`, reason)
  }
  const formatted = `${NAMESPACE}:${urn.elements.map((e) => `${e.type}.${e.id}`).join("/")}`
  const tooBig = checkBounds(urn.elements.length, formatted.length)
  if (tooBig !== undefined) throw fail(formatted, tooBig)
  return formatted
}

/**
 * The URN of a child of `parent` (or a root when parent is undefined). A valid URN is its own
 * spelling (`format(parse(urn)) === urn`), so only the new element and the bounds are checked,
 * and the child is remembered as parsed (the parent's elements and its own): the store, the
 * policy and the Schema then find it without parsing it. A child already known is not checked
 * again: a URN whose last element is `type.id` is `parent` plus that element, and valid.
 */
export const child = (parent: string | undefined, type: string, id: string): string => {
  const formatted = parent === undefined ? `${NAMESPACE}:${type}.${id}` : `${parent}/${type}.${id}`
  const known = parsedUrns.get(formatted)
  if (known !== undefined) {
    const last = known.elements[known.elements.length - 1] as Element
    if (last.type === type && last.id === id && (parent !== undefined || known.elements.length === 1))
      return formatted
  }
  const above = parent === undefined ? [] : parse(parent).elements
  const reason = checkElement(type, id)
  if (reason !== undefined) throw fail(`${NAMESPACE}:${type}.${id}`, reason)
  const tooBig = checkBounds(above.length + 1, formatted.length)
  if (tooBig !== undefined) throw fail(formatted, tooBig)
  remember(formatted, Object.freeze({ elements: Object.freeze([...above, Object.freeze({ type, id })]) }))
  return formatted
}

/**
 * Whether `urn` is `child(parent, type, id)`, answered without building that string, for a URN
 * already parsed (false when it is not known: then ask `child`). A resource's URN is checked
 * against its parent, type and hash at every put and read.
 */
export const isChildOf = (urn: string, parent: string | undefined, type: string, id: string): boolean => {
  const parsed = parsedUrns.get(urn)
  if (parsed === undefined) return false
  const last = parsed.elements[parsed.elements.length - 1] as Element
  if (last.type !== type || last.id !== id) return false
  if (parent === undefined) return parsed.elements.length === 1
  // Its last element is `type.id`: with that length after `parent/`, it is exactly that child.
  return (
    urn.length === parent.length + type.length + id.length + 2 &&
    urn.charCodeAt(parent.length) === 47 &&
    urn.startsWith(parent)
  )
}

/**
 * The parent URN, or undefined for a root. A valid URN is its own spelling and no element holds a
 * "/", so its ancestors are its own prefixes up to each "/" (nothing to format or check again).
 */
export const parent = (urn: string): string | undefined => {
  parse(urn)
  const last = urn.lastIndexOf("/")
  return last === -1 ? undefined : urn.slice(0, last)
}

/** Ancestors from the root down, not including the URN itself (its prefixes, as `parent` says). */
export const ancestors = (urn: string): Array<string> => {
  parse(urn)
  const out: Array<string> = []
  for (let at = urn.indexOf("/"); at !== -1; at = urn.indexOf("/", at + 1)) out.push(urn.slice(0, at))
  return out
}

/** The last element's type. */
export const typeOf = (urn: string): string => {
  const { elements } = parse(urn)
  return elements[elements.length - 1]!.type
}

/** The URN in its one spelling (itself, once it parses); throws InvalidUrnError. */
export const check = (urn: string): string => {
  parse(urn)
  return urn
}

/** The key prefix every descendant of `urn` starts with (and nothing else does). */
export const descendantPrefix = (urn: string): string => `${check(urn)}/`

/** True when `candidate` is strictly below `urn`. */
export const isDescendant = (candidate: string, urn: string): boolean =>
  candidate.startsWith(descendantPrefix(urn))

/** A URN as a Schema: a string that parses. */
export const UrnString = Schema.String.check(
  Schema.makeFilter((s: string) => {
    const r = parseEither(s)
    return r instanceof InvalidUrnError ? r.message : undefined
  })
)
