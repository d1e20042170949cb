/**
 * Resource: everything an agent works with, addressed by a URN.
 *
 * A resource has `meta` (its URN, name, type, parent, a deterministic hash of
 * parent + type + name; its token count and the time it was first stored, both
 * set by the store on put; a similarity score on search results) and the four
 * descriptive fields `purpose`, `instructions`, `applicability`, `evaluation`,
 * compiled by `describe` into one structured description. Each kind
 * (conversation, message, task, assistant, chunk, document, tool) has its own Schema; a
 * stored resource is rebuilt as its own kind from `meta.type` by `decode`.
 */
import { hash as hashText } from "node:crypto"
import { Exit, Schema } from "effect"
import { deepFreeze, rememberChecked } from "./internal/frozen.js"
import { isJsonStable } from "./internal/jsonCopy.js"
import * as Urn from "./Urn.js"

// ---------------------------------------------------------------------------
// Meta
// ---------------------------------------------------------------------------

export const Meta = Schema.Struct({
  /** The resource's URN: the parent's path plus `<type>.<hash>`. */
  urn: Urn.UrnString,
  name: Schema.String,
  type: Schema.String,
  parent: Schema.optionalKey(Urn.UrnString),
  hash: Schema.String,
  /** Tokens of what the resource says (`textOf`), counted by the store on every put. */
  tokens: Schema.optionalKey(Schema.Number),
  /** When the URN was first stored (ISO-8601, UTC), set by the store; a replace keeps it. */
  created: Schema.optionalKey(Schema.String),
  score: Schema.optionalKey(Schema.Number)
})
export type Meta = typeof Meta.Type

const Descriptive = {
  purpose: Schema.optionalKey(Schema.String),
  instructions: Schema.optionalKey(Schema.String),
  applicability: Schema.optionalKey(Schema.String),
  evaluation: Schema.optionalKey(Schema.String)
}

export interface Descriptive {
  readonly purpose?: string
  readonly instructions?: string
  readonly applicability?: string
  readonly evaluation?: string
}

/**
 * Hashes lately computed, by parent, type and name (the strings looked up as they are, no key
 * built): a resource's hash is asked for at each put (its name's URN is checked against its
 * siblings') and a planner stores a task several times.
 */
const hashes = new Map<string, Map<string, Map<string, string>>>()
let hashesHeld = 0
const hashesRemembered = 8192

/** The deterministic hash of a resource's parent, type and name (hex, 16 chars). */
export const hashOf = (parent: string | undefined, type: string, name: string): string => {
  const parentKey = parent ?? ""
  const known = hashes.get(parentKey)?.get(type)?.get(name)
  if (known !== undefined) return known
  // One-shot `hash`: no Hash object per new name.
  const hash = hashText("sha256", `${parentKey}\u0000${type}\u0000${name}`, "hex").slice(0, 16)
  if (hashesHeld >= hashesRemembered) {
    hashes.clear()
    hashesHeld = 0
  }
  let byType = hashes.get(parentKey)
  if (byType === undefined) {
    byType = new Map()
    hashes.set(parentKey, byType)
  }
  let byName = byType.get(type)
  if (byName === undefined) {
    byName = new Map()
    byType.set(type, byName)
  }
  byName.set(name, hash)
  hashesHeld++
  return hash
}

export interface MetaInput {
  readonly name: string
  readonly type: string
  readonly parent?: string
  readonly tokens?: number
  readonly score?: number
}

/** Builds `meta`: the hash from parent + type + name, the URN from parent + type + hash. */
export const makeMeta = (input: MetaInput): Meta => {
  if (input.parent !== undefined) Urn.parse(input.parent)
  const hash = hashOf(input.parent, input.type, input.name)
  const urn = Urn.child(input.parent, input.type, hash)
  return {
    urn,
    name: input.name,
    type: input.type,
    hash,
    ...(input.parent === undefined ? {} : { parent: input.parent }),
    ...(input.tokens === undefined ? {} : { tokens: input.tokens }),
    ...(input.score === undefined ? {} : { score: input.score })
  }
}

/**
 * What a resource says, as one text: every string field and list of strings
 * beside `meta` (content, text, output, the four descriptive fields, examples...),
 * one per line. What `meta.tokens` counts: the resource's cost in a model's context.
 */
export const textOf = (resource: Resource): string => {
  const texts: Array<string> = []
  const fields = resource as unknown as Record<string, unknown>
  for (const key of Object.keys(fields)) {
    if (key === "meta") continue
    const value = fields[key]
    if (typeof value === "string") texts.push(value)
    else if (Array.isArray(value)) for (const item of value) if (typeof item === "string") texts.push(item)
  }
  return texts.join("\n")
}

/** The URN a resource named `name` has under `parent`: its hash is the name's (see `hashOf`). */
export const namedUrn = (parent: string | undefined, type: string, name: string): string =>
  Urn.child(parent, type, hashOf(parent, type, name))

