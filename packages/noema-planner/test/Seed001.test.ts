/**
 * Seed 001's examples (resources, policies, the task planner), run as written with noema's
 * names: `common.Conversation`/`common.MessageV2`/`plan.Task` are the resource types
 * `conversation`/`message`/`task` (so `cld:common.Conversation.hash0001/...` is
 * `cld:conversation.<hash>/...`), `withMeta()` is `Resource.make` (hash and URN from parent +
 * type + name) plus the store's put (`meta.tokens`), `toDescription()` is `Resource.describe`,
 * `policy.evaluate({actor, resources})` is `Policy.authorize({actor, action, resources})`,
 * `vectorIndex.queryItems(vector, filter)` is `index.search(actor, query, { type })`, and the
 * Plan service's `Process` is `Planner.run`. Left out on purpose: the deprecation steps
 * (01-03, nothing to deprecate in noema), protobuf/gRPC (noema is one TypeScript process
 * with Effect schemas), the S3 listing snippet (S3ResourceStore.test.ts runs findByPrefix
 * against s3rver), and the Rego sample as Rego (compiling Rego needs the `opa` binary, not
 * installable here; the same rule is written in Cedar below).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { CedarPolicy, FileResourceStore, Policy, Resource, ResourceIndex, Urn } from "@noema/resources"
import { Effect, Fiber, Stream } from "effect"
import * as Planner from "../src/Planner.js"
import * as PlannerTesting from "../src/testing.js"

/** The seed's example tree: conversation > message > task > task. */
const tree = () => {
  const conversation = Resource.make("conversation", { name: "hash0001" })
  const message = Resource.make("message", {
    name: "hash0002",
    parent: conversation.meta.urn,
    role: "user",
    content: "Plan the launch"
  })
  const task = Resource.make("task", { name: "hash0003", parent: message.meta.urn, status: "pending" })
  const subtask = Resource.make("task", { name: "hash0004", parent: task.meta.urn, status: "pending" })
  return { conversation, message, task, subtask }
}

