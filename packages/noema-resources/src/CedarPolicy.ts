/**
 * CedarPolicy: the Cedar engine (`@cedar-policy/cedar-wasm`), the default real
 * policy engine.
 *
 * Requests map to Cedar as: principal `Noema::Actor::"<actor URN>"`, action
 * `Noema::Action::"get" | "put" | "delete"`, resource `Noema::Resource::"<URN>"`
 * whose parents are its URN's ancestors (each a `Noema::Resource` in its own
 * parent), so `resource in Noema::Resource::"cld:conversation.c1"` covers
 * everything below that conversation. A resource carries its `type` (the last
 * element's type). Policies are validated against `schema` when loaded: a parse
 * or validation error refuses the load. A request is allowed only when Cedar
 * allows every resource it names; a Cedar error is a deny (fail closed).
 */
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { Effect, Schema } from "effect"
import * as Policy from "./Policy.js"
import * as Urn from "./Urn.js"

export const schema = `namespace Noema {
  entity Actor;
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

/** Parses and validates `policies` (Cedar text) against the schema; fails with every problem found. */
export const make = (policies: string): Effect.Effect<Policy.Service, CedarPolicyError> =>
  Effect.gen(function* () {
    const parsed = cedar.checkParsePolicySet({ staticPolicies: policies })
    if (parsed.type === "failure")
      return yield* Effect.fail(
        new CedarPolicyError({ message: `cedar: policies do not parse: ${errorsText(parsed.errors)}` })
      )
    const validation = cedar.validate({ schema, policies: { staticPolicies: policies } })
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
    return Policy.failClosed("cedar", (request) =>
      Effect.try({
        try: () => {
          const reasons: Array<string> = []
          for (const urn of request.resources) {
            const answer = cedar.isAuthorized({
              principal: { type: "Noema::Actor", id: request.actor },
              action: { type: "Noema::Action", id: request.action },
              resource: { type: "Noema::Resource", id: urn },
              context: {},
              schema,
              validateRequest: true,
              policies: { staticPolicies: policies },
              entities: [
                { uid: { type: "Noema::Actor", id: request.actor }, attrs: {}, parents: [] },
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
