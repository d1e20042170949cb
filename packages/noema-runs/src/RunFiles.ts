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
 * A stage's directories are fsynced once each, together, just before its manifest
 * (not after each file): nothing claims a name before then, so each fsync the
 * contract needs is done once (a stage with one artifact: four files, its three
 * directories, then the manifest's directory again). Nor does a write wait for its
 * fsync unless its caller needs the file in place (an artifact): `input.json` and
 * `output.json` land (fsync, then link) while the stage goes on, and the manifest waits
 * for them, so a stage's file fsyncs wait on the disk together.
 * Files are made 0600 and directories 0700 (as `$NOEMA_HOME` is): a run's
 * request and artifacts are its owner's alone, wherever the workspace is.
 *
 * `run.json` holds the run's fixed facts, its pipeline included. Its sha256 is
 * recorded in the timeline when the run is created (`RunQueued`), and
 * `readRunFile` refuses a file that no longer matches (`RunFileChanged`): the
 * instructions a stage runs are the ones the run was created, and approved, with.
 *
 * Attempts: the stage directory holds the latest attempt. When a stage is
 * retried, its earlier attempt's directory is renamed, whole and untouched, to
 * `stages/<nn>-<stage_key>.attempt-<k>/` (its manifest says `attempt: k`), and
 * the new attempt starts an empty `stages/<nn>-<stage_key>/`.
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { Printable, Tool } from "@noema/core"
import { Cause, Effect, Exit, Schema } from "effect"
import { type ArtifactEntry, ModelIdentity, type RunView, stageDirectory } from "./Run.js"

export class FileError extends Schema.TaggedError<FileError>()("FileError", {
  path: Schema.String,
  detail: Schema.String,
  /** The system's error code when the file system refused (`ENOSPC`, `EACCES`): whether it may pass. */
  systemError: Schema.optionalKey(Schema.String)
}) {
  override get message() {
    return `${this.path}: ${this.detail}`
  }
}

/** A run's `run.json` differs from the one its timeline recorded: nothing of the run is carried on. */
export class RunFileChanged extends Schema.TaggedError<RunFileChanged>()("RunFileChanged", {
  /** Relative to the workspace (`runs/<run_id>/run.json`). */
  path: Schema.String,
  recorded: Schema.String,
  found: Schema.String
}) {
  override get message() {
    return `${this.path} was changed after the run was created (its sha256 is ${this.found.slice(0, 12)}…, the timeline recorded ${this.recorded.slice(0, 12)}…); the run is not carried on: put the file back as it was, or cancel the run`
  }
}

const describe = (error: unknown): string => (error instanceof Error ? error.message : String(error))

const oneLine = (text: string): string => text.replace(/\s+/g, " ").trim()

// ---------------------------------------------------------------------------
// Reading what is on disk, trusting nothing
// ---------------------------------------------------------------------------

/**
 * The directories found real on the way down during one pass of reads (a stage's hand-off
 * reads every earlier stage's files, all under the same run and stage directories): each is
 * looked at once in the pass, not once per file under it. A pass is one go, as the walk
 * before each open already is; the next pass looks again.
 */
export type Walked = Set<string>

/**
 * The problem with the way from `root` down to `file`'s directory, if any: every
 * directory on it must be a real directory, not a symbolic link (a link placed in a
 * run's directory must not lead a reader outside it). `walked`: the pass's directories
 * already found real, not looked at again; those found real here are added.
 */
export const linkOnTheWay = (root: string, file: string, walked?: Walked): string | undefined => {
  const relative = path.relative(root, path.dirname(file))
  if (relative === "") return undefined
  if (relative.startsWith("..") || path.isAbsolute(relative)) return "outside the directory it belongs to"
  let at = root
  for (const segment of relative.split(path.sep)) {
    at = path.join(at, segment)
    if (walked?.has(at)) continue
    const stat = fs.lstatSync(at)
    if (stat.isSymbolicLink()) return "the path goes through a symbolic link"
    if (!stat.isDirectory()) return "the path goes through something that is not a directory"
    walked?.add(at)
  }
  return undefined
}

/**
 * The bytes of `file` (under `root`), read only as a regular file reached through real
 * directories: a symbolic link, a FIFO (whose open would block the reader), a device or a
 * directory is refused with an error saying which, never followed or waited on; so is a
 * file of more than `maxBytes`, when given. `undefined` when there is no such file.
 * `walked`: the directories this pass of reads found real already (`Walked`).
 */
export const readRegularFile = (
  root: string,
  file: string,
  maxBytes?: number,
  walked?: Walked
): Buffer | undefined => {
  // The way down is checked first; whether the file's directory exists is asked only when the way
  // is refused or cannot be walked: a way into no directory means no such file, as before.
  const noDirectory = () => !fs.existsSync(path.dirname(file))
  let problem: string | undefined
  try {
    problem = linkOnTheWay(root, file, walked)
  } catch (error) {
    if (noDirectory()) return undefined
    throw error
  }
  if (problem !== undefined) {
    if (noDirectory()) return undefined
    throw new Error(problem)
  }
  let fd: number
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === "ENOENT") return undefined
    if (code === "ELOOP") throw new Error("a symbolic link, not a file")
    throw error
  }
  try {
    const stat = fs.fstatSync(fd)
    if (!stat.isFile()) throw new Error("not a regular file")
    // Checked on what was opened, so a file swapped for a huge one is refused, not read.
    if (maxBytes !== undefined && stat.size > maxBytes)
      throw new Error(`${stat.size} bytes, more than the ${maxBytes} expected`)
    // The size this fstat gave, as `readFileSync` reads it after an fstat of its own: one fstat a read.
    const bytes = Buffer.allocUnsafe(stat.size)
    let length = 0
    while (length < bytes.length) {
      const read = fs.readSync(fd, bytes, length, bytes.length - length, null)
      if (read === 0) break
      length += read
    }
    return length === bytes.length ? bytes : bytes.subarray(0, length)
  } finally {
    fs.closeSync(fd)
  }
}

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

