/**
 * Pipeline: the stages a run is made of, from a JSON or YAML file.
 *
 *     name: report
 *     stages:
 *       - key: outline
 *         instructions: Outline the answer.
 *       - key: draft
 *         instructions: Write it.
 *         tools: [current_time]
 *         approval: true
 *
 * `key` names the stage's directory (`<nn>-<key>`); `instructions` are the
 * stage agent's system prompt; `tools` names tools the executor is given (every
 * stage has `stageTools`: `write_artifact` and `read_artifact`); `approval: true`
 * makes the run wait for a person before the stage runs.
 *
 * A pipeline is refused before anything runs with every problem, one per line,
 * each naming its field (`stages[1].tools[0]`) and, read from a file, where it
 * is (`review.yaml:7:14`): its shape, and, given the tools offered
 * (`CheckOptions.tools`), every tool name none of them has.
 *
 * A pipeline may come from anyone who can reach the API, so its size is
 * bounded (`limits`: stages, tools, the lengths of names and instructions),
 * whichever way it arrives: JSON over HTTP, a JSON or YAML file, all decoded
 * here. A file is read only up to `limits.maxFileBytes`.
 */
import * as fs from "node:fs"
import { Effect, Schema } from "effect"
import { type Document, isMap, isNode, isScalar, isSeq, LineCounter, parseDocument } from "yaml"
import type { PlannedStage } from "./Run.js"
import { stageKeyPattern } from "./Run.js"

export interface StageDefinition {
  readonly key: string
  readonly instructions: string
  readonly tools: ReadonlyArray<string>
  readonly approval: boolean
}

export interface Pipeline {
  readonly name: string
  readonly stages: ReadonlyArray<StageDefinition>
}

export class PipelineError extends Schema.TaggedError<PipelineError>()("PipelineError", {
  source: Schema.String,
  problems: Schema.Array(Schema.String)
}) {
  override get message() {
    return `Invalid pipeline ${this.source}:\n  ${this.problems.join("\n  ")}`
  }
}

const toolName = /^[a-zA-Z0-9_-]{1,64}$/

/**
 * The tools every stage has, whatever its `tools` say: `write_artifact` (its own artifacts)
 * and `read_artifact` (those of the earlier stages). A pipeline may name them too.
 */
export const stageTools: ReadonlyArray<string> = ["write_artifact", "read_artifact"]

/**
 * The tool names a pipeline may use where `tools` are offered: the stage tools, then those
 * tools' names. What `Executor.make({ tools })` checks pipelines against, and what a program
 * offering tools (the CLI) lists to its users: one list.
 */
export const toolNames = (tools: ReadonlyArray<{ readonly name: string }>): ReadonlyArray<string> => [
  ...stageTools,
  ...tools.map((tool) => tool.name).filter((name) => !stageTools.includes(name))
]

/** What a pipeline is checked against besides its own shape. */
export interface CheckOptions {
  /**
   * The tool names its stages may use (`toolNames`); a stage naming another is refused, naming
   * the tool, the stage and these. Unset: tool names are checked for their form only.
   */
  readonly tools?: ReadonlyArray<string>
}

/** The bounds every pipeline keeps (a stage key is bounded by its pattern: at most 48 characters). */
export const limits = {
  maxStages: 50,
  maxNameLength: 100,
  maxInstructionsLength: 20_000,
  maxToolsPerStage: 32,
  maxFileBytes: 1024 * 1024
} as const

/** A field name as an error shows it: cut short, since it comes from whoever sent the pipeline. */
const shown = (key: string) => (key.length > 40 ? `${key.slice(0, 40)}…` : key)

/** One problem: the path of the field it is about (`["stages", 1, "key"]`) and what is wrong. */
interface Found {
  readonly at: ReadonlyArray<string | number>
  readonly text: string
}

/** `stages[1].key`: a field's path as problems name it. */
const where = (at: ReadonlyArray<string | number>): string =>
  at
    .map((segment, index) =>
      typeof segment === "number" ? `[${segment}]` : `${index === 0 ? "" : "."}${shown(segment)}`
    )
    .join("")

