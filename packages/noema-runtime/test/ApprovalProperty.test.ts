/**
 * A property over random interleavings of people's messages (queued and
 * interrupting), cancels and decisions on the calls waiting for approval
 * (approve, reject, one of several, a duplicate, an unknown call), while turns
 * stream and call tools that need approval. Whatever the interleaving: no call
 * has two results and no approved call runs twice (no duplicate decision); a
 * call runs only once approved; each decision the runtime took in is recorded
 * once on its calls' results, or reported (refused when its turn would come,
 * or left unprocessed by `stop`), and a refused one is never recorded; and the
 * session never ends with an unanswered call, except one still waiting for
 * approval when the runtime was stopped at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Approval, ConversationContext, type Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Schema } from "effect"
import fc from "fast-check"
import * as ContextItem from "../src/ContextItem.js"
import type * as Runtime from "../src/Runtime.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { assertValidRequests, setup, waitFor } from "./support.js"

const kinds = [
  "message",
  "interrupting message",
  "cancel",
  "approve all",
  "reject all",
  "approve one",
  "duplicate",
  "unknown call",
  "wait until idle"
] as const

// Weighted towards what makes calls wait and decides them: messages, waiting for the turn to end, approving.
const weights: Record<(typeof kinds)[number], number> = {
  message: 3,
  "interrupting message": 2,
  cancel: 2,
  "approve all": 3,
  "reject all": 1,
  "approve one": 1,
  duplicate: 1,
  "unknown call": 1,
  "wait until idle": 3
}
const step = fc.record({
  kind: fc.oneof(...kinds.map((kind) => ({ arbitrary: fc.constant(kind), weight: weights[kind] }))),
  pauseMs: fc.integer({ min: 0, max: 6 })
})

/** Once the steps are sent: decide until nothing waits, then stop; or stop at once (cancel or finish). */
const ending = fc.constantFrom("drain", "cancel", "finish")

interface Recorded {
  readonly approved: boolean
  readonly trigger?: string
}

const recordOf = (message: Message.ToolMessage): Recorded | undefined =>
  message.metadata?.[ContextItem.decisionMetadataKey] as Recorded | undefined

