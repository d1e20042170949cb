import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Printable, Tool } from "@noema/core"
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

/** The writer of the draft stage's attempt (the first unless `options` says), in `root`. */
const draftWriter = (root: string, options: Partial<RunFiles.StageWriterOptions> = {}) =>
  RunFiles.stageWriter({ workspace: root, runId: "run_1", position: 1, key: "draft", attempt: 1, ...options })

describe("RunFiles", () => {
  it.effect(
    "writes the contract's files with exact names; the manifest lists every artifact with its hash",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        yield* RunFiles.writeRunFile(root, runFile("run_1"))
        const writer = yield* draftWriter(root)
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

  it("readRegularFile: no such file where its directory is missing or a dangling link; a link to a directory, or a file on the way, is refused", () => {
    const root = workspace()
    const real = path.join(root, "real")
    fs.mkdirSync(real)
    fs.writeFileSync(path.join(real, "a.txt"), "bytes")
    fs.writeFileSync(path.join(root, "plain"), "a file, not a directory")
    fs.symlinkSync(path.join(root, "nowhere"), path.join(root, "dangling"))
    fs.symlinkSync(real, path.join(root, "linked"))
    assert.strictEqual(RunFiles.readRegularFile(root, path.join(real, "a.txt"))?.toString(), "bytes")
    assert.isUndefined(RunFiles.readRegularFile(root, path.join(real, "b.txt")))
    assert.isUndefined(RunFiles.readRegularFile(root, path.join(root, "missing", "a.txt")))
    assert.isUndefined(RunFiles.readRegularFile(root, path.join(root, "plain", "x", "a.txt")))
    assert.throws(() => RunFiles.readRegularFile(root, path.join(root, "plain", "a.txt")), /not a directory/)
    assert.isUndefined(RunFiles.readRegularFile(root, path.join(root, "dangling", "a.txt")))
    assert.throws(() => RunFiles.readRegularFile(root, path.join(root, "linked", "a.txt")), /symbolic link/)
  })

  it("readRegularFile in one pass of reads (Walked): each directory on the way is looked at once; one not walked yet is still checked", () => {
    const root = workspace()
    const real = path.join(root, "real")
    fs.mkdirSync(path.join(real, "sub"), { recursive: true })
    fs.writeFileSync(path.join(real, "a.txt"), "a")
    fs.writeFileSync(path.join(real, "sub", "b.txt"), "b")
    fs.symlinkSync(real, path.join(root, "linked"))
    const walked: RunFiles.Walked = new Set()
    assert.strictEqual(
      RunFiles.readRegularFile(root, path.join(real, "a.txt"), undefined, walked)?.toString(),
      "a"
    )
    assert.deepStrictEqual([...walked], [real])
    assert.strictEqual(
      RunFiles.readRegularFile(root, path.join(real, "sub", "b.txt"), undefined, walked)?.toString(),
      "b"
    )
    assert.deepStrictEqual([...walked], [real, path.join(real, "sub")])
    assert.throws(
      () => RunFiles.readRegularFile(root, path.join(root, "linked", "a.txt"), undefined, walked),
      /symbolic link/
    )
    assert.deepStrictEqual([...walked], [real, path.join(real, "sub")], "a link is never taken as walked")
    // What the pass found real is not looked at again (a pass is one go: the next one looks again).
    fs.rmSync(path.join(real, "sub"), { recursive: true })
    fs.symlinkSync(real, path.join(real, "sub"))
    assert.strictEqual(
      RunFiles.readRegularFile(root, path.join(real, "sub", "a.txt"), undefined, walked)?.toString(),
      "a"
    )
    assert.throws(() => RunFiles.readRegularFile(root, path.join(real, "sub", "a.txt")), /symbolic link/)
  })

  it.effect(
    "readRunFile gives back what writeRunFile wrote, against the sha256 it returned; bytes changed since are checked, not taken as known",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const file = runFile("run_1")
        const sha = yield* RunFiles.writeRunFile(root, file)
        assert.strictEqual(sha, RunFiles.sha256(RunFiles.encodeRunFile(file)))
        assert.deepStrictEqual(
          yield* RunFiles.readRunFile(root, { runId: "run_1", runFileSha256: sha }),
          file
        )
        const onDisk = path.join(root, "runs", "run_1", "run.json")
        fs.chmodSync(onDisk, 0o600)
        fs.writeFileSync(onDisk, JSON.stringify({ ...file, request: "other" }))
        const changed = yield* Effect.flip(RunFiles.readRunFile(root, { runId: "run_1", runFileSha256: sha }))
        assert.strictEqual(changed._tag, "RunFileChanged")
        fs.writeFileSync(onDisk, JSON.stringify({ ...file, stages: "none" }))
        const invalid = yield* Effect.flip(RunFiles.readRunFile(root, { runId: "run_1" }))
        assert.include(invalid.message, "not a run file")
      })
  )

  it.effect("never overwrites: an existing file, artifact or run.json is refused and kept", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const again = yield* Effect.flip(RunFiles.writeRunFile(root, { ...runFile("run_1"), request: "other" }))
      assert.strictEqual(again._tag, "FileError")
      assert.include(fs.readFileSync(path.join(root, "runs", "run_1", "run.json"), "utf8"), "write a note")
      const writer = yield* draftWriter(root)
      yield* writer.writeArtifact("a.txt", "one")
      const second = yield* Effect.flip(writer.writeArtifact("a.txt", "two"))
      assert.include(second.message, "never overwritten")
      assert.strictEqual(fs.readFileSync(path.join(writer.artifactsDirectory, "a.txt"), "utf8"), "one")
      // Two writes of one name at once: one is written, the other refused, and listed once.
      const both = yield* Effect.all(
        [writer.writeArtifact("b.txt", "one"), writer.writeArtifact("b.txt", "two")].map(Effect.result),
        { concurrency: "unbounded" }
      )
      const written = both.findIndex((result) => result._tag === "Success")
      assert.strictEqual(both.filter((result) => result._tag === "Success").length, 1)
      assert.strictEqual(
        fs.readFileSync(path.join(writer.artifactsDirectory, "b.txt"), "utf8"),
        ["one", "two"][written]
      )
      assert.deepStrictEqual(
        writer.artifacts().map((entry) => entry.path),
        ["a.txt", "b.txt"]
      )
    })
  )

  it.effect(
    "a file of the attempt is written once: a second input.json is refused, one put in its directory by another process is kept and fails the attempt",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        yield* RunFiles.writeRunFile(root, runFile("run_1"))
        const writer = yield* draftWriter(root)
        yield* writer.writeInput({ request: "ours" })
        const again = yield* Effect.flip(writer.writeInput({ request: "again" }))
        assert.include(again.message, "never overwritten")
        // Another process writes output.json in the directory the attempt made.
        const output = path.join(writer.directory, "output.json")
        fs.writeFileSync(output, "theirs")
        // Refused at once, or when it lands: then the manifest, which waits for it, is not written.
        const written = yield* Effect.result(writer.writeOutput({ text: "ours" }))
        if (written._tag === "Success") {
          const manifest = yield* Effect.flip(writer.writeManifest(manifestFields(1)))
          assert.include(manifest.message, "output.json")
        }
        assert.strictEqual(fs.readFileSync(output, "utf8"), "theirs")
        yield* writer.settle
        assert.include(fs.readFileSync(path.join(writer.directory, "input.json"), "utf8"), "ours")
        // No temporary file is left behind.
        assert.deepStrictEqual(fs.readdirSync(writer.directory).sort(), [
          "artifacts",
          "input.json",
          "output.json"
        ])
      })
  )

  it.effect(
    "artifacts written at once are listed in the order they were asked for, not as their disks finished",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        yield* RunFiles.writeRunFile(root, runFile("run_1"))
        const writer = yield* draftWriter(root)
        // Largest first: the first asked for is the last to reach the disk.
        const names = Array.from({ length: 12 }, (_, index) => `part-${String(index).padStart(2, "0")}.md`)
        const written = yield* Effect.forEach(
          names,
          (name, index) => writer.writeArtifact(name, "x".repeat((names.length - index) * 60_000)),
          { concurrency: "unbounded" }
        )
        assert.deepStrictEqual(
          written.map((entry) => entry.path),
          names
        )
        // A refused write gives its place up: the order stays the order of the writes that were made.
        yield* Effect.flip(writer.writeArtifact(names[0]!, "again"))
        assert.deepStrictEqual(
          writer.artifacts().map((entry) => entry.path),
          names
        )
        const manifest = yield* writer.writeManifest(manifestFields(1))
        assert.deepStrictEqual(
          manifest.artifacts.map((entry) => entry.path),
          names
        )
      })
  )

  it.effect("refuses path traversal, absolute and hidden paths, and artifacts over the cap", () =>
    Effect.gen(function* () {
      const root = workspace()
      const writer = yield* draftWriter(root, { maxArtifactBytes: 10 })
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
      const first = yield* draftWriter(root)
      yield* first.writeInput({ request: "r" })
      yield* first.writeArtifact("partial.md", "half")
      yield* first.writeManifest(manifestFields(1, "failed"))
      const before = fs.readFileSync(path.join(first.directory, "manifest.json"))
      const second = yield* draftWriter(root, { attempt: 2 })
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
      const stale = yield* Effect.flip(draftWriter(root, { attempt: 2 }))
      assert.include(stale.message, "overwrite")
    })
  )

  it.effect("verify finds changed, missing and unlisted artifacts", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const writer = yield* draftWriter(root)
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
        const writer = yield* draftWriter(root)
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

  it.effect(
    "write_artifact refuses control and bidirectional-text characters, saying which; names are NFC",
    () =>
      Effect.gen(function* () {
        const root = workspace()
        const writer = yield* draftWriter(root)
        const tool = RunFiles.writeArtifactTool(writer)
        const hostile = [
          "title\u001b]0;pwned\u0007.md",
          "ok.md\n\u2713 verified.md",
          "report\u202egpj.md",
          "a\u2066b.md",
          "c\u200fd.md",
          "e\u061cf.md",
          "del\u007f.md",
          "csi\u009b2J.md"
        ]
        for (const name of hostile) {
          const result = yield* Tool.call(tool, {
            id: "c",
            name: "write_artifact",
            arguments: JSON.stringify({ path: name, content: "x" })
          })
          assert.isTrue(result.isError, name)
          assert.match(result.content, /is U\+[0-9A-F]{4}, a control or bidirectional-text character/, name)
          // The error quotes the name with the character escaped, not as it is.
          assert.isUndefined(Printable.firstControl(result.content), name)
        }
        assert.deepStrictEqual(fs.readdirSync(writer.artifactsDirectory), [])
        // "é" as e + combining accent is stored (and published) as the one character.
        const entry = yield* writer.writeArtifact("caf\u0065\u0301.md", "x")
        assert.strictEqual(entry.path, "caf\u00e9.md")
        assert.deepStrictEqual(fs.readdirSync(writer.artifactsDirectory), ["caf\u00e9.md"])
      })
  )

  it.effect("what a run writes is its owner's alone: directories 0700, files 0600", () =>
    Effect.gen(function* () {
      // A workspace that does not exist yet, outside any home: every level is created here.
      const root = path.join(workspace(), "elsewhere", "workspace")
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const writer = yield* draftWriter(root)
      yield* writer.writeInput({ request: "write a note" })
      yield* writer.writeArtifact("deep/note.md", "# Note\n")
      yield* writer.writeOutput({ text: "done" })
      yield* writer.writeManifest(manifestFields(1))
      const modes = [path.dirname(root), root, ...fs.readdirSync(root, { recursive: true }).map(String)].map(
        (entry) => {
          const full = path.isAbsolute(entry) ? entry : path.join(root, entry)
          const stat = fs.statSync(full)
          return [stat.isDirectory() ? "d" : "f", (stat.mode & 0o777).toString(8)]
        }
      )
      assert.isAbove(modes.length, 8)
      for (const [kind, mode] of modes) assert.strictEqual(mode, kind === "d" ? "700" : "600")
    })
  )

  it.effect("verify reads run.json: a truncated or foreign one fails; an unrecorded sha256 says so", () =>
    Effect.gen(function* () {
      const root = workspace()
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const file = path.join(root, "runs", "run_1", "run.json")
      const whole = fs.readFileSync(file)
      const unrecorded = yield* RunFiles.verify(root, "run_1")
      assert.isTrue(unrecorded.ok)
      assert.strictEqual(unrecorded.runFile, "not recorded")
      const recorded = yield* RunFiles.verify(root, "run_1", RunFiles.sha256(whole))
      assert.isTrue(recorded.ok)
      assert.strictEqual(recorded.runFile, "matches")

      fs.writeFileSync(file, whole.subarray(0, whole.length - 20))
      const truncated = yield* RunFiles.verify(root, "run_1")
      assert.isFalse(truncated.ok)
      assert.deepStrictEqual(
        truncated.problems.map((p) => [p.stage, p.path]),
        [["", "run.json"]]
      )
      assert.match(truncated.problems[0]?.problem ?? "", /^not a run file/)
      const changed = yield* RunFiles.verify(root, "run_1", RunFiles.sha256(whole))
      assert.isFalse(changed.ok)
      assert.strictEqual(changed.runFile, "changed")
      assert.match(changed.problems[0]?.problem ?? "", /^changed after the run was created/)
      const read = yield* Effect.flip(RunFiles.readRunFile(root, { runId: "run_1" }))
      assert.strictEqual(read._tag, "FileError")

      fs.writeFileSync(file, RunFiles.encodeRunFile(runFile("run_2")))
      const foreign = yield* RunFiles.verify(root, "run_1")
      assert.isFalse(foreign.ok)
      assert.include(foreign.problems[0]?.problem, "another run (run_2)")
    })
  )

  // Another local user (or a hostile tool) may put links and FIFOs where a run's files are:
  // verify and the readers must neither follow them nor block on them.
  it.effect("verify and readRunFile refuse links and FIFOs instead of following or waiting on them", () =>
    Effect.gen(function* () {
      const root = workspace()
      const outside = path.join(root, "outside.md")
      fs.writeFileSync(outside, "aaa")
      yield* RunFiles.writeRunFile(root, runFile("run_1"))
      const writer = yield* draftWriter(root)
      yield* writer.writeArtifact("a.md", "aaa")
      yield* writer.writeArtifact("b.md", "bbb")
      yield* writer.writeArtifact("sub/c.md", "ccc")
      yield* writer.writeManifest(manifestFields(1))
      const artifacts = writer.artifactsDirectory
      // a.md: a link to a file with the same bytes; b.md: a FIFO; sub/: a link to a directory.
      fs.rmSync(path.join(artifacts, "a.md"))
      fs.symlinkSync(outside, path.join(artifacts, "a.md"))
      fs.rmSync(path.join(artifacts, "b.md"))
      execFileSync("mkfifo", [path.join(artifacts, "b.md")])
      const elsewhere = path.join(root, "elsewhere")
      fs.mkdirSync(elsewhere)
      fs.writeFileSync(path.join(elsewhere, "c.md"), "ccc")
      fs.rmSync(path.join(artifacts, "sub"), { recursive: true })
      fs.symlinkSync(elsewhere, path.join(artifacts, "sub"))
      const report = yield* RunFiles.verify(root, "run_1")
      assert.isFalse(report.ok)
      assert.deepStrictEqual(
        report.problems.map((p) => [p.path, p.problem]),
        [
          ["a.md", "refused: a symbolic link, not a file"],
          ["b.md", "refused: not a regular file"],
          ["sub/c.md", "refused: the path goes through a symbolic link"],
          ["sub", "not listed in the manifest"]
        ]
      )
      // run.json as a FIFO: refused at once, not waited on.
      const file = path.join(root, "runs", "run_1", "run.json")
      fs.rmSync(file)
      execFileSync("mkfifo", [file])
      const read = yield* Effect.flip(RunFiles.readRunFile(root, { runId: "run_1" }))
      assert.include(read.message, "not a regular file")
      const verified = yield* Effect.flip(RunFiles.verify(root, "run_1"))
      assert.include(verified.message, "not a regular file")
    })
  )
})
