/**
 * The OPA engine's loader and its contract with a compiled policy. No compiled
 * OPA policy ships with noema (Rego cannot be compiled here: no `opa` binary),
 * so what is tested is everything on noema's side of the WebAssembly boundary:
 * the input document, how result sets become decisions, failing closed, and
 * the loader refusing what is not a usable OPA policy, through the real
 * `@open-policy-agent/opa-wasm` and the runtime's WebAssembly.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as OpaPolicy from "../src/OpaPolicy.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-opa-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
const file = (name: string, bytes: Uint8Array | string) => {
  const target = path.join(directory, name)
  fs.writeFileSync(target, bytes)
  return target
}

const actor = "cld:assistant.a"
const urn = "cld:conversation.c1/message.m2/task.t3"

describe("OpaPolicy", () => {
  it("gives the policy the actor, the action, and each resource with its type and ancestors", () => {
    assert.deepEqual(OpaPolicy.inputOf({ actor, action: "put", resources: [urn, "cld:conversation.c1"] }), {
      actor,
      action: "put",
      resources: [
        { urn, type: "task", ancestors: ["cld:conversation.c1", "cld:conversation.c1/message.m2"] },
        { urn: "cld:conversation.c1", type: "conversation", ancestors: [] }
      ]
    })
  })

  it("turns result sets into decisions; anything unexpected is a deny that says what came", () => {
    const cases: ReadonlyArray<readonly [unknown, "allow" | "deny", RegExp]> = [
      [[{ result: true }], "allow", /allowed/],
      [[{ result: false }], "deny", /denied/],
      [[{ result: { allow: true, reasons: ["owner"] } }], "allow", /^owner$/],
      [[{ result: { allow: false, reasons: ["not yours", 3] } }], "deny", /^not yours$/],
      [[{ result: { allow: false } }], "deny", /denied/],
      [[], "deny", /no decision/],
      [undefined, "deny", /no decision/],
      [[{ result: true }, { result: true }], "deny", /2 results/],
      [[{ result: "yes" }], "deny", /"yes".*expected a boolean/],
      [[{ result: { allow: "true" } }], "deny", /expected a boolean/]
    ]
    for (const [resultSet, decision, reason] of cases) {
      const decided = OpaPolicy.decisionOf(resultSet)
      assert.equal(decided.decision, decision, JSON.stringify(resultSet))
      assert.match(decided.reasons[0] ?? "", reason)
    }
  })

  it.effect("fails closed: an evaluation that throws is a deny naming the error", () =>
    Effect.gen(function* () {
      const policy = OpaPolicy.fromEvaluator("opa", () => {
        throw new Error("opa_abort: var assignment conflict")
      })
      const decision = yield* policy.authorize({ actor, action: "get", resources: [urn] })
      assert.equal(decision.decision, "deny")
      assert.match(decision.reasons[0]!, /var assignment conflict/)
    })
  )

  it.effect(
    "the loader refuses a missing file, bytes that are not WebAssembly, and a module that is not an OPA policy",
    () =>
      Effect.gen(function* () {
        const missing = yield* Effect.flip(OpaPolicy.load(path.join(directory, "absent.wasm")))
        assert.match(missing.message, /absent\.wasm: cannot read the policy/)
        const text = yield* Effect.flip(OpaPolicy.load(file("policy.rego.wasm", "package noema.authz\n")))
        assert.match(text.message, /not a WebAssembly module/)
        // The smallest valid WebAssembly module: magic number and version, nothing else.
        const empty = yield* Effect.flip(
          OpaPolicy.load(file("empty.wasm", new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00])))
        )
        assert.match(empty.message, /not an OPA policy \(missing exports: opa_eval_ctx_new, .*entrypoints/)
        for (const error of [missing, text, empty]) {
          assert.equal(error._tag, "OpaPolicyError")
          assert.ok(!error.message.includes("\n"), error.message)
        }
      })
  )
})
