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
      expect(tooMany.problems).toEqual([`${yaml}:2:1: stages: 51 stages, more than the 50 allowed`])
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

/** A pipeline file in a new directory, removed after `use`. */
const withFile = async <A>(name: string, text: string, use: (file: string) => Promise<A>): Promise<A> => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-pipeline-"))
  try {
    const file = path.join(directory, name)
    fs.writeFileSync(file, text)
    return await use(file)
  } finally {
    fs.rmSync(directory, { recursive: true, force: true })
  }
}

describe("Pipeline: tool names against the tools offered, each problem where it is", () => {
  const offered = Pipeline.toolNames([
    { name: "calculator" },
    { name: "current_time" },
    { name: "read_file" }
  ])

  it("the tools a pipeline may use: the stage tools, then the ones offered, once each", () => {
    expect(offered).toEqual(["write_artifact", "read_artifact", "calculator", "current_time", "read_file"])
    expect(Pipeline.toolNames([{ name: "write_artifact" }, { name: "x" }])).toEqual([
      "write_artifact",
      "read_artifact",
      "x"
    ])
  })

  it("an unknown tool in a YAML file is refused with file:line:column, the tool, the stage and the tools offered", async () => {
    const text = [
      "name: review", // 1
      "stages:", // 2
      "  - key: draft", // 3
      "    instructions: Write it.", // 4
      "    tools: [current_time]", // 5
      "  - key: publish", // 6
      "    instructions: Publish it.", // 7
      "    tools:", // 8
      "      - read_artifact", // 9
      "      - clock", // 10
      ""
    ].join("\n")
    await withFile("review.yaml", text, async (file) => {
      const error = await Effect.runPromise(Effect.flip(Pipeline.load(file, { tools: offered })))
      expect(error.problems).toEqual([
        `${file}:10:9: stages[1].tools[1]: unknown tool "clock" in stage "publish"; a pipeline may use write_artifact, read_artifact, calculator, current_time, read_file`
      ])
      // Without the tools offered, only the names' form is checked.
      expect((await Effect.runPromise(Pipeline.load(file))).stages[1]?.tools).toEqual([
        "read_artifact",
        "clock"
      ])
    })
  })

  it("every problem of a file is listed, one each, in the order of the checks, with its line", async () => {
    const text = [
      "name: report", // 1
      "colour: blue", // 2
      "stages:", // 3
      "  - key: Draft", // 4
      "    instructions: Write it.", // 5
      "    tools: [calculater, current-time]", // 6
      "  - key: final", // 7
      "    approval: sometimes", // 8
      ""
    ].join("\n")
    await withFile("report.yml", text, async (file) => {
      const error = await Effect.runPromise(Effect.flip(Pipeline.load(file, { tools: offered })))
      const tools = "a pipeline may use write_artifact, read_artifact, calculator, current_time, read_file"
      expect(error.problems).toEqual([
        `${file}:2:1: colour: unknown field (expected name, stages)`,
        `${file}:4:5: stages[0].key: must be lowercase letters, digits, '-' or '_', starting with a letter (at most 48)`,
        `${file}:6:13: stages[0].tools[0]: unknown tool "calculater" (did you mean "calculator"?); ${tools}`,
        `${file}:6:25: stages[0].tools[1]: unknown tool "current-time" (did you mean "current_time"?); ${tools}`,
        // A missing field is placed at its stage.
        `${file}:7:5: stages[1].instructions: must be a non-empty string`,
        `${file}:8:5: stages[1].approval: must be true or false`
      ])
      expect(error.message).toContain(`Invalid pipeline ${file}:\n  ${file}:2:1: colour`)
    })
  })

  it("a JSON file's problems are placed too; a name far from every tool gets no guess", async () => {
    const text = `${JSON.stringify(
      { name: "p", stages: [{ key: "a", instructions: "Do it.", tools: ["read_artifacts", "weather"] }] },
      null,
      2
    )}\n`
    await withFile("p.json", text, async (file) => {
      const error = await Effect.runPromise(Effect.flip(Pipeline.load(file, { tools: offered })))
      expect(error.problems.map((problem) => problem.split("; ")[0])).toEqual([
        `${file}:8:9: stages[0].tools[0]: unknown tool "read_artifacts" in stage "a" (did you mean "read_artifact"?)`,
        `${file}:9:9: stages[0].tools[1]: unknown tool "weather" in stage "a"`
      ])
    })
  })

  it("the same check refuses a value (the API's JSON) without a place", async () => {
    const error = await Effect.runPromise(
      Effect.flip(
        Pipeline.decode({ name: "p", stages: [stage(0, { tools: ["calculator"] })] }, "the pipeline", {
          tools: Pipeline.stageTools
        })
      )
    )
    expect(error.problems).toEqual([
      'stages[0].tools[0]: unknown tool "calculator" in stage "s0"; a pipeline may use write_artifact, read_artifact'
    ])
  })
})
