/**
 * A property over random interleavings: triggers of all three priorities
 * arrive at random moments, with random interruptions, while turns stream and
 * call tools. Whatever the interleaving: no item is lost (each is stored once,
 * or reported by `stop` or a failed cycle), none is duplicated, each cycle
 * takes its items in priority then arrival order, and the stored history is
 * valid (every tool call answered, results right after their call). Some
 * scenarios include a person's cancel (an Interruption without messages), and
 * some stop the runtime at once after the last trigger, cancelling or finishing
 * the running cycle, so `stop`'s report is part of the accounting.
 *
 * The same property holds for every agent the builder can choose: it runs over
 * the tool loop (`ToolAgent`, steered between model calls) and the plan-driven
 * workflow (`PlanAgent`, steered between plan steps), and for each, across the
 * runs, items did join running turns (steering is live, not merely unused).
 */
import { assert, describe, it } from "@effect/vitest"
import { PlanAgent } from "@noema/agents"
import { type Agent, type ChatModel, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Schema } from "effect"
import fc from "fast-check"
import * as ContextItem from "../src/ContextItem.js"
import type * as Runtime from "../src/Runtime.js"
import type * as RuntimeBuilder from "../src/RuntimeBuilder.js"
import type * as Submind from "../src/Submind.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { assertValidHistory, assertValidRequests, setup, toolAgent, waitFor } from "./support.js"

const rank: Record<ContextItem.ContextPriority, number> = { Interruption: 0, ForNextTurn: 1, InTheEnd: 2 }

/** `note` triggers become InTheEnd items (`user.message` ones are ForNextTurn or Interruption). */
const inTheEnd: Submind.Submind = {
  name: "in-the-end",
  onTrigger: (trigger) =>
    Effect.succeed(
      trigger.type === "note"
        ? [ContextItem.make("InTheEnd", [Message.user(String(trigger.payload))], { trigger })]
        : []
    )
}

const quick = Tool.make({
  name: "quick",
  description: "Quick",
  parameters: Schema.Struct({}),
  handler: () => Effect.as(Effect.sleep("2 millis"), "done")
})

const step = fc.record({
  // "Cancel" is a person's Ctrl-C: an Interruption without messages, which only stops the turn.
  kind: fc.constantFrom("ForNextTurn", "Interruption", "InTheEnd", "Cancel"),
  pauseMs: fc.integer({ min: 0, max: 6 })
})

/** How the scenario ends: once everything was handled, or at once after the last trigger (cancel or finish). */
const ending = fc.constantFrom("when-idle", "cancel", "finish")

/** An agent the builder can choose, and how the scripted model answers it. */
interface Subject {
  readonly agent: (parts: RuntimeBuilder.AgentParts) => Agent.Agent
  /** The reply to a request that is not a plain turn of the tool loop (a plan, a review, the notify decision). */
  readonly workflow: (
    request: ChatModel.ChatRequest,
    count: number
  ) => string | ScriptedChatModel.Reply | undefined
}

const json = (value: unknown) => JSON.stringify(value)

const subjects: Record<string, Subject> = {
  ToolAgent: { agent: toolAgent, workflow: () => undefined },
  PlanAgent: {
    agent: ({ tools, steering }) => PlanAgent.make({ name: "runtime", tools, steering }),
    workflow: (request, count) => {
      const format = request.responseFormat
      if (format?.type === "json-schema" && format.name === "plan") {
        const steps = count % 2 === 0 ? ["first", "second"] : ["only"]
        return json({ thoughts: "t", goal: "g", steps: steps.map((title) => ({ title, detail: title })) })
      }
      if (format?.type === "json-schema" && format.name === "review") {
        return json({
          thoughts: "t",
          outcome: "done",
          summary: "s",
          decision: count % 4 === 0 ? "finish" : "continue",
          remainingSteps: null
        })
      }
      if (request.tools?.some((tool) => tool.name === PlanAgent.sendMessageToolName)) {
        return { toolCalls: [{ name: PlanAgent.sendMessageToolName, arguments: { text: `reply ${count}` } }] }
      }
      return undefined
    }
  }
}

/** Runs where an item joined a running turn, per agent. */
const joinedRuns: Record<string, number> = { ToolAgent: 0, PlanAgent: 0 }

