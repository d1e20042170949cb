import { assert, describe, it } from "@effect/vitest"
import type { ChatModel } from "@noema/core"
import { Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { CedarPolicy, Policy, Resource, ResourceEvents, ResourceIndex, Urn } from "@noema/resources"
import { Deferred, Effect, Fiber, Schema, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as Graph from "../src/Graph.js"
import * as Planner from "../src/Planner.js"
import * as PlannerTesting from "../src/testing.js"

const planner = "cld:assistant.planner"

const team = [
  {
    name: "researcher",
    purpose: "find facts, sources and figures about a topic",
    examples: ["find the population of Lisbon", "look up sources on tea history"]
  },
  {
    name: "writer",
    purpose: "write prose: summaries, introductions, articles and conclusions",
    examples: ["write an introduction", "write a conclusion for the article"]
  },
  {
    name: "reviewer",
    purpose: "review and check text for errors, facts and style",
    examples: ["review the draft for errors"]
  }
]

/**
 * Depth 3: "Article" > ("Research" > (two leaves), "Draft" > (two leaves)), and a top-level
 * leaf "Review". Five leaves, three supervisors: eight tasks.
 */
const articlePlan = {
  tasks: [
    PlannerTesting.parent(
      "Article",
      [
        PlannerTesting.parent(
          "Research",
          [
            PlannerTesting.leaf("Find tea facts", "find facts and figures about tea"),
            PlannerTesting.leaf("Find tea sources", "look up sources on the history of tea")
          ],
          "find facts and sources about tea"
        ),
        PlannerTesting.parent(
          "Draft",
          [
            PlannerTesting.leaf("Write introduction", "write an introduction for the article"),
            PlannerTesting.leaf("Write conclusion", "write a conclusion for the article")
          ],
          "write the article's introduction and conclusion"
        )
      ],
      "write an article about tea"
    ),
    PlannerTesting.leaf("Review", "review the draft for errors")
  ]
}

/**
 * A model in front of `inner` that counts the leaves' calls in flight: each waits (up to
 * `wait`) until `target` are in flight together, so leaves run one after another show a
 * maximum of 1, and leaves run side by side reach the target.
 */
const concurrencyProbe = (inner: ChatModel.Service, target: number) => {
  let inFlight = 0
  let most = 0
  let together = Deferred.makeUnsafe<void>()
  const enter = (request: ChatModel.ChatRequest) =>
    PlannerTesting.partOf(request).kind !== "leaf"
      ? Effect.succeed(false)
      : Effect.gen(function* () {
          inFlight++
          most = Math.max(most, inFlight)
          if (inFlight >= target) {
            Deferred.doneUnsafe(together, Effect.void)
            together = Deferred.makeUnsafe<void>()
          } else yield* Effect.ignore(Effect.timeout(Deferred.await(together), "2 seconds"))
          return true
        })
  const leave = (entered: boolean) =>
    Effect.sync(() => {
      if (entered) inFlight--
    })
  const model: ChatModel.Service = {
    ...inner,
    complete: (request) => Effect.acquireUseRelease(enter(request), () => inner.complete(request), leave),
    stream: (request) =>
      Stream.unwrap(
        Effect.map(enter(request), (entered) => Stream.ensuring(inner.stream(request), leave(entered)))
      )
  }
  return { model, most: () => most }
}

/** Below the threshold, a default: these tests are not about the election. */
const anyone = { fallback: { kind: "default" as const, assistant: "cld:assistant.generalist" } }

describe("Planner.run", () => {
  it.live(
    "plans a depth-3 tree, elects assistants by similarity, runs siblings in parallel and supervises",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        const assistants = yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const byName = new Map(assistants.map((a) => [a.meta.name, a.meta.urn]))
        const scripted = PlannerTesting.scriptedModel({ plan: articlePlan })
        const probe = concurrencyProbe(scripted, 2)
        const events: Array<Planner.PlannerEvent> = []
        const result = yield* Planner.run("Write a short article about tea", {
          model: probe.model,
          ...world,
          limits: { parallel: 2 },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })

        // Every task done, nothing missing, the answer made of the top-level tasks' results.
        assert.deepStrictEqual(result.missing, [])
        assert.strictEqual(result.tasks.length, 8)
        assert.isTrue(result.tasks.every((task) => task.status === "done"))
        assert.match(result.answer, /^## Article\n/)
        assert.match(result.answer, /## Review\nReview: done/)
        assert.notMatch(result.answer, /What is missing/)

        // Two leaves were worked on at the same time, never more than `parallel`.
        assert.strictEqual(probe.most(), 2)

        // The tree is stored under the request's message, three levels deep.
        const stored = (yield* world.store.findByPrefix(result.tree.message)).filter(
          (resource): resource is Resource.Task => resource.meta.type === "task"
        )
        assert.strictEqual(stored.length, 8)
        const deepest = stored.find((task) => task.meta.name === "1. Find tea facts")
        assert.isDefined(deepest)
        const path = Urn.ancestors(deepest!.meta.urn)
        assert.deepStrictEqual(
          [...path, deepest!.meta.urn].map(Urn.typeOf),
          ["conversation", "message", "task", "task", "task"],
          "conversation > message > Article > Research > Find tea facts"
        )
        assert.strictEqual(path[0], result.tree.conversation)
        assert.isTrue(stored.every((task) => task.status === "done"))

        // Each task's assignment: elected by similarity, with its scores kept.
        const assignmentOf = (name: string) =>
          stored.find((task) => task.meta.name.endsWith(`. ${name}`))!.assignment!
        assert.strictEqual(assignmentOf("Find tea sources").assistant, byName.get("researcher"))
        assert.strictEqual(assignmentOf("Write conclusion").assistant, byName.get("writer"))
        assert.strictEqual(assignmentOf("Review").assistant, byName.get("reviewer"))
        for (const task of stored) {
          const assignment = task.assignment!
          assert.strictEqual(assignment.by, "similarity")
          assert.isAtLeast(assignment.score, 0.2)
          assert.strictEqual(assignment.score, assignment.candidates[0]!.score)
          assert.isAtLeast(assignment.candidates.length, 2)
        }

        // A leaf's output is a message resource under it, written as its assistant.
        const outputs = (yield* world.store.findByPrefix(deepest!.meta.urn)).filter(
          (resource): resource is Resource.Message => resource.meta.type === "message"
        )
        assert.deepStrictEqual(
          outputs.map((m) => [m.role, m.content]),
          [["assistant", "Find tea facts: done"]]
        )

        // A supervisor evaluates only once every subtask reported, learnt from the events.
        const at = (type: string, title: string) =>
          events.findIndex((event) => event.type === type && "title" in event && event.title === title)
        assert.isAbove(at("evaluated", "Research"), at("done", "Find tea facts"))
        assert.isAbove(at("evaluated", "Research"), at("done", "Find tea sources"))
        assert.isAbove(at("evaluated", "Article"), at("done", "Draft"))
        assert.isBelow(at("started", "Research"), at("started", "Find tea facts"))
        assert.strictEqual(events.filter((event) => event.type === "evaluated").length, 3)
        assert.strictEqual(events.filter((event) => event.type === "assigned").length, 8)
        // The model calls: one plan, five leaves, three evaluations.
        assert.strictEqual(result.modelCalls, 9)
        assert.strictEqual(scripted.requests.length, 9)
        assert.isAbove(result.tokens, 0)
      })
  )

  it.effect("a failed evaluation adds a corrective subtask, which is assigned, run and evaluated again", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      yield* PlannerTesting.registerAssistants(world.index, planner, team)
      const evaluations: Array<string> = []
      const scripted = PlannerTesting.scriptedModel({
        plan: {
          tasks: [
            PlannerTesting.parent(
              "Draft",
              [
                PlannerTesting.leaf("Write introduction", "write an introduction for the article"),
                PlannerTesting.leaf("Write body", "write the body of the article")
              ],
              "write a draft of the article"
            )
          ]
        },
        verdict: (task, round, results) => {
          evaluations.push(results)
          return round === 0
            ? {
                successful: false,
                reason: "the draft has no conclusion",
                corrective: [PlannerTesting.leaf("Write conclusion", "write a conclusion for the article")]
              }
            : { successful: true, reason: `${task} is complete now` }
        }
      })
      const events: Array<Planner.PlannerEvent> = []
      const result = yield* Planner.run("Draft an article", {
        model: scripted,
        ...world,
        onEvent: (event) => Effect.sync(() => events.push(event))
      })
      assert.deepStrictEqual(result.missing, [])
      const tasks = (yield* world.store.findByPrefix(result.tree.message)).filter(
        (resource): resource is Resource.Task => resource.meta.type === "task"
      )
      const corrective = tasks.find((task) => task.corrective === true)
      assert.isDefined(corrective)
      assert.strictEqual(corrective!.meta.name, "3. Write conclusion")
      assert.strictEqual(corrective!.position, 3)
      assert.strictEqual(corrective!.status, "done")
      assert.isDefined(corrective!.assignment)
      assert.strictEqual(Urn.parent(corrective!.meta.urn), result.tree.tasks[0]!.urn)
      assert.deepStrictEqual(
        events.filter((e) => e.type === "evaluated").map((e) => e.type === "evaluated" && e.successful),
        [false, true]
      )
      assert.deepStrictEqual(
        events.flatMap((e) => (e.type === "corrective" ? e.tasks.map((t) => t.spec.title) : [])),
        ["Write conclusion"]
      )
      // The second evaluation saw all three results.
      assert.match(evaluations[1]!, /## Write conclusion \(done\)\nWrite conclusion: done/)
      assert.match(evaluations[1]!, /## Write introduction \(done\)/)
      const draft = tasks.find((task) => task.meta.name === "1. Draft")!
      assert.strictEqual(draft.status, "done")
      assert.match(draft.completedAt!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      // The supervisor's verdict is its own final message, stored under it like a leaf's output.
      const final = (yield* world.store.findByPrefix(draft.meta.urn)).filter(
        (resource): resource is Resource.Message =>
          resource.meta.type === "message" && resource.meta.parent === draft.meta.urn
      )
      assert.strictEqual(final.length, 1)
      assert.match(final[0]!.content, /^Draft is complete now\n\n## Write introduction \(done\)/)
      assert.strictEqual(result.tasks.find((task) => task.title === "Draft")?.output, final[0]!.content)
    })
  )

  it.effect("a depth no URN can hold is refused before the model is asked", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const scripted = PlannerTesting.scriptedModel({ plan: { tasks: [PlannerTesting.leaf("Write body")] } })
      const error = yield* Effect.flip(
        Planner.run("Draft", { model: scripted, ...world, limits: { maxDepth: 31 } })
      )
      assert.strictEqual(error._tag, "PlannerError")
      assert.match(error.message, /more than the 32 a URN may have: at most 29 levels$/)
      const fits = yield* Effect.flip(
        Planner.run("Draft", {
          model: ScriptedChatModel.make({ replies: [] }),
          ...world,
          limits: { maxDepth: 29 }
        })
      )
      // 29 levels pass the check: what fails then is the script's empty model, not the depth.
      assert.notMatch(fits.message, /a URN may have/)
    })
  )

  it.effect("corrective rounds are bounded: past the limit the task fails and the user is told why", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      yield* PlannerTesting.registerAssistants(world.index, planner, team)
      let fixes = 0
      const scripted = PlannerTesting.scriptedModel({
        plan: { tasks: [PlannerTesting.parent("Draft", [PlannerTesting.leaf("Write body")])] },
        verdict: () => ({
          successful: false,
          reason: "still not good",
          corrective: [PlannerTesting.leaf(`Fix ${++fixes}`)]
        })
      })
      const result = yield* Planner.run("Draft", {
        model: scripted,
        ...world,
        limits: { maxCorrectiveRounds: 2 },
        election: { fallback: { kind: "default", assistant: "cld:assistant.generalist" } }
      })
      assert.strictEqual(fixes, 3, "the initial evaluation and two corrective rounds")
      assert.deepStrictEqual(
        result.missing.map((task) => [task.title, task.reason]),
        [["Draft", "unsuccessful after 2 corrective rounds: still not good"]]
      )
      assert.match(result.answer, /## Draft \(not done\)/)
      assert.match(result.answer, /## What is missing\n- Draft: unsuccessful after 2 corrective rounds/)
    })
  )

  it.live(
    "a stalled subtask escalates: its supervisor stops it, fails, and the answer says what is missing",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const scripted = PlannerTesting.scriptedModel({
          plan: {
            tasks: [
              PlannerTesting.parent(
                "Research",
                [
                  PlannerTesting.leaf("Find tea facts", "find facts and figures about tea"),
                  PlannerTesting.leaf("Find tea sources", "look up sources on the history of tea")
                ],
                "find facts and sources about tea"
              )
            ]
          },
          leaf: (task) => (task === "Find tea sources" ? { hang: true } : `${task}: done`)
        })
        const events: Array<Planner.PlannerEvent> = []
        const result = yield* Planner.run("Research tea", {
          model: scripted,
          ...world,
          limits: { stallTimeout: "300 millis" },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        const stalled = events.find((event) => event.type === "stalled")
        assert.deepStrictEqual(stalled?.type === "stalled" && stalled.waitingFor, ["Find tea sources"])
        const research = result.missing.find((task) => task.title === "Research")
        assert.match(research!.reason!, /^stalled: Find tea sources did not finish within 300ms/)
        assert.match(result.answer, /## What is missing\n- Research: stalled: Find tea sources/)
        // The hung call was interrupted, not left running.
        assert.isTrue(scripted.requests.some((request) => request.interrupted))
        const hung = (yield* world.store.findByType("task")).find(
          (task) => task.meta.name === "2. Find tea sources"
        )
        assert.strictEqual((hung as Resource.Task).status, "failed")
        assert.strictEqual((hung as Resource.Task).reason, "interrupted before it finished")
        // The finished sibling's work stands.
        assert.isTrue(result.tasks.some((task) => task.title === "Find tea facts" && task.status === "done"))
      })
  )

  it.effect("a supervisor's stall timeout restarts at every subtask it hears of", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      yield* PlannerTesting.registerAssistants(world.index, planner, team)
      const scripted = PlannerTesting.scriptedModel({
        plan: {
          tasks: [
            PlannerTesting.parent(
              "Research",
              [
                PlannerTesting.leaf("Find tea facts", "find facts and figures about tea"),
                PlannerTesting.leaf("Find tea sources", "look up sources on the history of tea"),
                PlannerTesting.leaf("Find tea prices", "find figures about tea prices")
              ],
              "find facts and sources about tea"
            )
          ]
        }
      })
      // Each leaf's answer takes 200 ms (of the test clock) and the leaves run one at a time:
      // 600 ms in all, never 300 without a subtask heard of.
      const slow = (request: ChatModel.ChatRequest) =>
        PlannerTesting.partOf(request).kind === "leaf" ? Effect.sleep("200 millis") : Effect.void
      const model: ChatModel.Service = {
        ...scripted,
        complete: (request) => Effect.andThen(slow(request), scripted.complete(request)),
        stream: (request) => Stream.unwrap(Effect.as(slow(request), scripted.stream(request)))
      }
      const events: Array<Planner.PlannerEvent> = []
      const running = yield* Effect.forkChild(
        Planner.run("Research tea", {
          model,
          ...world,
          limits: { stallTimeout: "300 millis", parallel: 1 },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
      )
      for (let step = 0; step < 40 && running.pollUnsafe() === undefined; step++)
        yield* TestClock.adjust("50 millis")
      const result = yield* Fiber.join(running)
      assert.deepStrictEqual(
        events.filter((event) => event.type === "stalled"),
        []
      )
      assert.deepStrictEqual(result.missing, [])
      assert.strictEqual(result.tasks.length, 4)
    })
  )

  it.live(
    "a subtask whose outcome the policy will not store is caught when its fiber returns: its supervisor goes on without a stall",
    () =>
      Effect.gen(function* () {
        const writer = Resource.make("assistant", { name: "writer" }).meta.urn
        const policy = yield* CedarPolicy.make(`
        @id("everyone")
        permit (principal, action, resource);
        @id("writer-stores-nothing")
        forbid (principal == Noema::Actor::"${writer}", action == Noema::Action::"put", resource);
      `)
        const world = yield* PlannerTesting.world(policy)
        yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const scripted = PlannerTesting.scriptedModel({
          plan: {
            tasks: [
              PlannerTesting.parent(
                "Research",
                [
                  PlannerTesting.leaf("Find tea facts", "find facts and figures about tea"),
                  PlannerTesting.leaf("Write introduction", "write an introduction about tea")
                ],
                "find facts and sources about tea"
              )
            ]
          }
        })
        const events: Array<Planner.PlannerEvent> = []
        // No event can tell the supervisor of the writer's outcome: without the backstop it would
        // wait the whole stall timeout (longer than the test may take) and report a stall.
        const result = yield* Planner.run("Research tea", {
          model: scripted,
          ...world,
          limits: { stallTimeout: "10 minutes" },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        assert.deepStrictEqual(
          events.filter((event) => event.type === "stalled"),
          []
        )
        const written = result.tasks.find((task) => task.title === "Write introduction")
        assert.strictEqual(written?.status, "failed")
        assert.match(written?.reason ?? "", /denied|not allowed|forbid/i)
        assert.isTrue(
          events.some((event) => event.type === "evaluated" && event.title === "Research"),
          "the supervisor evaluated its subtasks' outcomes"
        )
      }),
    60_000
  )

  it.effect(
    "the policy is enforced with the assistant as actor: a denied resource is withheld from its context",
    () =>
      Effect.gen(function* () {
        // A URN is its parent, type and name's hash: the writer's is known before it is stored.
        const writer = Resource.make("assistant", { name: "writer" }).meta.urn
        const root = Resource.make("conversation", { name: "tea" })
        const secret = Resource.make("chunk", {
          name: "secret",
          parent: root.meta.urn,
          text: "tea notes: the secret blend is lapsang with bergamot"
        })
        const open = Resource.make("chunk", {
          name: "open",
          parent: root.meta.urn,
          text: "tea notes: the article should mention green tea"
        })
        const policy = yield* CedarPolicy.make(`
        @id("everyone")
        permit (principal, action, resource);
        @id("writer-not-secret")
        forbid (principal == Noema::Actor::"${writer}", action == Noema::Action::"get", resource == Noema::Resource::"${secret.meta.urn}");
      `)
        const guarded = yield* PlannerTesting.world(policy)
        const assistants = yield* PlannerTesting.registerAssistants(guarded.index, planner, team)
        assert.include(
          assistants.map((a) => a.meta.urn),
          writer
        )
        yield* guarded.index.put(planner, root)
        yield* guarded.index.put(planner, secret)
        yield* guarded.index.put(planner, open)
        const systems: Array<string> = []
        const scripted = PlannerTesting.scriptedModel({
          plan: {
            tasks: [
              PlannerTesting.leaf("Write introduction", "write an introduction about tea notes and the blend")
            ]
          },
          leaf: (task, system) => {
            systems.push(system)
            return `${task}: done`
          }
        })
        const events: Array<Planner.PlannerEvent> = []
        const result = yield* Planner.run("Write an introduction about tea", {
          model: scripted,
          ...guarded,
          conversation: root.meta.urn,
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        assert.deepStrictEqual(result.missing, [])
        const context = events.find((event) => event.type === "context")
        assert.strictEqual(context?.type, "context")
        if (context?.type !== "context") return
        assert.deepStrictEqual(context.withheld, [secret.meta.urn])
        assert.include(context.items, open.meta.urn)
        assert.notInclude(context.items, secret.meta.urn)
        assert.strictEqual(systems.length, 1)
        assert.include(systems[0]!, "green tea")
        assert.notInclude(systems[0]!, "bergamot")
        const task = result.tree.tasks[0]!
        assert.strictEqual(task.resource.assignment?.assistant, writer)
      })
  )

  it.live(
    "resumed after being cut short: what is done is read back, not re-run; the rest runs; a task not retryable is not run twice",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const plan = {
          tasks: [
            PlannerTesting.parent(
              "Research",
              [
                PlannerTesting.leaf("Find tea facts", "find facts and figures about tea"),
                PlannerTesting.leaf("Find tea sources", "look up sources on the history of tea")
              ],
              "find facts and sources about tea"
            ),
            { ...PlannerTesting.leaf("Send the report", "send the report to the reviewer"), retryable: false }
          ]
        }
        const cut = Deferred.makeUnsafe<void>()
        const first = PlannerTesting.scriptedModel({
          plan,
          leaf: (task) => (task === "Find tea facts" ? "Find tea facts: black and green" : { hang: true })
        })
        let message = ""
        const fiber = yield* Effect.forkChild(
          Planner.run("Research tea and send it", {
            model: first,
            ...world,
            election: anyone,
            onEvent: (event) =>
              Effect.sync(() => {
                if (event.type === "planned") message = event.tree.message
                if (event.type === "done" && event.title === "Find tea facts")
                  Deferred.doneUnsafe(cut, Effect.void)
              })
          })
        )
        // Bounded, so a run that failed before the leaf finished fails the test instead of hanging it.
        yield* Effect.raceFirst(
          Deferred.await(cut),
          Effect.flatMap(Fiber.join(fiber), () => Effect.die("the run ended before it was cut short"))
        )
        // The other two leaves are working (hung); the process dies here.
        yield* Effect.sleep("50 millis")
        yield* Fiber.interrupt(fiber)

        // Reopened: new events and index over what was stored.
        const engine = yield* Policy.allowAll
        const events = yield* ResourceEvents.makeMemory(engine)
        const index = ResourceIndex.make(world.store, engine, { events, vectors: world.vectors })
        const evaluations: Array<string> = []
        const second = PlannerTesting.scriptedModel({
          plan: { tasks: [] },
          verdict: (_, __, results) => {
            evaluations.push(results)
            return { successful: true, reason: "both found" }
          }
        })
        const seen: Array<Planner.PlannerEvent> = []
        const result = yield* Planner.resume(message, {
          model: second,
          index,
          events,
          election: anyone,
          onEvent: (event) => Effect.sync(() => seen.push(event))
        })
        const leaves = second.requests
          .map((request) => PlannerTesting.partOf(request.request))
          .flatMap((part) => (part.kind === "leaf" ? [part.task] : []))
        assert.deepStrictEqual(leaves, ["Find tea sources"], "only the unfinished, retryable leaf ran again")
        assert.isFalse(
          second.requests.some((request) => PlannerTesting.partOf(request.request).kind === "plan"),
          "not planned again"
        )
        // The supervisor read the finished leaf's output from the store.
        assert.match(evaluations[0]!, /## Find tea facts \(done\)\nFind tea facts: black and green/)
        assert.match(evaluations[0]!, /## Find tea sources \(done\)\nFind tea sources: done/)
        assert.isTrue(
          seen.some(
            (event) =>
              event.type === "done" &&
              event.title === "Find tea facts" &&
              event.before === true &&
              event.output === "Find tea facts: black and green"
          )
        )
        assert.deepStrictEqual(
          result.missing.map((task) => [task.title, task.reason]),
          [["Send the report", "interrupted before it finished; not retried: it is marked not retryable"]]
        )
        assert.deepStrictEqual(
          result.tasks.map((task) => [task.title, task.status]),
          [
            ["Research", "done"],
            ["Find tea facts", "done"],
            ["Find tea sources", "done"],
            ["Send the report", "failed"]
          ]
        )
        assert.match(result.answer, /^## Research\nboth found/)
      })
  )

  it.effect(
    "a leaf's stated facts reach the graph, named after its output, and a later leaf gets them with graph_query",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const graph = Graph.make()
        const found = PlannerTesting.scriptedModel({
          plan: { tasks: [PlannerTesting.leaf("Find the capital", "find facts about Portugal")] },
          leaf: () => "Lisbon is the capital.\nfact: Lisbon | capital of | Portugal"
        })
        const earlier = yield* Planner.run("Find the capital of Portugal", {
          model: found,
          ...world,
          graph,
          election: anyone
        })
        const output = (yield* world.store.findByPrefix(earlier.tree.tasks[0]!.urn)).find(
          (resource) => resource.meta.type === "message"
        )!
        assert.deepStrictEqual(graph.query({ subject: "lisbon" }), [
          { subject: "lisbon", predicate: "capital of", object: "Portugal", source: output.meta.urn }
        ])

        let calls = 0
        const asking = PlannerTesting.scriptedModel({
          plan: { tasks: [PlannerTesting.leaf("Answer", "find facts about the capital")] },
          // A schema-following model: null for what it leaves open.
          leaf: () =>
            calls++ === 0
              ? {
                  toolCalls: [
                    { name: "graph_query", arguments: '{"subject":"lisbon","predicate":null,"object":null}' }
                  ]
                }
              : "Lisbon, as the graph says."
        })
        const later = yield* Planner.run("What is the capital?", {
          model: asking,
          ...world,
          graph,
          election: anyone
        })
        assert.deepStrictEqual(later.missing, [])
        const leafRequests = asking.requests.filter((r) => PlannerTesting.partOf(r.request).kind === "leaf")
        assert.deepStrictEqual(
          leafRequests[0]!.request.tools?.map((tool) => tool.name),
          ["graph_query"]
        )
        const answered = Array.from(leafRequests[1]!.request.messages).find((m) => m.role === "tool")
        assert.isDefined(answered)
        assert.strictEqual(
          JSON.stringify(answered).includes(`lisbon capital of Portugal  (from ${output.meta.urn})`),
          true
        )
        // The registered tools are resources too.
        const tools = (yield* world.store.findByType("tool")) as Array<Resource.Tool>
        assert.deepStrictEqual(
          tools.map((tool) => tool.meta.name),
          ["graph_query"]
        )
      })
  )

  it.effect("the tools given to the planner are stored as tool resources, once", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      yield* PlannerTesting.registerAssistants(world.index, planner, team)
      const clock = Tool.make({
        name: "clock",
        description: "the time now",
        parameters: Schema.Struct({}),
        handler: () => Effect.succeed("noon")
      }) as Tool.Any
      const puts: Array<string> = []
      const counting = {
        ...world.index,
        put: (actor: string, resource: Resource.Resource) =>
          Effect.tap(world.index.put(actor, resource), () => Effect.sync(() => puts.push(resource.meta.type)))
      }
      for (let i = 0; i < 2; i++)
        yield* Planner.run("the time", {
          model: PlannerTesting.scriptedModel({ plan: { tasks: [PlannerTesting.leaf("Tell the time")] } }),
          ...world,
          index: counting,
          tools: [clock],
          graph: false,
          election: anyone
        })
      const tools = (yield* world.store.findByType("tool")) as Array<Resource.Tool>
      assert.deepStrictEqual(
        tools.map((tool) => [tool.meta.name, tool.purpose]),
        [["clock", "the time now"]]
      )
      assert.deepStrictEqual(tools[0]!.parameters, clock.definition.parameters)
      assert.strictEqual(puts.filter((type) => type === "tool").length, 1, "stored once, not again unchanged")
    })
  )

  it.effect(
    "one write per state change, no task read back before its write, and what the run wrote listed from what it holds",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const writes: Array<Array<string>> = []
        const taskReads: Array<string> = []
        const storeListings: Array<string> = []
        const heldListings: Array<string> = []
        const record = (resources: ReadonlyArray<Resource.Resource>) =>
          Effect.sync(() =>
            writes.push(resources.map((r) => `${r.meta.type}${"status" in r ? `:${r.status}` : ""}`))
          )
        const counting: ResourceIndex.Service = {
          ...world.index,
          get: (actor, urn) =>
            Effect.tap(world.index.get(actor, urn), (found) =>
              Effect.sync(() => {
                if (found.meta.type === "task" && actor === (found as Resource.Task).assignment?.assistant)
                  taskReads.push(found.meta.name)
              })
            ),
          findReadable: (actor, urn) =>
            Effect.tap(world.index.findReadable(actor, urn), () =>
              Effect.sync(() => storeListings.push(urn))
            ),
          // What the run holds is what the store holds: the same answer, read both ways.
          filterReadable: (actor, urn, held) =>
            Effect.tap(world.index.filterReadable(actor, urn, held), (fromHeld) =>
              Effect.map(world.index.findReadable(actor, urn), (fromStore) => {
                heldListings.push(urn)
                assert.deepStrictEqual(fromHeld, fromStore)
              })
            ),
          put: (actor, resource) => Effect.tap(world.index.put(actor, resource), () => record([resource])),
          putMany: (actor, resources) =>
            Effect.tap(world.index.putMany(actor, resources), () => record(resources))
        }
        const result = yield* Planner.run("Write about tea", {
          model: PlannerTesting.scriptedModel({
            plan: {
              tasks: [
                PlannerTesting.parent("Research", [
                  PlannerTesting.leaf("Find tea facts"),
                  PlannerTesting.leaf("Find tea sources")
                ]),
                PlannerTesting.leaf("Write the article")
              ]
            }
          }),
          ...world,
          index: counting,
          graph: false,
          election: anyone
        })
        assert.deepStrictEqual(result.missing, [])
        // The plan whole, then every assignment, in one write each.
        assert.deepStrictEqual(writes[0], [
          "conversation",
          "message",
          "task:pending",
          "task:pending",
          "task:pending",
          "task:pending"
        ])
        assert.deepStrictEqual(writes[1], ["task:pending", "task:pending", "task:pending", "task:pending"])
        // Then two writes a task: it started; it is done, with its output in the same write.
        const rest = writes.slice(2)
        assert.strictEqual(rest.length, 8)
        assert.strictEqual(rest.filter((write) => write.join() === "task:running").length, 4)
        assert.strictEqual(rest.filter((write) => write.join() === "message,task:done").length, 4)
        // A task's assistant never reads it back before writing its new state.
        assert.deepStrictEqual(taskReads, [])
        // In the conversation it began, the run lists what it wrote from what it holds, not
        // from the store: three contexts, one evaluation, the answer.
        assert.deepStrictEqual(storeListings, [])
        assert.strictEqual(heldListings.length, 5)
      })
  )
})
