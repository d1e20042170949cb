import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Message, ModelError } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import * as Executor from "../src/Executor.js"
import type * as Pipeline from "../src/Pipeline.js"
import * as RunFiles from "../src/RunFiles.js"
import * as RunsStore from "../src/RunsStore.js"

const stage = (key: string, extra: Partial<Pipeline.StageDefinition> = {}): Pipeline.StageDefinition => ({
  key,
  instructions: `Do ${key}.`,
  tools: [],
  approval: false,
  ...extra
})

const setup = (replies: ReadonlyArray<ScriptedChatModel.Reply>, options: Partial<Executor.Options> = {}) =>
  Effect.gen(function* () {
    const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-handoff-"))
    const store = yield* RunsStore.makeMemory()
    const model = ScriptedChatModel.make({ replies })
    const executor = Executor.make({ store, workspace, model, ...options })
    const thread = yield* store.createThread({ title: "t" })
    return { workspace, store, model, executor, thread }
  })

const write = (file: string, content: string) => ({
  name: "write_artifact",
  arguments: { path: file, content }
})
const read = (args: { stage: string; path: string; attempt?: number }) => ({
  name: "read_artifact",
  arguments: args
})

const userText = (request: ScriptedChatModel.RecordedRequest) =>
  Message.text(request.messages.find((message) => message.role === "user")!)

/** The tool results the model read in `request`, in order. */
const toolResults = (request: ScriptedChatModel.RecordedRequest) =>
  request.messages.filter((message) => message.role === "tool").map(Message.text)

const inputOf = (workspace: string, runId: string, directory: string): RunFiles.StageInput =>
  JSON.parse(
    fs.readFileSync(
      path.join(RunFiles.runDirectory(workspace, runId), "stages", directory, "input.json"),
      "utf8"
    )
  )

const sha = (text: string) => RunFiles.sha256(Buffer.from(text, "utf8"))

const brief = "# Brief\n\nGreen tea, three sentences, no sugar.\n\n```\nsteep 2 min\n```\n"
const big = `${"A long survey of tea growing regions and their soils. ".repeat(200)}\n`
const data = '{"cups": 3}\n'

