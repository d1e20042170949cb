import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore } from "@noema/session"
import { Effect, Result, Schema } from "effect"
import * as Routine from "../src/Routine.js"
import * as RoutineConformance from "../src/RoutineConformance.js"
import type { RoutineEvent } from "../src/RoutineContext.js"
import * as RoutineStore from "../src/RoutineStore.js"
import * as TaskVerdict from "../src/TaskVerdict.js"
import * as Variables from "../src/Variables.js"
import * as WorkBreakdown from "../src/WorkBreakdown.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-routines-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const tool = (name: string) =>
  Tool.make({
    name,
    description: `the ${name} tool`,
    parameters: Schema.Struct({ value: Schema.String }),
    handler: ({ value }) => Effect.succeed(`${name}:${value}`)
  }) as Tool.Any

const document = `variables: [thread.topic]
skills:
  - id: ops
    system: "Operate on {{thread.topic}}."
    tools: [alpha]
    scenarios:
      - id: deploy
        tools: [beta]
        tasks:
          - { id: build, title: Build, tools: [gamma] }
      - id: other
        tasks:
          - { id: look, title: Look }
  - id: misc
    tools: [delta]
    scenarios:
      - id: m
        tasks:
          - { id: x, title: X }
`

describe("Routine", () => {
  it.effect("gives a chain's agent only the tools and the prompt of its chain", () =>
    Effect.gen(function* () {
      const breakdown = WorkBreakdown.parse(document, "ops.yaml")
      const model = ScriptedChatModel.make({
        replies: [
          { toolCalls: [{ name: "gamma", arguments: { value: "v" } }] },
          RoutineConformance.finish("built"),
          RoutineConformance.finish("looked")
        ]
      })
      const routine = Routine.make({
        breakdown,
        model,
        store: RoutineStore.memory(),
        tools: ["alpha", "beta", "gamma", "delta"].map(tool),
        system: "You are careful.",
        sources: Variables.values({ "thread.topic": "prod" })
      })
      yield* routine.runChain(WorkBreakdown.select(breakdown, "ops/deploy")[0]!)
      yield* routine.runChain(WorkBreakdown.select(breakdown, "ops/other")[0]!)
      const names = model.requests.map((request) =>
        (request.request.tools ?? []).map((definition) => definition.name)
      )
      assert.deepStrictEqual(names, [
        ["alpha", "beta", "gamma", "complete_task"],
        ["alpha", "beta", "gamma", "complete_task"],
        ["alpha", "complete_task"]
      ])
      assert.deepStrictEqual(
        model.requests[0]!.messages[0],
        Message.system(`You are careful.\n\n${TaskVerdict.instructions("tool-call")}\n\nOperate on prod.`)
      )
      // Tasks with tools are not told they have none.
      assert.notInclude(Message.text(model.requests[0]!.messages.at(-1)!), "no tools")
      const toolResult = model.requests[1]!.messages.find((message) => message.role === "tool")
      assert.strictEqual(toolResult === undefined ? undefined : Message.text(toolResult), "gamma:v")
    })
  )

  it.effect("runs a work item outside any chain as a plain turn, keeping no state", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const model = ScriptedChatModel.make({ replies: ["hello back"] })
      const routine = Routine.make({ breakdown: RoutineConformance.breakdown(), id: "r", model, store })
      const result = yield* routine.execute({ type: "plain", messages: [Message.user("hello")] })
      assert.strictEqual(result.type, "plain")
      assert.deepStrictEqual(result.type === "plain" ? result.messages.map(Message.text) : [], ["hello back"])
      assert.deepStrictEqual(yield* store.list("r"), [])
      assert.deepStrictEqual(routine.active, [])
    })
  )

  it.effect("keeps a chain's context while it has tasks left, and drops it when the goal is complete", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ fallback: RoutineConformance.finish("ok") })
      const routine = Routine.make({
        breakdown: RoutineConformance.breakdown(),
        id: "r",
        model,
        store: RoutineStore.memory(),
        sources: RoutineConformance.sources
      })
      const chain = WorkBreakdown.select(RoutineConformance.breakdown(), "report/yearly")[0]!
      const first = yield* routine.execute({ type: "goal", chain })
      assert.deepStrictEqual(first, {
        type: "task",
        chain: "report/yearly",
        task: "collect",
        goalComplete: false
      })
      assert.deepStrictEqual(routine.active, ["report/yearly"])
      const context = yield* routine.ensureContext(chain)
      assert.isTrue(context.matchesGoalChain(chain))
      assert.isFalse(
        context.matchesGoalChain(WorkBreakdown.select(RoutineConformance.breakdown(), "quarterly")[0]!)
      )
      const second = yield* routine.execute({ type: "goal", chain })
      assert.deepStrictEqual(second, {
        type: "task",
        chain: "report/yearly",
        task: "write",
        goalComplete: true
      })
      assert.deepStrictEqual(routine.active, [])
      // The preamble was sent once, in the first request only as part of the history.
      const preambles = model.requests[1]!.messages.filter(
        (message) => Message.text(message) === "The yearly report."
      )
      assert.strictEqual(preambles.length, 1)
    })
  )
})

