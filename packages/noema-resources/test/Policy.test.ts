import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, References, Stream } from "effect"
import { vi } from "vitest"
import * as CedarPolicy from "../src/CedarPolicy.js"
import * as LocalEmbedder from "../src/LocalEmbedder.js"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
import * as OpaPolicy from "../src/OpaPolicy.js"
import * as Policy from "../src/Policy.js"
import * as Resource from "../src/Resource.js"
import * as ResourceEvents from "../src/ResourceEvents.js"
import * as ResourceIndex from "../src/ResourceIndex.js"
import * as Urn from "../src/Urn.js"
import * as VectorIndex from "../src/VectorIndex.js"

const c1 = "cld:conversation.c1"
const m1 = `${c1}/message.m1`
const t1 = `${m1}/task.t1`
const c2 = "cld:conversation.c2"
const lookalike = "cld:conversation.c10/message.m1"
const planner = "cld:assistant.planner"
const reader = "cld:assistant.reader"
const stranger = "cld:assistant.stranger"

const policies = `
@id("planner-owns-c1")
permit (principal == Noema::Actor::"${planner}", action, resource in Noema::Resource::"${c1}");

@id("reader-reads-c1")
permit (principal == Noema::Actor::"${reader}", action == Noema::Action::"get", resource in Noema::Resource::"${c1}");

@id("tasks-are-not-deleted")
forbid (principal, action == Noema::Action::"delete", resource) when { resource.type == "task" };
`

/** actors x actions x URNs -> what the policies above decide. */
const table: ReadonlyArray<readonly [string, Policy.Action, ReadonlyArray<string>, "allow" | "deny"]> = [
  [planner, "get", [c1], "allow"],
  [planner, "put", [t1], "allow"],
  [planner, "delete", [m1], "allow"],
  [planner, "delete", [t1], "deny"],
  [planner, "put", [c2], "deny"],
  [planner, "get", [lookalike], "deny"],
  [planner, "get", [m1, t1], "allow"],
  [reader, "get", [t1], "allow"],
  [reader, "put", [m1], "deny"],
  [reader, "delete", [c1], "deny"],
  [reader, "get", [m1, c2], "deny"],
  [stranger, "get", [c1], "deny"]
]

/**
 * The same policies as OPA would run them, compiled from this Rego:
 *
 *   package noema.authz
 *   within(r, root) if r.urn == root
 *   within(r, root) if r.ancestors[_] == root
 *   permitted(r) if { input.actor == "<planner>"; within(r, "<c1>") }
 *   permitted(r) if { input.actor == "<reader>"; input.action == "get"; within(r, "<c1>") }
 *   forbidden(r) if { input.action == "delete"; r.type == "task" }
 *   allow if every r in input.resources { permitted(r); not forbidden(r) }
 *   decision := {"allow": allow, "reasons": ["rules"]}
 *
 * No `opa` binary exists here to compile it to policy.wasm, so this evaluator stands in for
 * the compiled module, reading only the input document OpaPolicy builds (the part under test:
 * that the input carries what a hierarchical policy needs, and how answers become decisions).
 */
const regoStandIn: OpaPolicy.Evaluate = (input) => {
  const within = (r: { urn: string; ancestors: ReadonlyArray<string> }, root: string) =>
    r.urn === root || r.ancestors.includes(root)
  const permitted = (r: { urn: string; ancestors: ReadonlyArray<string> }) =>
    (input.actor === planner && within(r, c1)) ||
    (input.actor === reader && input.action === "get" && within(r, c1))
  const forbidden = (r: { type: string }) => input.action === "delete" && r.type === "task"
  const allow = input.resources.every((r) => permitted(r) && !forbidden(r))
  return [
    { result: { allow, reasons: [allow ? "opa: a rule permits every resource" : "opa: no rule permits it"] } }
  ]
}

const engines: ReadonlyArray<
  readonly [string, Effect.Effect<Policy.Service, unknown>, (expected: string) => string]