/**
 * fsync off the event loop (libuv's thread pool): the fsyncs of one batch (a stage's files,
 * then its directories) then wait on the disk together instead of one after another.
 */
const fsyncInPool = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.fsync(fd, (error) => (error === null ? resolve() : reject(error))))

const fsyncDirectoryInPool = async (directory: string): Promise<void> => {
  const fd = fs.openSync(directory, "r")
  try {
    await fsyncInPool(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * Directories with new entries (a linked file, a new subdirectory) that must reach the disk
 * before anything claims them: collected while files are written, then each fsynced once,
 * all at the same time (`syncDirectories`).
 */
type PendingDirectories = Set<string>

const syncDirectories = async (pending: PendingDirectories): Promise<void> => {
  const directories = [...pending]
  pending.clear()
  await Promise.all(directories.map(fsyncDirectoryInPool))
}

/** The modes of what a run writes: its owner's alone (what is already there is left as it is). */
const directoryMode = 0o700
const fileMode = 0o600

/** Makes `directory` (0700), whose parent exists: refused if it exists; its parent is pending a directory fsync. */
const makeDirectory = (directory: string, pending: PendingDirectories) => {
  fs.mkdirSync(directory, { mode: directoryMode })
  pending.add(path.dirname(directory))
}

/** Creates `directory` (and parents, 0700); each new one's parent is pending a directory fsync. */
const ensureDirectory = (directory: string, pending: PendingDirectories) => {
  if (fs.existsSync(directory)) return
  ensureDirectory(path.dirname(directory), pending)
  makeDirectory(directory, pending)
}

/**
 * Writes `data` to a new temporary file beside `file` at once (a refusal, `ENOSPC` or
 * `EACCES`, is thrown here) and starts its fsync: once `synced` resolves, its bytes are on
 * disk, under no name yet that counts.
 */
const startTemporary = (
  file: string,
  data: string | Uint8Array
): { readonly temporary: string; readonly synced: Promise<void> } => {
  const temporary = path.join(
    path.dirname(file),
    `.${path.basename(file)}.${process.pid}.${crypto.randomUUID()}.tmp`
  )
  const fd = fs.openSync(temporary, "wx", fileMode)
  try {
    fs.writeFileSync(fd, data)
  } catch (error) {
    fs.closeSync(fd)
    throw error
  }
  return { temporary, synced: fsyncInPool(fd).finally(() => fs.closeSync(fd)) }
}

/** `startTemporary`, waited on: the temporary file's name once its bytes are on disk. */
const writeTemporary = async (file: string, data: string | Uint8Array): Promise<string> => {
  const { temporary, synced } = startTemporary(file, data)
  await synced
  return temporary
}

/** Links a temporary file into place as `file` (refused if `file` exists), then unlinks the temporary name. */
const linkInto = (temporary: string, file: string, pending: PendingDirectories) => {
  try {
    fs.linkSync(temporary, file)
  } finally {
    fs.unlinkSync(temporary)
  }
  pending.add(path.dirname(file))
}

/**
 * Writes `data` to `file`: temporary file, fsync, link into place (refused if `file`
 * exists), unlink the temporary name. The file's bytes are on disk before its name
 * exists; the name itself is on disk once its directory, added to `pending`, is fsynced.
 */
const linkDurable = async (file: string, data: string | Uint8Array, pending: PendingDirectories) =>
  linkInto(await writeTemporary(file, data), file, pending)

/**
 * Writes `data` to `file` (creating its directory) and returns once the file and its name
 * are on disk: the file fsynced before it is linked, then every directory with a new entry
 * fsynced, together.
 */
export const writeFileAtomic = async (file: string, data: string | Uint8Array): Promise<void> => {
  const pending: PendingDirectories = new Set()
  ensureDirectory(path.dirname(file), pending)
  await linkDurable(file, data, pending)
  await syncDirectories(pending)
}

/** The system's error code of a thrown error, if it is a system error. */
const systemErrorOf = (error: unknown): { readonly systemError?: string } => {
  const code = (error as NodeJS.ErrnoException | undefined)?.code
  return typeof code === "string" ? { systemError: code } : {}
}

const attempt = <A>(file: string, f: () => A): Effect.Effect<A, FileError> =>
  Effect.try({
    try: f,
    catch: (error) => new FileError({ path: file, detail: describe(error), ...systemErrorOf(error) })
  })

/** `attempt` for a write on the thread pool; never cut off halfway (no temporary file is left by an interrupt). */
const attemptWrite = <A>(file: string, f: () => Promise<A>): Effect.Effect<A, FileError> =>
  Effect.uninterruptible(
    Effect.tryPromise({
      try: f,
      catch: (error) =>
        // A file written earlier that failed on its way (`Landing`) is named as itself.
        error instanceof FileError
          ? error
          : new FileError({ path: file, detail: describe(error), ...systemErrorOf(error) })
    })
  )

/**
 * The files of one attempt still on their way to disk (temporary file fsynced, then linked):
 * started by a write, which returns once the bytes are written, and waited on all together
 * before anything claims them (`writeManifest`), so their fsyncs wait on the disk at the
 * same time instead of one after another, and beside the agent's work.
 */
class Landing {
  readonly #files = new Set<Promise<void>>()
  readonly #failures: Array<FileError> = []
  readonly #names = new Set<string>()
  /**
   * The directories this attempt made itself (`mkdir`, which refuses one that exists): a name
   * in one of them that is not in `#names` cannot be there yet, so it is not looked for on
   * disk (`link` still refuses one that another process put there meanwhile).
   */
  readonly #made: ReadonlySet<string>

  constructor(made: ReadonlySet<string>) {
    this.#made = made
  }

  /**
   * Takes `file`'s name for a write of this attempt, refused (`refusal`) if it is taken: written
   * or on its way here, or, outside the directories this attempt made, on disk.
   */
  claim(file: string, refusal: string): void {
    if (this.#names.has(file) || (!this.#made.has(path.dirname(file)) && fs.existsSync(file)))
      throw new Error(refusal)
    this.#names.add(file)
  }

  /** Gives up a name whose write failed: it is free again. */
  release(file: string): void {
    this.#names.delete(file)
  }

  /**
   * `claim`s `file`'s name and writes `data` to its temporary file (`startTemporary`); a write
   * refused there gives the name up again.
   */
  startClaimed(file: string, data: string | Uint8Array, refusal: string): ReturnType<typeof startTemporary> {
    this.claim(file, refusal)
    try {
      return startTemporary(file, data)
    } catch (error) {
      this.release(file)
      throw error
    }
  }

  /** Whether `directory` is one this attempt made. */
  made(directory: string): boolean {
    return this.#made.has(directory)
  }

  /**
   * Writes `data` to `file`'s temporary file now; its fsync and its link into place follow,
   * the link only once `after` (what the file names) has landed too: if that fails, `file` is
   * not linked and its name is free again (the failure is `after`'s to tell).
   * A name already written, or on its way, is refused now, as `link` would refuse it later.
   */
  start(
    file: string,
    data: string | Uint8Array,
    pending: PendingDirectories,
    after?: Promise<unknown>
  ): void {
    const { temporary, synced } = this.startClaimed(
      file,
      data,
      "already written: a file of an attempt is written once, never overwritten"
    )
    const landed: Promise<void> = synced
      .then(
        () => after,
        (error: unknown) => {
          this.#failures.push(new FileError({ path: file, detail: describe(error), ...systemErrorOf(error) }))
          return Promise.reject(error)
        }
      )
      .then(
        () => {
          try {
            linkInto(temporary, file, pending)
          } catch (error) {
            this.#failures.push(
              new FileError({ path: file, detail: describe(error), ...systemErrorOf(error) })
            )
          }
        },
        () => {
          fs.rmSync(temporary, { force: true })
          this.release(file)
        }
      )
      .finally(() => this.#files.delete(landed))
    this.#files.add(landed)
  }

  /**
   * Once every file started has landed; the first that could not be written fails it (each
   * failure is told once, as a write waited on would have told it to its caller).
   */
  async landed(): Promise<void> {
    await this.settled()
    const [failure] = this.#failures.splice(0)
    if (failure !== undefined) throw failure
  }

  /** A write the caller waits on itself (an artifact): only what `settled` waits for. */
  track(write: Promise<unknown>): void {
    const settled: Promise<void> = write.then(
      () => undefined,
      () => undefined
    )
    const tracked = settled.finally(() => this.#files.delete(tracked))
    this.#files.add(tracked)
  }

  /** Once no file is on its way any more, landed or not. */
  async settled(): Promise<void> {
    while (this.#files.size > 0) await Promise.all(this.#files)
  }
}

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
export const RunFile = Schema.Struct({
  run_id: Schema.String,
  thread_id: Schema.String,
  request: Schema.String,
  pipeline: Schema.String,
  /** The whole pipeline the run was created with, so any process can carry the run on. */
  pipeline_definition: Schema.optionalKey(Schema.Unknown),
  /**
   * The model the run was started with, which carries it on wherever it is resumed (absent
   * for runs made before it was recorded). Never a credential (`Run.modelIdentity`).
   */
  model: Schema.optionalKey(ModelIdentity),
  /** When the executor made the run (its `RunQueued` is recorded a moment later). */
  created_at: Schema.String,
  stages: Schema.Array(
    Schema.Struct({ position: Schema.Number, stage_key: Schema.String, needs_approval: Schema.Boolean })
  )
})
export type RunFile = typeof RunFile.Type

/** `run.json`, relative to the workspace: how messages name it. */
export const runFileName = (runId: string): string => ["runs", runId, "run.json"].join("/")

/** The bytes of `run.json` for `run`: what is written, and whose sha256 the timeline records. */
export const encodeRunFile = (run: RunFile): string => json(run)

/** Which run.json is meant, and the sha256 its timeline recorded (a `RunView` is one). */
export interface RunFileRef {
  readonly runId: string
  readonly runFileSha256?: string | undefined
}

const decodeRunFile = Schema.decodeUnknownExit(Schema.fromJsonString(RunFile))

/**
 * The run.json files this process wrote or decoded, by the sha256 of their bytes: bytes that
 * hash to one of these are that file (a run's files are read back once a run, each read
 * hashed against the timeline's record, and decoding is most of a read's work). Bounded: the
 * runs under way are few.
 */
const knownRunFiles = new Map<string, RunFile>()
const rememberRunFile = (sha: string, file: RunFile) => {
  knownRunFiles.delete(sha)
  knownRunFiles.set(sha, file)
  if (knownRunFiles.size > 256) knownRunFiles.delete(knownRunFiles.keys().next().value as string)
}

/** What `run.json`'s bytes are, against the sha256 the timeline recorded. */
type RunFileCheck =
  | { readonly _tag: "Valid"; readonly file: RunFile; readonly sha256: "matches" | "not recorded" }
  | { readonly _tag: "Changed"; readonly error: RunFileChanged }
  | { readonly _tag: "Invalid"; readonly detail: string }

/** The one check of a run.json: its sha256 against the recorded one, then its content. */
const checkRunFile = (bytes: Uint8Array, run: RunFileRef): RunFileCheck => {
  const found = sha256(bytes)
  if (run.runFileSha256 !== undefined && found !== run.runFileSha256)
    return {
      _tag: "Changed",
      error: new RunFileChanged({ path: runFileName(run.runId), recorded: run.runFileSha256, found })
    }
  const known = knownRunFiles.get(found)
  const decoded =
    known === undefined ? decodeRunFile(Buffer.from(bytes).toString("utf8")) : Exit.succeed(known)
  if (Exit.isFailure(decoded))
    return { _tag: "Invalid", detail: `not a run file: ${oneLine(describe(Cause.squash(decoded.cause)))}` }
  if (known === undefined) rememberRunFile(found, decoded.value)
  if (decoded.value.run_id !== run.runId)
    return { _tag: "Invalid", detail: `it is the run.json of another run (${decoded.value.run_id})` }
  return {
    _tag: "Valid",
    file: decoded.value,
    sha256: run.runFileSha256 === undefined ? "not recorded" : "matches"
  }
}

/**
 * The run's run.json, checked against the sha256 its timeline recorded (`RunFileChanged`
 * when it differs), then decoded; a run made before the sha256 was recorded is only decoded.
 */
export const readRunFile = (
  workspace: string,
  run: RunFileRef
): Effect.Effect<RunFile, FileError | RunFileChanged> => {
  const file = path.join(workspace, runFileName(run.runId))
  return Effect.flatMap(
    attempt(file, () => {
      const bytes = readRegularFile(workspace, file)
      if (bytes === undefined) throw new Error("no such file")
      return bytes
    }),
    (bytes): Effect.Effect<RunFile, FileError | RunFileChanged> => {
      const check = checkRunFile(bytes, run)
      if (check._tag === "Changed") return Effect.fail(check.error)
      if (check._tag === "Invalid") return Effect.fail(new FileError({ path: file, detail: check.detail }))
      return Effect.succeed(check.file)
    }
  )
}

/** Removes the run.json of a run the store refused to make (and its directory, holding nothing else). */
export const discardRunFile = (workspace: string, runId: string): Effect.Effect<void> =>
  Effect.sync(() => {
    const directory = runDirectory(workspace, runId)
    try {
      fs.rmSync(path.join(directory, "run.json"), { force: true })
      fs.rmdirSync(directory)
    } catch {
      // Left as it is: a directory no run names harms nothing.
    }
  })

/**
 * Writes the run's `run.json` (never over one there); the sha256 of its bytes, which the
 * timeline records. Read back in this process, those bytes are not decoded again.
 */
export const writeRunFile = (workspace: string, run: RunFile): Effect.Effect<string, FileError> => {
  const file = path.join(workspace, runFileName(run.run_id))
  const text = encodeRunFile(run)
  return attemptWrite(file, async () => {
    await writeFileAtomic(file, text)
    const sha = sha256(text)
    // As a reader decodes them: the JSON of the bytes written (no value of `run` left unwritten).
    rememberRunFile(sha, JSON.parse(text) as RunFile)
    return sha
  })
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
  /** A failed attempt's: why it failed, as its `StageFailed` says (absent in manifests of an earlier noema). */
  readonly error_code?: string
  readonly error_message?: string
  readonly retryable?: boolean
  /** The model this attempt ran on (`runs resume --model` gives an attempt another than run.json's). */
  readonly model?: ModelIdentity
  readonly artifacts: ReadonlyArray<ArtifactEntry>
}

/**
 * An artifact of an earlier stage as a stage's input names it: its content was in the
 * stage's prompt (`full`), or only its path, kind, size and sha256 were, for `read_artifact`
 * (`listed`: too big, binary, or past the budget).
 */
export const ArtifactReference = Schema.Struct({
  stage: Schema.String,
  path: Schema.String,
  kind: Schema.String,
  size: Schema.Number,
  sha256: Schema.String,
  included: Schema.Literals(["full", "listed"])
})
export type ArtifactReference = typeof ArtifactReference.Type

/**
 * What a stage was given (`input.json`): the request, its instructions, the earlier stages'
 * answers and a reference to each of their artifacts, with the budget that chose which went
 * in whole. The artifacts are named by sha256 and never change, so this file and the earlier
 * stages' files are the stage's whole prompt: a run can be audited, and a stage run again
 * after a crash is given the same.
 */
export const StageInput = Schema.Struct({
  request: Schema.String,
  instructions: Schema.String,
  previous: Schema.Array(
    Schema.Struct({
      stage_key: Schema.String,
      position: Schema.Number,
      attempt: Schema.Number,
      answer: Schema.String
    })
  ),
  artifacts: Schema.Array(ArtifactReference),
  /** Tokens all `full` artifacts may take together, and the counter that measured them. */
  artifact_budget: Schema.Struct({ tokens: Schema.Number, counter: Schema.String })
})
export type StageInput = typeof StageInput.Type

/** One attempt of one stage: its directory, and the writes it may make, in order. */
export interface StageWriter {
  readonly directory: string
  readonly artifactsDirectory: string
  /**
   * Returns once its bytes are written (a refusal of the file system fails it then); the file
   * is fsynced and linked into place on the way, and `writeManifest` waits for it.
   */
  readonly writeInput: (input: unknown) => Effect.Effect<void, FileError>
  /** Returns once the artifact is on disk, in place, under its name. */
  readonly writeArtifact: (
    relative: string,
    content: string,
    kind?: string
  ) => Effect.Effect<ArtifactEntry, FileError>
  /** As `writeInput`. */
  readonly writeOutput: (output: unknown) => Effect.Effect<void, FileError>
  /**
   * The stage's answer kept as the artifact `name` and `output` as output.json, their fsyncs
   * waiting on the disk together: output.json lands only once the artifact has (one that
   * fails leaves output.json unwritten, for the attempt's error). Returns once the artifact
   * is in place.
   */
  readonly writeAnswer: (
    name: string,
    content: string,
    output: unknown
  ) => Effect.Effect<ArtifactEntry, FileError>
  /**
   * Last: only after every artifact; lists them with their hashes. Waits for the input and
   * output to be linked, fsyncs every directory the attempt's files were linked in, then links
   * the manifest and fsyncs its directory: once it returns, everything it names is on disk.
   * A file of the attempt that could not be written fails it.
   */
  readonly writeManifest: (manifest: Omit<Manifest, "artifacts">) => Effect.Effect<Manifest, FileError>
  /** Once no file of the attempt is on its way any more: an attempt cut off ends with its writes. */
  readonly settle: Effect.Effect<void>
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
 * Why an artifact name is refused before it is a path: a control character (an escape
 * sequence, a newline) or a bidirectional-text control in it would make every listing that
 * shows the name show something else (a changed window title, a fake line, reversed text).
 */
const nameProblem = (relative: string): string | undefined => {
  const control = Printable.firstControl(relative)
  return control === undefined
    ? undefined
    : `character ${control.index + 1} is ${control.codePoint}, a control or bidirectional-text character: artifact names take printable characters only`
}

/**
 * An artifact's name as every tool takes it, writing or reading: stored in Unicode NFC,
 * refused with a control or bidirectional-text character (`nameProblem`) or a path that
 * `confine` refuses. The file it names in `artifactsDirectory`, and its relative path.
 */
export const artifactTarget = (
  artifactsDirectory: string,
  name: string
): { readonly relative: string; readonly target: string } | FileError => {
  const relative = name.normalize("NFC")
  const refused = nameProblem(relative)
  if (refused !== undefined)
    return new FileError({ path: Printable.escapeControls(relative), detail: refused })
  const target = confine(artifactsDirectory, relative)
  if (typeof target !== "string") return new FileError({ path: relative, detail: target.problem })
  return { relative, target }
}

/**
 * The writer of one stage attempt. For attempt k > 1, the directory holding
 * the earlier attempt is first renamed to `<nn>-<key>.attempt-<k-1>`.
 *
 * Each file is fsynced before it is linked; the directories that gained entries (the
 * stage's own, `artifacts/`, new ones and their parents) are fsynced once each, together,
 * by `writeManifest`, before the manifest is linked: so the manifest, and what the
 * timeline records after it, never claims a name a crash could still take away.
 */
export const stageWriter = (options: StageWriterOptions): Effect.Effect<StageWriter, FileError> => {
  const directory = stagePath(options.workspace, options.runId, options.position, options.key)
  const artifactsDirectory = path.join(directory, "artifacts")
  const maxBytes = options.maxArtifactBytes ?? 1024 * 1024
  const maxCount = options.maxArtifacts ?? 100
  // In the order the writes were asked for (a model's parallel calls finish in any order),
  // each filled in once its file is durable; a failed write gives its place up.
  const slots: Array<{ entry: ArtifactEntry | undefined }> = []
  const published = () => slots.flatMap((slot) => (slot.entry === undefined ? [] : [slot.entry]))
  const pending: PendingDirectories = new Set()
  const landing = new Landing(new Set([directory, artifactsDirectory]))
  const startWrite = (file: string, data: string, after?: Promise<unknown>) =>
    attempt(file, () => landing.start(file, data, pending, after))
  /**
   * Checks an artifact and starts its write (a refusal fails it now): `landed` once the file
   * is on disk under its name, with its entry in its place among the attempt's artifacts.
   */
  const startArtifact = (
    name: string,
    content: string,
    kind?: string
  ): Effect.Effect<{ readonly relative: string; readonly landed: Promise<ArtifactEntry> }, FileError> => {
    const named = artifactTarget(artifactsDirectory, name)
    if (named instanceof FileError) return Effect.fail(named)
    const { relative, target } = named
    const bytes = Buffer.from(content, "utf8")
    if (bytes.length > maxBytes)
      return Effect.fail(
        new FileError({
          path: relative,
          detail: `${bytes.length} bytes is over the ${maxBytes}-byte cap`
        })
      )
    return attempt(relative, () => {
      // Counted with the writes still waiting on the disk, so writes at once cannot pass the cap.
      if (slots.length >= maxCount) throw new Error(`at most ${maxCount} artifacts per stage`)
      // Every directory between the artifacts root and the file must be a real directory.
      let parent = path.dirname(target)
      if (!landing.made(parent)) ensureDirectory(parent, pending)
      while (parent !== artifactsDirectory) {
        if (fs.lstatSync(parent).isSymbolicLink()) throw new Error("the path goes through a symbolic link")
        parent = path.dirname(parent)
      }
      const { temporary, synced } = landing.startClaimed(
        target,
        bytes,
        "the artifact already exists: artifacts are never overwritten"
      )
      const slot: { entry: ArtifactEntry | undefined } = { entry: undefined }
      slots.push(slot)
      const landed = synced
        .then(() => {
          linkInto(temporary, target, pending)
          slot.entry = {
            path: path.relative(artifactsDirectory, target).split(path.sep).join("/"),
            kind: kind ?? kindOf(relative),
            sha256: sha256(bytes),
            size: bytes.length
          }
          return slot.entry
        })
        .catch((error: unknown) => {
          slots.splice(slots.indexOf(slot), 1)
          landing.release(target)
          throw error
        })
      landing.track(landed)
      return { relative, landed }
    })
  }
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
      // At once: the earlier attempt is set aside before a new one takes its name.
      fsyncDirectory(path.dirname(directory))
    }
    // Not there now (never made, or just set aside): made here, not looked for again.
    ensureDirectory(path.dirname(directory), pending)
    makeDirectory(directory, pending)
    makeDirectory(artifactsDirectory, pending)
  }).pipe(
    Effect.as<StageWriter>({
      directory,
      artifactsDirectory,
      writeInput: (input) => startWrite(path.join(directory, "input.json"), json(input)),
      writeOutput: (output) => startWrite(path.join(directory, "output.json"), json(output)),
      // Uninterruptible from start to landing: nothing of an artifact is left on its way unwatched.
      writeArtifact: (name, content, kind) =>
        Effect.uninterruptible(
          Effect.flatMap(startArtifact(name, content, kind), (started) =>
            attemptWrite(started.relative, () => started.landed)
          )
        ),
      writeAnswer: (name, content, output) =>
        Effect.uninterruptible(
          Effect.flatMap(startArtifact(name, content), (started) =>
            Effect.andThen(
              // Refused (output.json written already), the answer still lands: its failure is told.
              Effect.onError(
                startWrite(path.join(directory, "output.json"), json(output), started.landed),
                () => Effect.ignore(Effect.promise(() => started.landed.catch(() => undefined)))
              ),
              attemptWrite(started.relative, () => started.landed)
            )
          )
        ),
      writeManifest: (fields) => {
        const file = path.join(directory, "manifest.json")
        const manifest: Manifest = { ...fields, artifacts: published() }
        return attemptWrite(file, async () => {
          // Its bytes while the other files land and their directories are synced; its name
          // only once they are.
          const [written, landed] = await Promise.allSettled([
            writeTemporary(file, json(manifest)),
            landing.landed().then(() => syncDirectories(pending))
          ])
          if (landed.status === "rejected") {
            if (written.status === "fulfilled") fs.rmSync(written.value, { force: true })
            throw landed.reason
          }
          if (written.status === "rejected") throw written.reason
          linkInto(written.value, file, pending)
          await syncDirectories(pending)
          return manifest
        })
      },
      settle: Effect.promise(() => landing.settled()),
      artifacts: published
    })
  )
}

/** The manifest in an attempt's directory, if it has one. */
export const readManifest = (directory: string): Manifest | undefined => {
  const bytes = readRegularFile(directory, path.join(directory, "manifest.json"))
  return bytes === undefined ? undefined : (JSON.parse(bytes.toString("utf8")) as Manifest)
}

// ---------------------------------------------------------------------------
// write_artifact: the tool agents write artifacts with
// ---------------------------------------------------------------------------

/** `write_artifact`'s arguments: one schema for every stage's tool, so its JSON Schema is derived once. */
const WriteArtifactParameters = Schema.Struct({
  path: Schema.String,
  content: Schema.String,
  kind: Schema.optional(Schema.String)
})

/** A `write_artifact` tool bound to one stage attempt's artifacts directory. */
export const writeArtifactTool = (
  writer: StageWriter,
  onPublished: (entry: ArtifactEntry) => Effect.Effect<void> = () => Effect.void
) =>
  Tool.make({
    name: "write_artifact",
    description:
      "Write a file (Markdown, JSON or any text) as an artifact of the current stage. The path is relative to the stage's artifacts directory, in printable characters (no control or bidirectional-text characters); an existing artifact is never overwritten.",
    parameters: WriteArtifactParameters,
    annotations: { readOnly: false, destructive: false, idempotent: false },
    handler: ({ path: relative, content, kind }) =>
      writer.writeArtifact(relative, content, kind).pipe(
        Effect.tap(onPublished),
        Effect.map((entry) => `Wrote ${entry.path} (${entry.size} bytes, sha256 ${entry.sha256})`),
        Effect.mapError((error) => error.message)
      )
  })

// ---------------------------------------------------------------------------
// read_artifact: the tool agents read earlier stages' artifacts with
// ---------------------------------------------------------------------------

/** An artifact the timeline published for one attempt of one stage. */
export interface PublishedArtifact {
  readonly runId: string
  readonly position: number
  readonly key: string
  readonly attempt: number
  /** The stage's latest attempt: its directory is the stage's, earlier ones were set aside. */
  readonly latest: number
  readonly entry: ArtifactEntry
}

/** `<nn>-<key>/<path>`: how a published artifact is named in errors (never by where the workspace is). */
const publishedName = (artifact: PublishedArtifact) =>
  `${stageDirectory(artifact.position, artifact.key)}/${artifact.entry.path}`

/**
 * The bytes of a published artifact, exactly as published: the same path rules as
 * `write_artifact` (`artifactTarget`), read by `readRegularFile` from the workspace down (no
 * symbolic link, FIFO or device; nothing larger than the published size), and refused
 * unless its size and sha256 are the ones the timeline recorded.
 */
export const readPublished = (
  workspace: string,
  artifact: PublishedArtifact,
  walked?: Walked
): Effect.Effect<Buffer, FileError> => {
  const name = publishedName(artifact)
  const directory = attemptPath(
    workspace,
    artifact.runId,
    artifact.position,
    artifact.key,
    artifact.attempt,
    artifact.latest
  )
  const named = artifactTarget(path.join(directory, "artifacts"), artifact.entry.path)
  if (named instanceof FileError) return Effect.fail(new FileError({ path: name, detail: named.detail }))
  return Effect.try({
    try: () => {
      const bytes = readRegularFile(workspace, named.target, artifact.entry.size, walked)
      if (bytes === undefined) throw new Error("missing: the file is not there any more")
      if (bytes.length !== artifact.entry.size || sha256(bytes) !== artifact.entry.sha256)
        throw new Error("changed since it was published: its sha256 is not the one recorded")
      return bytes
    },
    // A system error's message names the file's absolute path: its code alone is said.
    catch: (error) =>
      new FileError({
        path: name,
        detail:
          (error as NodeJS.ErrnoException).code === undefined
            ? describe(error)
            : `cannot read it (${(error as NodeJS.ErrnoException).code})`,
        ...systemErrorOf(error)
      })
  })
}

/** `read_artifact`'s arguments (one schema for every stage's tool, as `write_artifact`'s). */
const ReadArtifactParameters = Schema.Struct({
  stage: Schema.String,
  path: Schema.String,
  attempt: Schema.optional(Schema.Number)
})

/**
 * A `read_artifact` tool: `read` finds the artifact an agent names (an earlier, completed
 * stage of its run; refusals are the message the model reads) and gives its text.
 */
export const readArtifactTool = (
  read: (request: {
    readonly stage: string
    readonly path: string
    readonly attempt?: number | undefined
  }) => Effect.Effect<string, FileError>
) =>
  Tool.make({
    name: "read_artifact",
    description:
      "Read an artifact of an earlier, completed stage of this run: `stage` is the stage's key, `path` the artifact's path in that stage, as your input lists them. Long texts are cut, saying so.",
    parameters: ReadArtifactParameters,
    annotations: { readOnly: true, destructive: false, idempotent: true },
    handler: (request) => read(request).pipe(Effect.mapError((error) => error.message))
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
  /**
   * run.json against the sha256 its timeline recorded when the run was created: `not recorded`
   * for a run made before noema recorded it (or when no sha256 was given to `verify`).
   */
  readonly runFile: "matches" | "changed" | "not recorded"
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
 * Checks run.json (against `runFileSha256`, the sha256 the run's timeline recorded, when
 * given; then its content) and re-hashes every artifact of every stage directory (earlier
 * attempts included) against its manifest; reports missing, changed and unlisted files.
 */
export const verify = (
  workspace: string,
  runId: string,
  runFileSha256?: string
): Effect.Effect<VerifyReport, FileError> => {
  const runDir = runDirectory(workspace, runId)
  return attempt(runDir, () => {
    const runFileBytes = readRegularFile(runDir, path.join(runDir, "run.json"))
    if (runFileBytes === undefined) throw new Error("no run.json: not a run directory")
    const problems: Array<VerifyProblem> = []
    const check = checkRunFile(runFileBytes, { runId, runFileSha256 })
    if (check._tag !== "Valid")
      problems.push({
        stage: "",
        path: "run.json",
        problem:
          check._tag === "Changed"
            ? `changed after the run was created: its sha256 is ${check.error.found}, the timeline recorded ${check.error.recorded}`
            : check.detail
      })
    const runFile =
      check._tag === "Valid"
        ? check.sha256
        : check._tag === "Changed"
          ? "changed"
          : runFileSha256 === undefined
            ? "not recorded"
            : "matches"
    const stagesDir = path.join(runDir, "stages")
    const checked: Array<string> = []
    let artifacts = 0
    const stageDirs = fs.existsSync(stagesDir) ? fs.readdirSync(stagesDir).sort() : []
    for (const stage of stageDirs) {
      const directory = path.join(stagesDir, stage)
      if (!fs.lstatSync(directory).isDirectory()) {
        problems.push({
          stage,
          path: "",
          problem: "not a directory (a symbolic link?): nothing in it is trusted"
        })
        continue
      }
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
        let bytes: Buffer | undefined
        try {
          bytes = readRegularFile(runDir, target)
        } catch (error) {
          problems.push({ stage, path: entry.path, problem: `refused: ${describe(error)}` })
          continue
        }
        if (bytes === undefined) {
          problems.push({ stage, path: entry.path, problem: "missing" })
          continue
        }
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
    return { runId, ok: problems.length === 0, runFile, checked, artifacts, problems }
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
  Effect.flatMap(verify(workspace, run.runId, run.runFileSha256), (report) =>
    Effect.map(agreement(workspace, run), (disagreements) => ({
      ...report,
      ok: report.ok && disagreements.length === 0,
      problems: [...report.problems, ...disagreements]
    }))
  )