const render = (found: Found): string =>
  found.at.length === 0 ? found.text : `${where(found.at)}: ${found.text}`

/** The edit distance of two names (for "did you mean"), bounded by their lengths (at most 64). */
const distance = (a: string, b: string): number => {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++)
      current[j] = Math.min(
        (previous[j] ?? 0) + 1,
        (current[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1)
      )
    previous = current
  }
  return previous[b.length] ?? 0
}

/**
 * The offered name `name` was most likely meant to be: one a few edits away (`calculater`,
 * `current-time`), or one holding it or held by it (`calc`, `read_artifacts`).
 */
const closest = (name: string, offered: ReadonlyArray<string>): string | undefined => {
  const plain = (text: string) => text.toLowerCase().replace(/-/g, "_")
  let best: { readonly name: string; readonly edits: number } | undefined
  for (const candidate of offered) {
    const [a, b] = [plain(name), plain(candidate)]
    const edits = a.length >= 4 && (b.includes(a) || a.includes(b)) ? 1 : distance(a, b)
    if (edits <= Math.max(1, Math.floor(b.length / 4)) && (best === undefined || edits < best.edits))
      best = { name: candidate, edits }
  }
  return best?.name
}

const unknownTool = (tool: string, stage: unknown, offered: ReadonlyArray<string>): string => {
  const meant = closest(tool, offered)
  const named = typeof stage === "string" && stageKeyPattern.test(stage) ? ` in stage "${stage}"` : ""
  return `unknown tool "${tool}"${named}${meant === undefined ? "" : ` (did you mean "${meant}"?)`}; a pipeline may use ${offered.join(", ")}`
}

const checkTools = (
  at: ReadonlyArray<string | number>,
  s: Record<string, unknown>,
  found: Array<Found>,
  options: CheckOptions
) => {
  if (s.tools === undefined) return
  if (!Array.isArray(s.tools) || s.tools.some((tool) => typeof tool !== "string" || !toolName.test(tool)))
    found.push({ at: [...at, "tools"], text: "must be an array of tool names" })
  else if (s.tools.length > limits.maxToolsPerStage)
    found.push({
      at: [...at, "tools"],
      text: `${s.tools.length} tools, more than the ${limits.maxToolsPerStage} allowed`
    })
  else if (options.tools !== undefined) {
    const offered = options.tools
    s.tools.forEach((tool: string, index) => {
      if (!offered.includes(tool))
        found.push({ at: [...at, "tools", index], text: unknownTool(tool, s.key, offered) })
    })
  }
}

const checkStage = (
  at: ReadonlyArray<string | number>,
  s: Record<string, unknown>,
  keys: Set<string>,
  found: Array<Found>,
  options: CheckOptions
) => {
  for (const key of Object.keys(s))
    if (!["key", "instructions", "tools", "approval"].includes(key))
      found.push({ at: [...at, key], text: "unknown field (expected key, instructions, tools, approval)" })
  if (typeof s.key !== "string" || !stageKeyPattern.test(s.key))
    found.push({
      at: [...at, "key"],
      text: "must be lowercase letters, digits, '-' or '_', starting with a letter (at most 48)"
    })
  else if (keys.has(s.key)) found.push({ at: [...at, "key"], text: `"${s.key}" is used twice` })
  else keys.add(s.key)
  if (typeof s.instructions !== "string" || s.instructions.trim().length === 0)
    found.push({ at: [...at, "instructions"], text: "must be a non-empty string" })
  else if (s.instructions.length > limits.maxInstructionsLength)
    found.push({
      at: [...at, "instructions"],
      text: `${s.instructions.length} characters, more than the ${limits.maxInstructionsLength} allowed`
    })
  checkTools(at, s, found, options)
  if (s.approval !== undefined && typeof s.approval !== "boolean")
    found.push({ at: [...at, "approval"], text: "must be true or false" })
}