describe("task verdicts", () => {
  const chain = () => WorkBreakdown.select(RoutineConformance.breakdown(), "report/yearly")[0]!

  it.effect("a task whose chain names no tools is told so, not that tools are turned off", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ fallback: RoutineConformance.finish("ok") })
      yield* Routine.make({
        breakdown: RoutineConformance.breakdown(),
        id: "r",
        model,
        store: RoutineStore.memory(),
        tools: ["alpha"].map(tool),
        sources: RoutineConformance.sources
      }).runChain(chain())
      const task = Message.text(model.requests[0]!.messages.at(-1)!)
      assert.strictEqual(
        task,
        "Task collect: Collect the quarters\n\nThis task has no tools: do it with what this conversation holds."
      )
      const everything = model.requests.flatMap((request) => request.messages.map(Message.text)).join("\n")
      assert.notInclude(everything, "--no-tools")
      assert.notInclude(everything, "turned off")
      assert.deepStrictEqual(
        (model.requests[0]!.request.tools ?? []).map((definition) => definition.name),
        ["complete_task"]
      )
    })
  )

  it.effect("a model that cannot call tools gives a structured verdict after its answer", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const events: Array<RoutineEvent> = []
      const model = ScriptedChatModel.make({
        replies: [
          "Collected Q1 to Q4.",
          JSON.stringify({ done: true, summary: "the four quarters are collected" }),
          "I cannot write the year: Q4 is missing.",
          JSON.stringify({ done: false, summary: "Q4 is missing" })
        ]
      })
      const routine = Routine.make({
        breakdown: RoutineConformance.breakdown(),
        id: "r",
        model,
        store,
        sources: RoutineConformance.sources,
        verdict: "structured-output",
        onEvent: (event) => Effect.sync(() => events.push(event))
      })
      yield* routine.runChain(chain())
      assert.strictEqual(model.requests.length, 4)
      // The answers are plain turns without tools; the verdicts are asked for with a JSON Schema.
      assert.strictEqual(model.requests[0]!.request.tools, undefined)
      assert.strictEqual(model.requests[1]!.request.responseFormat?.type, "json-schema")
      assert.strictEqual(
        Message.text(model.requests[1]!.messages.at(-1)!),
        TaskVerdict.questionText("collect")
      )
      const stored = (yield* store.load("r", "report/yearly"))!
      assert.deepStrictEqual(
        stored.completed.map((entry) => [
          entry.task,
          entry.source,
          entry.summary,
          Message.text(entry.evidence)
        ]),
        [["collect", "structured-output", "the four quarters are collected", "Collected Q1 to Q4."]]
      )
      assert.deepStrictEqual(
        stored.open.map((entry) => [entry.task, entry.reason]),
        [["write", "Q4 is missing"]]
      )
      assert.strictEqual(stored.status, "active")
      assert.deepStrictEqual(
        events.filter((event) => event.type === "task-open"),
        [{ type: "task-open", chain: "report/yearly", task: "write", reason: "Q4 is missing" }]
      )
    })
  )

  it.effect("a verdict that never matches leaves the task open, not confirmed", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const model = ScriptedChatModel.make({ replies: ["Collected.", "yes", "yes, done"] })
      const result = yield* Routine.make({
        breakdown: RoutineConformance.breakdown(),
        id: "r",
        model,
        store,
        sources: RoutineConformance.sources,
        verdict: "structured-output"
      }).step(chain())
      assert.deepStrictEqual(result, {
        type: "task",
        chain: "report/yearly",
        task: "collect",
        openReason: TaskVerdict.notConfirmed,
        goalComplete: false
      })
    })
  )

  it.effect("a complete_task call with bad arguments does not complete the task", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const model = ScriptedChatModel.make({
        replies: [
          { toolCalls: [{ name: "complete_task", arguments: { done: "yes" } }] },
          "Sorry.",
          "Still sorry."
        ]
      })
      const result = yield* Routine.make({
        breakdown: RoutineConformance.breakdown(),
        id: "r",
        model,
        store,
        sources: RoutineConformance.sources
      }).step(chain())
      assert.strictEqual(result.type === "task" ? result.openReason : undefined, TaskVerdict.notConfirmed)
      assert.strictEqual(model.requests.length, 3)
    })
  )

  it("refuses a tool of its own named complete_task", () => {
    assert.throws(
      () =>
        Routine.make({
          breakdown: RoutineConformance.breakdown(),
          model: ScriptedChatModel.make(),
          store: RoutineStore.memory(),
          tools: [tool("complete_task")]
        }),
      /may not include "complete_task"/
    )
  })
})

