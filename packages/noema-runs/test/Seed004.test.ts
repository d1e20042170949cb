/**
 * Seed 004's data flow and done criteria (run-centric execution), run as written with
 * noema's names: a thread's request is `executor.create` + `execute`, the orchestrator's
 * stages are a `Pipeline`, `runtime/vm/runs/<run_id>` is `<workspace>/runs/<run_id>`
 * (`RunFiles.runDirectory`), the projectors are the store's `RunView` fold, the panel's
 * lists are `listRuns({ threadId })` and each `RunView`'s stages and attempts (the web
 * panel itself is tested in the cli's ServePanel tests). Retries are covered by
 * Executor.test.ts ("retry adds an attempt") and not repeated here.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect } from "effect"
import * as Executor from "../src/Executor.js"
import * as Pipeline from "../src/Pipeline.js"
import * as RunFiles from "../src/RunFiles.js"
import * as RunsStore from "../src/RunsStore.js"

const files = (root: string): Array<string> =>
  fs
    .readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.relative(root, path.join(entry.parentPath, entry.name)))
    .sort()

describe("seed 004, as written", () => {
  it.effect("a request in a thread -> a run of stages -> real, hashed, never-overwritten output", () =>
    Effect.gen(function* () {
      const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-seed004-"))
      const store = yield* RunsStore.makeMemory()
      const model = ScriptedChatModel.make({
        replies: [
          { toolCalls: [{ name: "write_artifact", arguments: { path: "brief.md", content: "# Brief\n" } }] },
          "Brief written.",
          "The result."
        ]
      })
      const timeline: Array<string> = []
      const executor = Executor.make({
        store,
        workspace,
        model,
        onEvent: (_run, event) => Effect.sync(() => timeline.push(event.type))
      })
      // 1-3. The user sends a request in a thread; the run is registered with its planned stages.
      const thread = yield* store.createThread({ title: "launch" })
      const run = yield* executor.create({
        threadId: thread.id,
        request: "Write the launch note",
        pipeline: Pipeline.defaultPipeline
      })
      assert.strictEqual(run.status, "queued")
      assert.deepStrictEqual(
        run.stages.map((stage) => [stage.position, stage.key]),
        [
          [1, "brief"],
          [2, "result"]
        ]
      )
      // 4-6. Each stage writes output.json and its artifacts; the manifest names them.
      const outcome = yield* executor.execute(run.runId, Pipeline.defaultPipeline)
      assert.strictEqual(outcome.run.status, "completed")
      const runDir = RunFiles.runDirectory(workspace, run.runId)
      assert.strictEqual(runDir, path.join(workspace, "runs", run.runId))
      const written = files(runDir)
      assert.includeMembers(written, [
        "run.json",
        "stages/01-brief/manifest.json",
        "stages/01-brief/input.json",
        "stages/01-brief/output.json",
        "stages/01-brief/artifacts/brief.md"
      ])
      const manifest = JSON.parse(fs.readFileSync(path.join(runDir, "stages/01-brief/manifest.json"), "utf8"))
      // The manifest contract, field by field.
      for (const field of [
        "stage_key",
        "stage_position",
        "attempt",
        "status",
        "started_at",
        "finished_at",
        "thread_id",
        "run_id",
        "event_id",
        "artifacts"
      ])
        assert.property(manifest, field)
      assert.deepInclude(manifest, { stage_key: "brief", stage_position: 1, attempt: 1, status: "completed" })
      const brief = manifest.artifacts.find((artifact: { path: string }) => artifact.path === "brief.md")
      assert.deepStrictEqual(brief, {
        path: "brief.md",
        kind: brief.kind,
        sha256: RunFiles.sha256("# Brief\n"),
        size: Buffer.byteLength("# Brief\n")
      })
      assert.isTrue((yield* RunFiles.verify(workspace, run.runId)).ok)
      // The timeline's milestones, in order.
      assert.deepStrictEqual(timeline, [
        "RunStarted",
        "StageStarted",
        "ArtifactPublished",
        "StageCompleted",
        "StageStarted",
        "ArtifactPublished",
        "StageCompleted",
        "RunCompleted"
      ])
      // 7-8. The read model the panel shows: runs by thread, stages with attempts and artifacts.
      const listed = yield* store.listRuns({ threadId: thread.id })
      assert.deepStrictEqual(
        listed.map((view) => view.runId),
        [run.runId]
      )
      const view = listed[0]!
      assert.isString(view.startedAt)
      assert.isString(view.finishedAt)
      assert.deepStrictEqual(
        view.stages.map((stage) => [stage.key, stage.status, stage.attempts.length]),
        [
          ["brief", "completed", 1],
          ["result", "completed", 1]
        ]
      )
      assert.deepStrictEqual(view.stages[0]!.attempts[0]!.artifacts, manifest.artifacts)
      // Done criterion 5: running the thread again makes a new run_id; the first run's files stay.
      const before = written.map((file) => fs.readFileSync(path.join(runDir, file)))
      model.enqueue("brief 2", "result 2")
      const again = yield* executor.create({
        threadId: thread.id,
        request: "Write the launch note",
        pipeline: Pipeline.defaultPipeline
      })
      yield* executor.execute(again.runId, Pipeline.defaultPipeline)
      assert.notStrictEqual(again.runId, run.runId)
      assert.deepStrictEqual(
        files(runDir).map((file) => fs.readFileSync(path.join(runDir, file))),
        before
      )
      assert.strictEqual((yield* store.listRuns({ threadId: thread.id })).length, 2)
    })
  )

  it.effect("the thread must exist and be open; a busy thread does not start a concurrent run", () =>
    Effect.gen(function* () {
      const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-seed004-"))
      const store = yield* RunsStore.makeMemory()
      const executor = Executor.make({ store, workspace, model: ScriptedChatModel.make() })
      const create = (threadId: string) =>
        Effect.flip(executor.create({ threadId, request: "r", pipeline: Pipeline.defaultPipeline }))
      assert.strictEqual((yield* create("thr_missing"))._tag, "ThreadNotFound")
      const thread = yield* store.createThread({ title: "t" })
      yield* executor.create({ threadId: thread.id, request: "r", pipeline: Pipeline.defaultPipeline })
      // No explicit queue policy: the second request is refused while the first is active.
      assert.strictEqual((yield* create(thread.id))._tag, "ThreadBusy")
      yield* store.closeThread(thread.id)
      assert.strictEqual((yield* create(thread.id))._tag, "ThreadClosed")
      // Nothing was written for the refusals: only the one run's directory.
      assert.strictEqual(fs.readdirSync(path.join(workspace, "runs")).length, 1)
    })
  )
})