> = [
  ["allow-all", Policy.allowAll, () => "allow"],
  ["cedar", CedarPolicy.make(policies), (expected) => expected],
  ["shadow(cedar)", Effect.map(CedarPolicy.make(policies), Policy.shadow), () => "allow"],
  [
    "opa (evaluator standing in for policy.wasm)",
    Effect.succeed(OpaPolicy.fromEvaluator("opa", regoStandIn)),
    (expected) => expected
  ]
]

describe("the decision table, on every engine", () => {
  for (const [name, make, expect] of engines) {
    for (const [actor, action, resources, expected] of table) {
      it.effect(`${name}: ${actor} ${action} ${resources.join(" ")} -> ${expect(expected)}`, () =>
        Effect.gen(function* () {
          const engine = yield* make
          const decision = yield* engine.authorize({ actor, action, resources })
          assert.equal(decision.decision, expect(expected), decision.reasons.join("; "))
          assert.isAbove(decision.reasons.length, 0)
        })
      )
    }
  }
})

const capture = () => {
  const lines: Array<string> = []
  const logger = Logger.make<unknown, void>(({ message, logLevel }) => {
    lines.push(`${logLevel} ${Array.isArray(message) ? message.join(" ") : String(message)}`)
  })
  return { lines, layer: Logger.layer([logger]) }
}

describe("CedarPolicy", () => {
  it.effect("names policies by their @id (else by position) in its reasons", () =>
    Effect.gen(function* () {
      const engine = yield* CedarPolicy.make(`${policies}
permit (principal == Noema::Actor::"${stranger}", action == Noema::Action::"get", resource == Noema::Resource::"${c2}");`)
      const allowed = yield* engine.authorize({ actor: reader, action: "get", resources: [m1] })
      assert.match(allowed.reasons[0]!, /allowed by reader-reads-c1$/)
      const forbidden = yield* engine.authorize({ actor: planner, action: "delete", resources: [t1] })
      assert.match(forbidden.reasons[0]!, /denied by tasks-are-not-deleted$/)
      const unnamed = yield* engine.authorize({ actor: stranger, action: "get", resources: [c2] })
      assert.match(unnamed.reasons[0]!, /allowed by policy3$/)
    })
  )

  it.effect("refuses two policies with one @id, and templates", () =>
    Effect.gen(function* () {
      const twice = yield* Effect.flip(
        CedarPolicy.make(`@id("p") permit (principal, action, resource);
@id("p") forbid (principal, action, resource);`)
      )
      assert.match(twice.message, /two policies are named "p"/)
      const template = yield* Effect.flip(
        CedarPolicy.make("permit (principal == ?principal, action, resource);")
      )
      assert.match(template.message, /templates are not supported/)
    })
  )
})

