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
 * once, when loaded (Cedar's preparsed policy sets), not on every request.
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { Effect, Schema } from "effect"
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
  const parts = cedar.policySetTextToParts(text)
  if (parts.type === "failure")
    return new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(parts.errors)}` })
  if (parts.policy_templates.length > 0)
    return new CedarPolicyError({
      message: "cedar: policy templates are not supported; write static policies"
    })
  const named: Record<string, string> = {}
  for (const [index, policy] of parts.policies.entries()) {
    const json = cedar.policyToJson(policy)
    const annotated = json.type === "success" ? json.json.annotations?.id : undefined
    const id = typeof annotated === "string" && annotated.length > 0 ? annotated : `policy${index}`
    if (Object.hasOwn(named, id))
      return new CedarPolicyError({ message: `cedar: two policies are named "${id}"; @id must be unique` })
    named[id] = policy
  }
  return named
}

const schemaName = "noema"
let schemaPrepared = false
let policySets = 0

/** Parses and validates `policies` (Cedar text) against the schema; fails with every problem found. */
export const make = (policies: string): Effect.Effect<Policy.Service, CedarPolicyError> =>
  Effect.gen(function* () {
    const named = namedPolicies(policies)
    if (named instanceof CedarPolicyError) return yield* Effect.fail(named)
    const staticPolicies = named
    const parsed = cedar.checkParsePolicySet({ staticPolicies })
    if (parsed.type === "failure")
      return yield* Effect.fail(
        new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(parsed.errors)}` })
      )
    const validation = cedar.validate({ schema, policies: { staticPolicies } })
    if (validation.type === "failure")
      return yield* Effect.fail(
        new CedarPolicyError({ message: `cedar: cannot validate: ${errorsText(validation.errors)}` })
      )
    if (validation.validationErrors.length > 0)
      return yield* Effect.fail(
        new CedarPolicyError({
          message: `cedar: policies do not match the schema: ${validation.validationErrors
            .map((e) => `${e.policyId}: ${e.error.message}`)
            .join("; ")}`
        })
      )
    if (!schemaPrepared) {
      const prepared = cedar.preparseSchema(schemaName, schema)
      if (prepared.type === "failure")
        return yield* Effect.fail(
          new CedarPolicyError({ message: `cedar: schema: ${errorsText(prepared.errors)}` })
        )
      schemaPrepared = true
    }
    // Kept by cedar-wasm for the life of the process, under a name of its own.
    const policySetId = `noema-${++policySets}`
    const preparsed = cedar.preparsePolicySet(policySetId, { staticPolicies })
    if (preparsed.type === "failure")
      return yield* Effect.fail(
        new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(preparsed.errors)}` })
      )
    return Policy.failClosed("cedar", (request) =>
      Effect.try({
        try: () => {
          const reasons: Array<string> = []
          for (const urn of request.resources) {
            const answer = cedar.statefulIsAuthorized({
              principal: { type: "Noema::Actor", id: request.actor },
              action: { type: "Noema::Action", id: request.action },
              resource: { type: "Noema::Resource", id: urn },
              context: {},
              preparsedSchemaName: schemaName,
              validateRequest: true,
              preparsedPolicySetId: policySetId,
              entities: [
                {
                  uid: { type: "Noema::Actor", id: request.actor },
                  attrs: { type: Urn.typeOf(request.actor) },
                  parents: []
                },
                ...entitiesOf(urn)
              ]
            })
            if (answer.type === "failure")
              return Policy.deny(`cedar: error, denied ${urn}: ${errorsText(answer.errors)}`)
            const { decision, diagnostics } = answer.response
            if (diagnostics.errors.length > 0)
              return Policy.deny(
                `cedar: error, denied ${urn}: ${diagnostics.errors.map((e) => `${e.policyId}: ${e.error.message}`).join("; ")}`
              )
            const by =
              diagnostics.reason.length > 0
                ? ` by ${diagnostics.reason.join(", ")}`
                : " (no policy allows it)"
            if (decision !== "allow") return Policy.deny(`cedar: ${request.action} ${urn} denied${by}`)
            reasons.push(`cedar: ${request.action} ${urn} allowed${by}`)
          }
          return Policy.allow(...reasons)
        },
        catch: (error) => error
      })
    )
  })
