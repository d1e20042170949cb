import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Fiber } from "effect"
import * as Executor from "../src/Executor.js"
import type * as Pipeline from "../src/Pipeline.js"
import type { RunView } from "../src/Run.js"
import * as RunFiles from "../src/RunFiles.js"
import * as RunLease from "../src/RunLease.js"
import * as RunsStore from "../src/RunsStore.js"
import * as Worker from "../src/Worker.js"

const workspaceDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-worker-"))

/** A process id nothing runs under (Linux pids stay below 2^22). */
const deadPid = 2 ** 22 + 12345

describe("RunLease", () => {
  it.effect("one owner at a time; a dead process's claim is taken over at once; released after", () =>
    Effect.gen(function* () {
      const store = yield* RunsStore.makeMemory()
      const thread = yield* store.createThread()
      const run = yield* store.createRun({
        threadId: thread.id,
        request: "r",
        pipeline: "p",
        stages: [{ key: "a", position: 1, needsApproval: false }]
      })
      const inside = yield* RunLease.withLease(
        store,
        run.runId,
        Effect.gen(function* () {
          const claims = yield* store.claims()
          assert.deepStrictEqual(
            claims.map((c) => c.owner),
            [RunLease.processOwner]
          )
          // Another live owner is refused, naming the holder.
          const busy = yield* Effect.flip(
            RunLease.withLease(store, run.runId, Effect.void, { owner: "other/1/x" })
          )
          assert.strictEqual(busy._tag, "RunBusy")
          assert.match(
            busy.message,
            new RegExp(`^run ${run.runId} is being carried on by process ${process.pid} on ${os.hostname()}`)
          )
          return "ran"
        })
      )
      assert.strictEqual(inside, "ran")
      assert.deepStrictEqual(yield* store.claims(), [])
      // Left by a process of this host that is gone: stale before it expires, taken over at once.
      const dead = `${os.hostname()}/${deadPid}/abc`
      yield* store.claim(run.runId, { owner: dead, ttlMs: 60_000 })
      assert.isTrue(RunLease.isStale((yield* store.claims())[0]!))
      assert.strictEqual(yield* RunLease.withLease(store, run.runId, Effect.succeed(1)), 1)
      // Held by a process on another machine: not stale until it expires.
      yield* store.claim(run.runId, { owner: `elsewhere/${process.pid}/abc`, ttlMs: 60_000 })
      assert.isFalse(RunLease.isStale((yield* store.claims())[0]!))
      const refused = yield* Effect.flip(RunLease.withLease(store, run.runId, Effect.void))
      assert.strictEqual(refused._tag, "RunBusy")
    })
  )

  it.live("a claim taken by another process interrupts the work with LeaseLost", () =>
    Effect.gen(function* () {
      const store = yield* RunsStore.makeMemory()
      let interrupted = false
      const work = Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      const fiber = yield* Effect.forkChild(RunLease.withLease(store, "run_x", work, { ttlMs: 60 }))
      yield* Effect.sleep("30 millis")
      yield* store.claim("run_x", { owner: "thief/1/x", ttlMs: 60_000, takeOver: RunLease.processOwner })
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit))
      assert.isTrue(interrupted)
      if (Exit.isFailure(exit)) assert.match(String(exit.cause), /LeaseLost/)
      // The thief's claim is not released by the loser.
      assert.deepStrictEqual(
        (yield* store.claims()).map((c) => c.owner),
        ["thief/1/x"]
      )
    })
  )
})

const slowPipeline: Pipeline.Pipeline = {
  name: "two",
  stages: [
    { key: "one", instructions: "first", tools: [], approval: false },
    { key: "two", instructions: "second", tools: [], approval: false }
  ]
}

/** A store, an executor answering "done", and one run of `slowPipeline`, created. */
const oneRun = Effect.gen(function* () {
  const workspace = workspaceDir()
  const store = yield* RunsStore.makeMemory()
  const executor = Executor.make({ store, workspace, model: ScriptedChatModel.make({ fallback: "done" }) })
  const thread = yield* store.createThread()
  const run = yield* executor.create({ threadId: thread.id, request: "r", pipeline: slowPipeline })
  return { workspace, store, executor, run }
})

