/**
 * `noema run --pipeline FILE`: a pipeline that does not fit is refused before anything runs
 * (exit 2, every problem on its own line as FILE:LINE:COLUMN, nothing stored or written),
 * its tool names checked against the tools the CLI offers; and the example pipelines of
 * docs/runs.md and of `noema run --help` run, on the offline model, through the CLI.
 */
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "vitest"
import { pipelineTools } from "../src/RunsCommand.js"
import { offlineNoticeLine, runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

const docsFile = fileURLToPath(new URL("../../../docs/runs.md", import.meta.url))

/** Every file under `directory` with its sha256, by relative path (none when it is not there). */
const snapshot = (directory: string): Record<string, string> => {
  const out: Record<string, string> = {}
  if (!fs.existsSync(directory)) return out
  for (const entry of fs.readdirSync(directory, { recursive: true, withFileTypes: true }))
    if (entry.isFile()) {
      const full = path.join(entry.parentPath, entry.name)
      out[path.relative(directory, full)] = createHash("sha256").update(fs.readFileSync(full)).digest("hex")
    }
  return out
}

const runIdOf = (stdout: string) => {
  const id = /^run (run_\S+)$/m.exec(stdout)?.[1]
  assert.ok(id, stdout)
  return id as string
}

const offered = [...pipelineTools.always, ...pipelineTools.builtin]
const mayUse = `a pipeline may use ${offered.join(", ")}`

/**
 * Runs `pipeline` (YAML text) with `noema run` on the offline model, approving each stage that
 * waits (at most once per stage); the last exit status and the run's id.
 */
const runToTheEnd = async (pipeline: string, name: string) => {
  const env = { NOEMA_HOME: path.join(frame.home, name) }
  const file = path.join(frame.home, `${name}.yaml`)
  fs.writeFileSync(file, pipeline)
  const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
  let result = await runCli(["run", "A short note about green tea", "--thread", thread, "--pipeline", file], {
    env
  })
  const runId = runIdOf(result.stdout)
  const stages = (pipeline.match(/^\s*- key:/gm) ?? []).length
  for (let approvals = 0; result.code === 4 && approvals < stages; approvals++)
    result = await runCli(["runs", "approve", runId], { env })
  assert.equal(result.code, 0, `${name}: ${result.stdout}${result.stderr}`)
  const verify = await runCli(["runs", "verify", runId], { env })
  assert.equal(verify.code, 0, verify.stdout)
  return { env, runId }
}

describe("noema run --pipeline: refused before anything runs", () => {
  it("an unknown tool on line 9: exit 2 naming file:9, the tool, the stage and the tools offered; nothing stored or written", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "unknown-tool") }
    const file = path.join(frame.home, "review.yaml")
    fs.writeFileSync(
      file,
      [
        "name: review", // 1
        "stages:", // 2
        "  - key: draft", // 3
        "    instructions: Write a draft. Save it as draft.md.", // 4
        "  - key: publish", // 5
        "    instructions: Publish it.", // 6
        "    approval: true", // 7
        "    tools:", // 8
        "      - calculater", // 9
        ""
      ].join("\n")
    )
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const before = snapshot(env.NOEMA_HOME)
    const refused = await runCli(["run", "a note", "--thread", thread, "--pipeline", file], { env })
    assert.equal(refused.code, 2, refused.stdout)
    assert.equal(refused.stdout, "")
    assert.equal(
      refused.stderr,
      `${offlineNoticeLine}noema: the pipeline ${file} is refused, nothing was run:\n` +
        `${file}:9:9: stages[1].tools[0]: unknown tool "calculater" in stage "publish" (did you mean "calculator"?); ${mayUse}\n`
    )
    // The database is as the thread left it, and no workspace was made.
    assert.deepEqual(snapshot(env.NOEMA_HOME), before)
    assert.isFalse(fs.existsSync(path.join(env.NOEMA_HOME, "workspace")))

    // Offered without --no-tools only: with it, even a built-in tool is refused, saying why.
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace("calculater", "calculator"))
    const noTools = await runCli(["run", "a note", "--thread", thread, "--pipeline", file, "--no-tools"], {
      env
    })
    assert.equal(noTools.code, 2)
    assert.include(noTools.stderr, "(--no-tools: the stages have write_artifact and read_artifact only)")
    assert.include(
      noTools.stderr,
      `${file}:9:9: stages[1].tools[0]: unknown tool "calculator" in stage "publish"; a pipeline may use write_artifact, read_artifact\n`
    )
    assert.deepEqual(snapshot(env.NOEMA_HOME), before)
    assert.equal((await runCli(["runs", "list", "--json"], { env })).stdout.trim(), "[]")
  })

  it("several problems: every one is listed, one per line, each with its line and column", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "several") }
    const file = path.join(frame.home, "several.yml")
    fs.writeFileSync(
      file,
      [
        "name: report", // 1
        "stages:", // 2
        "  - key: Outline", // 3
        "    instructions: Outline it.", // 4
        "    tools: [clock, current-time]", // 5
        "  - key: draft", // 6
        "    instruction: Write it.", // 7
        ""
      ].join("\n")
    )
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const refused = await runCli(["run", "a report", "--thread", thread, "--pipeline", file], { env })
    assert.equal(refused.code, 2)
    assert.deepEqual(refused.stderr.trimEnd().split("\n"), [
      offlineNoticeLine.trimEnd(),
      `noema: the pipeline ${file} is refused, nothing was run:`,
      `${file}:3:5: stages[0].key: must be lowercase letters, digits, '-' or '_', starting with a letter (at most 48)`,
      `${file}:5:13: stages[0].tools[0]: unknown tool "clock"; ${mayUse}`,
      `${file}:5:20: stages[0].tools[1]: unknown tool "current-time" (did you mean "current_time"?); ${mayUse}`,
      `${file}:7:5: stages[1].instruction: unknown field (expected key, instructions, tools, approval)`,
      `${file}:6:5: stages[1].instructions: must be a non-empty string`
    ])
    assert.isFalse(fs.existsSync(path.join(env.NOEMA_HOME, "workspace")))
  })
})

