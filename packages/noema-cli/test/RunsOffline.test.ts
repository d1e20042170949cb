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

describe("the offline model in a run's stage", () => {
  it.effect("writes the artifact the instructions name, with the request and what earlier stages made", () =>
    Effect.gen(function* () {
      const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-offline-"))
      const store = yield* RunsStore.makeMemory()
      const executor = Executor.make({ store, workspace, model: OfflineModel.make() })
      const thread = yield* store.createThread()
      const pipeline: Pipeline.Pipeline = {
        name: "two",
        stages: [
          {
            key: "facts",
            instructions: "Collect the facts. Save them as facts.json.",
            tools: [],
            approval: false
          },
          { key: "essay", instructions: "Write the essay; save it as essay.md.", tools: [], approval: false }
        ]
      }
      const run = yield* executor.create({
        threadId: thread.id,
        request: "An essay on 3 kinds of tea",
        pipeline
      })
      const outcome = yield* executor.execute(run.runId, pipeline)
      assert.strictEqual(outcome.run.status, "completed")
      const read = (position: number, key: string, file: string) =>
        fs.readFileSync(
          path.join(RunFiles.stagePath(workspace, run.runId, position, key), "artifacts", file),
          "utf8"
        )
      const facts = JSON.parse(read(1, "facts", "facts.json"))
      assert.strictEqual(facts.request, "An essay on 3 kinds of tea")
      const essay = read(2, "essay", "essay.md")
      assert.match(essay, /^# An essay on 3 kinds of tea\n/)
      assert.include(essay, "**Stage instructions:** Write the essay; save it as essay.md.")
      assert.match(essay, /- facts: Wrote facts\.json \(\d+ bytes, sha256 [0-9a-f]+\)/)
      const output = JSON.parse(
        fs.readFileSync(
          path.join(RunFiles.stagePath(workspace, run.runId, 2, "essay"), "output.json"),
          "utf8"
        )
      )
      assert.deepStrictEqual(output.artifacts, ["essay.md"])
      assert.isTrue((yield* RunFiles.verify(workspace, run.runId)).ok)
      fs.rmSync(workspace, { recursive: true, force: true })
    })
  )
})
