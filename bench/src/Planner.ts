/**
 * Planner: what the planner's machinery costs around the model.
 *
 * - `planner.overhead_ms`: `Planner.run` of a 20-task tree (4 supervisors with
 *   4 leaves each, and 0 corrective rounds) with an instant model: planning,
 *   persisting, electing 20 assistants by similarity, 16 context windows,
 *   16 inner loops, events to 4 supervisors, 4 evaluations, every access through
 *   the policy. In memory, and on SQLite (the CLI's default). Beside it, the
 *   floor: the same 21 model calls (one plan, 16 leaves through `ToolAgent`,
 *   4 evaluations through `StructuredOutput`) made one after another with no
 *   planner around them. Both warm up as the harness does (1.5 s and 20 runs at
 *   least, 0.5 s quick) before the rounds count; each memory round is a fresh
 *   world and a fresh scripted model.
 * - `planner.tasks_per_s`: leaves finished per second when each model call takes
 *   10 ms, with 8 in parallel (64 leaves under 8 supervisors), next to the
 *   ceiling (8 / 10 ms = 800/s) and to 1 at a time.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ToolAgent } from "@noema/agents"
import { type ChatModel, ConversationContext, Message, StructuredOutput } from "@noema/core"
import { Planner, TaskTree } from "@noema/planner"
import * as PlannerTesting from "@noema/planner/testing"
import {
  LocalEmbedder,
  Policy,
  ResourceEvents,
  ResourceIndex,
  SqlResourceStore,
  VectorIndex
} from "@noema/resources"
import { Database } from "@noema/sql"
import { Effect, Layer, Schema, Stream } from "effect"
import { check, median, now } from "./Harness.ts"

export interface PlannerOptions {
  readonly rounds: number
  /** Warm-up before the rounds count, as the harness's (README): this long and 20 runs at least. */
  readonly warmupMs: number
}

/**
 * Runs `once` until `warmupMs` have passed and it ran 20 times (the harness's warm-up rule, so
 * the JIT has settled before anything counts); bounded by ten budgets and a count.
 */
const warmUp = <E>(once: Effect.Effect<unknown, E>, warmupMs: number) =>
  Effect.gen(function* () {
    const start = now()
    for (let runs = 0; runs < 100_000; runs++) {
      const elapsed = now() - start
      if (elapsed >= warmupMs && runs >= 20) break
      if (elapsed >= warmupMs * 10 && runs >= 1) break
      yield* once
    }
  })

export const team = [
  { name: "researcher", purpose: "find facts and sources about a topic", examples: ["find the facts"] },
  {
    name: "writer",
    purpose: "write introductions, summaries and conclusions",
    examples: ["write a summary"]
  },
  { name: "analyst", purpose: "calculate and compare numbers and figures", examples: ["compare the prices"] }
]

export const treeOf = (supervisors: number, leaves: number): TaskTree.Plan => ({
  tasks: Array.from({ length: supervisors }, (_, s) =>
    PlannerTesting.parent(
      `Part ${s + 1}`,
      Array.from({ length: leaves }, (_, l) =>
        PlannerTesting.leaf(`Step ${s + 1}.${l + 1}`, l % 2 === 0 ? "find the facts" : "write a summary")
      ),
      "find facts and write a summary"
    )
  )
})

const limitsFor = (plan: TaskTree.Plan, parallel: number) => ({
  maxChildren: 64,
  maxTasks: TaskTree.count(plan.tasks),
  maxModelCalls: 10_000,
  maxTokens: 100_000_000,
  parallel
})

/** A model that answers after `ms` (the leaves' calls only), as a provider would. */
const slow = (inner: ChatModel.Service, ms: number): ChatModel.Service => ({
  ...inner,
  complete: (request) => Effect.delay(inner.complete(request), ms),
  stream: (request) => Stream.unwrap(Effect.delay(Effect.succeed(inner.stream(request)), ms))
})

const runOnce = (
  plan: TaskTree.Plan,
  world: PlannerTesting.World,
  model: ChatModel.Service,
  parallel: number
) =>
  Effect.gen(function* () {
    const started = now()
    const result = yield* Planner.run("bench", { model, ...world, limits: limitsFor(plan, parallel) })
    const ms = now() - started
    check(
      result.missing.length === 0 && result.tasks.length === TaskTree.count(plan.tasks),
      `planner bench: ${result.missing.length} tasks missing`
    )
    return ms
  })

