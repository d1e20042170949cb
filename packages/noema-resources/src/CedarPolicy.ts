/**
 * CedarPolicy: the Cedar engine (`@cedar-policy/cedar-wasm`), the default real
 * policy engine.
 *
 * Requests map to Cedar as: principal `Noema::Actor::"<actor URN>"`, action
 * `Noema::Action::"get" | "put" | "delete"`, resource `Noema::Resource::"<URN>"`
 * whose parents are its URN's ancestors (each a `Noema::Resource` in its own
 * parent), so `resource in Noema::Resource::"cld:conversation.c1"` covers
 * everything below that conversation. A resource carries its `type` (the last
 * element's type), and so does an actor (`principal.type == "assistant"` grants
 * every assistant at once). Policies are validated against `schema` when loaded: a parse
 * or validation error refuses the load. A request is allowed only when Cedar
 * allows every resource it names; a Cedar error is a deny (fail closed).
 *
 * Each policy is named by its `@id("...")` annotation (else `policy<N>`, its
 * position), and reasons name the policies that decided. The set is parsed
 * and validated once, when loaded; a request is then evaluated against the
 * preparsed slice of the policies whose scope can match its actor and resource
 * (`internal/cedarSlices.ts`: same decision, same reasons, without evaluating
 * the policies about other actors and resources), with only the entities that
 * slice's conditions can observe (cedar-wasm parses every entity it is given on
 * every call: most of a decision's time). Requests are not validated
 * against the schema again on each call: this module builds them, and their
 * entities, in the schema's shapes. `fromFile` re-reads a policy file when it
 * changes and fails closed while it does not load.
 */
import * as fs from "node:fs"
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { Effect, Schema } from "effect"
import * as Slices from "./internal/cedarSlices.js"
import * as Policy from "./Policy.js"
import * as Urn from "./Urn.js"

export const schema = `namespace Noema {
  entity Actor { type: String };
  entity Resource in [Resource] { type: String };
  action "get", "put", "delete" appliesTo { principal: Actor, resource: Resource };
}`

export class CedarPolicyError extends Schema.TaggedError<CedarPolicyError>()("CedarPolicyError", {
  message: Schema.String
}) {}

const errorsText = (errors: ReadonlyArray<{ message: string; help?: string | null }>) =>
  errors.map((e) => (e.help ? `${e.message} (${e.help})` : e.message)).join("; ")

/** The Cedar entity of a URN and its ancestors, each naming its parent. */
export const entitiesOf = (urn: string): Array<cedar.EntityJson> => {
  const chain = [...Urn.ancestors(urn), urn]
  return chain.map((u, i) => ({
    uid: { type: "Noema::Resource", id: u },
    attrs: { type: Urn.typeOf(u) },
    parents: i === 0 ? [] : [{ type: "Noema::Resource", id: chain[i - 1]! }]
  }))
}

/** The policies of a Cedar text, each under its `@id` annotation or `policy<N>`; a failure says why not. */
export const namedPolicies = (text: string): Record<string, string> | CedarPolicyError => {
  const parsed = parsePolicies(text)
  return parsed instanceof CedarPolicyError
    ? parsed
    : Object.fromEntries(parsed.map((policy) => [policy.id, policy.text]))
}

const parsePolicies = (text: string): Array<Slices.NamedPolicy> | CedarPolicyError => {
  const parts = cedar.policySetTextToParts(text)
  if (parts.type === "failure")
    return new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(parts.errors)}` })
  if (parts.policy_templates.length > 0)
    return new CedarPolicyError({
      message: "cedar: policy templates are not supported; write static policies"
    })
  const named: Array<Slices.NamedPolicy> = []
  const ids = new Set<string>()
  for (const [index, policy] of parts.policies.entries()) {
    const answer = cedar.policyToJson(policy)
    const json = answer.type === "success" ? answer.json : undefined
    const annotated = json?.annotations?.id
    const id = typeof annotated === "string" && annotated.length > 0 ? annotated : `policy${index}`
    if (ids.has(id))
      return new CedarPolicyError({ message: `cedar: two policies are named "${id}"; @id must be unique` })
    ids.add(id)
    named.push({ id, text: policy, json })
  }
  return named
}

/** Parses and validates a Cedar text against the schema, and slices it; a failure names every problem found. */
const compile = (text: string): Slices.Slices | CedarPolicyError => {
  const named = parsePolicies(text)
  if (named instanceof CedarPolicyError) return named
  const staticPolicies = Object.fromEntries(named.map((policy) => [policy.id, policy.text]))
  const parsed = cedar.checkParsePolicySet({ staticPolicies })
  if (parsed.type === "failure")
    return new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(parsed.errors)}` })
  const validation = cedar.validate({ schema, policies: { staticPolicies } })
  if (validation.type === "failure")
    return new CedarPolicyError({ message: `cedar: cannot validate: ${errorsText(validation.errors)}` })
  if (validation.validationErrors.length > 0)
    return new CedarPolicyError({
      message: `cedar: policies do not match the schema: ${validation.validationErrors
        .map((e) => `${e.policyId}: ${e.error.message}`)
        .join("; ")}`
    })
  return Slices.make(named)
}

/**
 * The entities Cedar needs to decide on `urn` with `slice`: cedar-wasm parses each one on every
 * call, so only what the slice's conditions can observe is sent. With no `Noema::Resource`
 * literal in them, the resource alone, listing every ancestor as a parent, answers each `in` as
 * the chain would; with no attribute read, `type` is left out, and so is the actor (an entity
 * Cedar is not given has no parents, as an actor has none).
 */