describe("Policy", () => {
  it.effect("allow-all says so once per process, however many are made; chosen explicitly, not at all", () =>
    Effect.gen(function* () {
      // A fresh module: a process that has not made one yet.
      vi.resetModules()
      const fresh = yield* Effect.promise(() => import("../src/Policy.js"))
      const { lines, layer } = capture()
      const chosen = fresh.allowAllChosen
      assert.equal(
        (yield* chosen.authorize({ actor: "cld:user.cli", action: "get", resources: ["cld:task.t"] }))
          .decision,
        "allow"
      )
      assert.deepEqual(lines, [])
      for (let i = 0; i < 3; i++) yield* Effect.provide(fresh.allowAll, layer)
      assert.equal(lines.filter((line) => /Warn.*allow-all/i.test(line)).length, 1, lines.join("\n"))
    })
  )

  it.effect("shadow logs what the engine would decide and allows", () =>
    Effect.gen(function* () {
      const { lines, layer } = capture()
      const engine = Policy.shadow(yield* CedarPolicy.make(policies))
      const decision = yield* Effect.provide(
        engine.authorize({ actor: stranger, action: "get", resources: [c1] }),
        layer
      )
      assert.equal(decision.decision, "allow")
      assert.match(decision.reasons[0]!, /would deny/)
      assert.isTrue(
        lines.some((line) => line.includes("cedar would deny")),
        lines.join("\n")
      )
    }).pipe(Effect.provideService(References.MinimumLogLevel, "All"))
  )

  it.effect("fails closed: engine errors, defects and malformed requests are denies", () =>
    Effect.gen(function* () {
      const failing = Policy.failClosed("broken", () => Effect.fail(new Error("engine down")))
      const dying = Policy.failClosed("dying", () => Effect.die(new Error("bug")))
      const request = { actor: planner, action: "get" as const, resources: [c1] }
      const a = yield* failing.authorize(request)
      assert.equal(a.decision, "deny")
      assert.match(a.reasons[0]!, /engine down/)
      const b = yield* dying.authorize(request)
      assert.equal(b.decision, "deny")
      assert.match(b.reasons[0]!, /bug/)
      const allowAll = yield* Policy.allowAll
      for (const bad of [
        { ...request, actor: "planner" },
        { ...request, resources: ["nope"] },
        { ...request, resources: [] },
        { ...request, action: "drop" as Policy.Action }
      ]) {
        const decision = yield* allowAll.authorize(bad)
        assert.equal(decision.decision, "deny", JSON.stringify(bad))
      }
    })
  )

  it.effect(
    "an engine that decides without an effect: its allows are known at once and remembered, its denials and malformed requests still asked",
    () =>
      Effect.gen(function* () {
        let asked = 0
        // Allows everything but the resource `hidden`, without an effect; `authorize` counted.
        const hidden = `${c1}/message.hidden`
        const decide = (request: Policy.Request) =>
          request.resources.includes(hidden) ? Policy.deny("hidden") : Policy.allow("fine")
        const engine = Policy.failClosed(
          "now",
          (request) =>
            Effect.sync(() => {
              asked += 1
              return decide(request)
            }),
          () => "1",
          decide
        )
        const view = Policy.remembering(engine)
        const reader = "cld:assistant.reader"
        const request = (resources: ReadonlyArray<string>): Policy.Request => ({
          actor: reader,
          action: "get",
          resources
        })
        assert.isTrue(Policy.allowedBefore(view, request([c1])))
        assert.isFalse(Policy.allowedBefore(view, request([c1, hidden])))
        assert.isFalse(Policy.allowedBefore(view, request(["not a urn"])))
        assert.strictEqual(engine.decideNow?.(request(["not a urn"])).decision, "deny")
        assert.strictEqual(asked, 0)
        // The allow is remembered as authorize's are: the engine is not asked about it.
        assert.strictEqual((yield* view.authorize(request([c1]))).decision, "allow")
        assert.strictEqual(asked, 0)
        // A denial comes from authorize, with the engine's reasons.
        const denied = yield* view.authorize(request([hidden]))
        assert.deepStrictEqual([denied.decision, denied.reasons, asked], ["deny", ["hidden"], 1])
      })
  )

  it.effect("cedar: policies are validated against the schema on load", () =>
    Effect.gen(function* () {
      const syntax = yield* Effect.flip(CedarPolicy.make("permit (principal, action, resource"))
      assert.match(syntax.message, /do not parse/)
      const unknownAttribute = yield* Effect.flip(
        CedarPolicy.make(`permit (principal, action, resource) when { resource.owner == "x" };`)
      )
      assert.match(unknownAttribute.message, /do not match the schema/)
      const unknownAction = yield* Effect.flip(
        CedarPolicy.make(`permit (principal, action == Noema::Action::"rename", resource);`)
      )
      assert.match(unknownAction.message, /do not match the schema/)
    })
  )

  it.effect("cedar: an evaluation error is a deny, not an allow", () =>
    Effect.gen(function* () {
      // Valid against the schema, but fails at run time (integer overflow): the permit errors, so nothing allows.
      const engine = yield* CedarPolicy.make(
        `permit (principal, action, resource) when { 9223372036854775807 + 1 > 0 };`
      )
      const decision = yield* engine.authorize({ actor: planner, action: "get", resources: [c1] })
      assert.equal(decision.decision, "deny")
      assert.match(decision.reasons.join(" "), /error/)
    })
  )
})

