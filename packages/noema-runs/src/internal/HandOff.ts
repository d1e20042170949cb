/**
 * HandOff: what a stage is given of the stages before it.
 *
 * A stage's agent sees the request, then each earlier stage's answer and artifacts (of the
 * attempt that completed it). Text artifacts go into its prompt whole while they fit one
 * token budget for all of them (measured with core's `TokenCounter`), in stage and
 * publication order; the others (binary, too big, past the budget) are listed with path,
 * kind, size and sha256, for the agent to read with `read_artifact`, which reaches only the
 * completed attempts of earlier stages of its own run.
 *
 * What was given is recorded in `input.json` (`RunFiles.StageInput`) by reference: every
 * artifact by its sha256, read back only if it still has it. Earlier stages are completed,
 * and their files are never rewritten, so a stage run again (a new attempt after a crash)
 * is given exactly the same input, and its prompt (`prompt`) is a function of that file
 * and those files.
 */
import * as path from "node:path"
import type { TokenCounter } from "@noema/core"
import { Effect } from "effect"
import type { ArtifactEntry, AttemptView, RunView, StageView } from "../Run.js"
import * as RunFiles from "../RunFiles.js"

export interface Options {
  readonly workspace: string
  /** Tokens the earlier artifacts given whole may take together. */
  readonly budget: number
  readonly counter: TokenCounter.TokenCounter
}

/** The budget when none is given: about 32 KB of English text, enough for briefs and drafts. */
export const defaultBudget = 8_000

/** What `read_artifact` returns at most, in characters, when no cap is given. */
export const defaultMaxReadCharacters = 50_000

/** A stage's input, and the texts of the artifacts it gives in full (by `stage/path`). */
export interface HandOff {
  readonly input: RunFiles.StageInput
  readonly texts: ReadonlyMap<string, string>
}

const textKey = (stage: string, artifactPath: string) => `${stage}/${artifactPath}`

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })

/** The bytes as text, or undefined for what is not text (not UTF-8, or holding NUL). */
const textOf = (bytes: Uint8Array): string | undefined => {
  try {
    const text = strictUtf8.decode(bytes)
    return text.includes("\u0000") ? undefined : text
  } catch {
    return undefined
  }
}

/** The attempt that completed `stage`: its latest (a completed stage is never retried). */
const completedAttempt = (stage: StageView): AttemptView | undefined => {
  const latest = stage.attempts[stage.attempts.length - 1]
  return stage.status === "completed" && latest?.status === "completed" ? latest : undefined
}

const published = (run: RunView, stage: StageView, attempt: AttemptView, entry: ArtifactEntry) => ({
  runId: run.runId,
  position: stage.position,
  key: stage.key,
  attempt: attempt.attempt,
  latest: stage.attempts.length,
  entry
})

/** A completed attempt's answer: the `text` of its output.json. */
const answerOf = (workspace: string, run: RunView, stage: StageView, walked: RunFiles.Walked) => {
  const file = path.join(RunFiles.stagePath(workspace, run.runId, stage.position, stage.key), "output.json")
  return Effect.try({
    try: () => {
      const bytes = RunFiles.readRegularFile(workspace, file, undefined, walked)
      if (bytes === undefined) throw new Error("missing")
      const output = JSON.parse(bytes.toString("utf8")) as unknown
      return typeof output === "object" &&
        output !== null &&
        "text" in output &&
        typeof output.text === "string"
        ? output.text
        : JSON.stringify(output)
    },
    catch: (error) =>
      new RunFiles.FileError({
        path: `${path.basename(path.dirname(file))}/output.json`,
        detail: error instanceof Error ? error.message : String(error)
      })
  })
}

/** The input of the stage at `position`, from the earlier stages' completed attempts. */
export const gather = Effect.fnUntraced(function* (
  options: Options,
  run: RunView,
  position: number,
  instructions: string
) {
  let remaining = options.budget
  const previous: Array<RunFiles.StageInput["previous"][number]> = []
  const artifacts: Array<RunFiles.ArtifactReference> = []
  const texts = new Map<string, string>()
  // One pass of reads: the run's and each stage's directories are looked at once, not per file.
  const walked: RunFiles.Walked = new Set()
  for (const stage of run.stages) {
    const attempt = stage.position < position ? completedAttempt(stage) : undefined
    if (attempt === undefined) continue
    const answer = yield* answerOf(options.workspace, run, stage, walked)
    previous.push({ stage_key: stage.key, position: stage.position, attempt: attempt.attempt, answer })
    for (const entry of attempt.artifacts) {
      // Read only while something may still fit: past the budget, everything is listed.
      const bytes =
        remaining > 0
          ? yield* RunFiles.readPublished(options.workspace, published(run, stage, attempt, entry), walked)
          : undefined
      const text = bytes === undefined ? undefined : textOf(bytes)
      const tokens = text === undefined ? undefined : options.counter.countText(text)
      const full = text !== undefined && tokens !== undefined && tokens <= remaining
      if (full) {
        remaining -= tokens
        texts.set(textKey(stage.key, entry.path), text)
      }
      artifacts.push({
        stage: stage.key,
        path: entry.path,
        kind: entry.kind,
        size: entry.size,
        sha256: entry.sha256,
        included: full ? "full" : "listed"
      })
    }
  }
  const input: RunFiles.StageInput = {
    request: run.request,
    instructions,
    previous,
    artifacts,
    artifact_budget: { tokens: options.budget, counter: options.counter.name }
  }
  return { input, texts } satisfies HandOff
})