describe("Worker", () => {
  it.live("a cancel recorded elsewhere interrupts the stage under way", () =>
    Effect.gen(function* () {
      const workspace = workspaceDir()
      const store = yield* RunsStore.makeMemory()
      const model = ScriptedChatModel.make({ replies: [{ hang: true }] })
      const executor = Executor.make({ store, workspace, model })
      const thread = yield* store.createThread()
      const run = yield* executor.create({ threadId: thread.id, request: "wait", pipeline: slowPipeline })
      const fiber = yield* Effect.forkChild(
        Worker.carryOn(store, run.runId, executor.execute(run.runId, slowPipeline), {
          cancelPollMs: 20,
          interrupt: executor.interrupt
        })
      )
      // Until the stage's model call is under way (its files go through the disk first: bounded, not timed).
      for (let i = 0; i < 3000 && model.requests.length === 0; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual((yield* store.getRun(run.runId)).stages[0]?.status, "running")
      // Another process cancels it: only the store is shared.
      yield* Executor.make({ store, workspace, model }).cancel(run.runId, "no longer needed")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome.run.status, "canceled")
      assert.isTrue(model.requests[0]?.interrupted)
      const view = yield* store.getRun(run.runId)
      assert.deepStrictEqual(
        view.stages.map((s) => [s.status, s.attempts.map((a) => a.status)]),
        [
          ["canceled", ["canceled"]],
          ["canceled", []]
        ]
      )
      // No manifest describes the interrupted attempt, and verify has nothing to complain of.
      const stage = RunFiles.stagePath(workspace, run.runId, 1, "one")
      assert.isFalse(fs.existsSync(path.join(stage, "manifest.json")))
      assert.isTrue((yield* RunFiles.verify(workspace, run.runId)).ok)
      assert.deepStrictEqual(yield* store.claims(), [])
      // The run's workflow execution was interrupted, and completed as such.
      const execution = yield* store.journal.execution(`${run.runId}/1`)
      assert.isTrue(execution?.interrupted)
      assert.strictEqual(
        (JSON.parse(execution?.result ?? "{}") as { exit?: { _tag: string } }).exit?._tag,
        "Failure"
      )
    })
  )

  it.live("two workers share the runs: each stage attempt once, a thread's runs never overlap", () =>
    Effect.gen(function* () {
      const workspace = workspaceDir()
      const store = yield* RunsStore.makeMemory()
      const model = ScriptedChatModel.make({ fallback: "done", chunkDelay: "2 millis" })
      const started: Array<string> = []
      const executor = (name: string) =>
        Executor.make({
          store,
          workspace,
          model,
          onEvent: (run, event) =>
            Effect.sync(() => {
              if (event.type === "StageStarted")
                started.push(`${run.runId}/${event.position}/${event.attempt}/${name}`)
            })
        })
      const creator = executor("creator")
      const enqueued = yield* store.createThread({ queuePolicy: "enqueue" })
      const runs: Array<RunView> = []
      for (let n = 0; n < 4; n++)
        runs.push(
          yield* creator.create({ threadId: enqueued.id, request: `queued ${n}`, pipeline: slowPipeline })
        )
      for (let n = 0; n < 4; n++) {
        const thread = yield* store.createThread()
        runs.push(
          yield* creator.create({ threadId: thread.id, request: `alone ${n}`, pipeline: slowPipeline })
        )
      }
      const workers = yield* Effect.forEach(["a", "b"], (name) =>
        Worker.make({
          store,
          executor: executor(name),
          pollMs: 10,
          concurrency: 3,
          lease: { owner: `worker-${name}/1/x`, cancelPollMs: 20 }
        })
      )
      const fibers = yield* Effect.forEach(workers, (worker) => Effect.forkChild(worker.run))
      // Bounded by rounds, not by the clock: a busy machine only makes each round slower.
      for (let round = 0; round < 5000; round++) {
        const all = yield* store.listRuns()
        if (all.every((run) => run.status === "completed")) break
        yield* Effect.sleep("20 millis")
      }
      yield* Effect.forEach(fibers, Fiber.interrupt)
      const all = yield* store.listRuns()
      assert.deepStrictEqual(
        all.map((run) => run.status),
        runs.map(() => "completed")
      )
      // Every stage ran exactly one attempt, by one worker.
      assert.strictEqual(started.length, runs.length * 2)
      assert.strictEqual(new Set(started.map((s) => s.split("/").slice(0, 3).join("/"))).size, started.length)
      assert.isTrue(started.some((s) => s.endsWith("/a")) && started.some((s) => s.endsWith("/b")))
      // The enqueued thread's runs ran one after another, in their order.
      const queued = all.filter((run) => run.threadId === enqueued.id)
      for (let n = 1; n < queued.length; n++)
        assert.isTrue(
          (queued[n]!.startedAt ?? "") >= (queued[n - 1]!.finishedAt ?? "~"),
          `run ${n} started after run ${n - 1} finished`
        )
      for (const run of all) assert.isTrue((yield* RunFiles.verify(workspace, run.runId)).ok)
    })
  )

  it.live("a run that cannot be carried on is reported once, then left alone for a while", () =>
    Effect.gen(function* () {
      const { workspace, store, executor, run } = yield* oneRun
      // Its run.json broken (a disk problem, a hand edit): resume cannot read its pipeline.
      fs.writeFileSync(path.join(RunFiles.runDirectory(workspace, run.runId), "run.json"), "{ broken")
      const reports: Array<string> = []
      const worker = yield* Worker.make({
        store,
        executor,
        pollMs: 10,
        onStopped: (runId, exit) =>
          Effect.sync(() => {
            if (Exit.isFailure(exit)) reports.push(runId)
          })
      })
      const fiber = yield* Effect.forkChild(worker.run)
      for (let round = 0; round < 5000 && reports.length === 0; round++) yield* Effect.sleep("10 millis")
      // Many more polls (every 10 ms) while it is left alone: no second report.
      yield* Effect.sleep("300 millis")
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(reports, [run.runId])
      assert.strictEqual((yield* store.getRun(run.runId)).status, "queued")
      assert.deepStrictEqual(yield* store.claims(), [])
    })
  )

  it.live("a run held by a worker on another machine is taken over only once its claim expires", () =>
    Effect.gen(function* () {
      const { store, executor, run } = yield* oneRun
      // What a worker on machine a leaves when the machine dies inside stage 1: its claim
      // (no pid of this host to check) runs 3 s more: far more than the early look below
      // needs, however busy the machine.
      yield* store.append(run.runId, [
        { type: "RunStarted" },
        { type: "StageStarted", position: 1, attempt: 1 }
      ])
      yield* store.claim(run.runId, { owner: "machine-a/4242/x", ttlMs: 3000 })
      const worker = yield* Worker.make({ store, executor, pollMs: 20, lease: { owner: "machine-b/1/y" } })
      const fiber = yield* Effect.forkChild(worker.run)
      yield* Effect.sleep("200 millis")
      const early = yield* store.getRun(run.runId)
      assert.deepStrictEqual(
        early.stages[0]?.attempts.map((a) => a.status),
        ["running"]
      )
      assert.deepStrictEqual(worker.active(), [])
      for (let round = 0; round < 5000 && (yield* store.getRun(run.runId)).status !== "completed"; round++)
        yield* Effect.sleep("20 millis")
      yield* Fiber.interrupt(fiber)
      const done = yield* store.getRun(run.runId)
      assert.strictEqual(done.status, "completed")
      assert.deepStrictEqual(
        done.stages[0]?.attempts.map((a) => [a.status, a.error?.error_code]),
        [
          ["failed", "interrupted"],
          ["completed", undefined]
        ]
      )
    })
  )
})
