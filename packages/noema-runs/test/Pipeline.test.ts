/**
 * A pipeline's size is bounded whichever way it arrives (JSON over HTTP, a JSON
 * or YAML file): past a bound it is refused with an error that names the
 * field and the bound, and a hostile pipeline cannot make a huge error.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import * as Pipeline from "../src/Pipeline.js"

const stage = (index: number, extra: Record<string, unknown> = {}) => ({
  key: `s${index}`,
  instructions: "Do it.",
  ...extra
})

describe("Pipeline: limits", () => {
  it("at the bounds a pipeline is taken; one past each, it is refused saying which bound", () => {
    const { limits } = Pipeline
    const atBounds = {
      name: "n".repeat(limits.maxNameLength),
      stages: Array.from({ length: limits.maxStages }, (_, index) =>
        stage(index, {
          instructions: "i".repeat(limits.maxInstructionsLength),
          tools: Array.from({ length: limits.maxToolsPerStage }, (_, tool) => `tool_${tool}`)
        })
      )
    }
    expect(Pipeline.problems(atBounds)).toEqual([])
    expect(Pipeline.problems({ ...atBounds, name: "n".repeat(101) })).toEqual([
      "name: 101 characters, more than the 100 allowed"
    ])
    expect(
      Pipeline.problems({ name: "p", stages: Array.from({ length: 51 }, (_, index) => stage(index)) })
    ).toEqual(["stages: 51 stages, more than the 50 allowed"])
    expect(
      Pipeline.problems({ name: "p", stages: [stage(0, { instructions: "i".repeat(20_001) })] })
    ).toEqual(["stages[0].instructions: 20001 characters, more than the 20000 allowed"])
    const tools = Array.from({ length: 33 }, (_, tool) => `tool_${tool}`)
    expect(Pipeline.problems({ name: "p", stages: [stage(0, { tools })] })).toEqual([
      "stages[0].tools: 33 tools, more than the 32 allowed"
    ])
  })

  it("a pipeline with very many problems gets an error of 20 of them and a count, with field names cut short", async () => {
    const fields = Object.fromEntries(
      Array.from({ length: 500 }, (_, index) => [`${"f".repeat(1000)}${index}`, 1])
    )
    const error = await Effect.runPromise(
      Effect.flip(Pipeline.decode({ name: "p", stages: [stage(0)], ...fields }, "the pipeline"))
    )
    expect(error.problems).toHaveLength(21)
    expect(error.problems.at(-1)).toBe("and 480 more problems")
    expect(error.problems[0]).toBe(`${"f".repeat(40)}…: unknown field (expected name, stages)`)
    expect(error.message.length).toBeLessThan(2000)
  })

  it("a YAML file over the limits is refused like JSON; a file over 1 MiB is not read", async () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-pipeline-"))
    try {
      const yaml = path.join(directory, "big.yaml")
      fs.writeFileSync(
        yaml,
        `name: p\nstages:\n${Array.from({ length: 51 }, (_, index) => `  - key: s${index}\n    instructions: Do it.\n`).join("")}`
      )
      const tooMany = await Effect.runPromise(Effect.flip(Pipeline.load(yaml)))
      expect(tooMany.problems).toEqual(["stages: 51 stages, more than the 50 allowed"])
      const huge = path.join(directory, "huge.json")
      fs.writeFileSync(huge, " ".repeat(Pipeline.limits.maxFileBytes + 1))
      const tooBig = await Effect.runPromise(Effect.flip(Pipeline.load(huge)))
      expect(tooBig.problems).toEqual([
        `${Pipeline.limits.maxFileBytes + 1} bytes, more than the 1048576 a pipeline file may have`
      ])
    } finally {
      fs.rmSync(directory, { recursive: true, force: true })
    }
  })
})
