import { assert, describe, it } from "@effect/vitest"
import { Message, TokenCounter } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { CedarPolicy, Policy, Resource, ResourceIndex, Urn, VectorIndex } from "@noema/resources"
import { Effect } from "effect"
import * as Assistants from "../src/Assistants.js"
import * as ContextWindow from "../src/ContextWindow.js"
import * as Graph from "../src/Graph.js"
import * as Planner from "../src/Planner.js"
import * as TaskPlanner from "../src/TaskPlanner.js"
import * as TaskTree from "../src/TaskTree.js"
import * as PlannerTesting from "../src/testing.js"

const planner = "cld:assistant.planner"
const { leaf, parent } = PlannerTesting

const deep = (depth: number): TaskTree.TaskSpec =>
  depth === 1 ? leaf("bottom") : parent(`level ${depth}`, [deep(depth - 1)])

describe("TaskTree", () => {
  it("names every way a plan breaks the limits", () => {
    const limits = { maxDepth: 2, maxChildren: 2, maxTasks: 4 }
    assert.deepStrictEqual(TaskTree.problems({ tasks: [leaf("a"), parent("b", [leaf("c")])] }, limits), [])
    assert.deepStrictEqual(TaskTree.problems({ tasks: [] }, limits), ["the plan has no tasks"])
    assert.deepStrictEqual(TaskTree.problems({ tasks: [deep(3)] }, limits), [
      `"level 3" > "level 2" > "bottom" is at depth 3; at most 2 levels are allowed`
    ])
    assert.deepStrictEqual(TaskTree.problems({ tasks: [leaf("a"), leaf("a"), leaf("b")] }, limits), [
      "the plan has 3 tasks; at most 2 are allowed",
      'the plan: two tasks are titled "a"'
    ])
    assert.deepStrictEqual(
      TaskTree.problems({ tasks: [parent("p", [leaf("1"), leaf("2")]), parent("q", [leaf("3")])] }, limits),
      ["the plan has 5 tasks; at most 4 are allowed"]
    )
  })
})

