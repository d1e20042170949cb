/**
 * The seed's own example (seed 003, "AgentRoutineContext integration plan"), run as
 * written with noema's names: AgentRoutine is `Routine`, AgentRoutineContext is
 * `RoutineContext`, the WBS goal chain is a `GoalChain` of a work breakdown, and
 * "the task completed" is the agent's verdict (`complete_task`), not its answering.
 */
import { assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect } from "effect"
import * as Routine from "../src/Routine.js"
import * as RoutineConformance from "../src/RoutineConformance.js"
import type { RoutineEvent } from "../src/RoutineContext.js"
import * as RoutineStore from "../src/RoutineStore.js"
import * as WorkBreakdown from "../src/WorkBreakdown.js"

const { finish, refuse } = RoutineConformance

describe("seed 003, as written", () => {
  it.effect(
    "executeWorkItems: ensureContext, execute the next task, track completion, drop the context",
    () =>
      Effect.gen(function* () {
        const store = RoutineStore.memory()
        const events: Array<RoutineEvent> = []
        const model = ScriptedChatModel.make({
          replies: [
            finish("collected"),
            refuse("No figures for Q4.", "Q4 is not published"),
            finish("written")
          ]
        })
        const routine = Routine.make({
          breakdown: RoutineConformance.breakdown(),
          id: "wbs",
          model,
          store,
          sources: RoutineConformance.sources,
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        const goalChain = WorkBreakdown.select(RoutineConformance.breakdown(), "report/yearly")[0]!
        const other = WorkBreakdown.select(RoutineConformance.breakdown(), "report/quarterly")[0]!

        // Step 2: ensureContext makes a context for the chain and sets it up (variables, preambles).
        const context = yield* routine.ensureContext(goalChain)
        assert.isTrue(context.matchesGoalChain(goalChain))
        assert.isFalse(context.matchesGoalChain(other))
        // The same chain gets the same context; setup is not repeated.
        assert.strictEqual(yield* routine.ensureContext(goalChain), context)
        assert.deepStrictEqual(
          events.filter((event) => event.type === "preamble").map((event) => event.kind),
          ["skill", "scenario"]
        )

        // Step 4: execute the next work item through the context; completion is tracked in it.
        const first = yield* routine.execute({ type: "goal", chain: goalChain })
        assert.deepStrictEqual(first, {
          type: "task",
          chain: "report/yearly",
          task: "collect",
          goalComplete: false
        })
        assert.isFalse(context.isComplete())
        // "if (result.taskCompleted)": an answer that says it could not do the task does not complete it.
        const second = yield* routine.execute({ type: "goal", chain: goalChain })
        assert.deepStrictEqual(second, {
          type: "task",
          chain: "report/yearly",
          task: "write",
          openReason: "Q4 is not published",
          goalComplete: false
        })
        assert.deepStrictEqual(routine.active, ["report/yearly"])
        const third = yield* routine.execute({ type: "goal", chain: goalChain })
        assert.deepStrictEqual(third, {
          type: "task",
          chain: "report/yearly",
          task: "write",
          goalComplete: true
        })
        // "if (context.isComplete()) { markGoalComplete; currentContext = null }"
        assert.isTrue(context.isComplete())
        assert.deepStrictEqual(routine.active, [])
        assert.strictEqual((yield* store.load("wbs", "report/yearly"))?.status, "complete")

        // The fallback: a work item outside any goal chain runs as an ordinary turn.
        model.enqueue("hello")
        const plain = yield* routine.execute({ type: "plain", messages: [Message.user("hi")] })
        assert.deepStrictEqual(plain.type === "plain" ? plain.messages.map(Message.text) : [], ["hello"])
      })
  )

  it.effect("setup flow: preambles once each, then the overview of completed tasks when work resumes", () =>
    Effect.gen(function* () {
      const store = RoutineStore.memory()
      const goalChain = WorkBreakdown.select(RoutineConformance.breakdown(), "report/quarterly")[0]!
      const make = (model: ScriptedChatModel.ScriptedChatModel) =>
        Routine.make({
          breakdown: RoutineConformance.breakdown(),
          id: "wbs",
          model,
          store,
          sources: RoutineConformance.sources
        })
      yield* make(ScriptedChatModel.make({ replies: [finish("figures")] })).step(goalChain)
      // A new process (after a crash): "context persistence for recovery after crashes".
      const model = ScriptedChatModel.make({ replies: [finish("summary")] })
      yield* make(model).step(goalChain)
      const texts = model.requests[0]!.messages.map(Message.text)
      assert.strictEqual(texts.filter((text) => text === "You write reports for Ada.").length, 1)
      assert.strictEqual(texts.filter((text) => text === "Brief: Q3 numbers").length, 1)
      const overview = texts.find((text) =>
        text.startsWith("These tasks of report/quarterly are already completed")
      )
      assert.strictEqual(
        overview,
        "These tasks of report/quarterly are already completed:\n- gather: Gather the figures (result: figures)\n\nDo not redo them; continue with the remaining tasks."
      )
    })
  )
})
