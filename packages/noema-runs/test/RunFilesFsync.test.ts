/**
 * The fsyncs a stage attempt makes, counted on the real calls (`node:fs` is wrapped for the
 * test, and its ESM bindings synced so RunFiles sees the wrapper): each file fsynced before it
 * is linked, every directory with a new name fsynced before the manifest is linked, the
 * manifest's directory after it, and nothing more.
 */
import * as fs from "node:fs"
import { createRequire, syncBuiltinESMExports } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as RunFiles from "../src/RunFiles.js"

type Step = { readonly fsync: string } | { readonly link: string }

const steps: Array<Step> = []
const cjs = createRequire(import.meta.url)("node:fs") as typeof fs
const original = { fsync: cjs.fsync, fsyncSync: cjs.fsyncSync, linkSync: cjs.linkSync }
const pathOf = (fd: number) => fs.readlinkSync(`/proc/self/fd/${fd}`)

/** While set, the fsyncs off the event loop wait here (by path) until a test lets them go on. */
let held: Map<string, (error?: NodeJS.ErrnoException) => void> | undefined

beforeAll(() => {
  cjs.fsync = ((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
    const file = pathOf(fd)
    steps.push({ fsync: file })
    if (held !== undefined) {
      held.set(file, (error) => (error === undefined ? original.fsync(fd, callback) : callback(error)))
      return
    }
    return original.fsync(fd, callback)
  }) as typeof fs.fsync
  cjs.fsyncSync = (fd: number) => {
    steps.push({ fsync: pathOf(fd) })
    return original.fsyncSync(fd)
  }
  cjs.linkSync = (from: fs.PathLike, to: fs.PathLike) => {
    steps.push({ link: String(to) })
    return original.linkSync(from, to)
  }
  syncBuiltinESMExports()
})
afterAll(() => {
  Object.assign(cjs, original)
  syncBuiltinESMExports()
})

const manifestFields = (position: number, key: string) => ({
  stage_key: key,
  stage_position: position,
  attempt: 1,
  status: "completed" as const,
  started_at: "2026-11-24T08:00:00.000Z",
  finished_at: "2026-11-24T08:00:01.000Z",
  thread_id: "thr_1",
  run_id: "run_1",
  event_id: "evt_1"
})

/** One attempt as the executor writes it: input, one artifact, output, manifest. */
const writeStage = (root: string, position: number, key: string) =>
  Effect.gen(function* () {
    const writer = yield* RunFiles.stageWriter({ workspace: root, runId: "run_1", position, key, attempt: 1 })
    yield* writer.writeInput({ request: "r" })
    yield* writer.writeArtifact(`${key}.md`, "answer\n")
    yield* writer.writeOutput({ text: "answer", artifacts: [`${key}.md`] })
    yield* writer.writeManifest(manifestFields(position, key))
    return writer.directory
  })