describe("TaskPlanner", () => {
  it.effect("the whole tree comes in one tool call whose parameters are the recursive Schema", () =>
    Effect.gen(function* () {
      const model = PlannerTesting.scriptedModel({ plan: { tasks: [deep(3)] } })
      const plan = yield* TaskPlanner.plan(model, "go deep")
      assert.deepStrictEqual(plan, { tasks: [deep(3)] })
      const request = model.requests[0]!.request
      assert.deepStrictEqual(
        request.tools?.map((tool) => tool.name),
        ["create_tasks"]
      )
      const parameters = JSON.stringify(request.tools?.[0]?.parameters)
      // Subtasks refer back to the task's own definition: any depth, one definition.
      assert.include(parameters, '"$defs"')
      assert.include(parameters, '"$ref":"#/$defs/Task"')
    })
  )

  it.effect("an invalid payload gets one repair round listing its problems", () =>
    Effect.gen(function* () {
      const model = PlannerTesting.scriptedModel({
        plan: (_, attempt) =>
          attempt === 0 ? { tasks: [deep(5)] } : { tasks: [parent("fixed", [leaf("one"), leaf("two")])] }
      })
      const plan = yield* TaskPlanner.plan(model, "plan it", {
        limits: { maxDepth: 3, maxChildren: 4, maxTasks: 10 }
      })
      assert.strictEqual(plan.tasks[0]?.title, "fixed")
      assert.strictEqual(model.requests.length, 2)
      const repair = model.requests[1]!.messages.map(Message.text).join("\n")
      assert.include(repair, "is at depth 4; at most 3 levels are allowed")
    })
  )

  it.effect("a schema-following model's plan, null for every optional field, is accepted as it is", () =>
    Effect.gen(function* () {
      // What a strict-mode model sends: every key present, null for the optional ones
      // (declared `anyOf [string, null]` / `anyOf [boolean, null]`).
      const strict = {
        tasks: [
          {
            title: "Send the report",
            purpose: "send the report to the team",
            instructions: "Send it.",
            applicability: null,
            evaluation: "the report is sent",
            retryable: null,
            subtasks: []
          }
        ]
      }
      const world = yield* PlannerTesting.world()
      const model = PlannerTesting.scriptedModel({ plan: strict })
      const tree = yield* TaskPlanner.planAndPersist({
        model,
        index: world.index,
        actor: planner,
        request: "hi"
      })
      assert.strictEqual(model.requests.length, 1, "accepted without a repair round")
      const parameters = JSON.stringify(model.requests[0]!.request.tools?.[0]?.parameters)
      assert.include(parameters, '"applicability":{"anyOf":[{"type":"string"},{"type":"null"}]')
      const task = (yield* world.store.get(tree.tasks[0]!.urn)) as Resource.Task
      assert.isFalse("applicability" in task, "null is the field left out")
      assert.isFalse("retryable" in task)
    })
  )

  it.effect("a second invalid payload fails, saying why", () =>
    Effect.gen(function* () {
      const model = PlannerTesting.scriptedModel({
        plan: (_, attempt) => (attempt === 0 ? "not even JSON" : { tasks: [{ title: "no purpose" }] })
      })
      const error = yield* Effect.flip(TaskPlanner.plan(model, "plan it"))
      assert.strictEqual(error._tag, "PlanningError")
      assert.match(error.message, /^planning failed: /)
      assert.match(error.message, /purpose/)
      assert.strictEqual(model.requests.length, 2)
    })
  )

  it.effect("the tree is persisted under the request's message, siblings numbered", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const model = PlannerTesting.scriptedModel({
        plan: { tasks: [parent("p", [leaf("same"), parent("q", [leaf("same")])]), leaf("r")] }
      })
      const tree = yield* TaskPlanner.planAndPersist({
        model,
        index: world.index,
        actor: planner,
        request: "hi"
      })
      const message = (yield* world.store.get(tree.message)) as Resource.Message
      assert.strictEqual(message.content, "hi")
      assert.strictEqual(Urn.parent(tree.message), tree.conversation)
      const stored = yield* world.store.findByPrefix(tree.message)
      assert.deepStrictEqual(stored.map((resource) => resource.meta.name).sort(), [
        "1. p",
        "1. same",
        "1. same",
        "2. q",
        "2. r"
      ])
      const q = tree.tasks[0]!.subtasks[1]!
      assert.strictEqual(q.depth, 2)
      assert.strictEqual(Urn.parent(q.subtasks[0]!.urn), q.urn)
      assert.strictEqual(
        (yield* world.store.get(q.urn) as Effect.Effect<Resource.Task, never>).status,
        "pending"
      )
    })
  )
})