/** The four descriptive fields compiled into one structured description (Markdown sections). */
export const describe = (resource: Descriptive): string => {
  const sections: Array<string> = []
  if (resource.purpose) sections.push(`**Purpose:** ${resource.purpose}`)
  if (resource.instructions) sections.push(`**Instructions:** ${resource.instructions}`)
  if (resource.applicability) sections.push(`**Applicability:** ${resource.applicability}`)
  if (resource.evaluation) sections.push(`**Evaluation:** ${resource.evaluation}`)
  return sections.join("\n\n")
}

// ---------------------------------------------------------------------------
// Kinds
// ---------------------------------------------------------------------------

const kind = <Type extends string, Fields extends Schema.Struct.Fields>(type: Type, fields: Fields) =>
  Schema.Struct({
    meta: Meta.check(
      Schema.makeFilter((m: Meta) =>
        m.type === type ? undefined : `meta.type must be "${type}", got "${m.type}"`
      )
    ),
    ...Descriptive,
    ...fields
  })

export const Conversation = kind("conversation", {
  title: Schema.optionalKey(Schema.String)
})
export type Conversation = typeof Conversation.Type

export const Message = kind("message", {
  role: Schema.Literals(["system", "user", "assistant", "tool"]),
  content: Schema.String
})
export type Message = typeof Message.Type

/** Who was elected for a task, how well they fit, and what else was considered. */
export const Assignment = Schema.Struct({
  /** The assistant's URN. */
  assistant: Schema.String,
  /** Its similarity to the task (cosine), or the best score seen when a fallback chose it. */
  score: Schema.Number,
  candidates: Schema.Array(Schema.Struct({ assistant: Schema.String, score: Schema.Number })),
  /** How it was chosen: the most similar, a default below the threshold, or the model among the top. */
  by: Schema.Literals(["similarity", "default", "model"])
})
export type Assignment = typeof Assignment.Type

export const Task = kind("task", {
  status: Schema.Literals(["pending", "running", "done", "failed"]),
  input: Schema.optionalKey(Schema.String),
  output: Schema.optionalKey(Schema.String),
  /** Its place among its siblings, from 1. */
  position: Schema.optionalKey(Schema.Number),
  assignment: Schema.optionalKey(Assignment),
  /** Added by a supervisor after an unsuccessful evaluation. */
  corrective: Schema.optionalKey(Schema.Boolean),
  /** Why it failed, or what its evaluation said. */
  reason: Schema.optionalKey(Schema.String),
  /** When it was stored done or failed (ISO-8601): the seed's `completed_at`. */
  completedAt: Schema.optionalKey(Schema.String),
  /** False when it must not be done twice (it sends, pays, deletes): it is never retried. */
  retryable: Schema.optionalKey(Schema.Boolean)
})
export type Task = typeof Task.Type

export const Assistant = kind("assistant", {
  model: Schema.optionalKey(Schema.String),
  tools: Schema.optionalKey(Schema.Array(Schema.String)),
  /** Requests it is meant for: part of what it is elected by. */
  examples: Schema.optionalKey(Schema.Array(Schema.String))
})
export type Assistant = typeof Assistant.Type

export const Chunk = kind("chunk", {
  text: Schema.String,
  source: Schema.optionalKey(Schema.String),
  /** Its place in what it was split from, from 1 (see `ResourceProcessor`). */
  position: Schema.optionalKey(Schema.Number)
})
export type Chunk = typeof Chunk.Type

/** A text to be found by passages: put through a `ResourceIndex`, it is split into chunks under it. */
export const Document = kind("document", {
  title: Schema.optionalKey(Schema.String),
  text: Schema.String,
  /** Where it came from: a path, a URL. */
  source: Schema.optionalKey(Schema.String)
})
export type Document = typeof Document.Type

export const Tool = kind("tool", {
  parameters: Schema.optionalKey(Schema.Unknown)
})
export type Tool = typeof Tool.Type

/** The schema of each kind, by `meta.type`. */
export const kinds = {
  conversation: Conversation,
  message: Message,
  task: Task,
  assistant: Assistant,
  chunk: Chunk,
  document: Document,
  tool: Tool
} as const

export type Kind = keyof typeof kinds

export type Resource = Conversation | Message | Task | Assistant | Chunk | Document | Tool

/** Each kind's decoder, made once (a store decodes at every put and read). */
const decoders = Object.fromEntries(
  Object.entries(kinds).map(([type, schema]) => [
    type,
    Schema.decodeUnknownExit(schema as Schema.Codec<Resource, unknown>)
  ])
) as Record<Kind, ReturnType<typeof Schema.decodeUnknownExit<Schema.Codec<Resource, unknown>>>>

/** What a resource says, without the meta its store completes on every put (`tokens`, `created`, and a search's `score`). */
const ownFields = (resource: Resource): unknown => {
  const { tokens: _tokens, created: _created, score: _score, ...meta } = resource.meta
  return { ...resource, meta }
}

/** Whether `a` and `b` say the same, whatever their stores added (`tokens`, `created`, `score`): a put of `b` over `a` changes nothing. */
export const sameContent = (a: Resource, b: Resource): boolean =>
  JSON.stringify(ownFields(a)) === JSON.stringify(ownFields(b))