const entitiesFor = (
  slice: Slices.Slice,
  actor: string,
  chain: ReadonlyArray<string>
): Array<cedar.EntityJson> => {
  const urn = chain[chain.length - 1] as string
  const actorEntity = () => ({
    uid: { type: "Noema::Actor", id: actor },
    attrs: { type: Urn.typeOf(actor) },
    parents: []
  })
  if (slice.namesResources) return [actorEntity(), ...entitiesOf(urn)]
  const resource: cedar.EntityJson = {
    uid: { type: "Noema::Resource", id: urn },
    attrs: slice.readsAttributes ? { type: Urn.typeOf(urn) } : {},
    parents: chain.slice(0, -1).map((id) => ({ type: "Noema::Resource", id }))
  }
  return slice.readsAttributes ? [actorEntity(), resource] : [resource]
}

/** Cedar's decision on every resource of a request, against the slices of one loaded policy set. */
const decide = (slices: Slices.Slices, request: Policy.Request): Policy.Decision => {
  const reasons: Array<string> = []
  const principal = { type: "Noema::Actor", id: request.actor }
  const action = { type: "Noema::Action", id: request.action }
  for (const urn of request.resources) {
    const chain = [...Urn.ancestors(urn), urn]
    const slice = slices.sliceFor(request.actor, chain)
    const answer = cedar.statefulIsAuthorized({
      principal,
      action,
      resource: { type: "Noema::Resource", id: urn },
      context: {},
      preparsedPolicySetId: slice.id,
      entities: entitiesFor(slice, request.actor, chain)
    })
    if (answer.type === "failure")
      return Policy.deny(`cedar: error, denied ${urn}: ${errorsText(answer.errors)}`)
    const { decision, diagnostics } = answer.response
    if (diagnostics.errors.length > 0)
      return Policy.deny(
        `cedar: error, denied ${urn}: ${diagnostics.errors.map((e) => `${e.policyId}: ${e.error.message}`).join("; ")}`
      )
    const by =
      diagnostics.reason.length > 0 ? ` by ${diagnostics.reason.join(", ")}` : " (no policy allows it)"
    if (decision !== "allow") return Policy.deny(`cedar: ${request.action} ${urn} denied${by}`)
    reasons.push(`cedar: ${request.action} ${urn} allowed${by}`)
  }
  return Policy.allow(...reasons)
}

/** Parses and validates `policies` (Cedar text) against the schema; fails with every problem found. */
export const make = (policies: string): Effect.Effect<Policy.Service, CedarPolicyError> =>
  Effect.suspend(() => {
    const slices = compile(policies)
    if (slices instanceof CedarPolicyError) return Effect.fail(slices)
    return Effect.succeed(
      // One policy set for the engine's life: one revision. Each resource is decided on its own,
      // in-process and synchronously, so without an effect too.
      Policy.failClosed(
        "cedar",
        (request) => Effect.sync(() => decide(slices, request)),
        () => "static",
        (request) => decide(slices, request)
      )
    )
  })

/** What identifies a version of a file without reading it: inode, size and times (ns), or its absence. */
const versionOf = (file: string): string => {
  const stats = fs.statSync(file, { bigint: true, throwIfNoEntry: false })
  return stats === undefined ? "missing" : `${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`
}

const load = (file: string): Slices.Slices | CedarPolicyError => {
  let text: string
  try {
    text = fs.readFileSync(file, "utf8")
  } catch (error) {
    return new CedarPolicyError({
      message: `cedar: cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`
    })
  }
  const loaded = compile(text)
  return loaded instanceof CedarPolicyError
    ? new CedarPolicyError({ message: `${file}: ${loaded.message}` })
    : loaded
}

/**
 * The policy set in `file`, re-read when the file changes: one `stat` before each decision
 * compares its inode, size and times with the loaded version's, so the next decision follows an
 * edit, and an unchanged file is never parsed again. Fails closed: once the file no longer loads
 * (a parse or schema error, or the file is gone) every request is denied, naming why, until it
 * loads again; the previous policies do not go on deciding. A file that does not load at the
 * start fails `fromFile`.
 */
export const fromFile = (file: string): Effect.Effect<Policy.Service, CedarPolicyError> =>
  Effect.suspend(() => {
    let version = versionOf(file)
    let loaded = load(file)
    if (loaded instanceof CedarPolicyError) return Effect.fail(loaded)
    /** Reloads when the file changed; says what happened, for the log. */
    const refresh = (): Effect.Effect<void> => {
      const current = versionOf(file)
      if (current === version) return Effect.void
      version = current
      if (!(loaded instanceof CedarPolicyError)) loaded.retire()
      loaded = load(file)
      return loaded instanceof CedarPolicyError
        ? Effect.logError(`policy: ${loaded.message}; every request is denied until the file loads`)
        : Effect.logInfo(`policy: ${file} changed, its policies are loaded`)
    }
    return Effect.succeed(
      Policy.failClosed(
        "cedar",
        (request) =>
          Effect.map(refresh(), () =>
            loaded instanceof CedarPolicyError
              ? Policy.deny(`${loaded.message}; denied until the file loads`)
              : decide(loaded, request)
          ),
        // The file's version: an edit is a new revision, so nothing allowed before is remembered.
        () => versionOf(file)
      )
    )
  })