/** Every problem of a parsed pipeline value, with the path of its field. */
const check = (value: unknown, options: CheckOptions): Array<Found> => {
  const found: Array<Found> = []
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return [{ at: [], text: "the pipeline must be an object" }]
  const record = value as Record<string, unknown>
  for (const key of Object.keys(record))
    if (key !== "name" && key !== "stages")
      found.push({ at: [key], text: "unknown field (expected name, stages)" })
  if (typeof record.name !== "string" || record.name.trim().length === 0)
    found.push({ at: ["name"], text: "must be a non-empty string" })
  else if (record.name.length > limits.maxNameLength)
    found.push({
      at: ["name"],
      text: `${record.name.length} characters, more than the ${limits.maxNameLength} allowed`
    })
  if (!Array.isArray(record.stages) || record.stages.length === 0) {
    found.push({ at: ["stages"], text: "must be a non-empty array" })
    return found
  }
  if (record.stages.length > limits.maxStages) {
    // Not checked one by one: the problems of thousands of stages would be an attack of their own.
    found.push({
      at: ["stages"],
      text: `${record.stages.length} stages, more than the ${limits.maxStages} allowed`
    })
    return found
  }
  const keys = new Set<string>()
  record.stages.forEach((stage: unknown, index) => {
    if (typeof stage !== "object" || stage === null || Array.isArray(stage))
      found.push({ at: ["stages", index], text: "must be an object" })
    else checkStage(["stages", index], stage as Record<string, unknown>, keys, found, options)
  })
  return found
}

/** Every problem of a parsed pipeline value, with its location (`stages[1].key: ...`). */
export const problems = (value: unknown, options: CheckOptions = {}): Array<string> =>
  check(value, options).map(render)

/** The problems an error lists at most: a hostile pipeline cannot make a huge error. */
const maxProblems = 20

/** Where in its file a field is: `file:line:column`, or undefined when it cannot be told. */
type Locate = (at: ReadonlyArray<string | number>) => string | undefined

const refuse = (source: string, found: ReadonlyArray<Found>, locate?: Locate): PipelineError => {
  const shownProblems = found.slice(0, maxProblems).map((problem) => {
    const place = locate?.(problem.at)
    return place === undefined ? render(problem) : `${place}: ${render(problem)}`
  })
  return new PipelineError({
    source,
    problems:
      found.length > maxProblems
        ? [...shownProblems, `and ${found.length - maxProblems} more problems`]
        : shownProblems
  })
}

const pipelineOf = (record: { name: string; stages: Array<Record<string, unknown>> }): Pipeline => ({
  name: record.name,
  stages: record.stages.map((stage) => ({
    key: stage.key as string,
    instructions: stage.instructions as string,
    tools: (stage.tools as Array<string> | undefined) ?? [],
    approval: stage.approval === true
  }))
})

const decodeWith = (
  value: unknown,
  source: string,
  options: CheckOptions,
  locate?: () => Locate
): Effect.Effect<Pipeline, PipelineError> => {
  const found = check(value, options)
  if (found.length > 0) return Effect.fail(refuse(source, found, locate?.()))
  return Effect.succeed(pipelineOf(value as { name: string; stages: Array<Record<string, unknown>> }))
}

/** A pipeline from a parsed JSON value. */
export const decode = (
  value: unknown,
  source = "pipeline",
  options: CheckOptions = {}
): Effect.Effect<Pipeline, PipelineError> => Effect.suspend(() => decodeWith(value, source, options))

/** Whether `source` names a YAML file (`.yaml`, `.yml`). */
export const isYaml = (source: string): boolean => /\.ya?ml$/i.test(source)

/**
 * Where the fields of `document` are, as `source:line:column`: a field's key for a map's
 * field (also when its value is what is wrong: it is on the key's line, or starts below it),
 * an item for a list's, and the nearest enclosing node for a field that is missing.
 */
const locator =
  (source: string, document: Document.Parsed, lines: LineCounter): Locate =>
  (at) => {
    let node: unknown = document.contents
    let offset = isNode(node) ? node.range?.[0] : undefined
    for (const segment of at) {
      if (isMap(node)) {
        const pair = node.items.find((item) => isScalar(item.key) && item.key.value === segment)
        if (pair === undefined) break
        offset = isNode(pair.key) ? (pair.key.range?.[0] ?? offset) : offset
        node = pair.value
      } else if (isSeq(node) && typeof segment === "number") {
        node = node.items[segment]
        if (!isNode(node)) break
        offset = node.range?.[0] ?? offset
      } else break
    }
    if (offset === undefined) return undefined
    const { line, col } = lines.linePos(offset)
    return `${source}:${line}:${col}`
  }

