/**
 * RunFiles: the file contract of a run, written so that nothing is ever half there.
 *
 * Under the workspace:
 *
 *     runs/<run_id>/run.json
 *     runs/<run_id>/stages/<nn>-<stage_key>/{input.json, output.json, manifest.json, artifacts/*}
 *
 * Every file goes to a temporary file in the same directory, is fsynced, and
 * is then linked into place (`link` refuses an existing name, so nothing is
 * ever overwritten; the temporary name is then removed), and the directory is
 * fsynced so the new name survives a crash. `manifest.json` is written last,
 * after every artifact is complete: a manifest never describes a partial file.
 *
 * Attempts: the stage directory holds the latest attempt. When a stage is
 * retried, its earlier attempt's directory is renamed, whole and untouched, to
 * `stages/<nn>-<stage_key>.attempt-<k>/` (its manifest says `attempt: k`), and
 * the new attempt starts an empty `stages/<nn>-<stage_key>/`.
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { Tool } from "@noema/core"
import { Effect, Schema } from "effect"
import { type ArtifactEntry, type RunView, stageDirectory } from "./Run.js"

export class FileError extends Schema.TaggedError<FileError>()("FileError", {
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

const describe = (error: unknown): string => (error instanceof Error ? error.message : String(error))

// ---------------------------------------------------------------------------
// Atomic, never-overwriting writes
// ---------------------------------------------------------------------------

const fsyncDirectory = (directory: string) => {
  const fd = fs.openSync(directory, "r")
  try {
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** Creates `directory` (and parents), fsyncing each new one's parent. */
const ensureDirectory = (directory: string) => {
  if (fs.existsSync(directory)) return
  ensureDirectory(path.dirname(directory))
  fs.mkdirSync(directory)
  fsyncDirectory(path.dirname(directory))
}

/**
 * Writes `data` to `file`: temporary file, fsync, link into place (refused if
 * `file` exists), unlink the temporary name, fsync the directory.
 */