const scenario = (
  steps: ReadonlyArray<{ readonly kind: (typeof kinds)[number]; readonly pauseMs: number }>,
  seed: number,
  end: "drain" | "cancel" | "finish"
) =>
  Effect.gen(function* () {
    let requests = 0
    let amounts = 0
    const payCall = () => {
      amounts++
      return { id: `pay_${amounts}`, name: "pay", arguments: { amount: amounts } }
    }
    // By the request's number: one or two calls that need approval, a quick tool, or text.
    const model = ScriptedChatModel.make({
      chunkDelay: "1 millis",
      fallback: () => {
        requests++
        const turn = (requests + seed) % 4
        if (turn === 0) return { toolCalls: [payCall()] }
        if (turn === 1) return { toolCalls: [payCall(), payCall()] }
        if (turn === 2) return { toolCalls: [{ name: "quick", arguments: {} }] }
        return `answer number ${requests} in several words`
      }
    })
    const runs: Array<number> = []
    const pay = Tool.make({
      name: "pay",
      description: "Pays",
      parameters: Schema.Struct({ amount: Schema.Number }),
      needsApproval: true,
      handler: ({ amount }) =>
        Effect.gen(function* () {
          runs.push(amount)
          yield* Effect.sleep("4 millis")
          return `paid ${amount}`
        })
    })
    const quick = Tool.make({
      name: "quick",
      description: "Quick",
      parameters: Schema.Struct({}),
      handler: () => Effect.as(Effect.sleep("1 millis"), "done")
    })
    const { runtime, events, stored, session } = yield* setup({ model, tools: [pay, quick] })
    yield* runtime.start

    const accepted: Array<TriggerEvent.TriggerEvent> = []
    const refused: Array<TriggerEvent.TriggerEvent> = []
    const send = (trigger: TriggerEvent.TriggerEvent) =>
      Effect.map(Effect.exit(runtime.receiveTrigger(trigger)), (exit) => {
        if (Exit.isSuccess(exit)) accepted.push(trigger)
        else refused.push(trigger)
      })
    const decide = (ids: ReadonlyArray<string>, decision: Approval.Decision) =>
      ids.length === 0
        ? Effect.void
        : send(TriggerEvent.decide(Object.fromEntries(ids.map((id) => [id, decision]))))
    const waitingIds = () => session.pendingApprovals().map((call) => call.id)
    const lastDecision = () => accepted.findLast((trigger) => trigger.type === TriggerEvent.approvalDecision)

    const handled = () =>
      waitFor(
        events,
        (all) =>
          all.at(-1)?.type === "idle" &&
          all.filter((event) => event.type === "trigger" && event.trigger.type !== TriggerEvent.userCancel)
            .length === accepted.length,
        "the runtime to go idle"
      )
    for (const [index, { kind, pauseMs }] of steps.entries()) {
      yield* Effect.sleep(`${pauseMs} millis`)
      switch (kind) {
        case "message":
        case "interrupting message":
          yield* send(TriggerEvent.fromUser(`item-${index}`, { interrupt: kind === "interrupting message" }))
          break
        case "cancel":
          yield* runtime.receiveTrigger(TriggerEvent.cancel())
          break
        case "approve all":
          yield* decide(waitingIds(), Approval.approve)
          break
        case "reject all":
          yield* decide(waitingIds(), Approval.reject("no"))
          break
        case "approve one":
          yield* decide(waitingIds().slice(0, 1), Approval.approve)
          break
        case "duplicate": {
          const last = lastDecision()
          if (last !== undefined) yield* send(TriggerEvent.make(last.type, last.payload))
          break
        }
        case "unknown call":
          yield* decide(["call_nobody_made"], Approval.approve)
          break
        case "wait until idle":
          yield* handled()
          break
      }
    }

    if (end === "drain") {
      // Bounded: the model's script asks for approval at most once in a row.
      for (let round = 0; round < 10; round++) {
        yield* handled()
        const ids = waitingIds()
        if (ids.length === 0) break
        yield* decide(ids, Approval.approve)
      }
      yield* handled()
    }
    const report = yield* runtime.stop(end === "finish" ? { running: "finish" } : {})
    const history = yield* stored()
    assertValidRequests(model)

    // The session ends with every call answered; stopped at once, only calls waiting for approval may be open.
    const waiting = new Set(session.pendingApprovals().map((call) => call.id))
    if (end === "drain") assert.deepStrictEqual(waiting, new Set(), "calls still waiting after the drain")
    const problems = ConversationContext.problems(history)
    const allowed = waiting.size === 0 ? [] : [`the end: calls ${[...waiting].join(", ")} have no result`]
    assert.deepStrictEqual(problems, allowed, "the stored history")

    // No duplicate decision: one result per call, and no call ran twice.
    const results = history.filter((message): message is Message.ToolMessage => message.role === "tool")
    const resultIds = results.map((result) => result.toolCallId)
    assert.strictEqual(new Set(resultIds).size, resultIds.length, `a call answered twice: ${resultIds}`)
    assert.strictEqual(new Set(runs).size, runs.length, `a call ran twice: ${runs}`)
    // A call runs only once approved; its result says so.
    for (const amount of runs) {
      const result = results.find((candidate) => candidate.toolCallId === `pay_${amount}`)
      assert.strictEqual(result === undefined ? undefined : recordOf(result)?.approved, true, `pay_${amount}`)
    }

    // Each decision taken in: recorded once on its calls, or reported; a refused one is never recorded.
    const recordedBy = (trigger: TriggerEvent.TriggerEvent) =>
      results.filter((result) => recordOf(result)?.trigger === trigger.id).map((result) => result.toolCallId)
    const reported = new Set(
      [
        ...events.flatMap((event: Runtime.RuntimeEvent) =>
          event.type === "decision-refused"
            ? [event.item]
            : event.type === "cycle-failed"
              ? event.dropped
              : []
        ),
        ...report.unprocessed
      ].flatMap((item) => (item.trigger === undefined ? [] : [item.trigger.id]))
    )
    for (const trigger of accepted) {
      if (trigger.type !== TriggerEvent.approvalDecision) continue
      const calls = Object.keys((trigger.payload as TriggerEvent.ApprovalDecisions).decisions).sort()
      const recorded = recordedBy(trigger).sort()
      assert.ok(
        reported.has(trigger.id) ? recorded.length === 0 : recorded.join() === calls.join(),
        `decision ${calls} recorded on [${recorded}], reported: ${reported.has(trigger.id)}`
      )
    }
    for (const trigger of refused)
      assert.deepStrictEqual(recordedBy(trigger), [], "a refused decision was recorded")
  })

describe("approval decisions under random interleavings", () => {
  it.live(
    "no duplicate decision, no call run twice or without approval, each decision recorded once or reported, no unanswered call",
    () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(
            fc.array(step, { minLength: 1, maxLength: 16 }),
            fc.integer({ min: 0, max: 3 }),
            ending,
            (steps, seed, end) => Effect.runPromise(Effect.scoped(scenario(steps, seed, end)))
          ),
          { numRuns: 100 }
        )
      )
  )
})
