/**
 * ClusterEngine with a Worker, on effect/cluster's in-memory `TestRunner` (one runner owning
 * every shard, memory message storage): what the engine adds to the Executor and the Worker,
 * without PostgreSQL or sockets (those are tested with real runner processes in the CLI's
 * RunsCluster.test.ts).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedChatModel } from "@noema/core/testing"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { ClusterWorkflowEngine, TestRunner } from "effect/cluster"
import * as ClusterEngine from "../src/ClusterEngine.js"
import * as Executor from "../src/Executor.js"
import type * as Pipeline from "../src/Pipeline.js"
import * as RunsStore from "../src/RunsStore.js"
import * as Worker from "../src/Worker.js"

const workspaceDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-cluster-"))

const onePipeline: Pipeline.Pipeline = {
  name: "one",
  stages: [{ key: "one", instructions: "answer", tools: [], approval: false }]
}

const inMemoryCluster = ClusterWorkflowEngine.layer.pipe(Layer.provideMerge(TestRunner.layer))

/** Waits, bounded by rounds (a busy machine only makes each round slower), until `done` holds. */
const eventually = <E, R>(done: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function* () {
    for (let round = 0; round < 3000; round++) {
      if (yield* done) return
      yield* Effect.sleep("10 millis")
    }
    return yield* Effect.die(`never: ${what}`)
  })

const allCompleted = (store: RunsStore.Service) =>
  Effect.map(store.listRuns(), (runs) => runs.length > 0 && runs.every((run) => run.status === "completed"))

describe("ClusterEngine with a Worker", () => {
  it.live(
    "a thread's next run is handed over as soon as the run before it ends here, not at the next poll",
    () =>
      Effect.gen(function* () {
        const store = yield* RunsStore.makeMemory()
        const engine = yield* ClusterEngine.make(store, { leaseTtlMs: 5_000 })
        const workspace = workspaceDir()
        const executor = Executor.make({
          store,
          workspace,
          model: ScriptedChatModel.make({ fallback: "done" }),
          engine
        })
        const thread = yield* store.createThread({ queuePolicy: "enqueue" })
        for (const request of ["first", "second", "third"])
          yield* executor.create({ threadId: thread.id, request, pipeline: onePipeline })
        // A poll far beyond the test's bound: only a wake can start the second and third runs.
        const worker = yield* Worker.make({ store, executor, pollMs: 3_600_000 })
        const fiber = yield* Effect.forkChild(worker.run)
        yield* eventually(allCompleted(store), "the queued runs completed")
        yield* Fiber.interrupt(fiber)
        const runs = [...(yield* store.listRuns())].sort((a, b) => a.createdAt.localeCompare(b.createdAt))
        for (let n = 1; n < runs.length; n++)
          assert.isTrue(runs[n]!.startedAt! >= runs[n - 1]!.finishedAt!, "a thread's runs one after another")
      }).pipe(Effect.provide(inMemoryCluster), Effect.scoped)
  )

  it.live("a runner carries at most `concurrency` runs at once; the others wait holding their lease", () =>
    Effect.gen(function* () {
      const store = yield* RunsStore.makeMemory()
      const engine = yield* ClusterEngine.make(store, { leaseTtlMs: 5_000, concurrency: 2 })
      const workspace = workspaceDir()
      const release = yield* Deferred.make<void>()
      let inStage = 0
      let most = 0
      const model = ScriptedChatModel.make({ fallback: "done" })
      const gated: typeof model = {
        ...model,
        complete: (request) =>
          Effect.gen(function* () {
            inStage++
            most = Math.max(most, inStage)
            yield* Deferred.await(release)
            inStage--
            return yield* model.complete(request)
          })
      }
      const executor = Executor.make({ store, workspace, model: gated, engine })
      for (let n = 0; n < 5; n++) {
        const thread = yield* store.createThread()
        yield* executor.create({ threadId: thread.id, request: `run ${n}`, pipeline: onePipeline })
      }
      const worker = yield* Worker.make({ store, executor, pollMs: 20, concurrency: 1 })
      const fiber = yield* Effect.forkChild(worker.run)
      // Every run handed over (the worker's own concurrency does not hold hand-overs back) and leased.
      yield* eventually(
        Effect.map(store.claims(), (claims) => claims.length === 5),
        "all five runs leased"
      )
      yield* eventually(
        Effect.sync(() => inStage === 2),
        "two stages under way"
      )
      // Given every chance to start a third, the runner does not.
      for (let round = 0; round < 20; round++) yield* Effect.sleep("5 millis")
      assert.strictEqual(inStage, 2)
      yield* Deferred.succeed(release, undefined)
      yield* eventually(allCompleted(store), "every run completed")
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(most, 2)
    }).pipe(Effect.provide(inMemoryCluster), Effect.scoped)
  )
})