/** The first line of a parser's message (YAML's carry the offending text below it). */
const firstLine = (message: string) => message.split("\n")[0] ?? message

const parseYamlText = (text: string, source: string, options: CheckOptions) => {
  const lines = new LineCounter()
  const document = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true })
  if (document.errors.length > 0)
    return Effect.fail(
      new PipelineError({
        source,
        problems: document.errors.slice(0, maxProblems).map((error) => {
          const { line, col } = lines.linePos(error.pos[0])
          return `${source}:${line}:${col}: not YAML: ${firstLine(error.message)}`
        })
      })
    )
  let value: unknown
  try {
    value = document.toJS()
  } catch (error) {
    return Effect.fail(
      new PipelineError({
        source,
        problems: [`not YAML: ${firstLine(error instanceof Error ? error.message : String(error))}`]
      })
    )
  }
  return decodeWith(value, source, options, () => locator(source, document, lines))
}

/**
 * A JSON text's fields located as a YAML document's are (JSON is YAML's flow style); no
 * location where the YAML parser reads the text otherwise (a duplicate key, say).
 */
const jsonLocator = (text: string, source: string): Locate => {
  const lines = new LineCounter()
  const document = parseDocument(text, { lineCounter: lines, prettyErrors: false })
  return document.errors.length > 0 ? () => undefined : locator(source, document, lines)
}

const parseJsonText = (text: string, source: string, options: CheckOptions) => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return Effect.fail(
      new PipelineError({
        source,
        problems: [`not JSON: ${firstLine(error instanceof Error ? error.message : String(error))}`]
      })
    )
  }
  return decodeWith(value, source, options, () => jsonLocator(text, source))
}

/**
 * A pipeline from JSON text, or YAML when `source` is a `.yaml`/`.yml` file. Each problem is
 * told with where it is, `source:line:column: ...`, when the text says where.
 */
export const parse = (
  text: string,
  source = "pipeline",
  options: CheckOptions = {}
): Effect.Effect<Pipeline, PipelineError> =>
  Effect.suspend(() =>
    isYaml(source) ? parseYamlText(text, source, options) : parseJsonText(text, source, options)
  )

/** A pipeline from a JSON or YAML file. */
export const load = (file: string, options: CheckOptions = {}): Effect.Effect<Pipeline, PipelineError> =>
  Effect.suspend(() => {
    let text: string
    try {
      const size = fs.statSync(file).size
      if (size > limits.maxFileBytes)
        return Effect.fail(
          new PipelineError({
            source: file,
            problems: [`${size} bytes, more than the ${limits.maxFileBytes} a pipeline file may have`]
          })
        )
      text = fs.readFileSync(file, "utf8")
    } catch (error) {
      return Effect.fail(
        new PipelineError({
          source: file,
          problems: [error instanceof Error ? error.message : String(error)]
        })
      )
    }
    return parse(text, file, options)
  })

/** The stages a run of `pipeline` is created with. */
export const planned = (pipeline: Pipeline): ReadonlyArray<PlannedStage> =>
  pipeline.stages.map((stage, index) => ({
    key: stage.key,
    position: index + 1,
    needsApproval: stage.approval
  }))

/** The pipeline used when none is given: works with any model, the offline one included. */
export const defaultPipeline: Pipeline = {
  name: "default",
  stages: [
    {
      key: "brief",
      instructions:
        "Restate the request as a short brief: the goal, the constraints, what the result must contain. Save it with write_artifact as brief.md.",
      tools: [],
      approval: false
    },
    {
      key: "result",
      instructions:
        "Produce what the request asks for, following the brief from the previous stage. Save it with write_artifact as result.md.",
      tools: [],
      approval: false
    }
  ]
}
