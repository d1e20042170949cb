import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as cedar from "@cedar-policy/cedar-wasm/nodejs"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger } from "effect"
import * as fc from "fast-check"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as Slices from "../src/internal/cedarSlices.js"
import type * as Policy from "../src/Policy.js"

const actors = ["cld:assistant.a0", "cld:assistant.a1", "cld:user.u0"]
const urns = [
  "cld:conversation.c0",
  "cld:conversation.c0/task.t0",
  "cld:conversation.c0/task.t0/message.m0",
  "cld:conversation.c1",
  "cld:conversation.c1/message.m1",
  "cld:conversation.c10"
]

const principalScope = fc.oneof(
  fc.constant("principal"),
  fc.constantFrom(...actors).map((a) => `principal == Noema::Actor::"${a}"`),
  fc.constant("principal is Noema::Actor")
)
const actionScope = fc.constantFrom(
  "action",
  `action == Noema::Action::"get"`,
  `action in [Noema::Action::"put", Noema::Action::"delete"]`
)
const resourceScope = fc.oneof(
  fc.constant("resource"),
  fc.constantFrom(...urns).map((u) => `resource == Noema::Resource::"${u}"`),
  fc.constantFrom(...urns).map((u) => `resource in Noema::Resource::"${u}"`),
  fc.constantFrom(...urns).map((u) => `resource is Noema::Resource in Noema::Resource::"${u}"`)
)
const condition = fc.constantFrom(
  "",
  ` when { resource.type == "task" }`,
  ` unless { principal.type == "user" }`,
  // Schema-valid, but an error when evaluated: must show up as an error whenever its scope matches.
  " when { 9223372036854775807 + 1 > 0 }",
  // Decided by the data of entities other than the request's resource (an ancestor's parents and
  // attributes, given only where the resource lies under it): the engine must send the chain.
  ` when { Noema::Resource::"cld:conversation.c0/task.t0" in Noema::Resource::"cld:conversation.c0" }`,
  ` unless { Noema::Resource::"cld:conversation.c0".type == "conversation" }`,
  // Reads only the request's own principal: its attributes must be there.
  ` when { principal has type }`
)
const policyText = fc
  .tuple(fc.constantFrom("permit", "forbid"), principalScope, actionScope, resourceScope, condition)
  .map(([effect, p, a, r, c]) => `${effect} (${p}, ${a}, ${r})${c};`)

const request = fc.record({
  actor: fc.constantFrom(...actors),
  action: fc.constantFrom<Policy.Action>("get", "put", "delete"),
  resource: fc.constantFrom(...urns)
})

/** The policy ids a decision names (reasons and errors), sorted. */
const idsIn = (texts: ReadonlyArray<string>) =>
  [...new Set(texts.flatMap((t) => t.match(/\bp\d+\b/g) ?? []))].sort()

/** Cedar on the whole set, parsed for this one call: the reference the sliced engine must equal. */
const wholeSet = (
  policies: ReadonlyArray<string>,
  r: { actor: string; action: string; resource: string }
) => {
  const answer = cedar.isAuthorized({
    principal: { type: "Noema::Actor", id: r.actor },
    action: { type: "Noema::Action", id: r.action },
    resource: { type: "Noema::Resource", id: r.resource },
    context: {},
    schema: CedarPolicy.schema,
    validateRequest: true,
    policies: { staticPolicies: Object.fromEntries(policies.map((p, i) => [`p${i}`, p])) },
    entities: [
      {
        uid: { type: "Noema::Actor", id: r.actor },
        attrs: { type: r.actor.split(":")[1]!.split(".")[0]! },
        parents: []
      },
      ...CedarPolicy.entitiesOf(r.resource)
    ]
  })
  if (answer.type === "failure") throw new Error(answer.errors.map((e) => e.message).join("; "))
  const { decision, diagnostics } = answer.response
  const errors = diagnostics.errors.map((e) => e.policyId)
  return {
    // An error anywhere is a deny in noema (fail closed); it names the policies in error.
    decision: errors.length > 0 ? "deny" : decision,
    ids: (errors.length > 0 ? errors : diagnostics.reason).slice().sort()
  }
}

const withIds = (policies: ReadonlyArray<string>) => policies.map((p, i) => `@id("p${i}") ${p}`).join("\n")