/** A Markdown fence longer than any run of backticks in `text`, so the text cannot close it. */
const fenceFor = (text: string) => {
  let longest = 0
  for (const match of text.matchAll(/`+/g)) longest = Math.max(longest, match[0].length)
  return "`".repeat(Math.max(3, longest + 1))
}

const described = (artifact: RunFiles.ArtifactReference) =>
  `${artifact.stage}/${artifact.path} (${artifact.kind}, ${artifact.size} bytes, sha256 ${artifact.sha256})`

/**
 * The stage's first message: the request, then each earlier stage's answer (`## key (stage
 * n)`), its artifacts given in full (fenced), and those only listed, with how to read them.
 */
export const prompt = (input: RunFiles.StageInput, texts: ReadonlyMap<string, string>): string => {
  if (input.previous.length === 0) return input.request
  const sections = input.previous.map((stage) => {
    const lines = [`## ${stage.stage_key} (stage ${stage.position})`, stage.answer]
    for (const artifact of input.artifacts.filter((a) => a.stage === stage.stage_key)) {
      const text =
        artifact.included === "full" ? texts.get(textKey(artifact.stage, artifact.path)) : undefined
      if (text === undefined)
        lines.push(
          "",
          `### Artifact ${described(artifact)}: listed only; read it with read_artifact {"stage": ${JSON.stringify(artifact.stage)}, "path": ${JSON.stringify(artifact.path)}}`
        )
      else {
        const fence = fenceFor(text)
        lines.push(
          "",
          `### Artifact ${described(artifact)}`,
          fence,
          text.endsWith("\n") ? text.slice(0, -1) : text,
          fence
        )
      }
    }
    return lines.join("\n")
  })
  return `${input.request}\n\nEarlier stages (their answers and artifacts):\n\n${sections.join("\n\n")}`
}

const refused = (stage: string, detail: string) => new RunFiles.FileError({ path: `stage ${stage}`, detail })

const listOf = (names: ReadonlyArray<string>) =>
  names.length === 0 ? "none" : names.length > 20 ? `${names.slice(0, 20).join(", ")}, …` : names.join(", ")

/** The artifact an agent of the stage at `position` asks for, or why it may not read it. */
const resolve = (
  workspace: string,
  run: RunView,
  position: number,
  request: { readonly stage: string; readonly path: string; readonly attempt?: number | undefined }
) => {
  const shownStage = JSON.stringify(request.stage.slice(0, 60))
  const stage = run.stages.find((s) => s.key === request.stage)
  if (stage === undefined)
    return refused(
      shownStage,
      `no such stage in this run (its stages: ${listOf(run.stages.map((s) => s.key))})`
    )
  if (stage.position >= position)
    return refused(
      shownStage,
      `not an earlier stage: a stage reads only the artifacts of the stages before it (${listOf(run.stages.filter((s) => s.position < position).map((s) => s.key))})`
    )
  const completed = completedAttempt(stage)
  if (completed === undefined) return refused(shownStage, `it has not completed (it is ${stage.status})`)
  if (request.attempt !== undefined && request.attempt !== completed.attempt) {
    const asked = stage.attempts.find((a) => a.attempt === request.attempt)
    return refused(
      shownStage,
      asked === undefined
        ? `no attempt ${request.attempt}; attempt ${completed.attempt} completed the stage`
        : `attempt ${request.attempt} ${asked.status}: only the artifacts of attempt ${completed.attempt}, which completed the stage, can be read`
    )
  }
  // The path rules of write_artifact, before anything is looked up.
  const directory = RunFiles.attemptPath(
    workspace,
    run.runId,
    stage.position,
    stage.key,
    completed.attempt,
    stage.attempts.length
  )
  const named = RunFiles.artifactTarget(path.join(directory, "artifacts"), request.path)
  if (named instanceof RunFiles.FileError) return named
  const entry = completed.artifacts.find((e) => e.path === named.relative)
  if (entry === undefined)
    return refused(
      shownStage,
      `no artifact ${JSON.stringify(named.relative)} (its artifacts: ${listOf(completed.artifacts.map((e) => e.path))})`
    )
  return published(run, stage, completed, entry)
}

/**
 * What `read_artifact` does for the stage at `position` of `run` (the run as the stage
 * started: its earlier stages no longer change): the text of an earlier stage's artifact,
 * cut at `maxCharacters` (saying so); a binary one is described, not shown.
 */
export const reader =
  (workspace: string, run: RunView, position: number, maxCharacters: number) =>
  (request: { readonly stage: string; readonly path: string; readonly attempt?: number | undefined }) => {
    const found = resolve(workspace, run, position, request)
    if (found instanceof RunFiles.FileError) return Effect.fail(found)
    return Effect.map(RunFiles.readPublished(workspace, found), (bytes) => {
      const heading = `${found.key}/${found.entry.path} (${found.entry.kind}, ${found.entry.size} bytes, sha256 ${found.entry.sha256})`
      const text = textOf(bytes)
      if (text === undefined) return `${heading} is binary: it cannot be shown as text.`
      if (text.length <= maxCharacters) return `${heading}:\n${text}`
      // Not in the middle of a surrogate pair.
      const end = /[\uD800-\uDBFF]/.test(text.charAt(maxCharacters - 1)) ? maxCharacters - 1 : maxCharacters
      return `${heading}, cut: the first ${end} of its ${text.length} characters:\n${text.slice(0, end)}\n[cut here: ${text.length - end} more characters]`
    })
  }