/** The same model calls with no planner: the floor. */
const floorOnce = (plan: TaskTree.Plan, model: ChatModel.Service) =>
  Effect.gen(function* () {
    const started = now()
    yield* StructuredOutput.generate(model, {
      schema: TaskTree.Plan,
      name: "create_tasks",
      mode: "tool",
      messages: [Message.system("You plan work for a team of assistants."), Message.user("bench")]
    })
    for (const parent of plan.tasks) {
      for (const leaf of parent.subtasks) {
        const agent = ToolAgent.make({ name: "leaf", system: `Your task: ${leaf.title}`, tools: [] })
        yield* agent.execute(ConversationContext.of(Message.user(leaf.instructions)), model)
      }
      yield* StructuredOutput.generate(model, {
        schema: Schema.Struct({ successful: Schema.Boolean, reason: Schema.String }),
        name: "evaluation",
        messages: [
          Message.system("You supervise a task done by others."),
          Message.user(`Task: ${parent.title}`)
        ]
      })
    }
    return now() - started
  })

const memoryWorld = Effect.gen(function* () {
  const world = yield* PlannerTesting.world()
  yield* PlannerTesting.registerAssistants(world.index, "cld:assistant.planner", team)
  return world
})

export const run = async (options: PlannerOptions): Promise<Record<string, number>> => {
  const results: Record<string, number> = {}
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-planner-"))
  const twenty = treeOf(4, 4)
  check(TaskTree.count(twenty.tasks) === 20, "the overhead tree has 20 tasks")
  try {
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          // A fresh scripted model per round, as a fresh world: the test model keeps every
          // request it is sent (for tests to read), which no real model does; one model for
          // every round made each round's garbage collection walk all the rounds before it.
          const freshModel = () => PlannerTesting.scriptedModel({ plan: twenty })
          // Memory: a fresh world per round (the tree's URNs differ every time anyway).
          const memory: Array<number> = []
          const floor: Array<number> = []
          const memoryRound = Effect.gen(function* () {
            const model = freshModel()
            const world = yield* memoryWorld
            return [yield* runOnce(twenty, world, model, 4), yield* floorOnce(twenty, model)] as const
          })
          yield* warmUp(memoryRound, options.warmupMs)
          for (let round = 0; round < options.rounds; round++) {
            const [ms, raw] = yield* memoryRound
            memory.push(ms)
            floor.push(raw)
          }
          results["planner.overhead_ms"] = median(memory)
          results["planner.overhead_raw_ms"] = median(floor)

          // SQLite, one database for every round, as the CLI keeps one.
          const context = yield* Layer.build(
            Database.layer({ kind: "sqlite", filename: path.join(directory, "planner.db") })
          )
          const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
          const vectors = yield* Effect.provideContext(
            VectorIndex.fromDatabase(LocalEmbedder.make()),
            context
          )
          const policy = yield* Policy.allowAll
          const events = yield* ResourceEvents.makeMemory(policy)
          const index = ResourceIndex.make(store, policy, { events, vectors })
          yield* PlannerTesting.registerAssistants(index, "cld:assistant.planner", team)
          const sqliteWorld = { store, index, events, vectors }
          const sqlite: Array<number> = []
          // Two runs of warm-up only, not the harness's: every run adds its tree to the one
          // database and a context window's search is exact over every vector stored, so a run
          // costs more the more runs came before (64 ms after the harness's 1.5 s of warm-up,
          // about 1,200 tasks stored); the row is the figure for a database of a few dozen runs.
          for (let round = 0; round < options.rounds + 2; round++) {
            const ms = yield* runOnce(twenty, sqliteWorld, freshModel(), 4)
            if (round >= 2) sqlite.push(ms)
          }
          results["planner.overhead_sqlite_ms"] = median(sqlite)

          // Throughput: 64 leaves, each model call 10 ms.
          const wide = treeOf(8, 8)
          const leaves = 64
          const slowModel = slow(PlannerTesting.scriptedModel({ plan: wide }), 10)
          const rates = (parallel: number) =>
            Effect.gen(function* () {
              const samples: Array<number> = []
              for (let round = 0; round < Math.max(3, Math.floor(options.rounds / 3)); round++) {
                const world = yield* memoryWorld
                const ms = yield* runOnce(wide, world, slowModel, parallel)
                samples.push(leaves / (ms / 1000))
              }
              return median(samples)
            })
          results["planner.parallel8.tasks_per_s"] = yield* rates(8)
          results["planner.parallel1.tasks_per_s"] = yield* rates(1)
          results["planner.ceiling8.tasks_per_s"] = 8 / 0.01
        })
      )
    )
  } finally {
    fs.rmSync(directory, { recursive: true, force: true })
  }
  return results
}