describe("resuming", () => {
  it.effect("tells the overview once when resumed again before another task was done", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const chain = WorkBreakdown.select(RoutineConformance.breakdown(), "report/quarterly")[0]!
      const make = (model: ScriptedChatModel.ScriptedChatModel) =>
        Routine.make({
          breakdown: RoutineConformance.breakdown(),
          id: "r",
          model,
          store,
          sources: RoutineConformance.sources
        })
      yield* make(ScriptedChatModel.make({ replies: [RoutineConformance.finish("figures")] })).step(chain)
      // Two resumes that only set up (as if killed before the next task was saved).
      yield* make(ScriptedChatModel.make()).ensureContext(chain)
      yield* make(ScriptedChatModel.make()).ensureContext(chain)
      const model = ScriptedChatModel.make({ fallback: RoutineConformance.finish("ok") })
      yield* make(model).runChain(chain)
      const marks = model.requests[0]!.messages.map((message) => message.metadata?.routine)
      assert.deepStrictEqual(marks, [
        undefined,
        "skill-preamble",
        "scenario-preamble",
        "task",
        undefined,
        undefined,
        "overview",
        "task"
      ])
    })
  )
})

describe("two runs of one chain", () => {
  it.effect("the one that saves second is refused instead of overwriting the other's work", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const chain = WorkBreakdown.select(RoutineConformance.breakdown(), "report/yearly")[0]!
      const make = () =>
        Routine.make({
          breakdown: RoutineConformance.breakdown(),
          id: "r",
          model: ScriptedChatModel.make({ fallback: RoutineConformance.finish("ok") }),
          store,
          sources: RoutineConformance.sources
        })
      const first = make()
      const second = make()
      yield* first.ensureContext(chain)
      // The second reads what the first saved; the first's copy is now behind.
      yield* second.ensureContext(chain)
      const refused = yield* Effect.flip(first.step(chain))
      assert.strictEqual(refused._tag, "RoutineConflictError")
      yield* second.step(chain)
      const stored = yield* store.load("r", "report/yearly")
      assert.deepStrictEqual(
        stored?.completed.map((entry) => entry.task),
        ["collect"]
      )
      // A third run, started now, continues from what is stored.
      const third = yield* make().step(chain)
      assert.deepStrictEqual(third, {
        type: "task",
        chain: "report/yearly",
        task: "write",
        goalComplete: true
      })
    })
  )
})