// ---------------------------------------------------------------------------
// No side channels: what an actor may not read never reaches it, by any path
// ---------------------------------------------------------------------------

describe("the decision table, through the index and the events: nothing hidden leaks", () => {
  const kitchen = Resource.make("conversation", { name: "kitchen" })
  const chunk = (name: string, text: string) =>
    Resource.make("chunk", { name, parent: kitchen.meta.urn, text })
  const open = chunk("open", "bread recipe: flour, water and salt, baked slowly")
  const secret = chunk("secret", "the secret sourdough bread recipe with the starter")
  const elsewhere = Resource.make("conversation", { name: "elsewhere" }).meta.urn
  const guest = "cld:user.guest"
  const owner = "cld:user.owner"
  // The guest reads the kitchen (but not the secret) and one other conversation; the owner does anything.
  const policyText = `
@id("owner-does-anything")
permit (principal == Noema::Actor::"${owner}", action, resource);
@id("guest-reads-the-kitchen")
permit (principal == Noema::Actor::"${guest}", action == Noema::Action::"get", resource in Noema::Resource::"${kitchen.meta.urn}");
@id("guest-reads-elsewhere")
permit (principal == Noema::Actor::"${guest}", action == Noema::Action::"get", resource == Noema::Resource::"${elsewhere}");
@id("the-secret-is-hidden")
forbid (principal == Noema::Actor::"${guest}", action, resource == Noema::Resource::"${secret.meta.urn}");
`
  const world = Effect.gen(function* () {
    const policy = yield* CedarPolicy.make(policyText)
    const events = yield* ResourceEvents.makeMemory(policy)
    const vectors = yield* VectorIndex.makeMemory(LocalEmbedder.make())
    const index = ResourceIndex.make(MemoryResourceStore.make(), policy, { events, vectors })
    return { policy, events, index }
  })
  const store = (index: ResourceIndex.Service) =>
    Effect.forEach([kitchen, open, secret], (resource) => index.put(owner, resource), { discard: true })

  it.effect("ls refused for an actor names only the prefix it asked for, never what is hidden under it", () =>
    Effect.gen(function* () {
      const { index } = yield* world
      yield* store(index)
      const refused = yield* Effect.flip(index.findByPrefix(guest, kitchen.meta.urn))
      assert.equal(refused._tag, "AccessDeniedError")
      const error = refused as ResourceIndex.AccessDeniedError
      assert.deepEqual(error.resources, [kitchen.meta.urn])
      const told = JSON.stringify({
        message: error.message,
        reasons: error.reasons,
        resources: error.resources
      })
      assert.notInclude(told, secret.meta.urn)
      assert.notInclude(told, secret.meta.hash)
      assert.notInclude(told, "the-secret-is-hidden")
      assert.match(error.message, /cld:user\.guest may not get everything under cld:conversation\./)
      // The owner lists everything; the guest's own requests still name what it asked for.
      assert.lengthOf(yield* index.findByPrefix(owner, kitchen.meta.urn), 2)
      const named = yield* Effect.flip(index.get(guest, secret.meta.urn))
      assert.deepEqual((named as ResourceIndex.AccessDeniedError).resources, [secret.meta.urn])
    })
  )

  it.effect(
    "search --limit 1 filters before it limits: a hidden better match changes nothing the actor sees",
    () =>
      Effect.gen(function* () {
        const { index } = yield* world
        yield* store(index)
        const query = { text: "the secret sourdough bread recipe with the starter" }
        // For the owner the secret is the best match, so it is the one a limit of 1 would keep.
        const best = yield* index.search(owner, query, { limit: 1 })
        assert.deepEqual(
          best.map((resource) => resource.meta.urn),
          [secret.meta.urn]
        )
        // The guest gets the best it may read, not "nothing found".
        const readable = yield* index.search(guest, query, { limit: 1 })
        assert.deepEqual(
          readable.map((resource) => resource.meta.urn),
          [open.meta.urn]
        )
        assert.isAbove(readable[0]!.meta.score!, 0)
        // And the hits it may read, in order, whatever the limit.
        const all = yield* index.search(guest, query, { limit: 5 })
        assert.deepEqual(
          all.map((resource) => resource.meta.urn).sort(),
          [kitchen.meta.urn, open.meta.urn].sort()
        )
      })
  )

  it.effect("a subscription carries an actor and hears only the events, and the resources, it may read", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { events } = yield* world
        const hears = yield* events.subscribe(guest, { prefix: kitchen.meta.urn }, { buffer: 2 })
        const everything = yield* events.subscribe(owner, { prefix: kitchen.meta.urn })
        const publish = (resources: ReadonlyArray<string>) =>
          events.publish({ source: owner, detailType: "RESOURCE_PUT", resources })
        // More events about the secret than the guest's buffer holds: they never count against it.
        for (let i = 0; i < 5; i++) yield* publish([secret.meta.urn])
        const both = yield* publish([secret.meta.urn, open.meta.urn])
        const last = yield* publish([open.meta.urn])
        const heard = yield* Stream.runCollect(Stream.take(hears, 2))
        assert.deepEqual(
          heard.map((event) => [event.id, event.resources, event.missedBefore]),
          [
            [both.id, [open.meta.urn], undefined],
            [last.id, [open.meta.urn], undefined]
          ]
        )
        // The owner, under the same filter, hears all seven as published.
        const all = yield* Stream.runCollect(Stream.take(everything, 7))
        assert.deepEqual(all.at(5)?.resources, [secret.meta.urn, open.meta.urn])
      })
    )
  )

  it.effect("a subscription's prefix matches only what the actor may read", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const { events } = yield* world
        const underKitchen = yield* events.subscribe(guest, { prefix: kitchen.meta.urn })
        const publish = (resources: ReadonlyArray<string>) =>
          events.publish({ source: owner, detailType: "RESOURCE_PUT", resources })
        // Under the kitchen only through the secret: the guest must not hear it (nor learn of the secret).
        yield* publish([secret.meta.urn, elsewhere])
        const marker = yield* publish([open.meta.urn])
        const [first] = yield* Stream.runCollect(Stream.take(underKitchen, 1))
        assert.equal(first?.id, marker.id)
      })
    )
  )

  it.effect("a 3,000-element URN is refused with a clear error wherever it is parsed", () =>
    Effect.gen(function* () {
      const deep = `cld:${Array.from({ length: 3000 }, (_, i) => `task.t${i}`).join("/")}`
      const parsed = Urn.parseEither(deep)
      assert.instanceOf(parsed, Urn.InvalidUrnError)
      assert.match((parsed as Urn.InvalidUrnError).message, /has 3000 elements, at most 32 are allowed$/)
      assert.isBelow((parsed as Urn.InvalidUrnError).message.length, 300)
      const { policy, index, events } = yield* world
      const decision = yield* policy.authorize({ actor: owner, action: "get", resources: [deep] })
      assert.equal(decision.decision, "deny")
      assert.match(decision.reasons.join(" "), /has 3000 elements, at most 32/)
      const refused = yield* Effect.flip(index.get(owner, deep))
      assert.match(refused.message, /has 3000 elements, at most 32/)
      const published = yield* Effect.flip(
        events.publish({ source: owner, detailType: "RESOURCE_PUT", resources: [deep] })
      )
      assert.match(published.message, /has 3000 elements, at most 32/)
    })
  )
})
