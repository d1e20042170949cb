import { assert, describe, it } from "@effect/vitest"
import { Agent, ConversationContext, Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Stream } from "effect"
import { AgentRouter, SimpleAgent } from "../src/index.js"
import { withoutCallInfo } from "./support.js"

const lastUserText = (context: ConversationContext.ConversationContext) => {
  const last = ConversationContext.lastOfRole(context, "user")
  return last === undefined ? "" : Message.text(last)
}

const router = AgentRouter.make({
  name: "desk",
  routes: [
    {
      when: (context) => lastUserText(context).startsWith("/math"),
      agent: SimpleAgent.make({ system: "math" })
    },
    {
      when: (context) => lastUserText(context).startsWith("/echo"),
      // Routes take any agent, async ones too.
      agent: Agent.fromAsync("echo", async ({ context }) => [
        Message.assistant(lastUserText(context).slice(6))
      ])
    }
  ],
  otherwise: SimpleAgent.make({ system: "chat" })
})

const systemPrompts = (model: ScriptedChatModel.ScriptedChatModel) =>
  model.requests.map((request) => request.messages[0]?.content)

describe("AgentRouter", () => {
  it.effect("runs the first route whose predicate holds, otherwise the fallback agent", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ fallback: "ok" })
      yield* router.execute(ConversationContext.of(Message.user("/math 2+2")), model)
      yield* router.execute(ConversationContext.of(Message.user("hello")), model)
      assert.deepStrictEqual(systemPrompts(model), ["math", "chat"])
      const echoed = yield* router.execute(ConversationContext.of(Message.user("/echo hi there")), model)
      assert.deepStrictEqual(echoed, [Message.assistant("hi there")])
      assert.strictEqual(model.requests.length, 2, "the echo agent calls no model")
      assert.strictEqual(router.name, "desk")
    })
  )

  it.effect("streams the chosen agent's events", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["four"] })
      const events = yield* Stream.runCollect(
        router.executeStream(ConversationContext.of(Message.user("/math 2+2")), model)
      )
      assert.deepStrictEqual(systemPrompts(model), ["math"])
      const last = events.at(-1)
      assert.deepStrictEqual(last?.type === "message" && withoutCallInfo([last.message]), [
        Message.assistant("four")
      ])
    })
  )

  it.effect("chooses when it runs, on the context it is given", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ fallback: "ok" })
      const messages: Array<Message.Message> = [Message.user("hello")]
      const run = router.execute(ConversationContext.fromArray(messages), model)
      messages.push(Message.user("/math 1+1"))
      yield* run
      assert.deepStrictEqual(systemPrompts(model), ["math"])
    })
  )
})
