/**
 * ClusterEngine with a Worker, on one in-process effect/cluster runner owning every shard
 * (effect's `TestRunner` parts) over the test PostgreSQL: the runs store and the cluster's
 * `SqlMessageStorage` in one schema, as `noema worker --engine cluster` has them. What the
 * engine adds to the Executor and the Worker, without sockets (real runner processes are
 * tested in the CLI's RunsCluster.test.ts).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ScriptedChatModel } from "@noema/core/testing"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Deferred, Effect, Fiber, Layer, Redacted } from "effect"
import {
  ClusterWorkflowEngine,
  RunnerHealth,
  RunnerStorage,
  Runners,
  Sharding,
  ShardingConfig,
  SqlMessageStorage
} from "effect/cluster"
import * as ClusterEngine from "../src/ClusterEngine.js"
import * as Executor from "../src/Executor.js"
import type * as Pipeline from "../src/Pipeline.js"
import type * as RunsStore from "../src/RunsStore.js"
import * as SqlRunsStore from "../src/SqlRunsStore.js"
import * as Worker from "../src/Worker.js"

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_runs_cluster" })
})
afterAll(() => database?.drop())

const workspaceDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-cluster-"))

const onePipeline: Pipeline.Pipeline = {
  name: "one",
  stages: [{ key: "one", instructions: "answer", tools: [], approval: false }]
}

/** A fresh schema: its runs store, and one runner of the cluster over its message storage. */
const cluster = Layer.unwrap(
  Effect.map(
    Effect.promise(() => database.schema("cluster")),
    (url) =>
      ClusterWorkflowEngine.layer.pipe(
        Layer.provideMerge(Sharding.layer),
        Layer.provideMerge(Runners.layerNoop),
        Layer.provideMerge(SqlMessageStorage.layer.pipe(Layer.provide(NodeCrypto.layerDigest))),
        Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop, ShardingConfig.layer()]),
        Layer.provideMerge(Database.layer({ kind: "postgres", url: Redacted.make(url), maxConnections: 6 }))
      )
  )
)

/** The store, the engine (`options`) and an executor answering with `model` on it. */
const onCluster = (model: Executor.Options["model"], options: { readonly concurrency?: number } = {}) =>
  Effect.gen(function* () {
    const store = yield* SqlRunsStore.fromDatabase
    const engine = yield* ClusterEngine.make(store, { leaseTtlMs: 5_000, ...options })
    const workspace = workspaceDir()
    const executor = Executor.make({ store, workspace, model, engine })
    return { store, engine, workspace, executor }
  })

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
        const { store, executor } = yield* onCluster(ScriptedChatModel.make({ fallback: "done" }))
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
      }).pipe(Effect.scoped, Effect.provide(cluster))
  )

  it.live("a runner carries at most `concurrency` runs at once; the others wait holding their lease", () =>
    Effect.gen(function* () {
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
      const { store, executor } = yield* onCluster(gated, { concurrency: 2 })
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
    }).pipe(Effect.scoped, Effect.provide(cluster))
  )

  it.live("workflowOf reads the execution from the cluster's message storage, as runs show gives it", () =>
    Effect.gen(function* () {
      const { store, executor } = yield* onCluster(ScriptedChatModel.make({ fallback: "done" }))
      const thread = yield* store.createThread()
      const gated: Pipeline.Pipeline = {
        name: "gated",
        stages: [
          { key: "draft", instructions: "draft", tools: [], approval: false },
          { key: "final", instructions: "final", tools: [], approval: true }
        ]
      }
      const run = yield* executor.create({ threadId: thread.id, request: "r", pipeline: gated })
      assert.isUndefined(yield* executor.workflowOf(run.runId), "nothing before the run started")
      yield* executor.submit(run.runId)
      yield* eventually(
        Effect.map(store.getRun(run.runId), (view) => view.status === "waiting_approval"),
        "the run waits for approval"
      )
      // The run's status is committed by the approval request's step; the cluster stores that
      // activity's reply a moment later, so the workflow is read once it has it.
      yield* eventually(
        Effect.map(executor.workflowOf(run.runId), (workflow) => workflow?.activities.length === 2),
        "the approval request's reply stored"
      )
      const waiting = yield* executor.workflowOf(run.runId)
      assert.deepStrictEqual(waiting, {
        executionId: `${run.runId}/1`,
        completed: false,
        interrupted: false,
        activities: ["stage/1/attempt/1", "request-approval/2"],
        deferreds: []
      })
      yield* executor.approve(run.runId)
      yield* eventually(allCompleted(store), "the run completed")
      yield* eventually(
        Effect.map(executor.workflowOf(run.runId), (workflow) => workflow?.completed === true),
        "its execution's result stored"
      )
      assert.deepStrictEqual(yield* executor.workflowOf(run.runId), {
        executionId: `${run.runId}/1`,
        completed: true,
        interrupted: false,
        activities: ["stage/1/attempt/1", "request-approval/2", "stage/2/attempt/1"],
        deferreds: ["approval/2"]
      })
    }).pipe(Effect.scoped, Effect.provide(cluster))
  )

  it.live(
    "a run whose model this runner lacks waits: handed over once per retryAfterMs, not replayed at every look",
    () =>
      Effect.gen(function* () {
        const { store, workspace, engine } = yield* onCluster(ScriptedChatModel.make({ fallback: "done" }))
        // Started on a model this runner does not have.
        const creator = Executor.make({
          store,
          workspace,
          model: ScriptedChatModel.make({ fallback: "elsewhere" }),
          modelIdentity: { provider: "openai", name: "elsewhere" }
        })
        const thread = yield* store.createThread()
        const run = yield* creator.create({ threadId: thread.id, request: "r", pipeline: onePipeline })
        // Counts the worker's looks and the run's replays (each reads the run's view).
        let looks = 0
        let reads = 0
        const counted: RunsStore.Service = {
          ...store,
          listRuns: (options) => Effect.tap(store.listRuns(options), () => Effect.sync(() => looks++)),
          getRun: (runId) =>
            Effect.tap(store.getRun(runId), () => Effect.sync(() => (reads += runId === run.runId ? 1 : 0)))
        }
        const executor = Executor.make({
          store: counted,
          workspace,
          model: ScriptedChatModel.make({ fallback: "done" }),
          modelIdentity: { provider: "openai", name: "here" },
          engine
        })
        const worker = yield* Worker.make({ store: counted, executor, pollMs: 5 })
        const fiber = yield* Effect.forkChild(worker.run)
        yield* eventually(
          Effect.map(store.getRun(run.runId), (view) => view.waitingForModel !== undefined),
          "the run recorded its wait for its model"
        )
        const waited = reads
        // Many more looks: none hands the run over again within retryAfterMs (30 s by default).
        const from = looks
        yield* eventually(
          Effect.sync(() => looks >= from + 100),
          "a hundred more looks"
        )
        yield* Fiber.interrupt(fiber)
        assert.isAtMost(reads - waited, 3, `read ${reads - waited} times more over ${looks - from} looks`)
        const view = yield* store.getRun(run.runId)
        assert.strictEqual(view.status, "running")
        assert.deepStrictEqual(view.stages[0]?.attempts, [])
        assert.strictEqual(
          (yield* store.events(run.runId)).filter((event) => event.data.type === "ModelUnavailable").length,
          1
        )
      }).pipe(Effect.scoped, Effect.provide(cluster))
  )
})