describe("hand-off between stages", () => {
  it.effect(
    "a stage is given the earlier answers and artifacts: small texts whole, the rest listed by sha256",
    () =>
      Effect.gen(function* () {
        const { workspace, executor, thread, model } = yield* setup(
          [
            {
              toolCalls: [
                write("brief.md", brief),
                write("big.md", big),
                write("bin.dat", "\u0000\u0001"),
                write("data.json", data)
              ]
            },
            "Notes written: the brief and the data.",
            "The report."
          ],
          { artifactBudget: 500 }
        )
        // Naming the tools every stage has anyway is allowed.
        const pipeline: Pipeline.Pipeline = {
          name: "p",
          stages: [stage("notes"), stage("report", { tools: ["read_artifact", "write_artifact"] })]
        }
        const run = yield* executor.create({ threadId: thread.id, request: "About tea", pipeline })
        const outcome = yield* executor.execute(run.runId, pipeline)
        assert.strictEqual(outcome.run.status, "completed")

        const second = model.requests[2]!
        assert.deepStrictEqual(
          (second.request.tools ?? []).map((tool) => tool.name),
          ["write_artifact", "read_artifact"]
        )
        const prompt = userText(second)
        // The content itself, not only the answer.
        assert.include(prompt, "Notes written: the brief and the data.")
        assert.include(prompt, "Green tea, three sentences, no sugar.")
        assert.include(prompt, '{"cups": 3}')
        // In a fence its own cannot close.
        assert.include(prompt, `\n\`\`\`\`\n${brief}\`\`\`\`\n`)
        // Past the budget (big.md) or binary (bin.dat): listed with kind, size, sha256, and how to read it.
        assert.notInclude(prompt, "A long survey")
        assert.include(
          prompt,
          `notes/big.md (markdown, ${big.length} bytes, sha256 ${sha(big)}): listed only; read it with read_artifact {"stage": "notes", "path": "big.md"}`
        )
        assert.include(prompt, `notes/bin.dat (text, 2 bytes, sha256 ${sha("\u0000\u0001")}): listed only`)

        const input = inputOf(workspace, run.runId, "02-report")
        // The file follows its documented shape.
        Schema.decodeUnknownSync(RunFiles.StageInput)(input)
        assert.deepStrictEqual(input, {
          request: "About tea",
          instructions: "Do report.",
          previous: [
            { stage_key: "notes", position: 1, attempt: 1, answer: "Notes written: the brief and the data." }
          ],
          artifacts: [
            {
              stage: "notes",
              path: "brief.md",
              kind: "markdown",
              size: brief.length,
              sha256: sha(brief),
              included: "full"
            },
            {
              stage: "notes",
              path: "big.md",
              kind: "markdown",
              size: big.length,
              sha256: sha(big),
              included: "listed"
            },
            {
              stage: "notes",
              path: "bin.dat",
              kind: "text",
              size: 2,
              sha256: sha("\u0000\u0001"),
              included: "listed"
            },
            {
              stage: "notes",
              path: "data.json",
              kind: "json",
              size: data.length,
              sha256: sha(data),
              included: "full"
            }
          ],
          artifact_budget: { tokens: 500, counter: "estimate" }
        })
        // The first stage had nothing before it: its prompt is the request.
        assert.strictEqual(userText(model.requests[0]!), "About tea")
        assert.deepStrictEqual(inputOf(workspace, run.runId, "01-notes").previous, [])
      })
  )

  it.effect(
    "read_artifact reads an earlier artifact (cut, saying so) and refuses everything else with a reason",
    () =>
      Effect.gen(function* () {
        const { executor, thread, model } = yield* setup(
          [
            // Stage 1, attempt 1 writes draft.md and then fails.
            { toolCalls: [write("draft.md", "a failed draft")] },
            { fail: new ModelError.Unavailable({ message: "upstream down", status: 503 }) },
            // Attempt 2 completes it.
            { toolCalls: [write("big.md", big)] },
            "Notes done.",
            {
              toolCalls: [
                read({ stage: "notes", path: "big.md" }),
                read({ stage: "notes", path: "../../../run.json" }),
                read({ stage: "notes", path: "/etc/passwd" }),
                read({ stage: "notes", path: "draft.md", attempt: 1 }),
                read({ stage: "notes", path: "draft.md" }),
                read({ stage: "report", path: "report.md" }),
                read({ stage: "final", path: "final.md" }),
                read({ stage: "elsewhere", path: "x.md" })
              ]
            },
            "Report done.",
            "Final done."
          ],
          { maxReadCharacters: 100 }
        )
        const pipeline: Pipeline.Pipeline = {
          name: "p",
          stages: [stage("notes"), stage("report"), stage("final")]
        }
        const run = yield* executor.create({ threadId: thread.id, request: "About tea", pipeline })
        assert.strictEqual((yield* executor.execute(run.runId, pipeline)).run.status, "failed")
        yield* executor.retry(run.runId)
        const outcome = yield* executor.execute(run.runId, pipeline)
        // Refusals are answers the model reads: the run goes on.
        assert.strictEqual(outcome.run.status, "completed")
        const results = toolResults(model.requests[5]!)
        assert.strictEqual(results.length, 8)
        assert.strictEqual(
          results[0],
          `notes/big.md (markdown, ${big.length} bytes, sha256 ${sha(big)}), cut: the first 100 of its ${big.length} characters:\n${big.slice(0, 100)}\n[cut here: ${big.length - 100} more characters]`
        )
        assert.include(results[1], "the path must not contain empty, '.' or '..' segments")
        assert.include(results[2], "the path must be relative")
        assert.include(
          results[3],
          "attempt 1 failed: only the artifacts of attempt 2, which completed the stage, can be read"
        )
        assert.include(results[4], 'no artifact "draft.md" (its artifacts: big.md)')
        assert.include(results[5], "not an earlier stage")
        assert.include(results[6], "not an earlier stage")
        assert.include(results[7], "no such stage in this run (its stages: notes, report, final)")
        for (const result of results.slice(1)) assert.notInclude(result, "failed draft")
      })
  )

  it.effect("read_artifact refuses an earlier artifact swapped for a link, a FIFO or other bytes", () =>
    Effect.gen(function* () {
      const { workspace, executor, thread, model } = yield* setup(
        [
          { toolCalls: [write("brief.md", brief), write("big.md", big), write("data.json", data)] },
          "Notes done.",
          {
            toolCalls: [
              read({ stage: "notes", path: "brief.md" }),
              read({ stage: "notes", path: "big.md" }),
              read({ stage: "notes", path: "data.json" })
            ]
          },
          "Report done."
        ],
        // Nothing is given whole, so the stage starts without reading the files.
        { artifactBudget: 0 }
      )
      const pipeline: Pipeline.Pipeline = {
        name: "p",
        stages: [stage("notes"), stage("report", { approval: true })]
      }
      const run = yield* executor.create({ threadId: thread.id, request: "About tea", pipeline })
      assert.strictEqual((yield* executor.execute(run.runId, pipeline))._tag, "WaitingApproval")
      const artifacts = path.join(RunFiles.stagePath(workspace, run.runId, 1, "notes"), "artifacts")
      // The same bytes, reached through a link: refused all the same.
      const outside = path.join(workspace, "outside.md")
      fs.writeFileSync(outside, brief)
      fs.rmSync(path.join(artifacts, "brief.md"))
      fs.symlinkSync(outside, path.join(artifacts, "brief.md"))
      fs.rmSync(path.join(artifacts, "big.md"))
      execFileSync("mkfifo", [path.join(artifacts, "big.md")])
      fs.rmSync(path.join(artifacts, "data.json"))
      fs.writeFileSync(path.join(artifacts, "data.json"), '{"cups": 4}\n')
      yield* executor.approve(run.runId)
      const outcome = yield* executor.execute(run.runId, pipeline)
      assert.strictEqual(outcome.run.status, "completed")
      const results = toolResults(model.requests[3]!)
      assert.include(results[0], "01-notes/brief.md: a symbolic link, not a file")
      assert.include(results[1], "01-notes/big.md: not a regular file")
      assert.include(results[2], "01-notes/data.json: changed since it was published")
      for (const result of results) assert.notInclude(result, workspace)
      assert.include(
        userText(model.requests[2]!),
        `notes/brief.md (markdown, ${brief.length} bytes, sha256 ${sha(brief)}): listed only`
      )
    })
  )

  it.effect("a stage run again after its process stopped is given the same input.json", () =>
    Effect.gen(function* () {
      const reached = Deferred.makeUnsafe<void>()
      const { workspace, store, executor, thread } = yield* setup([
        { toolCalls: [write("brief.md", brief), write("big.md", big)] },
        "Notes done.",
        // Stage 2's model never answers: the process "dies" in the middle of it.
        () => {
          Deferred.doneUnsafe(reached, Exit.void)
          return { hang: true }
        }
      ])
      const pipeline: Pipeline.Pipeline = { name: "p", stages: [stage("notes"), stage("report")] }
      const run = yield* executor.create({ threadId: thread.id, request: "About tea", pipeline })
      const fiber = yield* Effect.forkChild(executor.execute(run.runId, pipeline))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(fiber)

      // Another process carries it on, with the same store and workspace.
      const model = ScriptedChatModel.make({ replies: ["Report done."] })
      const resumed = yield* Executor.make({ store, workspace, model }).resume(run.runId)
      assert.strictEqual(resumed.run.status, "completed")
      assert.deepStrictEqual(
        resumed.run.stages[1]!.attempts.map((a) => [a.attempt, a.status, a.error?.error_code]),
        [
          [1, "failed", "interrupted"],
          [2, "completed", undefined]
        ]
      )
      const stages = path.join(RunFiles.runDirectory(workspace, run.runId), "stages")
      const first = fs.readFileSync(path.join(stages, "02-report.attempt-1", "input.json"))
      const again = fs.readFileSync(path.join(stages, "02-report", "input.json"))
      assert.strictEqual(again.toString("utf8"), first.toString("utf8"))
      assert.include(again.toString("utf8"), '"included": "full"')
      assert.include(userText(model.requests[0]!), "Green tea, three sentences, no sugar.")

      // And what a straight run of the same request, with the same stage 1, writes.
      const straightModel = ScriptedChatModel.make({
        replies: [
          { toolCalls: [write("brief.md", brief), write("big.md", big)] },
          "Notes done.",
          "Report done."
        ]
      })
      const straight = Executor.make({ store, workspace, model: straightModel })
      const other = yield* straight.create({ threadId: thread.id, request: "About tea", pipeline })
      assert.strictEqual((yield* straight.execute(other.runId, pipeline)).run.status, "completed")
      const straightInput = fs.readFileSync(
        path.join(RunFiles.runDirectory(workspace, other.runId), "stages", "02-report", "input.json")
      )
      assert.strictEqual(straightInput.toString("utf8"), again.toString("utf8"))
      assert.strictEqual(userText(straightModel.requests[2]!), userText(model.requests[0]!))
    })
  )
})