export type ResourceOf<K extends Kind> = (typeof kinds)[K]["Type"]

export const isKind = (type: string): type is Kind => Object.hasOwn(kinds, type)

export class ResourceDecodeError extends Schema.TaggedError<ResourceDecodeError>()("ResourceDecodeError", {
  urn: Schema.optionalKey(Schema.String),
  message: Schema.String
}) {}

/**
 * Rebuilds a stored resource as its own kind, chosen by `meta.type`; checks its
 * URN against parent + type + hash, so a tampered or misfiled resource is refused.
 */
export const decode = (input: unknown): Resource => {
  const meta = (input as { meta?: { type?: unknown; urn?: unknown } } | null)?.meta
  const urn = typeof meta?.urn === "string" ? meta.urn : undefined
  const where = urn === undefined ? "resource" : `resource ${urn}`
  if (typeof meta?.type !== "string")
    throw new ResourceDecodeError({ ...(urn ? { urn } : {}), message: `${where}: meta.type is missing` })
  if (!isKind(meta.type))
    throw new ResourceDecodeError({
      ...(urn ? { urn } : {}),
      message: `${where}: unknown resource type "${meta.type}"`
    })
  const decodeKind = decoders[meta.type]
  // Stopping at the first problem is cheaper; a refused one is decoded again to name them all.
  const first = decodeKind(input)
  const result = Exit.isSuccess(first) ? first : decodeKind(input, { errors: "all" })
  if (result._tag === "Failure") {
    const cause = result.cause.reasons
      .map((r) => ("error" in r ? String((r.error as Error).message ?? r.error) : String(r)))
      .join("; ")
    throw new ResourceDecodeError({ ...(urn ? { urn } : {}), message: `${where}: ${cause}` })
  }
  const resource = result.value
  const { urn: own, parent, type, hash } = resource.meta
  if (Urn.isChildOf(own, parent, type, hash)) return resource
  const expected = Urn.child(parent, type, hash)
  if (expected !== own)
    throw new ResourceDecodeError({
      urn: resource.meta.urn,
      message: `${where}: URN does not match parent + type + hash (expected ${expected})`
    })
  return resource
}

const positionOf = (resource: Resource): number =>
  "position" in resource && typeof resource.position === "number"
    ? resource.position
    : Number.POSITIVE_INFINITY

/** Siblings in their order: by `position` (a plan's, a document's), then by when they were first stored, then by URN. */
const bySiblingOrder = (a: Resource, b: Resource): number =>
  positionOf(a) - positionOf(b) ||
  (a.meta.created ?? "\uffff").localeCompare(b.meta.created ?? "\uffff") ||
  (a.meta.urn < b.meta.urn ? -1 : a.meta.urn > b.meta.urn ? 1 : 0)

/**
 * Resources as a tree reads, depth-first: each after its parent, siblings in their order
 * (a plan's tasks as planned, a document's chunks as in the text, messages as they came).
 * A resource whose parent is not among them starts a tree of its own.
 */
export const treeOrder = <R extends Resource>(resources: ReadonlyArray<R>): Array<R> => {
  const urns = new Set(resources.map((resource) => resource.meta.urn))
  const children = new Map<string | undefined, Array<R>>()
  for (const resource of resources) {
    const parent =
      resource.meta.parent !== undefined && urns.has(resource.meta.parent) ? resource.meta.parent : undefined
    const siblings = children.get(parent)
    if (siblings === undefined) children.set(parent, [resource])
    else siblings.push(resource)
  }
  const out: Array<R> = []
  const visit = (parent: string | undefined) => {
    for (const child of (children.get(parent) ?? []).sort(bySiblingOrder)) {
      out.push(child)
      visit(child.meta.urn)
    }
  }
  visit(undefined)
  return out
}

type KindFields<K extends Kind> = Omit<ResourceOf<K>, "meta">

/**
 * Makes a resource of a kind; its meta (hash, URN) is derived from name and parent. It is
 * frozen all the way down (the Schema built every object in it, so nothing of the caller's is
 * frozen), except a tool's `parameters`, which are the caller's own object: that one is left as
 * it is. A frozen one holding only what JSON keeps is remembered as checked: a store's put
 * neither copies it through JSON nor decodes it again (`ResourceStore`).
 */
export const make = <K extends Kind>(
  type: K,
  options: { readonly name: string; readonly parent?: string; readonly tokens?: number } & KindFields<K>
): ResourceOf<K> => {
  const { name, parent, tokens, ...fields } = options
  const meta = makeMeta({
    name,
    type,
    ...(parent === undefined ? {} : { parent }),
    ...(tokens === undefined ? {} : { tokens })
  })
  const resource = decode({ meta, ...fields })
  if ("parameters" in resource && resource.parameters !== undefined) return resource as ResourceOf<K>
  if (isJsonStable(resource)) rememberChecked(resource)
  return deepFreeze(resource) as ResourceOf<K>
}
