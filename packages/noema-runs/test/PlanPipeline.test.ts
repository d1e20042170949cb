import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect } from "effect"
import * as Executor from "../src/Executor.js"
import * as Pipeline from "../src/Pipeline.js"
import * as PlanPipeline from "../src/PlanPipeline.js"
import * as RunFiles from "../src/RunFiles.js"
import * as RunsStore from "../src/RunsStore.js"

const step = (id: number, title: string, detail = `do ${title}`) => ({
  id,
  title,
  detail,
  status: "pending" as const
})

describe("PlanPipeline", () => {
  it("keys from titles (unique, valid), approval, and steps beyond the limit kept in the last stage", () => {
    const pipeline = PlanPipeline.fromPlan(
      {
        goal: "a report",
        replans: 0,
        steps: [
          step(1, "Gather the Facts!"),
          step(2, "Gather the facts"),
          step(3, "3 charts"),
          step(4, "Écrire le résumé"),
          step(5, "Proofread")
        ]
      },
      { approval: "first", maxStages: 4, tools: ["clock"] }
    )
    assert.deepStrictEqual(
      pipeline.stages.map((s) => [s.key, s.approval, s.tools]),
      [
        ["gather-the-facts", true, ["clock"]],
        ["gather-the-facts-2", false, ["clock"]],
        ["step-3-charts", false, ["clock"]],
        ["ecrire-le-resume", false, ["clock"]]
      ]
    )
    assert.include(pipeline.stages[3]!.instructions, "Then also:\n- Proofread: do Proofread")
    assert.include(pipeline.stages[0]!.instructions, "Goal of the whole run: a report")
    // An ordinary pipeline: it passes the same checks as a file.
    assert.deepStrictEqual(Pipeline.problems(pipeline), [])
    assert.isTrue(
      PlanPipeline.fromPlan(
        { goal: "g", replans: 0, steps: [step(1, "a"), step(2, "b")] },
        { approval: "all" }
      ).stages.every((s) => s.approval)
    )
  })

  it.effect("a run planned by the model: one stage per step, carried out and resumable from run.json", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          JSON.stringify({
            thoughts: "two parts",
            goal: "A note about tea",
            steps: [
              { title: "Outline", detail: "List the points." },
              { title: "Write", detail: "Write the note from the outline." }
            ]
          })
        ],
        fallback: "done"
      })
      const pipeline = yield* PlanPipeline.plan("Write a note about tea", model)
      assert.deepStrictEqual(
        pipeline.stages.map((s) => s.key),
        ["outline", "write"]
      )
      assert.strictEqual(model.requests[0]?.request.responseFormat?.type, "json-schema")
      const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-plan-"))
      const store = yield* RunsStore.makeMemory()
      const executor = Executor.make({ store, workspace, model })
      const thread = yield* store.createThread()
      const run = yield* executor.create({ threadId: thread.id, request: "Write a note about tea", pipeline })
      const outcome = yield* executor.execute(run.runId, pipeline)
      assert.strictEqual(outcome.run.status, "completed")
      assert.deepStrictEqual(yield* executor.pipelineOf(run.runId), pipeline)
      assert.deepStrictEqual(
        fs.readdirSync(path.join(RunFiles.runDirectory(workspace, run.runId), "stages")).sort(),
        ["01-outline", "02-write"]
      )
      // The stage agent got the step as its instructions.
      const stageCall = model.requests.find((r) =>
        r.request.tools?.some((tool) => tool.name === "write_artifact")
      )
      assert.include(JSON.stringify(stageCall?.messages[0]), "This stage (1 of 2): Outline. List the points.")
    })
  )
})