describe("Assistants.elect", () => {
  const team = [
    {
      name: "translator",
      purpose: "translate text between languages",
      examples: ["translate this to French"]
    },
    { name: "accountant", purpose: "compute taxes, invoices and budgets", examples: ["compute the VAT"] }
  ]
  const task = (purpose: string) =>
    TaskPlanner.taskResource("cld:conversation.c/message.m", leaf(purpose, purpose), 1)

  it.effect("elects the most similar assistant and keeps the scores", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const [translator, accountant] = yield* PlannerTesting.registerAssistants(world.index, planner, team)
      const assignment = yield* Assistants.elect(
        world.index,
        planner,
        task("translate the invoice text to French")
      )
      assert.strictEqual(assignment.assistant, translator!.meta.urn)
      assert.strictEqual(assignment.by, "similarity")
      assert.deepStrictEqual(
        assignment.candidates.map((c) => c.assistant),
        [translator!.meta.urn, accountant!.meta.urn]
      )
      assert.isAbove(assignment.candidates[0]!.score, assignment.candidates[1]!.score)
    })
  )

  it.effect(
    "below the threshold: a default, the model's choice, or a clear failure; never a random pick",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        const [, accountant] = yield* PlannerTesting.registerAssistants(world.index, planner, team)
        const unrelated = task("paint a watercolour landscape")
        const refused = yield* Effect.flip(
          Assistants.elect(world.index, planner, unrelated, { threshold: 0.5 })
        )
        assert.match(
          refused.message,
          /^no assistant fits "1\. paint a watercolour landscape": the best, (translator|accountant), scored 0\.\d{3}, below the threshold 0\.5/
        )

        const byDefault = yield* Assistants.elect(world.index, planner, unrelated, {
          threshold: 0.5,
          fallback: { kind: "default", assistant: "cld:assistant.generalist" }
        })
        assert.strictEqual(byDefault.assistant, "cld:assistant.generalist")
        assert.strictEqual(byDefault.by, "default")
        assert.strictEqual(byDefault.candidates.length, 2)

        const chooser = ScriptedChatModel.make({ replies: ['{"assistant": 2, "reason": "money"}'] })
        const byModel = yield* Assistants.elect(world.index, planner, unrelated, {
          threshold: 0.5,
          fallback: { kind: "model", model: chooser }
        })
        assert.strictEqual(byModel.by, "model")
        assert.strictEqual(byModel.assistant, byModel.candidates[1]!.assistant)
        assert.oneOf(
          accountant!.meta.urn,
          byModel.candidates.map((c) => c.assistant)
        )

        const wrong = ScriptedChatModel.make({ replies: ['{"assistant": 7, "reason": "?"}'] })
        const invented = yield* Effect.flip(
          Assistants.elect(world.index, planner, unrelated, {
            threshold: 0.5,
            fallback: { kind: "model", model: wrong }
          })
        )
        assert.match(invented.message, /chose assistant 7 .* not one of the 2 offered/)
      })
  )

  it.effect("an assistant the electing actor may not read is never a candidate, nor a default", () =>
    Effect.gen(function* () {
      // A URN is its parent, type and name's hash: the translator's is known before it is stored.
      const translator = Resource.make("assistant", { name: "translator" }).meta.urn
      const policy = yield* CedarPolicy.make(`
        @id("everyone")
        permit (principal, action, resource);
        @id("planner-not-translator")
        forbid (principal == Noema::Actor::"${planner}", action == Noema::Action::"get", resource == Noema::Resource::"${translator}");
      `)
      const world = yield* PlannerTesting.world(policy)
      const [registered, accountant] = yield* PlannerTesting.registerAssistants(world.index, planner, team)
      assert.strictEqual(registered!.meta.urn, translator)
      const french = task("translate this text to French")
      const assignment = yield* Assistants.elect(world.index, planner, french, { threshold: -1 })
      assert.strictEqual(assignment.assistant, accountant!.meta.urn)
      assert.deepStrictEqual(
        assignment.candidates.map((c) => c.assistant),
        [accountant!.meta.urn]
      )
      // Another actor, whom the policy lets read it, gets the translator for the same task.
      const other = yield* Assistants.elect(world.index, "cld:assistant.other", french)
      assert.strictEqual(other.assistant, translator)
      const refused = yield* Effect.flip(
        Assistants.elect(world.index, planner, french, {
          threshold: 2,
          fallback: { kind: "default", assistant: translator }
        })
      )
      assert.match(
        refused.message,
        /^the default assistant cld:assistant\.\w+ cannot be elected for "1\. translate/
      )
      const named = yield* Effect.flip(
        Assistants.elect(world.index, planner, french, {
          threshold: 2,
          fallback: {
            kind: "model",
            model: ScriptedChatModel.make({ replies: ['{"assistant": 3, "reason": "?"}'] })
          }
        })
      )
      assert.match(named.message, /chose assistant 3 .* not one of the 1 offered \(accountant\)$/)
    })
  )

  it.effect("with no assistant registered, it says so", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const error = yield* Effect.flip(Assistants.elect(world.index, planner, task("anything")))
      assert.match(error.message, /none is registered/)
    })
  )
})

/** Where the tests' similar chunks live: stored first, as a store refuses a resource whose parent is missing. */
const library = Resource.decode({
  meta: { urn: "cld:conversation.library", name: "library", type: "conversation", hash: "library" }
})

