import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Executor, Pipeline, RunFiles, RunsStore } from "@noema/runs"
import { Effect } from "effect"
import * as OfflineModel from "../src/OfflineModel.js"

describe("runs with the offline model", () => {
  it.effect("the default pipeline completes offline with real artifacts whose hashes match", () =>
    Effect.gen(function* () {
      const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-offline-"))
      const store = yield* RunsStore.makeMemory()
      const executor = Executor.make({ store, workspace, model: OfflineModel.make() })
      const thread = yield* store.createThread({ title: "offline" })
      const run = yield* executor.create({
        threadId: thread.id,
        request: "Write a short note about tea",
        pipeline: Pipeline.defaultPipeline
      })
      const outcome = yield* executor.execute(run.runId, Pipeline.defaultPipeline)
      assert.strictEqual(outcome.run.status, "completed")
      const report = yield* RunFiles.verify(workspace, run.runId)
      assert.isTrue(report.ok)
      assert.deepStrictEqual(report.checked, ["01-brief", "02-result"])
      const result = path.join(RunFiles.stagePath(workspace, run.runId, 2, "result"), "artifacts")
      const files = fs.readdirSync(result)
      assert.isAbove(files.length, 0)
      assert.isAbove(fs.statSync(path.join(result, files[0] as string)).size, 0)
      fs.rmSync(workspace, { recursive: true, force: true })
    })
  )
})