const scenario = (
  subject: string,
  steps: ReadonlyArray<{ readonly kind: string; readonly pauseMs: number }>,
  seed: number,
  end: "when-idle" | "cancel" | "finish" = "when-idle"
) =>
  Effect.gen(function* () {
    const { agent, workflow } = subjects[subject] as Subject
    let requests = 0
    // The model answers with text, or asks for the quick tool, depending on the request's number
    // (and writes the plan's structured parts when the agent asks for them).
    const model = ScriptedChatModel.make({
      chunkDelay: "1 millis",
      fallback: ({ request }) => {
        requests++
        return (
          workflow(request, requests) ??
          ((requests + seed) % 3 === 0
            ? { toolCalls: [{ name: "quick", arguments: {} }] }
            : `answer number ${requests} in several words`)
        )
      }
    })
    const { runtime, events, stored } = yield* setup({ model, tools: [quick], subminds: [inTheEnd], agent })
    yield* runtime.start
    const texts: Array<string> = []
    for (const [index, { kind, pauseMs }] of steps.entries()) {
      yield* Effect.sleep(`${pauseMs} millis`)
      if (kind === "Cancel") {
        yield* runtime.receiveTrigger(TriggerEvent.cancel())
        continue
      }
      const text = `item-${index}`
      texts.push(text)
      yield* runtime.receiveTrigger(
        kind === "InTheEnd"
          ? TriggerEvent.make("note", text)
          : TriggerEvent.fromUser(text, { interrupt: kind === "Interruption" })
      )
    }
    // Let it finish whatever is queued, then stop; or stop at once, whatever is running or queued.
    if (end === "when-idle") {
      yield* waitFor(
        events,
        (all) =>
          all.at(-1)?.type === "idle" &&
          all.filter((event) => event.type === "trigger").length === steps.length,
        "the runtime to go idle"
      )
    }
    const report = yield* runtime.stop(end === "finish" ? { running: "finish" } : {})
    if (events.some((event) => event.type === "injected"))
      joinedRuns[subject] = (joinedRuns[subject] ?? 0) + 1
    assert.strictEqual(events.at(-1)?.type, "stopped")
    const history = yield* stored()
    assertValidHistory(history)
    assertValidRequests(model)

    // Nothing lost, nothing duplicated.
    const storedTexts = history
      .filter((message) => message.role === "user")
      .map((message) => Message.text(message))
    const dropped = events.flatMap((event: Runtime.RuntimeEvent) =>
      event.type === "cycle-failed"
        ? event.dropped.flatMap((item) => item.messages.map((m) => Message.text(m)))
        : []
    )
    const unprocessed = report.unprocessed.flatMap((item) => item.messages.map((m) => Message.text(m)))
    for (const text of texts) {
      const times = storedTexts.filter((candidate) => candidate === text).length
      assert.isAtMost(times, 1, `${text} stored twice`)
      assert.strictEqual(
        times +
          dropped.filter((candidate) => candidate === text).length +
          unprocessed.filter((c) => c === text).length,
        1,
        `${text} lost or duplicated (stored ${times}, dropped, or unprocessed)`
      )
    }
    // Each cycle took its items in priority order, and first in first out within one.
    for (const event of events) {
      if (event.type !== "cycle-started") continue
      const items = event.cycle.items
      for (let index = 1; index < items.length; index++) {
        const before = items[index - 1] as ContextItem.ContextItem
        const after = items[index] as ContextItem.ContextItem
        assert.isAtMost(rank[before.priority], rank[after.priority], "priority order")
        if (before.priority === after.priority) {
          const number = (item: ContextItem.ContextItem) =>
            Number(Message.text(item.messages[0] as Message.Message).slice("item-".length))
          assert.isBelow(number(before), number(after), "arrival order within a priority")
        }
      }
    }
  })

describe.each(Object.keys(subjects))("Runtime under random interleavings, %s", (subject) => {
  it.live(
    "loses nothing, duplicates nothing, keeps priority order and a valid history; items join running turns",
    () =>
      Effect.gen(function* () {
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(
              fc.array(step, { minLength: 1, maxLength: 12 }),
              fc.integer({ min: 0, max: 2 }),
              ending,
              (steps, seed, end) => Effect.runPromise(Effect.scoped(scenario(subject, steps, seed, end)))
            ),
            { numRuns: 60 }
          )
        )
        // Steering is live for this agent: somewhere in the runs, an item joined a running turn.
        assert.isAbove(joinedRuns[subject] ?? 0, 0, "no item ever joined a running turn")
      }),
    120_000
  )
})