describe("RunFiles: a stage's fsyncs", () => {
  it.effect("each needed fsync once: 4 files, the 3 directories with new names, then the manifest's", () =>
    Effect.gen(function* () {
      const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-fsync-")))
      yield* writeStage(root, 1, "one")
      steps.length = 0
      const stage = yield* writeStage(root, 2, "two")
      const fsynced = steps.flatMap((step) => ("fsync" in step ? [step.fsync] : []))
      const files = fsynced.filter((file) => path.basename(file).endsWith(".tmp"))
      const directories = fsynced.filter((file) => !path.basename(file).endsWith(".tmp"))
      assert.deepStrictEqual(
        files.map((file) => path.basename(file).split(".")[1]),
        ["input", "two", "output", "manifest"]
      )
      assert.deepStrictEqual(directories.map((directory) => path.relative(root, directory)).sort(), [
        "runs/run_1/stages",
        "runs/run_1/stages/02-two",
        "runs/run_1/stages/02-two",
        "runs/run_1/stages/02-two/artifacts"
      ])
      // Every file's bytes are fsynced before its name is linked.
      steps.forEach((step, index) => {
        if (!("link" in step)) return
        const name = path.basename(step.link)
        assert.isTrue(
          steps
            .slice(0, index)
            .some((earlier) => "fsync" in earlier && path.basename(earlier.fsync).startsWith(`.${name}.`)),
          `${name} linked before its bytes were fsynced`
        )
      })
      // The manifest is linked only once every directory holding the attempt's names is fsynced,
      // and its own directory is fsynced after it.
      const manifestLink = steps.findIndex((step) => "link" in step && step.link.endsWith("manifest.json"))
      const before = new Set(
        steps.slice(0, manifestLink).flatMap((step) => ("fsync" in step ? [step.fsync] : []))
      )
      for (const directory of [path.dirname(stage), stage, path.join(stage, "artifacts")])
        assert.isTrue(before.has(directory), `${directory} not fsynced before the manifest was linked`)
      assert.deepStrictEqual(steps.slice(manifestLink + 1), [{ fsync: stage }])
    })
  )

  /** Lets the fiber run until `done()` holds, for at most `rounds` turns of the scheduler (no clock). */
  const until = (done: () => boolean, rounds = 2000) =>
    Effect.gen(function* () {
      for (let round = 0; round < rounds && !done(); round++)
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
    })

  /**
   * A stage writer in a fresh workspace whose fsyncs off the event loop wait, by file, until the
   * test releases them (with an error, to fail one); the test's scope lets the rest go on.
   */
  const heldWriter = Effect.acquireRelease(
    Effect.gen(function* () {
      const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-fsync-")))
      const writer = yield* RunFiles.stageWriter({
        workspace: root,
        runId: "run_1",
        position: 1,
        key: "one",
        attempt: 1
      })
      const waiting = new Map<string, (error?: NodeJS.ErrnoException) => void>()
      held = waiting
      const pendingOf = (name: string) =>
        [...waiting].find(([file]) => path.basename(file).startsWith(`.${name}.`))?.[1]
      return {
        writer,
        waiting,
        /** Whether `name`'s temporary file is waiting for its fsync. */
        isHeld: (name: string) => pendingOf(name) !== undefined,
        /** Lets `name`'s fsync go on, or fail with `error`. */
        release: (name: string, error?: NodeJS.ErrnoException) => {
          const release = pendingOf(name)
          assert.isDefined(release, `${name} is not waiting for its fsync`)
          release(error)
        }
      }
    }),
    () =>
      Effect.sync(() => {
        held = undefined
      })
  )

  const eio = () => Object.assign(new Error("EIO: i/o error, fsync"), { code: "EIO" })

  it.effect(
    "input.json and output.json do not wait for their fsyncs: they land together, before the manifest",
    () =>
      Effect.gen(function* () {
        const { writer, waiting, isHeld } = yield* heldWriter
        const files = Effect.gen(function* () {
          yield* writer.writeInput({ request: "r" })
          yield* writer.writeOutput({ text: "answer", artifacts: [] })
        })
        const fiber = yield* Effect.forkChild(files)
        yield* until(() => isHeld("input.json") && isHeld("output.json"))
        assert.isTrue(
          isHeld("input.json") && isHeld("output.json"),
          "output.json waited for input.json's fsync"
        )
        yield* Fiber.join(fiber)
        const manifest = yield* Effect.forkChild(writer.writeManifest(manifestFields(1, "one")))
        yield* until(() => isHeld("manifest.json"))
        // Nothing is linked while its bytes are not on disk; the manifest waits for both.
        for (const name of ["input.json", "output.json", "manifest.json"])
          assert.isFalse(fs.existsSync(path.join(writer.directory, name)), `${name} linked before its fsync`)
        held = undefined
        for (const release of waiting.values()) release()
        yield* Fiber.join(manifest)
        for (const name of ["input.json", "output.json", "manifest.json"])
          assert.isTrue(fs.existsSync(path.join(writer.directory, name)), `${name} not in place`)
      })
  )

  it.effect("a file that fails on its way fails the manifest, naming the file; nothing is claimed", () =>
    Effect.gen(function* () {
      const { writer, release } = yield* heldWriter
      yield* writer.writeInput({ request: "r" })
      held = undefined
      release("input.json", eio())
      const error = yield* Effect.flip(writer.writeManifest(manifestFields(1, "one")))
      assert.strictEqual(error.path, path.join(writer.directory, "input.json"))
      assert.strictEqual(error.systemError, "EIO")
      assert.isFalse(fs.existsSync(path.join(writer.directory, "manifest.json")))
      assert.isFalse(fs.existsSync(path.join(writer.directory, "input.json")))
      // Told once: the failed attempt's own manifest can still be written.
      const failed = yield* writer.writeManifest({ ...manifestFields(1, "one"), status: "failed" })
      assert.strictEqual(failed.status, "failed")
    })
  )

  it.effect(
    "the answer and output.json are fsynced together; output.json lands only once the answer has",
    () =>
      Effect.gen(function* () {
        const { writer, isHeld, release } = yield* heldWriter
        const answer = yield* Effect.forkChild(writer.writeAnswer("one.md", "answer\n", { text: "answer" }))
        yield* until(() => isHeld("one.md") && isHeld("output.json"))
        assert.isTrue(isHeld("one.md"), "the answer's fsync was not started")
        assert.isTrue(isHeld("output.json"), "output.json's fsync waited for the answer's")
        // output.json's bytes are on disk first: it still waits for the answer it names.
        release("output.json")
        yield* until(() => fs.existsSync(path.join(writer.directory, "output.json")), 200)
        assert.isFalse(
          fs.existsSync(path.join(writer.directory, "output.json")),
          "output.json before the answer"
        )
        held = undefined
        release("one.md")
        const entry = yield* Fiber.join(answer)
        assert.strictEqual(entry.path, "one.md")
        yield* writer.writeManifest(manifestFields(1, "one"))
        for (const name of ["output.json", "artifacts/one.md", "manifest.json"])
          assert.isTrue(fs.existsSync(path.join(writer.directory, name)), `${name} not in place`)
      })
  )

  it.effect("an answer that fails on its way leaves output.json unwritten, for the attempt's error", () =>
    Effect.gen(function* () {
      const { writer, isHeld, release } = yield* heldWriter
      const answer = yield* Effect.forkChild(
        Effect.flip(writer.writeAnswer("one.md", "answer\n", { text: "answer" }))
      )
      yield* until(() => isHeld("one.md") && isHeld("output.json"))
      held = undefined
      release("output.json")
      release("one.md", eio())
      const error = yield* Fiber.join(answer)
      assert.strictEqual(error.systemError, "EIO")
      yield* writer.settle
      assert.isFalse(fs.existsSync(path.join(writer.directory, "output.json")))
      assert.deepStrictEqual(
        fs.readdirSync(writer.directory).filter((name) => name.endsWith(".tmp")),
        [],
        "output.json's temporary file removed"
      )
      // The attempt's error takes output.json's name; its manifest lists no artifact.
      yield* writer.writeOutput({ error: { error_code: "file_error" } })
      const failed = yield* writer.writeManifest({ ...manifestFields(1, "one"), status: "failed" })
      assert.deepStrictEqual(failed.artifacts, [])
      assert.include(fs.readFileSync(path.join(writer.directory, "output.json"), "utf8"), "file_error")
    })
  )
})