describe("CedarPolicy: each request is evaluated against the policies whose scope can match it", () => {
  it.effect(
    "decides, and names the deciding policies, exactly as Cedar does on the whole set",
    () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.array(policyText, { minLength: 1, maxLength: 12 }),
            fc.array(request, { minLength: 1, maxLength: 8 }),
            async (policies, requests) => {
              const engine = await Effect.runPromise(CedarPolicy.make(withIds(policies)))
              for (const r of requests) {
                const got = await Effect.runPromise(
                  engine.authorize({ actor: r.actor, action: r.action, resources: [r.resource] })
                )
                const expected = wholeSet(policies, r)
                assert.equal(
                  got.decision,
                  expected.decision,
                  `${JSON.stringify(r)}: ${got.reasons.join("; ")}`
                )
                assert.deepStrictEqual(idsIn(got.reasons), expected.ids, JSON.stringify(r))
              }
            }
          ),
          { numRuns: 150 }
        )
      ),
    60_000
  )

  it("keeps at most `capacity` slices, and a reused set holds the slice it now answers for", () => {
    const parts = [0, 1, 2, 3, 4].map((i) => ({
      id: `p${i}`,
      text: `permit (principal == Noema::Actor::"cld:assistant.a${i}", action, resource);`
    }))
    const slices = Slices.make(
      parts.map((part) => {
        const json = cedar.policyToJson(part.text)
        return { ...part, json: json.type === "success" ? json.json : undefined }
      }),
      2
    )
    const ids = new Set<string>()
    // Cycling through five actors with room for two: every lookup evicts, and ids are reused.
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5; i++) {
        const actor = `cld:assistant.a${i}`
        const setId = slices.sliceFor(actor, ["cld:conversation.c0"]).id
        ids.add(setId)
        const answer = cedar.statefulIsAuthorized({
          principal: { type: "Noema::Actor", id: actor },
          action: { type: "Noema::Action", id: "get" },
          resource: { type: "Noema::Resource", id: "cld:conversation.c0" },
          context: {},
          preparsedPolicySetId: setId,
          entities: []
        })
        assert.equal(answer.type, "success")
        if (answer.type === "success") assert.deepStrictEqual(answer.response.diagnostics.reason, [`p${i}`])
      }
    }
    assert.equal(ids.size, 2)
    slices.retire()
  })
})

const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    lines.push(`${logLevel} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  return { lines, layer: Logger.layer([logger]) }
}

describe("CedarPolicy.fromFile: the file's policies, re-read when it changes", () => {
  const reader = "cld:assistant.reader"
  const readC1 = { actor: reader, action: "get", resources: ["cld:conversation.c1/message.m1"] } as const
  const readC2 = { actor: reader, action: "get", resources: ["cld:conversation.c2"] } as const
  const grant = (conversation: string) =>
    `@id("reader-reads") permit (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource in Noema::Resource::"${conversation}");\n`
  const tempFile = (text: string) => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "noema-cedar-")), "policy.cedar")
    fs.writeFileSync(file, text)
    return file
  }

  it.effect("the next decision follows an edit; an unchanged file is not loaded again", () => {
    const { lines, layer } = capture()
    return Effect.gen(function* () {
      const file = tempFile(grant("cld:conversation.c1"))
      const engine = yield* CedarPolicy.fromFile(file)
      assert.equal((yield* engine.authorize(readC1)).decision, "allow")
      assert.equal((yield* engine.authorize(readC2)).decision, "deny")
      assert.equal((yield* engine.authorize(readC1)).decision, "allow")
      assert.deepStrictEqual(lines, [])
      fs.writeFileSync(file, `// moved to c2\n${grant("cld:conversation.c2")}`)
      assert.equal((yield* engine.authorize(readC1)).decision, "deny")
      assert.equal((yield* engine.authorize(readC2)).decision, "allow")
      assert.equal(lines.length, 1)
      assert.match(lines[0]!, /Info policy: .*policy\.cedar changed, its policies are loaded/)
    }).pipe(Effect.provide(layer))
  })

  it.effect(
    "fails closed: a broken or missing file denies everything, naming why, until it loads again",
    () => {
      const { lines, layer } = capture()
      return Effect.gen(function* () {
        const file = tempFile(grant("cld:conversation.c1"))
        const engine = yield* CedarPolicy.fromFile(file)
        assert.equal((yield* engine.authorize(readC1)).decision, "allow")
        // Half-written: the previous policies must not go on allowing.
        fs.writeFileSync(file, `${grant("cld:conversation.c1")}permit (principal, action`)
        const broken = yield* engine.authorize(readC1)
        assert.equal(broken.decision, "deny")
        assert.match(
          broken.reasons.join(" "),
          /policy\.cedar: cedar: policies do not parse.*denied until the file loads/
        )
        assert.equal((yield* engine.authorize(readC1)).decision, "deny")
        assert.equal(lines.filter((line) => line.startsWith("Error")).length, 1, lines.join("\n"))
        // Valid Cedar that does not match the schema is refused the same way.
        fs.writeFileSync(file, `permit (principal, action, resource) when { resource.owner == "x" };`)
        assert.match((yield* engine.authorize(readC1)).reasons.join(" "), /do not match the schema/)
        fs.rmSync(file)
        const missing = yield* engine.authorize(readC1)
        assert.equal(missing.decision, "deny")
        assert.match(missing.reasons.join(" "), /cannot read .*policy\.cedar/)
        fs.writeFileSync(file, grant("cld:conversation.c1"))
        assert.equal((yield* engine.authorize(readC1)).decision, "allow")
      }).pipe(Effect.provide(layer))
    }
  )

  it.effect("a file that does not load at the start is refused, naming the file", () =>
    Effect.gen(function* () {
      const file = tempFile("permit (principal, action")
      const error = yield* Effect.flip(CedarPolicy.fromFile(file))
      assert.match(error.message, /policy\.cedar: cedar: policies do not parse/)
      const missing = yield* Effect.flip(CedarPolicy.fromFile(path.join(path.dirname(file), "none.cedar")))
      assert.match(missing.message, /cannot read .*none\.cedar/)
    })
  )
})