describe("ContextWindow.build", () => {
  const setup = Effect.gen(function* () {
    const world = yield* PlannerTesting.world()
    const conversation = Resource.make("conversation", { name: "c", title: "tea research" })
    const messages = [1, 2, 3].map((i) =>
      Resource.make("message", {
        name: `2026-01-0${i} note`,
        parent: conversation.meta.urn,
        role: "user",
        content: `history item ${i}: ${"words ".repeat(20)}`
      })
    )
    const request = messages[2]!
    const task = TaskPlanner.taskResource(request.meta.urn, leaf("brew tea", "brew green tea"), 1)
    const similar = Resource.make("chunk", {
      name: "brewing",
      parent: "cld:conversation.library",
      text: "brew green tea at 80 degrees for two minutes"
    })
    for (const resource of [conversation, ...messages, task, library, similar])
      yield* world.index.put(planner, resource)
    return { world, conversation, messages, request, task, similar }
  })

  it.effect("path first, then similar resources, then the newest history, within the budget", () =>
    Effect.gen(function* () {
      const { world, conversation, messages, request, task, similar } = yield* setup
      const window = yield* ContextWindow.build({
        index: world.index,
        actor: planner,
        task,
        budget: 10_000
      })
      assert.deepStrictEqual(
        window.items.map((item) => [item.source, item.urn]),
        [
          ["path", conversation.meta.urn],
          ["path", request.meta.urn],
          ["similar", similar.meta.urn],
          ["history", messages[1]!.meta.urn],
          ["history", messages[0]!.meta.urn]
        ]
      )
      assert.deepStrictEqual(window.dropped, [])
      assert.strictEqual(
        window.tokens,
        window.items.reduce((sum, item) => sum + item.tokens, 0)
      )
    })
  )

  it.effect(
    "history: the newest messages, newest first (equal names as listed), whatever the listing's order",
    () =>
      Effect.gen(function* () {
        const { world, conversation, request, task } = yield* setup
        const parent = conversation.meta.urn
        const message = (name: string, id: string) =>
          Resource.decode({
            meta: { urn: `${parent}/message.${id}`, parent, name, type: "message", hash: id },
            role: "user",
            content: `note ${id}`
          })
        // Listed out of order, two pairs named the same, the request (on the path) among them.
        const listed = [
          message("2026-01-05 note", "e"),
          message("2026-01-02 note", "b"),
          message("2026-01-08 note", "h1"),
          request,
          message("2026-01-01 note", "a"),
          message("2026-01-08 note", "h2"),
          message("2026-01-07 note", "g"),
          message("2026-01-03 note", "c1"),
          message("2026-01-03 note", "c2"),
          conversation
        ]
        const reference = (history: number) =>
          listed
            .filter((resource) => resource.meta.type === "message" && resource.meta.urn !== request.meta.urn)
            .sort((a, b) => (a.meta.name < b.meta.name ? 1 : a.meta.name > b.meta.name ? -1 : 0))
            .slice(0, history)
            .map((resource) => resource.meta.urn)
        for (const history of [0, 1, 2, 3, 5, 7, 8, 100, 2.5, -2, Number.POSITIVE_INFINITY]) {
          const window = yield* ContextWindow.build({
            index: world.index,
            actor: planner,
            task,
            budget: 100_000,
            similar: 0,
            history,
            findReadable: () => Effect.succeed({ resources: listed, withheld: [] })
          })
          assert.deepStrictEqual(
            window.items.filter((item) => item.source === "history").map((item) => item.urn),
            reference(history),
            `history ${history}`
          )
        }
      })
  )

  it.effect("a counter that cannot count joined texts measures the same window", () =>
    Effect.gen(function* () {
      const { world, task } = yield* setup
      const { countJoined: _, ...plain } = TokenCounter.estimate
      for (const budget of [10_000, 60, 0]) {
        const joined = yield* ContextWindow.build({ index: world.index, actor: planner, task, budget })
        const whole = yield* ContextWindow.build({
          index: world.index,
          actor: planner,
          task,
          budget,
          counter: plain
        })
        assert.deepStrictEqual(whole, joined)
        for (const item of joined.items) {
          assert.strictEqual(item.tokens, TokenCounter.estimateText(item.text))
          assert.strictEqual(item.text, ContextWindow.render(yield* world.index.get(planner, item.urn)))
        }
      }
    })
  )

  it.effect("over budget: what does not fit is dropped and reported, or summarised by the model", () =>
    Effect.gen(function* () {
      const { world, task, messages } = yield* setup
      const full = yield* ContextWindow.build({
        index: world.index,
        actor: planner,
        task,
        budget: 10_000
      })
      const budget = full.items[0]!.tokens + full.items[1]!.tokens + full.items[2]!.tokens + 5
      const tight = yield* ContextWindow.build({
        index: world.index,
        actor: planner,
        task,
        budget
      })
      assert.strictEqual(tight.items.length, 3)
      assert.deepStrictEqual(
        tight.dropped.map((item) => [item.source, item.urn]),
        [
          ["history", messages[1]!.meta.urn],
          ["history", messages[0]!.meta.urn]
        ]
      )
      assert.isAtMost(tight.tokens, budget)
      assert.strictEqual(
        ContextWindow.toText(tight),
        `${tight.items.map((item) => item.text).join("\n\n")}\n\n(2 more resources did not fit and were left out.)`
      )
      assert.strictEqual(ContextWindow.toText(full), full.items.map((item) => item.text).join("\n\n"))
      assert.strictEqual(ContextWindow.toText({ ...full, items: [] }), "")

      const summarizer = ScriptedChatModel.make({ fallback: "older notes" })
      const roomy = budget - 5 + full.items[3]!.tokens - 1
      const summarised = yield* ContextWindow.build({
        index: world.index,
        actor: planner,
        task,
        budget: roomy,
        summarizer
      })
      const summaries = summarised.items.filter((item) => item.summarized === true)
      assert.isAbove(summaries.length, 0)
      assert.match(summaries[0]!.text, /, summarised\]\nolder notes$/)
      assert.isAtMost(summarised.tokens, roomy)
    })
  )
})