describe("the example pipelines run: docs/runs.md's and noema run --help's", () => {
  it("every YAML block of docs/runs.md runs to completion on the offline model, its stages' tools given", async () => {
    const docs = fs.readFileSync(docsFile, "utf8")
    const blocks = [...docs.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)].map((match) => match[1] as string)
    assert.isAbove(blocks.length, 0, "docs/runs.md has no YAML pipeline")
    for (const [index, block] of blocks.entries()) {
      const { env, runId } = await runToTheEnd(block, `docs-${index}`)
      const shown = JSON.parse((await runCli(["runs", "show", runId, "--json"], { env })).stdout)
      assert.equal(shown.status, "completed")
      const named = [...block.matchAll(/^\s*- key: (\S+)/gm)].map((match) => match[1])
      assert.deepEqual(
        shown.stages.map((stage: { key: string }) => stage.key),
        named
      )
    }
  })

  it("docs/runs.md and noema run --help list the tools a pipeline may use, as the CLI offers them", async () => {
    const docs = fs.readFileSync(docsFile, "utf8").replace(/\s+/g, " ")
    const listed = /The tools a stage may name in `noema run`: ([^.]*)\./.exec(docs)?.[1]
    assert.ok(listed, "docs/runs.md does not list the tools a stage may name")
    assert.deepEqual(
      [...(listed ?? "").matchAll(/`([a-z_]+)`/g)].map((match) => match[1]),
      offered
    )
    const help = await runCli(["run", "--help"])
    assert.equal(help.code, 0)
    assert.include(help.stdout, `The tools a stage may name: ${offered.join(", ")}\n`)
    // The help's own example pipeline runs too.
    const example = /^Pipelines\n([\s\S]*?)\n\n/m.exec(help.stdout)?.[1]
    assert.ok(example, help.stdout)
    await runToTheEnd(`${(example ?? "").replace(/^ {2}/gm, "")}\n`, "help")
  })
})
