import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Tool } from "@noema/core"
import { Effect } from "effect"
import * as RunFiles from "../src/RunFiles.js"

const workspace = () => fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-files-"))
const at = "2026-11-24T08:00:00.000Z"
const runFile = (runId: string): RunFiles.RunFile => ({
  run_id: runId,
  thread_id: "thr_1",
  request: "write a note",
  pipeline: "default",
  created_at: at,
  stages: [{ position: 1, stage_key: "draft", needs_approval: false }]
})
const manifestFields = (attempt: number, status: "completed" | "failed" = "completed") => ({
  stage_key: "draft",
  stage_position: 1,
  attempt,
  status,
  started_at: at,
  finished_at: at,
  thread_id: "thr_1",
  run_id: "run_1",
  event_id: `evt_${attempt}`
})

describe("RunFiles", () => {
  it.effect(
    "writes the contract's files with exact names; the manifest lists every artifact with its hash",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        yield* RunFiles.writeRunFile(root, runFile("run_1"))
        const writer = yield* RunFiles.stageWriter({
          workspace: root,
          runId: "run_1",
          position: 1,
          key: "draft",
          attempt: 1
        })
        yield* writer.writeInput({ request: "write a note" })
        yield* writer.writeArtifact("note.md", "# Note\n")
        yield* writer.writeArtifact("data/facts.json", '{"a":1}')
        yield* writer.writeOutput({ text: "done" })
        const manifest = yield* writer.writeManifest(manifestFields(1))
        const stage = path.join(root, "runs", "run_1", "stages", "01-draft")
        assert.deepStrictEqual(fs.readdirSync(stage).sort(), [
          "artifacts",
          "input.json",
          "manifest.json",
          "output.json"
        ])
        assert.isTrue(fs.existsSync(path.join(root, "runs", "run_1", "run.json")))
        const onDisk = JSON.parse(fs.readFileSync(path.join(stage, "manifest.json"), "utf8"))
        assert.deepStrictEqual(onDisk, manifest)
        assert.deepStrictEqual(Object.keys(onDisk).sort(), [
          "artifacts",
          "attempt",
          "event_id",
          "finished_at",
          "run_id",
          "stage_key",
          "stage_position",
          "started_at",
          "status",
          "thread_id"
        ])
        assert.deepStrictEqual(
          onDisk.artifacts.map((a: { path: string; kind: string; size: number }) => [a.path, a.kind, a.size]),
          [
            ["note.md", "markdown", 7],
            ["data/facts.json", "json", 7]
          ]
        )
        assert.strictEqual(onDisk.artifacts[0].sha256, RunFiles.sha256("# Note\n"))
        const report = yield* RunFiles.verify(root, "run_1")
        assert.isTrue(report.ok)
        assert.strictEqual(report.artifacts, 2)
        // No temporary file is left behind.
        assert.deepStrictEqual(fs.readdirSync(path.join(stage, "artifacts")).sort(), ["data", "note.md"])
      })
  )

  it.effect("never overwrites: an existing file, artifact or run.json is refused and kept", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const again = yield* Effect.flip(RunFiles.writeRunFile(root, { ...runFile("run_1"), request: "other" }))
      assert.strictEqual(again._tag, "FileError")
      assert.include(fs.readFileSync(path.join(root, "runs", "run_1", "run.json"), "utf8"), "write a note")
      const writer = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "draft",
        attempt: 1
      })
      yield* writer.writeArtifact("a.txt", "one")
      const second = yield* Effect.flip(writer.writeArtifact("a.txt", "two"))
      assert.include(second.message, "never overwritten")
      assert.strictEqual(fs.readFileSync(path.join(writer.artifactsDirectory, "a.txt"), "utf8"), "one")
    })
  )

  it.effect("refuses path traversal, absolute and hidden paths, and artifacts over the cap", () =>
    Effect.gen(function* () {
      const root = workspace()
      const writer = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "draft",
        attempt: 1,
        maxArtifactBytes: 10
      })
      for (const bad of ["../escape.md", "a/../../b", "/etc/passwd", ".hidden", "", "a//b"]) {
        const error = yield* Effect.flip(writer.writeArtifact(bad, "x"))
        assert.strictEqual(error._tag, "FileError", bad)
      }
      const big = yield* Effect.flip(writer.writeArtifact("big.txt", "x".repeat(11)))
      assert.include(big.message, "cap")
      fs.symlinkSync(os.tmpdir(), path.join(writer.artifactsDirectory, "link"))
      const throughLink = yield* Effect.flip(writer.writeArtifact("link/x.txt", "x"))
      assert.include(throughLink.message, "symbolic link")
      assert.isFalse(fs.existsSync(path.join(root, "runs", "run_1", "stages", "escape.md")))
      assert.deepStrictEqual(writer.artifacts(), [])
    })
  )

  it.effect("a retry keeps the earlier attempt's files and manifest beside the new one", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const first = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "draft",
        attempt: 1
      })
      yield* first.writeInput({ request: "r" })
      yield* first.writeArtifact("partial.md", "half")
      yield* first.writeManifest(manifestFields(1, "failed"))
      const before = fs.readFileSync(path.join(first.directory, "manifest.json"))
      const second = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "draft",
        attempt: 2
      })
      yield* second.writeArtifact("final.md", "whole")
      yield* second.writeManifest(manifestFields(2))
      const stages = path.join(root, "runs", "run_1", "stages")
      assert.deepStrictEqual(fs.readdirSync(stages).sort(), ["01-draft", "01-draft.attempt-1"])
      assert.deepStrictEqual(
        fs.readFileSync(path.join(stages, "01-draft.attempt-1", "manifest.json")),
        before
      )
      assert.strictEqual(
        fs.readFileSync(path.join(stages, "01-draft.attempt-1", "artifacts", "partial.md"), "utf8"),
        "half"
      )
      const report = yield* RunFiles.verify(root, "run_1")
      assert.deepStrictEqual(report.checked, ["01-draft", "01-draft.attempt-1"])
      assert.isTrue(report.ok)
      // Asking for an attempt that is already on disk is refused.
      const stale = yield* Effect.flip(
        RunFiles.stageWriter({ workspace: root, runId: "run_1", position: 1, key: "draft", attempt: 2 })
      )
      assert.include(stale.message, "overwrite")
    })
  )

  it.effect("verify finds changed, missing and unlisted artifacts", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const writer = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "draft",
        attempt: 1
      })
      yield* writer.writeArtifact("a.md", "aaa")
      yield* writer.writeArtifact("b.md", "bbb")
      yield* writer.writeManifest(manifestFields(1))
      fs.writeFileSync(path.join(writer.artifactsDirectory, "a.md"), "aab")
      fs.rmSync(path.join(writer.artifactsDirectory, "b.md"))
      fs.writeFileSync(path.join(writer.artifactsDirectory, "c.md"), "c")
      const report = yield* RunFiles.verify(root, "run_1")
      assert.isFalse(report.ok)
      assert.deepStrictEqual(
        report.problems.map((p) => [p.path, p.problem]),
        [
          ["a.md", "sha256 differs from the manifest"],
          ["b.md", "missing"],
          ["c.md", "not listed in the manifest"]
        ]
      )
      const notARun = yield* Effect.flip(RunFiles.verify(root, "run_nope"))
      assert.include(notARun.message, "no run.json")
    })
  )

  it.effect(
    "write_artifact is a core Tool: it writes in the stage, and a bad path becomes an error result",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const writer = yield* RunFiles.stageWriter({
          workspace: root,
          runId: "run_1",
          position: 1,
          key: "draft",
          attempt: 1
        })
        const published: Array<string> = []
        const tool = RunFiles.writeArtifactTool(writer, (entry) =>
          Effect.sync(() => published.push(entry.path))
        )
        const ok = yield* Tool.call(tool, {
          id: "c1",
          name: "write_artifact",
          arguments: '{"path":"x.md","content":"hi"}'
        })
        assert.isNotTrue(ok.isError)
        const bad = yield* Tool.call(tool, {
          id: "c2",
          name: "write_artifact",
          arguments: '{"path":"../x.md","content":"hi"}'
        })
        assert.isTrue(bad.isError)
        assert.deepStrictEqual(published, ["x.md"])
      })
  )
})
