/**
 * OpaPolicy: Open Policy Agent policies, compiled to WebAssembly.
 *
 * OPA's Rego is compiled ahead of time (`opa build -t wasm -e noema/authz/decision`)
 * into a `policy.wasm`, which `load` evaluates in-process through
 * `@open-policy-agent/opa-wasm`. Rego cannot be compiled on these machines (no
 * `opa` binary), so noema ships no bundle of its own: you bring the compiled
 * policy.
 *
 * The policy is given this input for every request:
 *
 * ```json
 * { "actor": "cld:assistant.a",
 *   "action": "get",
 *   "resources": [{ "urn": "cld:conversation.c1/message.m2", "type": "message",
 *                   "ancestors": ["cld:conversation.c1"] }] }
 * ```
 *
 * and its entrypoint (default `noema/authz/decision`) answers either a boolean
 * (`true` allows) or `{ "allow": boolean, "reasons": [string] }`. Anything else
 * (no result, several results, another shape) is a deny naming what came back;
 * like every engine it is wrapped by `Policy.failClosed`, so an evaluation
 * error is a deny too.
 */
import * as fs from "node:fs"
import { Effect, Schema } from "effect"
import * as Policy from "./Policy.js"
import * as Urn from "./Urn.js"

export class OpaPolicyError extends Schema.TaggedError<OpaPolicyError>()("OpaPolicyError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export const defaultEntrypoint = "noema/authz/decision"

/** The input document for one request (see the module's comment). */
export const inputOf = (request: Policy.Request) => ({
  actor: request.actor,
  action: request.action,
  resources: request.resources.map((urn) => ({ urn, type: Urn.typeOf(urn), ancestors: Urn.ancestors(urn) }))
})

/** OPA's answer for one request, as a decision (a shape it does not know is a deny that says what came). */
export const decisionOf = (resultSet: unknown): Policy.Decision => {
  if (!Array.isArray(resultSet) || resultSet.length === 0)
    return Policy.deny("opa: the policy gave no decision (undefined result)")
  if (resultSet.length > 1)
    return Policy.deny(`opa: the policy gave ${resultSet.length} results, expected one`)
  const result = (resultSet[0] as { result?: unknown } | undefined)?.result
  if (result === true) return Policy.allow("opa: allowed")
  if (result === false) return Policy.deny("opa: denied")
  if (
    typeof result === "object" &&
    result !== null &&
    typeof (result as { allow?: unknown }).allow === "boolean"
  ) {
    const { allow, reasons } = result as { allow: boolean; reasons?: unknown }
    const given = Array.isArray(reasons)
      ? reasons.filter((reason): reason is string => typeof reason === "string")
      : []
    const stated = given.length > 0 ? given : [allow ? "opa: allowed" : "opa: denied"]
    return allow ? Policy.allow(...stated) : Policy.deny(...stated)
  }
  return Policy.deny(
    `opa: the policy answered ${JSON.stringify(result)?.slice(0, 200)}; expected a boolean or { allow, reasons }`
  )
}

/** What evaluates a loaded policy: the input document in, OPA's result set out. */
export type Evaluate = (input: ReturnType<typeof inputOf>) => unknown

/** A policy over an evaluator (what `load` builds from the wasm), failing closed. */
export const fromEvaluator = (name: string, evaluate: Evaluate): Policy.Service =>
  Policy.failClosed(name, (request) =>
    Effect.try({ try: () => decisionOf(evaluate(inputOf(request))), catch: (error) => error })
  )

export interface LoadOptions {
  /** The entrypoint to evaluate. Default `noema/authz/decision`. */
  readonly entrypoint?: string
  /** Data the policy reads as `data` (e.g. role tables). */
  readonly data?: object
}

/** The runtime's WebAssembly, as much of it as the loader uses (the DOM typings are not loaded here). */
interface WebAssemblyApi {
  readonly Module: {
    new (bytes: Uint8Array): object
    exports(module: object): ReadonlyArray<{ readonly name: string }>
  }
}
const wasm = (globalThis as unknown as { readonly WebAssembly: WebAssemblyApi }).WebAssembly

const oneLine = (error: unknown) =>
  (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, "; ")

/**
 * Loads a compiled policy (`policy.wasm`). Refuses, with the file named: a
 * file that cannot be read, bytes that are not WebAssembly, a module that is
 * not an OPA policy (without OPA's exports), and a policy without the entrypoint.
 */
export const load = (
  file: string,
  options: LoadOptions = {}
): Effect.Effect<Policy.Service, OpaPolicyError> =>
  Effect.gen(function* () {
    const entrypoint = options.entrypoint ?? defaultEntrypoint
    const bytes = yield* Effect.try({
      try: () => fs.readFileSync(file),
      catch: (cause) =>
        new OpaPolicyError({ message: `${file}: cannot read the policy: ${oneLine(cause)}`, cause })
    })
    const module = yield* Effect.try({
      try: () => new wasm.Module(bytes),
      catch: (cause) =>
        new OpaPolicyError({ message: `${file}: not a WebAssembly module: ${oneLine(cause)}`, cause })
    })
    const exported = new Set(wasm.Module.exports(module).map((entry) => entry.name))
    const missing = [
      "opa_eval_ctx_new",
      "opa_eval_ctx_set_input",
      "opa_eval_ctx_get_result",
      "opa_heap_ptr_get",
      "entrypoints",
      "builtins"
    ].filter((name) => !exported.has(name))
    if (missing.length > 0)
      return yield* Effect.fail(
        new OpaPolicyError({ message: `${file}: not an OPA policy (missing exports: ${missing.join(", ")})` })
      )
    const { loadPolicy } = yield* Effect.promise(() => import("@open-policy-agent/opa-wasm"))
    const loaded = yield* Effect.tryPromise({
      try: () => loadPolicy(module as Parameters<typeof loadPolicy>[0]),
      catch: (cause) =>
        new OpaPolicyError({ message: `${file}: the policy does not load: ${oneLine(cause)}`, cause })
    })
    const entrypoints = Object.keys((loaded.entrypoints ?? {}) as Record<string, number>)
    if (!entrypoints.includes(entrypoint))
      return yield* Effect.fail(
        new OpaPolicyError({
          message: `${file}: no entrypoint "${entrypoint}" (the policy has: ${entrypoints.join(", ") || "none"})`
        })
      )
    if (options.data !== undefined) loaded.setData(options.data)
    return fromEvaluator("opa", (input) => loaded.evaluate(input, entrypoint))
  })
