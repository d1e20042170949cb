import * as fs from "node:fs"
import * as path from "node:path"
import type { OpenAiTestServer } from "@noema/openai/testing"
import { assert, describe, it } from "vitest"
import { type ChatBody, textOf } from "./support/chat.js"
import { runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

const brief = "# Brief\n\nThree sentences on green tea; mention Uji; no sugar.\n"

const messagesOf = (request: OpenAiTestServer.RecordedRequest) => (request.body as ChatBody).messages
const systemOf = (request: OpenAiTestServer.RecordedRequest) =>
  textOf(messagesOf(request).find((message) => message.role === "system")?.content)
const toolCall = (name: string, args: object) => ({ name, arguments: JSON.stringify(args) })

describe("noema run: a stage hands its work on to the next", () => {
  it("stage 2's request holds stage 1's artifact itself; read_artifact outside the finished stages is refused to the model", async () => {
    const env = { NOEMA_HOME: frame.home }
    const pipelineFile = path.join(frame.home, "pipeline.json")
    fs.writeFileSync(
      pipelineFile,
      JSON.stringify({
        name: "handoff",
        stages: [
          { key: "notes", instructions: "Write the brief." },
          { key: "report", instructions: "Write the report from the brief." },
          { key: "final", instructions: "Polish it." }
        ]
      })
    )
    let notesCalls = 0
    frame.server.setFallback((request) => {
      const system = systemOf(request)
      const afterTool = messagesOf(request).at(-1)?.role === "tool"
      if (system === "Write the brief.") {
        notesCalls++
        // Attempt 1 writes a draft, then the server refuses (400: not retried), failing the run.
        if (notesCalls === 2) return { type: "error", status: 400, message: "bad request" }
        if (afterTool) return { type: "text", text: "done" }
        return {
          type: "tool-calls",
          calls: [
            notesCalls === 1
              ? toolCall("write_artifact", { path: "draft.md", content: "a failed draft" })
              : toolCall("write_artifact", { path: "brief.md", content: brief })
          ]
        }
      }
      if (afterTool) return { type: "text", text: "done" }
      if (system === "Write the report from the brief.")
        return {
          type: "tool-calls",
          calls: [
            toolCall("read_artifact", { stage: "notes", path: "brief.md" }),
            toolCall("read_artifact", { stage: "notes", path: "../../../run.json" }),
            toolCall("read_artifact", { stage: "notes", path: "/etc/passwd" }),
            toolCall("read_artifact", { stage: "notes", path: "draft.md", attempt: 1 }),
            toolCall("read_artifact", { stage: "final", path: "final.md" })
          ]
        }
      return { type: "text", text: "polished" }
    })
    const model = ["--base-url", frame.server.url, "--api-key", "k", "-m", "m", "--no-tools"]
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const failed = await runCli(
      ["run", "A note on tea", "--thread", thread, "--pipeline", pipelineFile, ...model],
      {
        env
      }
    )
    assert.equal(failed.code, 1, failed.stdout + failed.stderr)
    const runId = /^run (run_\S+)$/m.exec(failed.stdout)?.[1]
    assert.ok(runId, failed.stdout)
    // A 400 is the server refusing the request itself: not retryable, so the retry is forced.
    const retried = await runCli(["runs", "retry", runId!, "--force", ...model], { env })
    assert.equal(retried.code, 0, retried.stdout + retried.stderr)
    assert.match(retried.stdout, /✔ run run_\S+ completed/)

    const reportRequests = frame.server.requests.filter(
      (r) => systemOf(r) === "Write the report from the brief."
    )
    assert.equal(reportRequests.length, 2)
    const [first, second] = reportRequests
    // The artifact's content went over the wire, not only the stage's answer.
    const prompt = textOf(messagesOf(first!).find((message) => message.role === "user")?.content)
    assert.include(prompt, "Three sentences on green tea; mention Uji; no sugar.")
    assert.include(prompt, "## notes (stage 1)\ndone")
    assert.notInclude(prompt, "a failed draft")
    assert.includeMembers(
      ((first!.body as ChatBody).tools ?? []).map((tool) => tool.function.name),
      ["write_artifact", "read_artifact"]
    )
    // Every refusal reaches the model as a tool result it can read and act on.
    const results = messagesOf(second!)
      .filter((message) => message.role === "tool")
      .map((message) => textOf(message.content))
    assert.equal(results.length, 5)
    assert.include(results[0], "Three sentences on green tea")
    assert.include(results[1], "the path must not contain empty, '.' or '..' segments")
    assert.include(results[2], "the path must be relative")
    assert.include(
      results[3],
      "attempt 1 failed: only the artifacts of attempt 2, which completed the stage, can be read"
    )
    assert.include(results[4], "not an earlier stage")
    for (const result of results.slice(1)) assert.notInclude(result, "failed draft")

    const input = JSON.parse(
      fs.readFileSync(
        path.join(frame.home, "workspace", "runs", runId!, "stages", "02-report", "input.json"),
        "utf8"
      )
    )
    assert.deepEqual(input.artifacts, [
      {
        stage: "notes",
        path: "brief.md",
        kind: "markdown",
        size: Buffer.byteLength(brief),
        sha256: input.artifacts[0].sha256,
        included: "full"
      }
    ])
    const verify = await runCli(["runs", "verify", runId!], { env })
    assert.equal(verify.code, 0, verify.stdout + verify.stderr)
  })

  it("the offline model's result names what the brief stage made", async () => {
    const env = { NOEMA_HOME: frame.home }
    const thread = (await runCli(["threads", "create"], { env })).stdout.trim()
    const result = await runCli(["run", "A note on tea", "--thread", thread], { env })
    assert.equal(result.code, 0, result.stdout + result.stderr)
    const runId = /^run (run_\S+)$/m.exec(result.stdout)?.[1]
    const resultMd = fs.readFileSync(
      path.join(frame.home, "workspace", "runs", runId!, "stages", "02-result", "artifacts", "result.md"),
      "utf8"
    )
    assert.match(
      resultMd,
      /\*\*From earlier stages:\*\*\n- brief: Wrote brief\.md .*\(artifacts: brief\.md\)/
    )
    assert.match(resultMd, /\*\*Request:\*\* A note on tea\n/)
  })
})