describe("ContextWindow.build and the policy", () => {
  it.effect("a similar resource the actor may not read takes no slot and is not named", () =>
    Effect.gen(function* () {
      const hidden = Resource.make("chunk", {
        name: "hidden",
        parent: "cld:conversation.library",
        text: "brew green tea at 80 degrees for two minutes"
      })
      const policy = yield* CedarPolicy.make(`
        @id("everyone")
        permit (principal, action, resource);
        @id("not-hidden")
        forbid (principal, action == Noema::Action::"get", resource == Noema::Resource::"${hidden.meta.urn}");
      `)
      const world = yield* PlannerTesting.world(policy)
      const readable = Resource.make("chunk", {
        name: "readable",
        parent: "cld:conversation.library",
        text: "green tea is brewed cooler than black tea"
      })
      const task = TaskPlanner.taskResource(
        "cld:conversation.c/message.m",
        leaf("brew tea", "brew green tea at 80 degrees"),
        1
      )
      for (const resource of [library, hidden, readable]) yield* world.index.put(planner, resource)
      const window = yield* ContextWindow.build({
        index: world.index,
        actor: planner,
        task,
        budget: 10_000,
        similar: 1
      })
      assert.deepStrictEqual(
        window.items.filter((item) => item.source === "similar").map((item) => item.urn),
        [readable.meta.urn]
      )
      assert.notInclude(window.withheld, hidden.meta.urn)
    })
  )
})

