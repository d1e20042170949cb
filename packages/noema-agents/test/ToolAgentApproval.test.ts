/**
 * Tool calls that need approval: the loop stops at them, leaving them
 * unanswered; run again on that output with decisions, it runs the approved
 * ones, answers the rejected ones, and carries on with the model.
 */
import { assert, describe, it } from "@effect/vitest"
import { type Agent, Approval, ConversationContext, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Schema, Stream } from "effect"
import { ToolAgent } from "../src/index.js"

const ran: Array<string> = []
const transfer = Tool.make({
  name: "transfer",
  description: "Move money",
  parameters: Schema.Struct({ amount: Schema.Number }),
  // Small amounts go through; larger ones need a person.
  needsApproval: ({ amount }) => amount > 100,
  annotations: { destructive: true },
  handler: ({ amount }) =>
    Effect.sync(() => {
      ran.push(`transfer ${amount}`)
      return `moved ${amount}`
    })
})
const balance = Tool.make({
  name: "balance",
  description: "Read the balance",
  parameters: Schema.Struct({}),
  handler: () =>
    Effect.sync(() => {
      ran.push("balance")
      return "1000"
    })
})

const calls = (...list: ReadonlyArray<readonly [string, object]>) => ({
  toolCalls: list.map(([name, args], index) => ({ id: `c${index}`, name, arguments: args }))
})

const agent = ToolAgent.make({ tools: [transfer, balance] })
const user = ConversationContext.of(Message.user("Pay 500 and 20, and check the balance"))

describe("ToolAgent approval", () => {
  for (const mode of ["execute", "executeStream"] as const) {
    const run = (
      context: ConversationContext.ConversationContext,
      model: ScriptedChatModel.ScriptedChatModel
    ) =>
      mode === "execute"
        ? Effect.map(agent.execute(context, model), (messages) => ({
            messages,
            events: [] as Array<Agent.AgentEvent>
          }))
        : Effect.map(Stream.runCollect(agent.executeStream(context, model)), (collected) => {
            const events = Array.from(collected)
            return {
              events,
              messages: events.flatMap((event) => (event.type === "message" ? [event.message] : []))
            }
          })

    it.effect(`${mode}: stops at a call that needs approval, runs the rest, and resumes with decisions`, () =>
      Effect.gen(function* () {
        ran.length = 0
        const model = ScriptedChatModel.make({
          replies: [
            calls(["transfer", { amount: 500 }], ["transfer", { amount: 20 }], ["balance", {}]),
            "Done: 20 moved, 500 refused."
          ]
        })
        const first = yield* run(user, model)
        // The 500 transfer waits; the 20 transfer and the balance ran.
        assert.deepStrictEqual(ran, ["transfer 20", "balance"])
        assert.deepStrictEqual(
          first.messages.map((message) => message.role),
          ["assistant", "tool", "tool"]
        )
        const history = ConversationContext.concat(user, first.messages)
        assert.deepStrictEqual(
          Approval.pendingCalls(history).map((call) => call.id),
          ["c0"]
        )
        if (mode === "executeStream") {
          const request = first.events.find((event) => event.type === "approval-request")
          assert.strictEqual(request?.type === "approval-request" && request.toolCall.id, "c0")
          assert.deepStrictEqual(request?.type === "approval-request" && request.annotations, {
            destructive: true
          })
        }
        assert.strictEqual(model.requests.length, 1)

        // Without a decision it waits again, with no model call.
        const again = yield* run(history, model)
        assert.deepStrictEqual(again.messages, [])
        assert.strictEqual(model.requests.length, 1)

        // Rejected: answered with the reason, and the model goes on.
        const resumed = yield* run(history, model).pipe(
          Effect.provideService(
            Approval.Approvals,
            Approval.fromDecisions({ c0: Approval.reject("too much") })
          )
        )
        assert.deepStrictEqual(ran, ["transfer 20", "balance"])
        const rejection = resumed.messages[0] as Message.ToolMessage
        assert.deepInclude(rejection, { role: "tool", toolCallId: "c0", isError: true })
        assert.include(rejection.content, "did not approve")
        assert.include(rejection.content, "too much")
        assert.strictEqual(
          Message.text(resumed.messages[1] as Message.Message),
          "Done: 20 moved, 500 refused."
        )
        // The model saw every call answered, in order.
        const seen = model.requests[1]?.messages ?? []
        assert.deepStrictEqual(
          seen.map((message) => message.role),
          ["user", "assistant", "tool", "tool", "tool"]
        )
      })
    )

    it.effect(`${mode}: an approved call runs when resumed`, () =>
      Effect.gen(function* () {
        ran.length = 0
        const model = ScriptedChatModel.make({
          replies: [calls(["transfer", { amount: 500 }]), "Moved 500."]
        })
        const first = yield* run(user, model)
        assert.deepStrictEqual(ran, [])
        const history = ConversationContext.concat(user, first.messages)
        const resumed = yield* run(history, model).pipe(
          Effect.provideService(
            Approval.Approvals,
            Approval.fromDecisions(new Map([["c0", Approval.approve]]))
          )
        )
        assert.deepStrictEqual(ran, ["transfer 500"])
        assert.deepInclude(resumed.messages[0], { role: "tool", content: "moved 500", isError: false })
        assert.strictEqual(Message.text(resumed.messages[1] as Message.Message), "Moved 500.")
      })
    )
  }

  it.effect("with Approvals in the context the loop does not stop at all", () =>
    Effect.gen(function* () {
      ran.length = 0
      const model = ScriptedChatModel.make({ replies: [calls(["transfer", { amount: 500 }]), "Moved."] })
      const messages = yield* agent
        .execute(user, model)
        .pipe(Effect.provideService(Approval.Approvals, Approval.approveAll))
      assert.deepStrictEqual(ran, ["transfer 500"])
      assert.strictEqual(messages.length, 3)
    })
  )

  it("needsApproval: always, never, by predicate; arguments that do not decode need none", () => {
    const call = (args: string) => ({ id: "x", name: "transfer", arguments: args })
    assert.isTrue(Tool.requiresApproval(transfer, call('{"amount": 101}')))
    assert.isFalse(Tool.requiresApproval(transfer, call('{"amount": 100}')))
    assert.isFalse(Tool.requiresApproval(transfer, call("not json")))
    assert.isFalse(Tool.requiresApproval(balance, call("{}")))
    assert.isTrue(Tool.requiresApproval(Tool.withApproval(balance), call("{}")))
  })
})
