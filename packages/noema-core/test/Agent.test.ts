import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { Agent, ChatModel, ConversationContext, Message, ModelError } from "../src/index.js"
import { ScriptedChatModel } from "../src/testing.js"

const echo = Agent.make({
  name: "echo",
  execute: (context) => Effect.succeed([Message.assistant(`you said: ${context.last?.content ?? ""}`)])
})

describe("Agent", () => {
  it("eventsOf replays reasoning apart from the answer text", () => {
    const message = Message.assistant([Message.reasoningPart("Hmm."), Message.textPart("Yes.")])
    assert.deepStrictEqual(Agent.eventsOf([message]), [
      { type: "reasoning-delta", delta: "Hmm." },
      { type: "text-delta", delta: "Yes." },
      { type: "message", message }
    ])
  })

  it.effect("make derives the stream from execute", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make()
      const context = ConversationContext.of(Message.user("hi"))
      const events = yield* Stream.runCollect(echo.executeStream(context, model))
      assert.deepStrictEqual(
        events.map((event) => event.type),
        ["text-delta", "message"]
      )
      const messages = yield* echo.execute(context, model)
      assert.strictEqual(messages[0]?.content, "you said: hi")
      assert.strictEqual(context.length, 1, "the context is untouched")
    })
  )

  it.effect("make derives execute from the stream", () =>
    Effect.gen(function* () {
      const streaming = Agent.make({
        name: "streaming",
        executeStream: () =>
          Stream.make(
            { type: "text-delta" as const, delta: "a" },
            { type: "message" as const, message: Message.assistant("a") },
            { type: "message" as const, message: Message.assistant("b") }
          )
      })
      const messages = yield* streaming.execute(ConversationContext.empty, ScriptedChatModel.make())
      assert.deepStrictEqual(
        messages.map((message) => message.content),
        ["a", "b"]
      )
    })
  )

  it.effect("fromAsync: a plain async function calls the model and its errors become AgentErrors", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ["from the model", { fail: new ModelError.Authentication({ message: "bad key" }) }]
      })
      const plain = Agent.fromAsync("plain", async ({ context, model }) => {
        const response = await model.complete({ messages: context })
        return [ChatModel.toMessage(response)]
      })
      const context = ConversationContext.of(Message.user("hi"))
      const messages = yield* plain.execute(context, model)
      assert.strictEqual(messages[0]?.content, "from the model")
      const error = yield* Effect.flip(plain.execute(context, model))
      assert.strictEqual(error._tag, "AgentError")
      assert.strictEqual(error.reason._tag, "ModelFailed")
      assert.match(error.message, /bad key/)
      const throwing = Agent.fromAsync("throwing", async () => {
        throw new Error("oops")
      })
      const failed = yield* Effect.flip(throwing.execute(context, model))
      assert.strictEqual(failed.reason._tag, "Failed")
      assert.strictEqual(failed.message, 'Agent "throwing" failed: oops')
    })
  )

  it.effect("fromAsyncGenerator streams events from a plain async generator", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["one two three"] })
      const generator = Agent.fromAsyncGenerator("gen", async function* ({ context, model }) {
        let text = ""
        for await (const chunk of model.stream({ messages: context })) {
          if (chunk.type === "text-delta") {
            text += chunk.delta
            yield { type: "text-delta", delta: chunk.delta }
          }
        }
        yield { type: "message", message: Message.assistant(text) }
      })
      const events = yield* Stream.runCollect(
        generator.executeStream(ConversationContext.of(Message.user("x")), model)
      )
      assert.deepStrictEqual(
        events.filter((event) => event.type === "text-delta").map((event) => event.delta),
        ["one ", "two ", "three"]
      )
      assert.deepStrictEqual(events.at(-1), { type: "message", message: Message.assistant("one two three") })
    })
  )

  it("run works from plain async code", async () => {
    const messages = await Agent.run(
      echo,
      ConversationContext.of(Message.user("ping")),
      ScriptedChatModel.make()
    )
    assert.strictEqual(messages[0]?.content, "you said: ping")
  })

  it("prependMessages puts what ran before the failing agent in front of its messages", () => {
    const error = new Agent.AgentError({
      agent: "second",
      reason: new Agent.Failed({ message: "no" }),
      messages: [Message.assistant("own")]
    })
    const earlier = [Message.user("q"), Message.assistant("first")]
    const combined = Agent.prependMessages(error, earlier)
    assert.strictEqual(combined.agent, "second")
    assert.strictEqual(combined.reason, error.reason)
    assert.deepStrictEqual(
      combined.messages.map((message) => message.content),
      ["q", "first", "own"]
    )
    assert.strictEqual(Agent.prependMessages(error, []), error)
  })
})
