/**
 * Decisions on tool calls waiting for approval, as runtime triggers: the
 * stopped turn goes on on the runtime (one path with messages), a decision is
 * checked against the calls the session has waiting, it is ordered against
 * messages by the bucket's priorities, it is recorded once (who and why, on the
 * call's result) however its turn ends, and a session another process wrote to
 * is reloaded by the runtime.
 */
import { assert, describe, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { Approval, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Session, SessionStore } from "@noema/session"
import { Cause, Deferred, Effect, Schema } from "effect"
import * as ContextItem from "../src/ContextItem.js"
import * as Runtime from "../src/Runtime.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { assertValidHistory, assertValidRequests, count, settle, setup } from "./support.js"

const texts = (messages: ReadonlyArray<Message.Message>) =>
  messages.map((message) => `${message.role}:${Message.text(message)}`)

/** A tool that needs approval; each run waits for the test to open `gate` (open from the start unless given). */
const payTool = (runs: Array<number>, gate?: Deferred.Deferred<void>, started?: Deferred.Deferred<void>) =>
  Tool.make({
    name: "pay",
    description: "Pays an amount",
    parameters: Schema.Struct({ amount: Schema.Number }),
    needsApproval: true,
    handler: ({ amount }) =>
      Effect.gen(function* () {
        runs.push(amount)
        if (started !== undefined) yield* Deferred.succeed(started, undefined)
        if (gate !== undefined) yield* Deferred.await(gate)
        return `paid ${amount}`
      })
  })

const pay = (id: string, amount: number) => ({ id, name: "pay", arguments: { amount } })

const resultOf = (messages: ReadonlyArray<Message.Message>, toolCallId: string) =>
  messages.filter(
    (message): message is Message.ToolMessage => message.role === "tool" && message.toolCallId === toolCallId
  )

/** The id of the (first) decision trigger the runtime received. */
const decisionTriggerId = (events: ReadonlyArray<Runtime.RuntimeEvent>): string => {
  for (const event of events) {
    if (event.type === "trigger" && event.trigger.type === TriggerEvent.approvalDecision)
      return event.trigger.id
  }
  throw new Error("no decision trigger was received")
}

/** A runtime whose first turn stopped at the calls `calls`, waiting for approval. */
const waiting = (options: {
  readonly calls: ReadonlyArray<ReturnType<typeof pay>>
  readonly replies: ReadonlyArray<ScriptedChatModel.Reply>
  readonly gate?: Deferred.Deferred<void>
  readonly started?: Deferred.Deferred<void>
}) =>
  Effect.gen(function* () {
    const runs: Array<number> = []
    const model = ScriptedChatModel.make({ replies: [{ toolCalls: options.calls }, ...options.replies] })
    const context = yield* setup({ model, tools: [payTool(runs, options.gate, options.started)] })
    yield* context.runtime.start
    yield* context.runtime.receiveTrigger(TriggerEvent.fromUser("pay the invoices"))
    yield* settle(context.events, (all) => count(all, "cycle-completed") === 1, "the turn that stops")
    assert.deepStrictEqual(
      context.session.pendingApprovals().map((call) => call.id),
      options.calls.map((call) => call.id)
    )
    return { ...context, model, runs }
  })

describe("approval decisions through the runtime", () => {
  it.effect(
    "a decision is a trigger: its item waits in the bucket, the stopped turn goes on as a cycle, and the result records who decided",
    () =>
      Effect.gen(function* () {
        const { runtime, events, stored, model, runs } = yield* waiting({
          calls: [pay("call_a", 500)],
          replies: ["Paid."]
        })
        const trigger = TriggerEvent.decide({ call_a: Approval.approve }, { source: "alice" })
        yield* runtime.receiveTrigger(trigger)
        yield* settle(events, (all) => count(all, "cycle-completed") === 2, "the continued turn")
        // The runtime saw the trigger and made it an item of decisions, which started the cycle.
        const seen = events.find((event) => event.type === "trigger" && event.trigger.id === trigger.id)
        assert.strictEqual(seen?.type, "trigger")
        if (seen?.type !== "trigger") return
        assert.deepStrictEqual(seen.items[0]?.decisions, { call_a: Approval.approve })
        const started = events.filter((event) => event.type === "cycle-started").at(-1)
        assert.deepStrictEqual(started?.type === "cycle-started" && started.cycle.items, seen.items)
        assert.deepStrictEqual(runs, [500])
        const history = yield* stored()
        assert.deepStrictEqual(texts(history), [
          "user:pay the invoices",
          "assistant:",
          "tool:paid 500",
          "assistant:Paid."
        ])
        assert.deepStrictEqual(resultOf(history, "call_a")[0]?.metadata, {
          [ContextItem.decisionMetadataKey]: { approved: true, by: "alice", trigger: trigger.id }
        })
        // The model saw the result, and the session has nothing waiting.
        assert.deepStrictEqual(
          texts(model.requests[1]?.messages ?? []).filter((text) => text.startsWith("tool")),
          ["tool:paid 500"]
        )
        assertValidHistory(history)
        assertValidRequests(model)
        yield* runtime.stop()
      })
  )

  it.effect("a rejection is recorded with its reason, told to the model, and the tool never runs", () =>
    Effect.gen(function* () {
      const { runtime, events, stored, runs, session } = yield* waiting({
        calls: [pay("call_a", 500)],
        replies: ["Understood."]
      })
      yield* runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.reject("too much") }))
      yield* settle(events, (all) => count(all, "cycle-completed") === 2, "the continued turn")
      assert.deepStrictEqual(runs, [])
      const result = resultOf(yield* stored(), "call_a")[0]
      assert.include(result?.content ?? "", "did not approve")
      assert.include(result?.content ?? "", "too much")
      assert.deepStrictEqual(result?.metadata?.[ContextItem.decisionMetadataKey], {
        approved: false,
        reason: "too much",
        by: "user",
        trigger: decisionTriggerId(events)
      })
      assert.deepStrictEqual(session.pendingApprovals(), [])
      yield* runtime.stop()
    })
  )

  it.effect(
    "a decision on a call that does not wait, or one already decided, is refused with a clear error; nothing is queued",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const { runtime, events, runs } = yield* waiting({
          calls: [pay("call_a", 1)],
          replies: ["Done."],
          gate,
          started
        })
        const unknown = yield* Effect.flip(
          runtime.receiveTrigger(TriggerEvent.decide({ call_zzz: Approval.approve }))
        )
        assert.instanceOf(unknown, Runtime.DecisionRefused)
        assert.deepStrictEqual(
          {
            toolCallId: (unknown as Runtime.DecisionRefused).toolCallId,
            reason: (unknown as Runtime.DecisionRefused).reason
          },
          { toolCallId: "call_zzz", reason: "not-waiting" }
        )
        assert.strictEqual(unknown.message, "tool call call_zzz does not wait for approval")
        assert.strictEqual(count(events, "cycle-started"), 1)
        yield* runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        yield* Deferred.await(started)
        // Being applied: a second decision on it is a duplicate.
        const twice = yield* Effect.flip(
          runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.reject() }))
        )
        assert.strictEqual((twice as Runtime.DecisionRefused).reason, "already-decided")
        yield* Deferred.succeed(gate, undefined)
        yield* settle(events, (all) => count(all, "cycle-completed") === 2, "the continued turn")
        // Answered: a decision now finds nothing waiting.
        const late = yield* Effect.flip(
          runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        )
        assert.strictEqual((late as Runtime.DecisionRefused).reason, "not-waiting")
        assert.deepStrictEqual(runs, [1])
        assert.strictEqual(count(events, "cycle-started"), 2)
        yield* runtime.stop()
      })
  )

  it.effect(
    "a decision while a new message's turn runs is refused: that turn answers the waiting calls",
    () =>
      Effect.gen(function* () {
        const { runtime, events, stored, runs, session } = yield* waiting({
          calls: [pay("call_a", 1)],
          replies: [{ hang: true }]
        })
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("never mind"))
        yield* settle(events, (all) => count(all, "cycle-started") === 2, "the message's turn")
        const refused = yield* Effect.flip(
          runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        )
        assert.strictEqual((refused as Runtime.DecisionRefused).reason, "superseded")
        yield* runtime.stop()
        assert.deepStrictEqual(runs, [])
        // That turn was cancelled before it kept anything: the call still waits, to be decided anew.
        assert.deepStrictEqual(
          session.pendingApprovals().map((call) => call.id),
          ["call_a"]
        )
        assert.deepStrictEqual(texts(yield* stored()), ["user:pay the invoices", "assistant:"])
      })
  )

  describe("a decision racing a new message is ordered by the bucket's priorities", () => {
    // Two calls wait; call_a is approved and runs (held by the gate) while the rest arrives.
    const race = (arrivals: ReadonlyArray<"decision" | "message" | "interrupting message">) =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const context = yield* waiting({
          calls: [pay("call_a", 1), pay("call_b", 2)],
          replies: ["Both paid.", "Noted the message."],
          gate,
          started
        })
        const { runtime, events } = context
        yield* runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        yield* Deferred.await(started)
        const refusals: Array<string> = []
        for (const arrival of arrivals) {
          const trigger =
            arrival === "decision"
              ? TriggerEvent.decide({ call_b: Approval.approve })
              : TriggerEvent.fromUser("also this", { interrupt: arrival === "interrupting message" })
          const exit = yield* Effect.exit(runtime.receiveTrigger(trigger))
          if (exit._tag === "Failure") refusals.push(`${arrival}: refused`)
        }
        yield* Deferred.succeed(gate, undefined)
        yield* settle(
          events,
          (all) => all.at(-1)?.type === "idle" && all.filter((event) => event.type === "trigger").length > 2,
          "everything handled"
        )
        const history = yield* context.stored()
        assertValidHistory(history)
        assertValidRequests(context.model)
        yield* runtime.stop()
        return { ...context, history, refusals }
      })

    it.effect(
      "decision, then message (both ForNextTurn): the decision goes first, the message joins its turn",
      () =>
        Effect.gen(function* () {
          const { history, runs, refusals } = yield* race(["decision", "message"])
          assert.deepStrictEqual(refusals, [])
          assert.deepStrictEqual(runs, [1, 2])
          assert.deepStrictEqual(texts(history).slice(2), [
            "tool:paid 1",
            "tool:paid 2",
            "assistant:Both paid.",
            "user:also this",
            "assistant:Noted the message."
          ])
        })
    )

    it.effect(
      "message, then decision: the message is ahead, so the decision is refused and the call superseded",
      () =>
        Effect.gen(function* () {
          const { history, runs, refusals } = yield* race(["message", "decision"])
          assert.deepStrictEqual(refusals, ["decision: refused"])
          assert.deepStrictEqual(runs, [1])
          const superseded = resultOf(history, "call_b")
          assert.strictEqual(superseded.length, 1)
          assert.include(superseded[0]?.content ?? "", "new message instead of deciding")
          assert.deepStrictEqual(texts(history).slice(-2), ["user:also this", "assistant:Both paid."])
        })
    )

    it.effect(
      "decision, then an interrupting message: the Interruption goes first; the decision is refused when its turn would come",
      () =>
        Effect.gen(function* () {
          const { history, runs, refusals, events } = yield* race(["decision", "interrupting message"])
          assert.deepStrictEqual(refusals, [])
          const refused = events.filter((event) => event.type === "decision-refused")
          assert.strictEqual(refused.length, 1)
          assert.strictEqual(refused[0]?.type === "decision-refused" && refused[0].error.reason, "superseded")
          // call_a was running when the interruption came: on record as interrupted, never run again.
          assert.deepStrictEqual(runs, [1])
          assert.include(resultOf(history, "call_a")[0]?.content ?? "", "interrupted")
          assert.include(resultOf(history, "call_b")[0]?.content ?? "", "new message instead of deciding")
          assert.strictEqual(resultOf(history, "call_b").length, 1)
        })
    )
  })

  it.effect(
    "Ctrl-C while an approved call runs: the call is recorded as interrupted, with the decision, and never runs again",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const { runtime, events, stored, runs, model } = yield* waiting({
          calls: [pay("call_a", 7)],
          replies: [],
          gate,
          started
        })
        yield* runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        yield* Deferred.await(started)
        yield* runtime.receiveTrigger(TriggerEvent.cancel())
        yield* settle(events, (all) => count(all, "cycle-interrupted") === 1, "the cancelled turn")
        yield* settle(events, (all) => all.at(-1)?.type === "idle", "idle")
        const interrupted = events.find((event) => event.type === "cycle-interrupted")
        const history = yield* stored()
        const result = resultOf(history, "call_a")
        assert.strictEqual(result.length, 1)
        assert.include(result[0]?.content ?? "", "interrupted; it may have partially run")
        assert.deepStrictEqual(interrupted?.type === "cycle-interrupted" && interrupted.kept, result)
        assert.deepStrictEqual(result[0]?.metadata, {
          interrupted: true,
          [ContextItem.decisionMetadataKey]: {
            approved: true,
            by: "user",
            trigger: decisionTriggerId(events)
          }
        })
        assert.deepStrictEqual(runs, [7])
        assert.strictEqual(model.requests.length, 1)
        assertValidHistory(history)
        const report = yield* runtime.stop()
        assert.deepStrictEqual(report.unprocessed, [])
      })
  )

  it.effect(
    "another process wrote to the session while the decision's turn ran: the cycle fails with the conflict, the runtime reloads the session",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const { runtime, events, session, store, runs } = yield* waiting({
          calls: [pay("call_a", 3)],
          replies: ["Paid."],
          gate,
          started
        })
        yield* runtime.receiveTrigger(TriggerEvent.decide({ call_a: Approval.approve }))
        yield* Deferred.await(started)
        // Elsewhere, someone sends a message instead of deciding.
        const theirs = yield* Effect.provideService(
          Session.open(session.id),
          SessionStore.SessionStore,
          store
        )
        yield* theirs.turn(
          ToolAgent.make({ name: "elsewhere", tools: [] }),
          ScriptedChatModel.make({ replies: ["theirs"] }),
          "elsewhere"
        )
        yield* Deferred.succeed(gate, undefined)
        yield* settle(events, (all) => count(all, "cycle-failed") === 1, "the conflict")
        const failed = events.find((event) => event.type === "cycle-failed")
        assert.strictEqual(failed?.type, "cycle-failed")
        if (failed?.type !== "cycle-failed") return
        assert.instanceOf(
          Cause.squash(failed.error as Cause.Cause<unknown>),
          SessionStore.SessionConflictError
        )
        // The decision was not stored: it is reported dropped; the handle shows what the other process stored.
        assert.deepStrictEqual(
          failed.dropped.map((item) => item.decisions),
          [{ call_a: Approval.approve }]
        )
        assert.deepStrictEqual(texts(session.context().toArray()).slice(-2), [
          "user:elsewhere",
          "assistant:theirs"
        ])
        assert.deepStrictEqual(session.pendingApprovals(), [])
        assert.deepStrictEqual(runs, [3])
        assertValidHistory(session.context().toArray())
        yield* runtime.stop()
      })
  )
})