describe("ContextWindow.build, failures", () => {
  it.effect(
    "a vector index that fails fails the window (it is not quietly left without similar resources)",
    () =>
      Effect.gen(function* () {
        const world = yield* PlannerTesting.world()
        const task = TaskPlanner.taskResource("cld:conversation.c/message.m", leaf("x"), 1)
        const broken = {
          ...world.vectors,
          search: () => Effect.fail(new VectorIndex.VectorIndexError({ message: "the index is gone" }))
        }
        const index = ResourceIndex.make(world.store, yield* Policy.allowAll, { vectors: broken })
        const error = yield* Effect.flip(ContextWindow.build({ index, actor: planner, task, budget: 100 }))
        assert.strictEqual(error.message, "the index is gone")
      })
  )
})

describe("Graph", () => {
  it.effect("statements extracted from a text resource are queried through the graph_query tool", () =>
    Effect.gen(function* () {
      const graph = Graph.make()
      const chunk = Resource.make("chunk", {
        name: "tea",
        text: "Green tea comes from China. Matcha is green tea."
      })
      const model = ScriptedChatModel.make({
        replies: [
          JSON.stringify({
            triples: [
              { subject: "Green tea", predicate: "comes from", object: "China" },
              { subject: "matcha", predicate: "is a", object: "green tea" }
            ]
          })
        ]
      })
      assert.strictEqual(yield* graph.extract(model, chunk, chunk.text), 2)
      assert.strictEqual(graph.size(), 2)
      assert.deepStrictEqual(graph.query({ subject: "green tea" }), [
        { subject: "green tea", predicate: "comes from", object: "China", source: chunk.meta.urn }
      ])
      assert.deepStrictEqual(
        graph.query({ predicate: "is a" }).map((m) => m.subject),
        ["matcha"]
      )
      const answer = yield* graph.tool.handler({ object: "China" }) as Effect.Effect<string>
      assert.strictEqual(answer, `green tea comes from China  (from ${chunk.meta.urn})`)
      assert.strictEqual(
        yield* graph.tool.handler({ subject: "coffee" }) as Effect.Effect<string>,
        "No matching statements."
      )
    })
  )

  it.effect("a model answer that is not statements fails with where it came from", () =>
    Effect.gen(function* () {
      const graph = Graph.make()
      const chunk = Resource.make("chunk", { name: "x", text: "x" })
      const model = ScriptedChatModel.make({ replies: ["no", "still no"] })
      const error = yield* Effect.flip(graph.extract(model, chunk, chunk.text))
      assert.match(error.message, new RegExp(`^extracting statements from ${chunk.meta.urn}: `))
      assert.strictEqual(graph.size(), 0)
    })
  )
})

describe("limits", () => {
  it.effect("the model-call budget stops work and the answer says which limit and what is missing", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      yield* PlannerTesting.registerAssistants(world.index, planner, [
        { name: "worker", purpose: "do the steps", examples: ["do step one"] }
      ])
      const model = PlannerTesting.scriptedModel({
        plan: {
          tasks: [
            leaf("step one", "do step one"),
            leaf("step two", "do step two"),
            leaf("step three", "do step three")
          ]
        }
      })
      const result = yield* Planner.run("three steps", {
        model,
        ...world,
        limits: { maxModelCalls: 3, parallel: 1 }
      })
      assert.strictEqual(result.limit, "the limit of 3 model calls was reached")
      assert.strictEqual(result.modelCalls, 3)
      assert.strictEqual(model.requests.length, 3)
      assert.deepStrictEqual(
        result.tasks.map((task) => task.status),
        ["done", "done", "failed"]
      )
      assert.match(
        result.answer,
        /## What is missing\n- step three: .*planner budget: the limit of 3 model calls was reached/
      )
      assert.match(result.answer, /Work stopped: the limit of 3 model calls was reached\.$/)
    })
  )

  it.effect("a plan beyond the limits is refused before anything runs", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const model = PlannerTesting.scriptedModel({ plan: { tasks: [deep(4)] } })
      const error = yield* Effect.flip(Planner.run("too deep", { model, ...world, limits: { maxDepth: 2 } }))
      assert.strictEqual(error._tag, "PlannerError")
      assert.match(error.message, /at most 2 levels are allowed/)
      assert.deepStrictEqual(yield* world.store.findByType("task"), [])
    })
  )
})
