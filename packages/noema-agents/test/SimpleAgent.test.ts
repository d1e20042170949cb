import { assert, describe, it } from "@effect/vitest"
import { type Agent, ConversationContext, Message, ModelError } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Stream } from "effect"
import { SimpleAgent } from "../src/index.js"
import { withoutCallInfo } from "./support.js"

describe("SimpleAgent", () => {
  it.effect("answers with one assistant message", () =>
    Effect.gen(function* () {
      const usage = { inputTokens: 5, outputTokens: 3, totalTokens: 8 }
      const model = ScriptedChatModel.make({ replies: [{ text: "Hello there", usage }] })
      const agent = SimpleAgent.make()
      const messages = yield* agent.execute(ConversationContext.of(Message.user("Hi")), model)
      assert.deepStrictEqual(messages, [
        Message.assistant("Hello there", { finishReason: "stop", usage, model: "scripted-model" })
      ])
      assert.strictEqual(agent.name, "simple-agent")
      assert.strictEqual(model.requests.length, 1)
      assert.strictEqual(model.requests[0]?.request.tools, undefined)
    })
  )

  it.effect("puts the system prompt in front of the context and passes the options", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["Short answer"] })
      const agent = SimpleAgent.make({
        name: "brief",
        system: "Be brief.",
        options: { temperature: 0.2, maxTokens: 64 }
      })
      const history = [
        Message.user("Explain monads"),
        Message.assistant("Long story"),
        Message.user("Shorter?")
      ]
      yield* agent.execute(ConversationContext.fromArray(history), model)
      const recorded = model.requests[0]
      assert.deepStrictEqual(recorded?.messages, [Message.system("Be brief."), ...history])
      assert.strictEqual(recorded?.request.temperature, 0.2)
      assert.strictEqual(recorded?.request.maxTokens, 64)
    })
  )

  it.effect("sends the context as a view over the history, not a copy", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["ok"] })
      const history: Array<Message.Message> = [Message.user("one")]
      yield* SimpleAgent.make({ system: "sys" }).execute(ConversationContext.fromArray(history), model)
      // A view reads through to the array underneath; a copy would not see this.
      history.push(Message.user("two"))
      const sent = Array.from(model.requests[0]?.request.messages ?? [])
      assert.deepStrictEqual(sent, [Message.system("sys"), Message.user("one"), Message.user("two")])
      assert.deepStrictEqual(model.requests[0]?.messages, [Message.system("sys"), Message.user("one")])
    })
  )

  it.effect("streams text deltas, then usage, then the completed message", () =>
    Effect.gen(function* () {
      const usage = { inputTokens: 5, outputTokens: 4, totalTokens: 9 }
      const model = ScriptedChatModel.make({
        replies: [{ text: "Hello brave new world", chunks: ["Hello", " brave", " new world"], usage }]
      })
      const events = yield* Stream.runCollect(
        SimpleAgent.make().executeStream(ConversationContext.of(Message.user("Hi")), model)
      )
      assert.deepStrictEqual(events, [
        { type: "text-delta", delta: "Hello" },
        { type: "text-delta", delta: " brave" },
        { type: "text-delta", delta: " new world" },
        { type: "usage", usage },
        {
          type: "message",
          message: Message.assistant("Hello brave new world", {
            finishReason: "stop",
            usage,
            model: "scripted-model"
          })
        }
      ])
      assert.strictEqual(model.requests[0]?.kind, "stream")
    })
  )

  it.effect("streams reasoning apart from the answer and keeps it in its own part", () =>
    Effect.gen(function* () {
      const usage = { inputTokens: 5, outputTokens: 9, totalTokens: 14, reasoningTokens: 4 }
      const model = ScriptedChatModel.make({
        replies: [
          {
            stream: [
              { type: "reasoning-delta", delta: "They greet " },
              { type: "reasoning-delta", delta: "me." },
              { type: "text-delta", delta: "Hello!" },
              { type: "finish", finishReason: "stop", rawFinishReason: "stop" },
              { type: "usage", usage }
            ]
          }
        ]
      })
      const events = yield* Stream.runCollect(
        SimpleAgent.make().executeStream(ConversationContext.of(Message.user("Hi")), model)
      )
      const message = Message.assistant(
        [Message.reasoningPart("They greet me."), Message.textPart("Hello!")],
        {
          finishReason: "stop",
          rawFinishReason: "stop",
          usage,
          model: "scripted-model"
        }
      )
      assert.deepStrictEqual(events, [
        { type: "reasoning-delta", delta: "They greet " },
        { type: "reasoning-delta", delta: "me." },
        { type: "text-delta", delta: "Hello!" },
        { type: "usage", usage },
        { type: "message", message }
      ])
      // `execute` (the complete path) builds the same message.
      model.enqueue({ text: "Hello!", reasoning: "They greet me.", usage })
      const [completed] = yield* SimpleAgent.make().execute(ConversationContext.of(Message.user("Hi")), model)
      assert.strictEqual(Message.text(completed as Message.Message), "Hello!")
      assert.strictEqual(Message.reasoning(completed as Message.Message), "They greet me.")
    })
  )

  it.effect("delivers deltas as they arrive, before the model call ends", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          {
            stream: [
              { type: "text-delta", delta: "Par" },
              { type: "text-delta", delta: "tial" }
            ],
            failAfter: new ModelError.Network({ message: "connection reset" })
          }
        ]
      })
      const seen: Array<Agent.AgentEvent> = []
      const error = yield* SimpleAgent.make({ name: "chat" })
        .executeStream(ConversationContext.of(Message.user("Hi")), model)
        .pipe(
          Stream.runForEach((event) => Effect.sync(() => seen.push(event))),
          Effect.flip
        )
      assert.deepStrictEqual(seen, [
        { type: "text-delta", delta: "Par" },
        { type: "text-delta", delta: "tial" }
      ])
      assert.strictEqual(error.reason._tag, "ModelFailed")
      assert.isTrue(error.isRetryable)
    })
  )

  it.effect("each run of the same event stream is its own turn", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ["First answer", { fail: new ModelError.Unavailable({ message: "down" }) }, "Third answer"]
      })
      const events = SimpleAgent.make().executeStream(ConversationContext.of(Message.user("Hi")), model)
      const messagesOf = (run: ReadonlyArray<Agent.AgentEvent>) =>
        run.flatMap((event) => (event.type === "message" ? [event.message] : []))
      assert.deepStrictEqual(withoutCallInfo(messagesOf(yield* Stream.runCollect(events))), [
        Message.assistant("First answer")
      ])
      const error = yield* Effect.flip(Stream.runCollect(events))
      assert.deepStrictEqual(error.messages, [], "a failed run carries nothing from an earlier run")
      assert.deepStrictEqual(withoutCallInfo(messagesOf(yield* Stream.runCollect(events))), [
        Message.assistant("Third answer")
      ])
    })
  )

  it.effect("turns a model failure into AgentError(ModelFailed)", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [{ fail: new ModelError.Authentication({ message: "bad key" }) }]
      })
      const error = yield* Effect.flip(
        SimpleAgent.make({ name: "chat" }).execute(ConversationContext.of(Message.user("Hi")), model)
      )
      assert.strictEqual(error._tag, "AgentError")
      assert.strictEqual(error.agent, "chat")
      assert.deepStrictEqual(error.messages, [])
      assert.isFalse(error.isRetryable)
      if (error.reason._tag !== "ModelFailed") return assert.fail(`unexpected reason ${error.reason._tag}`)
      assert.strictEqual(error.reason.error.reason._tag, "Authentication")
    })
  )
})