describe("seed 001, as written", () => {
  it.effect("resources are stored under their URN: `ls -1 resources/` and prefix lookups", () =>
    Effect.gen(function* () {
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-seed001-"))
      const store = FileResourceStore.make({ directory })
      const { conversation, message, task, subtask } = tree()
      for (const resource of [conversation, message, task, subtask]) yield* store.put(resource)
      const listed = fs
        .readdirSync(directory, { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile())
        .map((entry) => path.relative(directory, path.join(entry.parentPath, entry.name)))
        .sort()
      const c = `cld:conversation.${conversation.meta.hash}`
      const m = `message.${message.meta.hash}`
      const t = `task.${task.meta.hash}`
      assert.deepStrictEqual(listed, [
        `${c}.json`,
        `${c}/${m}.json`,
        `${c}/${m}/${t}.json`,
        `${c}/${m}/${t}/task.${subtask.meta.hash}.json`
      ])
      // "fetch all tasks within a conversation or all subtasks within a task" by URN prefix.
      assert.deepStrictEqual(
        (yield* store.findByPrefix(message.meta.urn)).map((r) => r.meta.urn),
        [task.meta.urn, subtask.meta.urn]
      )
      assert.deepStrictEqual(
        (yield* store.getMany([subtask.meta.urn, conversation.meta.urn])).map((r) => r.meta.urn),
        [subtask.meta.urn, conversation.meta.urn]
      )
      // The sub task's URN gives its Conversation, Message and parent Task.
      assert.deepStrictEqual(Urn.ancestors(subtask.meta.urn), [
        conversation.meta.urn,
        message.meta.urn,
        task.meta.urn
      ])
    })
  )

  it.effect("withMeta() and toDescription(): deterministic hash, URN, parent, tokens; four sections", () =>
    Effect.gen(function* () {
      const { message } = tree()
      const again = Resource.make("message", {
        name: "hash0002",
        parent: message.meta.parent!,
        role: "user",
        content: "Plan the launch"
      })
      assert.strictEqual(again.meta.urn, message.meta.urn)
      assert.strictEqual(message.meta.hash, Resource.hashOf(message.meta.parent, "message", "hash0002"))
      assert.strictEqual(Urn.parent(message.meta.urn), message.meta.parent)
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-seed001-"))
      const store = FileResourceStore.make({ directory })
      const { conversation } = tree()
      yield* store.put(conversation)
      yield* store.put(message)
      assert.isAbove((yield* store.get(message.meta.urn)).meta.tokens ?? 0, 0)
      assert.strictEqual(
        Resource.describe({ purpose: "P", instructions: "I", applicability: "A", evaluation: "E" }),
        "**Purpose:** P\n\n**Instructions:** I\n\n**Applicability:** A\n\n**Evaluation:** E"
      )
    })
  )

  it.effect("libpolicy: the static allow, and the sample policy's rule (in Cedar)", () =>
    Effect.gen(function* () {
      const { conversation, message } = tree()
      const assistant = Resource.make("assistant", { name: "data-expert" })
      const allowAll = yield* Policy.allowAll
      const allowed = yield* allowAll.authorize({
        actor: assistant.meta.urn,
        action: "get",
        resources: [message.meta.urn]
      })
      assert.strictEqual(allowed.decision, "allow")
      // authorized_actors := [the assistant]; glob.match("<message>/*", resource)
      const sample = yield* CedarPolicy.make(
        `permit (principal == Noema::Actor::"${assistant.meta.urn}", action, resource in Noema::Resource::"${message.meta.urn}");`
      )
      const { task } = tree()
      const ask = (actor: string, urn: string) =>
        Effect.map(sample.authorize({ actor, action: "get", resources: [urn] }), (d) => d.decision)
      assert.strictEqual(yield* ask(assistant.meta.urn, task.meta.urn), "allow")
      assert.strictEqual(yield* ask("cld:assistant.other", task.meta.urn), "deny")
      assert.strictEqual(yield* ask(assistant.meta.urn, conversation.meta.urn), "deny")
    })
  )

  it.live("ResourceIndex.get(actor, ids), queryItems with a type filter, RESOURCE_PUT events by prefix", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const actor = "cld:assistant.data-expert"
      const { conversation, message, task, subtask } = tree()
      const heard = yield* Effect.scoped(
        Effect.gen(function* () {
          const stream = yield* world.events.subscribe(actor, {
            prefix: message.meta.urn,
            detailType: "RESOURCE_PUT"
          })
          const fiber = yield* Effect.forkChild(Stream.runCollect(Stream.take(stream, 3)))
          for (const resource of [conversation, message, task, subtask])
            yield* world.index.put(actor, resource)
          return yield* Fiber.join(fiber)
        })
      )
      // Only the message and what lies under it (not the conversation), each with an ISO-8601 time.
      assert.deepStrictEqual(
        heard.map((event) => event.resources),
        [[message.meta.urn], [task.meta.urn], [subtask.meta.urn]]
      )
      for (const event of heard) assert.match(event.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      const similarities = yield* world.index.search(actor, { text: "Plan the launch" }, { type: "message" })
      assert.deepStrictEqual(
        similarities.map((r) => r.meta.urn),
        [message.meta.urn]
      )
      assert.isNumber(similarities[0]!.meta.score)
      const instances = yield* world.index.getMany(
        actor,
        similarities.map((r) => r.meta.urn)
      )
      assert.strictEqual(instances[0]!.meta.type, "message")
      const refused = yield* Effect.flip(
        ResourceIndex.make(world.store, yield* CedarPolicy.make("")).get(actor, message.meta.urn)
      )
      assert.strictEqual(refused._tag, "AccessDeniedError")
    })
  )

  it.live("Simple Summary: a message -> nested tasks in one tool call -> assistants -> the answer", () =>
    Effect.gen(function* () {
      const world = yield* PlannerTesting.world()
      const team = yield* PlannerTesting.registerAssistants(world.index, "cld:assistant.planner", [
        {
          name: "researcher",
          purpose: "find facts and figures",
          examples: ["find the population of Lisbon"]
        },
        { name: "writer", purpose: "write prose: summaries and articles", examples: ["write a summary"] }
      ])
      const model = PlannerTesting.scriptedModel({
        plan: {
          tasks: [
            PlannerTesting.parent(
              "Report",
              [
                PlannerTesting.leaf("Find figures", "find facts and figures about Lisbon"),
                PlannerTesting.leaf("Write summary", "write a summary of the figures")
              ],
              "find facts and figures about Lisbon and write a summary report"
            )
          ]
        }
      })
      const result = yield* Planner.run("Write a short report on Lisbon", { model, ...world })
      // 3.1 One create_tasks call made the whole tree.
      const planCalls = model.requests.filter(
        (request) => PlannerTesting.partOf(request.request).kind === "plan"
      )
      assert.strictEqual(planCalls.length, 1)
      // 3.2 Each task has an assistant elected by similarity.
      const tasks = (yield* world.store.findByPrefix(result.tree.message)).filter(
        (resource): resource is Resource.Task => resource.meta.type === "task"
      )
      assert.strictEqual(tasks.length, 3)
      const byName = new Map(team.map((a) => [a.meta.name, a.meta.urn]))
      const assigned = (title: string) =>
        tasks.find((t) => t.meta.name.endsWith(title))!.assignment!.assistant
      assert.strictEqual(assigned("Find figures"), byName.get("researcher"))
      assert.strictEqual(assigned("Write summary"), byName.get("writer"))
      // 4.1-4.3 The supervisor evaluated once its subtasks were done; leaves ran directly.
      assert.strictEqual(
        model.requests.filter((r) => PlannerTesting.partOf(r.request).kind === "evaluate").length,
        1
      )
      assert.strictEqual(
        model.requests.filter((r) => PlannerTesting.partOf(r.request).kind === "leaf").length,
        2
      )
      // Direct mode persists a message with the task output under the task; every task has completed_at.
      for (const task of tasks) {
        assert.strictEqual(task.status, "done")
        assert.isString(task.completedAt)
        const outputs = (yield* world.store.findByPrefix(task.meta.urn)).filter(
          (r) => r.meta.type === "message" && r.meta.parent === task.meta.urn
        )
        assert.strictEqual(outputs.length, 1)
      }
      // 5-7. The Plan service responds when all tasks complete: the answer for the user.
      assert.deepStrictEqual(result.missing, [])
      assert.match(result.answer, /Find figures: done/)
    })
  )
})
