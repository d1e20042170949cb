import { assert, describe, it } from "@effect/vitest"
import { ConversationContext, Message, StructuredOutput } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Schema, Stream } from "effect"
import { SimpleAgent } from "../src/index.js"

const Verdict = Schema.Struct({ label: Schema.Literals(["spam", "ham"]), confidence: Schema.Number })
const context = ConversationContext.of(Message.user("Buy now!!!"))

describe("SimpleAgent with output", () => {
  it.effect("returns one message carrying the JSON, read back with fromMessages, after a repair", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ['{"label": "eggs", "confidence": 1}', '{"label": "spam", "confidence": 0.9}']
      })
      const agent = SimpleAgent.make({ system: "Classify.", output: { schema: Verdict, name: "verdict" } })
      const messages = yield* agent.execute(context, model)
      assert.equal(messages.length, 1)
      assert.deepStrictEqual(yield* StructuredOutput.fromMessages(messages, Verdict), {
        label: "spam",
        confidence: 0.9
      })
      assert.equal(model.requests[0]?.messages[0]?.role, "system")
      assert.equal(model.requests[0]?.request.responseFormat?.type, "json-schema")
      assert.equal(model.requests.length, 2)
    })
  )

  it.effect("streams the decoded message; output that stays invalid fails the agent with the raw text", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ['{"label": "spam", "confidence": 1}', "no", "still no"]
      })
      const agent = SimpleAgent.make({ output: { schema: Verdict } })
      const events = yield* Stream.runCollect(agent.executeStream(context, model))
      assert.equal(events.at(-1)?.type, "message")
      const exit = yield* Effect.exit(agent.execute(context, model))
      assert.ok(Exit.isFailure(exit))
      const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail")
      assert.ok(failure?._tag === "Fail")
      assert.equal(failure.error.reason._tag, "Failed")
      const cause = failure.error.reason._tag === "Failed" ? failure.error.reason.cause : undefined
      assert.ok(cause instanceof StructuredOutput.StructuredOutputError)
      assert.equal(cause.text, "still no")
    })
  )
})
