/**
 * Pipeline: the stages a run is made of, from a JSON or YAML file.
 *
 *     { "name": "report",
 *       "stages": [
 *         { "key": "outline", "instructions": "Outline the answer." },
 *         { "key": "draft", "instructions": "Write it.", "tools": ["clock"], "approval": true } ] }
 *
 * `key` names the stage's directory (`<nn>-<key>`); `instructions` are the
 * stage agent's system prompt; `tools` names tools the executor is given (every
 * stage has `stageTools`: `write_artifact` and `read_artifact`); `approval: true` makes the run wait for a
 * person before the stage runs. A file that does not match is refused with
 * every problem, one per line, naming where it is.
 *
 * A pipeline may come from anyone who can reach the API, so its size is
 * bounded (`limits`: stages, tools, the lengths of names and instructions),
 * whichever way it arrives: JSON over HTTP, a JSON or YAML file, all decoded
 * here. A file is read only up to `limits.maxFileBytes`.
 */
import * as fs from "node:fs"
import { Effect, Schema } from "effect"
import { parse as parseYaml } from "yaml"
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

const checkStage = (at: string, s: Record<string, unknown>, keys: Set<string>, found: Array<string>) => {
  for (const key of Object.keys(s))
    if (!["key", "instructions", "tools", "approval"].includes(key))
      found.push(`${at}.${shown(key)}: unknown field (expected key, instructions, tools, approval)`)
  if (typeof s.key !== "string" || !stageKeyPattern.test(s.key))
    found.push(
      `${at}.key: must be lowercase letters, digits, '-' or '_', starting with a letter (at most 48)`
    )
  else if (keys.has(s.key)) found.push(`${at}.key: "${s.key}" is used twice`)
  else keys.add(s.key)
  if (typeof s.instructions !== "string" || s.instructions.trim().length === 0)
    found.push(`${at}.instructions: must be a non-empty string`)
  else if (s.instructions.length > limits.maxInstructionsLength)
    found.push(
      `${at}.instructions: ${s.instructions.length} characters, more than the ${limits.maxInstructionsLength} allowed`
    )
  if (
    s.tools !== undefined &&
    (!Array.isArray(s.tools) || s.tools.some((tool) => typeof tool !== "string" || !toolName.test(tool)))
  )
    found.push(`${at}.tools: must be an array of tool names`)
  else if (Array.isArray(s.tools) && s.tools.length > limits.maxToolsPerStage)
    found.push(`${at}.tools: ${s.tools.length} tools, more than the ${limits.maxToolsPerStage} allowed`)
  if (s.approval !== undefined && typeof s.approval !== "boolean")
    found.push(`${at}.approval: must be true or false`)
}

/** Every problem of a parsed pipeline value, with its location (`stages[1].key`). */
export const problems = (value: unknown): Array<string> => {
  const found: Array<string> = []
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return ["the pipeline must be an object"]
  const record = value as Record<string, unknown>
  for (const key of Object.keys(record))
    if (key !== "name" && key !== "stages") found.push(`${shown(key)}: unknown field (expected name, stages)`)
  if (typeof record.name !== "string" || record.name.trim().length === 0)
    found.push("name: must be a non-empty string")
  else if (record.name.length > limits.maxNameLength)
    found.push(`name: ${record.name.length} characters, more than the ${limits.maxNameLength} allowed`)
  if (!Array.isArray(record.stages) || record.stages.length === 0) {
    found.push("stages: must be a non-empty array")
    return found
  }
  if (record.stages.length > limits.maxStages) {
    // Not checked one by one: the problems of thousands of stages would be an attack of their own.
    found.push(`stages: ${record.stages.length} stages, more than the ${limits.maxStages} allowed`)
    return found
  }
  const keys = new Set<string>()
  record.stages.forEach((stage: unknown, index) => {
    const at = `stages[${index}]`
    if (typeof stage !== "object" || stage === null || Array.isArray(stage))
      found.push(`${at}: must be an object`)
    else checkStage(at, stage as Record<string, unknown>, keys, found)
  })
  return found
}

/** The problems an error lists at most: a hostile pipeline cannot make a huge error. */
const maxProblems = 20

/** A pipeline from a parsed JSON value. */
export const decode = (value: unknown, source = "pipeline"): Effect.Effect<Pipeline, PipelineError> => {
  const found = problems(value)
  if (found.length > 0)
    return Effect.fail(
      new PipelineError({
        source,
        problems:
          found.length > maxProblems
            ? [...found.slice(0, maxProblems), `and ${found.length - maxProblems} more problems`]
            : found
      })
    )
  const record = value as { name: string; stages: Array<Record<string, unknown>> }
  return Effect.succeed({
    name: record.name,
    stages: record.stages.map((stage) => ({
      key: stage.key as string,
      instructions: stage.instructions as string,
      tools: (stage.tools as Array<string> | undefined) ?? [],
      approval: stage.approval === true
    }))
  })
}

/** Whether `source` names a YAML file (`.yaml`, `.yml`). */
export const isYaml = (source: string): boolean => /\.ya?ml$/i.test(source)

/** A pipeline from JSON text, or YAML when `source` is a `.yaml`/`.yml` file. */
export const parse = (text: string, source = "pipeline"): Effect.Effect<Pipeline, PipelineError> =>
  Effect.suspend(() => {
    let value: unknown
    const yaml = isYaml(source)
    try {
      value = yaml ? parseYaml(text, { prettyErrors: true, uniqueKeys: true }) : JSON.parse(text)
    } catch (error) {
      return Effect.fail(
        new PipelineError({
          source,
          problems: [
            `not ${yaml ? "YAML" : "JSON"}: ${(error instanceof Error ? error.message : String(error)).split("\n")[0]}`
          ]
        })
      )
    }
    return decode(value, source)
  })

/** A pipeline from a JSON or YAML file. */
export const load = (file: string): Effect.Effect<Pipeline, PipelineError> =>
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
    return parse(text, file)
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