export const writeFileAtomic = (file: string, data: string | Uint8Array): void => {
  const directory = path.dirname(file)
  ensureDirectory(directory)
  const temporary = path.join(directory, `.${path.basename(file)}.${process.pid}.${crypto.randomUUID()}.tmp`)
  const fd = fs.openSync(temporary, "wx", 0o644)
  try {
    fs.writeFileSync(fd, data)
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
  try {
    fs.linkSync(temporary, file)
  } finally {
    fs.unlinkSync(temporary)
  }
  fsyncDirectory(directory)
}

const attempt = <A>(file: string, f: () => A): Effect.Effect<A, FileError> =>
  Effect.try({ try: f, catch: (error) => new FileError({ path: file, detail: describe(error) }) })

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`

export const sha256 = (data: string | Uint8Array): string => createHash("sha256").update(data).digest("hex")

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

export const runDirectory = (workspace: string, runId: string): string => path.join(workspace, "runs", runId)

export const stagePath = (workspace: string, runId: string, position: number, key: string): string =>
  path.join(runDirectory(workspace, runId), "stages", stageDirectory(position, key))

// ---------------------------------------------------------------------------
// run.json, input.json, output.json, manifest.json
// ---------------------------------------------------------------------------

/** The run's fixed facts (its status lives in the store's timeline: run.json is never rewritten). */
export interface RunFile {
  readonly run_id: string
  readonly thread_id: string
  readonly request: string
  readonly pipeline: string
  /** The whole pipeline the run was created with, so any process can carry the run on. */
  readonly pipeline_definition?: unknown
  readonly created_at: string
  readonly stages: ReadonlyArray<{
    readonly position: number
    readonly stage_key: string
    readonly needs_approval: boolean
  }>
}

/** The run's run.json. */
export const readRunFile = (workspace: string, runId: string): Effect.Effect<RunFile, FileError> => {
  const file = path.join(runDirectory(workspace, runId), "run.json")
  return attempt(file, () => JSON.parse(fs.readFileSync(file, "utf8")) as RunFile)
}

export const writeRunFile = (workspace: string, run: RunFile): Effect.Effect<void, FileError> => {
  const file = path.join(runDirectory(workspace, run.run_id), "run.json")
  return attempt(file, () => writeFileAtomic(file, json(run)))
}

export interface Manifest {
  readonly stage_key: string
  readonly stage_position: number
  readonly attempt: number
  readonly status: "completed" | "failed"
  readonly started_at: string
  readonly finished_at: string
  readonly thread_id: string
  readonly run_id: string
  readonly event_id: string
  readonly artifacts: ReadonlyArray<ArtifactEntry>
}

/** The stage's input: an object with a `request` string (the stage's minimal contract). */
export const StageInput = Schema.Struct({
  request: Schema.String,
  previous: Schema.optional(Schema.Array(Schema.Struct({ stage_key: Schema.String, output: Schema.Unknown })))
})
export type StageInput = typeof StageInput.Type

/** One attempt of one stage: its directory, and the writes it may make, in order. */
export interface StageWriter {
  readonly directory: string
  readonly artifactsDirectory: string
  readonly writeInput: (input: unknown) => Effect.Effect<void, FileError>
  readonly writeArtifact: (
    relative: string,
    content: string,
    kind?: string
  ) => Effect.Effect<ArtifactEntry, FileError>
  readonly writeOutput: (output: unknown) => Effect.Effect<void, FileError>
  /** Last: only after every artifact; lists them with their hashes. */
  readonly writeManifest: (manifest: Omit<Manifest, "artifacts">) => Effect.Effect<Manifest, FileError>
  readonly artifacts: () => ReadonlyArray<ArtifactEntry>
}

export interface StageWriterOptions {
  readonly workspace: string
  readonly runId: string
  readonly position: number
  readonly key: string
  readonly attempt: number
  /** Largest artifact in bytes. Default 1 MiB. */
  readonly maxArtifactBytes?: number
  /** Most artifacts per attempt. Default 100. */
  readonly maxArtifacts?: number
}

export const kindOf = (relative: string): string => {
  const extension = path.extname(relative).toLowerCase()
  return extension === ".md" || extension === ".markdown"
    ? "markdown"
    : extension === ".json"
      ? "json"
      : "text"
}

/**
 * The relative artifact path `relative` inside `root`, or why it is refused:
 * absolute paths, `..`, empty segments and hidden names are not allowed.
 */
export const confine = (root: string, relative: string): string | { readonly problem: string } => {
  if (relative.length === 0 || relative.length > 200)
    return { problem: "the path must have 1 to 200 characters" }
  if (path.isAbsolute(relative) || /^[a-zA-Z]:/.test(relative))
    return { problem: "the path must be relative" }
  const segments = relative.split(/[/\\]/)
  if (segments.some((segment) => segment === "" || segment === "." || segment === ".."))
    return { problem: "the path must not contain empty, '.' or '..' segments" }
  if (segments.some((segment) => segment.startsWith(".") || segment.includes("\0")))
    return { problem: "hidden or NUL names are not allowed" }
  const resolved = path.resolve(root, ...segments)
  if (!resolved.startsWith(root + path.sep)) return { problem: "the path leaves the artifacts directory" }
  return resolved
}

/**
 * The writer of one stage attempt. For attempt k > 1, the directory holding
 * the earlier attempt is first renamed to `<nn>-<key>.attempt-<k-1>`.
 */
export const stageWriter = (options: StageWriterOptions): Effect.Effect<StageWriter, FileError> => {
  const directory = stagePath(options.workspace, options.runId, options.position, options.key)
  const artifactsDirectory = path.join(directory, "artifacts")
  const maxBytes = options.maxArtifactBytes ?? 1024 * 1024
  const maxCount = options.maxArtifacts ?? 100
  const published: Array<ArtifactEntry> = []
  return attempt(directory, () => {
    if (fs.existsSync(directory)) {
      const manifest = readManifest(directory)
      const earlier = manifest?.attempt ?? options.attempt - 1
      if (earlier >= options.attempt)
        throw new Error(
          `attempt ${earlier} is already on disk; attempt ${options.attempt} would overwrite it`
        )
      const aside = `${directory}.attempt-${earlier}`
      if (fs.existsSync(aside)) throw new Error(`${aside} already exists`)
      fs.renameSync(directory, aside)
      fsyncDirectory(path.dirname(directory))
    }
    ensureDirectory(artifactsDirectory)
  }).pipe(
    Effect.as<StageWriter>({
      directory,
      artifactsDirectory,
      writeInput: (input) => {
        const file = path.join(directory, "input.json")
        return attempt(file, () => writeFileAtomic(file, json(input)))
      },
      writeOutput: (output) => {
        const file = path.join(directory, "output.json")
        return attempt(file, () => writeFileAtomic(file, json(output)))
      },
      writeArtifact: (relative, content, kind) => {
        const target = confine(artifactsDirectory, relative)
        if (typeof target !== "string")
          return Effect.fail(new FileError({ path: relative, detail: target.problem }))
        const bytes = Buffer.from(content, "utf8")
        if (bytes.length > maxBytes)
          return Effect.fail(
            new FileError({
              path: relative,
              detail: `${bytes.length} bytes is over the ${maxBytes}-byte cap`
            })
          )
        if (published.length >= maxCount)
          return Effect.fail(
            new FileError({ path: relative, detail: `at most ${maxCount} artifacts per stage` })
          )
        return attempt(relative, () => {
          // Every directory between the artifacts root and the file must be a real directory.
          let parent = path.dirname(target)
          ensureDirectory(parent)
          while (parent !== artifactsDirectory) {
            if (fs.lstatSync(parent).isSymbolicLink())
              throw new Error("the path goes through a symbolic link")
            parent = path.dirname(parent)
          }
          if (fs.existsSync(target))
            throw new Error("the artifact already exists: artifacts are never overwritten")
          writeFileAtomic(target, bytes)
          const entry: ArtifactEntry = {
            path: path.relative(artifactsDirectory, target).split(path.sep).join("/"),
            kind: kind ?? kindOf(relative),
            sha256: sha256(bytes),
            size: bytes.length
          }
          published.push(entry)
          return entry
        })
      },
      writeManifest: (fields) => {
        const file = path.join(directory, "manifest.json")
        const manifest: Manifest = { ...fields, artifacts: [...published] }
        return attempt(file, () => writeFileAtomic(file, json(manifest))).pipe(Effect.as(manifest))
      },
      artifacts: () => [...published]
    })
  )
}

/** The manifest in an attempt's directory, if it has one. */
export const readManifest = (directory: string): Manifest | undefined => {
  const file = path.join(directory, "manifest.json")
  if (!fs.existsSync(file)) return undefined
  return JSON.parse(fs.readFileSync(file, "utf8")) as Manifest
}

// ---------------------------------------------------------------------------
// write_artifact: the tool agents write artifacts with
// ---------------------------------------------------------------------------

/** A `write_artifact` tool bound to one stage attempt's artifacts directory. */
export const writeArtifactTool = (
  writer: StageWriter,
  onPublished: (entry: ArtifactEntry) => Effect.Effect<void> = () => Effect.void
) =>
  Tool.make({
    name: "write_artifact",
    description:
      "Write a file (Markdown, JSON or any text) as an artifact of the current stage. The path is relative to the stage's artifacts directory; an existing artifact is never overwritten.",
    parameters: Schema.Struct({
      path: Schema.String,
      content: Schema.String,
      kind: Schema.optional(Schema.String)
    }),
    annotations: { readOnly: false, destructive: false, idempotent: false },
    handler: ({ path: relative, content, kind }) =>
      writer.writeArtifact(relative, content, kind).pipe(
        Effect.tap(onPublished),
        Effect.map((entry) => `Wrote ${entry.path} (${entry.size} bytes, sha256 ${entry.sha256})`),
        Effect.mapError((error) => error.message)
      )
  })

/**
 * Where attempt `attempt` of a stage is: the stage directory holds its latest attempt
 * (`latest`), earlier ones were set aside as `<nn>-<key>.attempt-<k>`.
 */
export const attemptPath = (
  workspace: string,
  runId: string,
  position: number,
  key: string,
  attempt: number,
  latest: number
): string => {
  const directory = stagePath(workspace, runId, position, key)
  return attempt === latest ? directory : `${directory}.attempt-${attempt}`
}

/** An artifact's bytes, read from inside the attempt's `artifacts/` directory only. */
export const readArtifact = (
  attemptDirectory: string,
  relative: string,
  maxBytes = 4 * 1024 * 1024
): Effect.Effect<Uint8Array, FileError> => {
  const root = path.join(attemptDirectory, "artifacts")
  const target = confine(root, relative)
  if (typeof target !== "string")
    return Effect.fail(new FileError({ path: relative, detail: target.problem }))
  return attempt(target, () => {
    const size = fs.statSync(target).size
    if (size > maxBytes) throw new Error(`${size} bytes, more than the ${maxBytes} shown`)
    return new Uint8Array(fs.readFileSync(target))
  })
}

// ---------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------

export interface VerifyProblem {
  readonly stage: string
  readonly path: string
  readonly problem: string
}

export interface VerifyReport {
  readonly runId: string
  readonly ok: boolean
  /** Stage directories (and earlier attempts) with a manifest. */
  readonly checked: ReadonlyArray<string>
  readonly artifacts: number
  readonly problems: ReadonlyArray<VerifyProblem>
}

const listFiles = (root: string, prefix = ""): Array<string> =>
  fs.existsSync(root)
    ? fs
        .readdirSync(root, { withFileTypes: true })
        .flatMap((entry) =>
          entry.isDirectory()
            ? listFiles(path.join(root, entry.name), `${prefix}${entry.name}/`)
            : [`${prefix}${entry.name}`]
        )
    : []

/**
 * Re-hashes every artifact of every stage directory (earlier attempts
 * included) against its manifest; reports missing, changed and unlisted files.
 */
export const verify = (workspace: string, runId: string): Effect.Effect<VerifyReport, FileError> => {
  const runDir = runDirectory(workspace, runId)
  return attempt(runDir, () => {
    if (!fs.existsSync(path.join(runDir, "run.json"))) throw new Error("no run.json: not a run directory")
    const stagesDir = path.join(runDir, "stages")
    const problems: Array<VerifyProblem> = []
    const checked: Array<string> = []
    let artifacts = 0
    const stageDirs = fs.existsSync(stagesDir) ? fs.readdirSync(stagesDir).sort() : []
    for (const stage of stageDirs) {
      const directory = path.join(stagesDir, stage)
      let manifest: Manifest | undefined
      try {
        manifest = readManifest(directory)
      } catch (error) {
        problems.push({ stage, path: "manifest.json", problem: `unreadable: ${describe(error)}` })
        continue
      }
      if (manifest === undefined) continue // an attempt in flight: nothing is claimed yet
      checked.push(stage)
      const listed = new Set<string>()
      for (const entry of manifest.artifacts) {
        listed.add(entry.path)
        artifacts++
        const target = confine(path.join(directory, "artifacts"), entry.path)
        if (typeof target !== "string") {
          problems.push({ stage, path: entry.path, problem: target.problem })
          continue
        }
        if (!fs.existsSync(target)) {
          problems.push({ stage, path: entry.path, problem: "missing" })
          continue
        }
        const bytes = fs.readFileSync(target)
        if (bytes.length !== entry.size)
          problems.push({
            stage,
            path: entry.path,
            problem: `size ${bytes.length}, manifest says ${entry.size}`
          })
        else if (sha256(bytes) !== entry.sha256)
          problems.push({ stage, path: entry.path, problem: "sha256 differs from the manifest" })
      }
      for (const file of listFiles(path.join(directory, "artifacts"))) {
        if (/(^|\/)\.[^/]*\.tmp$/.test(file)) continue // a write cut off before its rename: never claimed
        if (!listed.has(file)) problems.push({ stage, path: file, problem: "not listed in the manifest" })
      }
    }
    return { runId, ok: problems.length === 0, checked, artifacts, problems }
  })
}

const entryKey = (entry: ArtifactEntry) =>
  `${entry.path}\u0000${entry.kind}\u0000${entry.sha256}\u0000${entry.size}`

/**
 * Where the store's read model and the files disagree: a completed attempt whose manifest
 * is missing, not `completed`, or lists other artifacts than the timeline published; a
 * failed attempt whose manifest says completed; a manifest on disk for an attempt the
 * timeline does not know. What `verify` cannot see alone: the files agree with their manifests, and the
 * manifests with the timeline.
 */
export const agreement = (
  workspace: string,
  run: RunView
): Effect.Effect<ReadonlyArray<VerifyProblem>, FileError> =>
  attempt(runDirectory(workspace, run.runId), () => {
    const problems: Array<VerifyProblem> = []
    const known = new Set<string>()
    for (const stage of run.stages) {
      for (const one of stage.attempts) {
        const directory = attemptPath(
          workspace,
          run.runId,
          stage.position,
          stage.key,
          one.attempt,
          stage.attempts.length
        )
        const name = path.basename(directory)
        known.add(name)
        const manifest = readManifest(directory)
        if (one.status === "completed") {
          if (manifest === undefined) {
            problems.push({
              stage: name,
              path: "manifest.json",
              problem: "missing, but the timeline says the attempt completed"
            })
            continue
          }
          if (manifest.status !== "completed" || manifest.attempt !== one.attempt)
            problems.push({
              stage: name,
              path: "manifest.json",
              problem: `says attempt ${manifest.attempt} ${manifest.status}, the timeline attempt ${one.attempt} completed`
            })
          const listed = new Set(manifest.artifacts.map(entryKey))
          const published = new Set(one.artifacts.map(entryKey))
          for (const entry of one.artifacts)
            if (!listed.has(entryKey(entry)))
              problems.push({
                stage: name,
                path: entry.path,
                problem: "published in the timeline, not in the manifest"
              })
          for (const entry of manifest.artifacts)
            if (!published.has(entryKey(entry)))
              problems.push({
                stage: name,
                path: entry.path,
                problem: "in the manifest, not published in the timeline"
              })
        } else if (one.status === "failed" && manifest?.status === "completed")
          // (A running attempt may have a manifest for a moment: its event comes right after. A
          // canceled one may have finished its files before the cancel: they are whole.)
          problems.push({
            stage: name,
            path: "manifest.json",
            problem: `says ${manifest.status}, the timeline says the attempt is ${one.status}`
          })
      }
    }
    const stagesDir = path.join(runDirectory(workspace, run.runId), "stages")
    for (const name of fs.existsSync(stagesDir) ? fs.readdirSync(stagesDir).sort() : [])
      if (!known.has(name) && readManifest(path.join(stagesDir, name)) !== undefined)
        problems.push({
          stage: name,
          path: "manifest.json",
          problem: "an attempt the timeline does not know"
        })
    return problems
  })

/** `verify`, and the files' agreement with the store's view of the run (`agreement`). */
export const verifyRun = (workspace: string, run: RunView): Effect.Effect<VerifyReport, FileError> =>
  Effect.flatMap(verify(workspace, run.runId), (report) =>
    Effect.map(agreement(workspace, run), (disagreements) => ({
      ...report,
      ok: report.ok && disagreements.length === 0,
      problems: [...report.problems, ...disagreements]
    }))
  )