describe("Variables", () => {
  it.effect("reads files, a directory, messages, thread metadata and stakeholders", () =>
    Effect.gen(function* () {
      fs.writeFileSync(path.join(directory, "brief.md"), "the brief")
      fs.writeFileSync(path.join(directory, "plain.txt"), "plain text")
      fs.writeFileSync(
        path.join(directory, "people.json"),
        JSON.stringify([{ id: "owner", name: "Ada", contact: { email: "ada@example.org" } }])
      )
      const files = Variables.files({ spec: "brief.md" }, directory)
      assert.strictEqual(yield* files.resolve("spec"), "the brief")
      assert.strictEqual(yield* files.resolve("unknown"), undefined)
      const dir = Variables.directory(directory)
      assert.strictEqual(yield* dir.resolve("brief"), "the brief")
      assert.strictEqual(yield* dir.resolve("plain"), "plain text")
      assert.strictEqual(yield* dir.resolve("../etc/passwd"), undefined)
      const messages = Variables.messages([
        Message.user("first", { metadata: { customer: "ACME" } }),
        Message.assistant("answer"),
        Message.user("last")
      ])
      assert.strictEqual(yield* messages.resolve("last"), "last")
      assert.strictEqual(yield* messages.resolve("first"), "first")
      assert.strictEqual(yield* messages.resolve("count"), "2")
      assert.strictEqual(yield* messages.resolve("customer"), "ACME")
      const thread = Variables.thread({ topic: "growth", owner: { team: "ops" } })
      assert.strictEqual(yield* thread.resolve("topic"), "growth")
      assert.strictEqual(yield* thread.resolve("owner.team"), "ops")
      const people = Variables.stakeholders(path.join(directory, "people.json"))
      assert.strictEqual(yield* people.resolve("owner.name"), "Ada")
      assert.strictEqual(yield* people.resolve("owner.contact.email"), "ada@example.org")
      assert.strictEqual(yield* people.resolve("nobody.name"), undefined)
    })
  )

  it.effect("a file that cannot be read fails naming the variable and the file", () =>
    Effect.gen(function* () {
      const missing = path.join(directory, "nope.json")
      const result = yield* Effect.result(Variables.stakeholders(missing).resolve("owner.name"))
      assert.isTrue(Result.isFailure(result))
      const error = Result.isFailure(result) ? result.failure : undefined
      assert.strictEqual(error?.variable, "stakeholder.owner.name")
      assert.include(error?.message ?? "", missing)
      assert.include(error?.message ?? "", "ENOENT")
    })
  )

  it.effect("reads message and thread variables from a stored session; a missing session names it", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.make()
      const { id } = yield* store.create({ title: "Launch", metadata: { topic: "growth" } })
      yield* store.append(id, 0, [
        Message.user("ship it", { metadata: { ticket: "T-1" } }),
        Message.assistant("ok")
      ])
      const [message, thread] = Variables.session(store, id)
      assert.strictEqual(yield* message!.resolve("last"), "ship it")
      assert.strictEqual(yield* message!.resolve("ticket"), "T-1")
      assert.strictEqual(yield* thread!.resolve("topic"), "growth")
      assert.strictEqual(yield* thread!.resolve("title"), "Launch")
      const [missing] = Variables.session(store, "nope")
      const result = yield* Effect.result(missing!.resolve("last"))
      assert.isTrue(Result.isFailure(result))
      assert.include(Result.isFailure(result) ? result.failure.message : "", "{{message.last}}")
      assert.include(Result.isFailure(result) ? result.failure.message : "", "session nope")
    })
  )

  it("fills templates with collected values", () => {
    assert.strictEqual(
      Variables.fill("Hi {{ thread.who }}, {{x.y}}", { "thread.who": "Ada" }),
      "Hi Ada, {{x.y}}"
    )
  })
})
