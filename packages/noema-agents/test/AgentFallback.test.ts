import { assert, describe, it } from "@effect/vitest"
import { Agent, ConversationContext, Message, ModelError, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Deferred, Effect, Fiber, Schema, Stream } from "effect"
import { AgentFallback, SimpleAgent, ToolAgent } from "../src/index.js"
import { withoutCallInfo } from "./support.js"

const question = ConversationContext.of(Message.user("Hi"))
const unavailable = { fail: new ModelError.Unavailable({ message: "overloaded" }) }

/** An agent over its own scripted model, as a second provider would be. */
const answering = (name: string, text: string) => {
  const model = ScriptedChatModel.make({ fallback: text })
  const agent = Agent.make({
    name,
    execute: (context) => SimpleAgent.make({ name }).execute(context, model),
    executeStream: (context) => SimpleAgent.make({ name }).executeStream(context, model)
  })
  return { agent, model }
}

describe("AgentFallback", () => {
  it.effect("runs the next agent on the same context when one fails", () =>
    Effect.gen(function* () {
      const primary = ScriptedChatModel.make({ replies: [unavailable] })
      const backup = answering("backup", "Hello from the backup")
      const agent = AgentFallback.make([SimpleAgent.make({ name: "primary" }), backup.agent])
      const messages = yield* agent.execute(question, primary)
      assert.deepStrictEqual(withoutCallInfo(messages), [Message.assistant("Hello from the backup")])
      assert.strictEqual(primary.requests.length, 1)
      assert.deepStrictEqual(backup.model.requests[0]?.messages, [Message.user("Hi")])
    })
  )

  it.effect("stops at the first agent that succeeds", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["first"] })
      const backup = answering("backup", "second")
      const messages = yield* AgentFallback.make([SimpleAgent.make(), backup.agent]).execute(question, model)
      assert.deepStrictEqual(withoutCallInfo(messages), [Message.assistant("first")])
      assert.strictEqual(backup.model.requests.length, 0)
    })
  )

  it.effect("falls back from an async agent that throws, and fails with the last error when all fail", () =>
    Effect.gen(function* () {
      const thrower = Agent.fromAsync("thrower", async () => {
        throw new Error("not today")
      })
      const model = ScriptedChatModel.make({ replies: [unavailable] })
      const error = yield* Effect.flip(
        AgentFallback.make([thrower, SimpleAgent.make({ name: "last" })]).execute(question, model)
      )
      assert.strictEqual(error.agent, "last")
      assert.strictEqual(error.reason._tag, "ModelFailed")

      const recovered = yield* AgentFallback.make([thrower, answering("backup", "fine").agent]).execute(
        question,
        model
      )
      assert.deepStrictEqual(withoutCallInfo(recovered), [Message.assistant("fine")])
    })
  )

  it.effect("streams only the successful attempt's messages", () =>
    Effect.gen(function* () {
      // An async generator that gets a message out before it fails.
      const flaky = Agent.fromAsyncGenerator("flaky", async function* () {
        yield { type: "text-delta", delta: "Draft" }
        yield { type: "message", message: Message.assistant("Draft") }
        throw new Error("lost the connection")
      })
      const backup = answering("backup", "Whole answer")
      const agent = AgentFallback.make([flaky, backup.agent])
      const events = yield* Stream.runCollect(agent.executeStream(question, ScriptedChatModel.make()))
      // Live deltas of the failed attempt were already shown; its messages are not kept.
      assert.deepStrictEqual(
        events.filter((event) => event.type === "text-delta").map((event) => event.delta),
        ["Draft", "Whole ", "answer"]
      )
      const streamed = events.flatMap((event) => (event.type === "message" ? [event.message] : []))
      assert.deepStrictEqual(withoutCallInfo(streamed), [Message.assistant("Whole answer")])
      assert.deepStrictEqual(streamed, yield* agent.execute(question, ScriptedChatModel.make()))
    })
  )

  it.effect("does not fall back when interrupted", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [{ hang: true }] })
      const backup = answering("backup", "too late")
      const agent = AgentFallback.make([SimpleAgent.make(), backup.agent])
      const fiber = yield* Effect.forkChild(agent.execute(question, model))
      while (model.requests.length === 0) yield* Effect.yieldNow
      yield* Fiber.interrupt(fiber)
      assert.isTrue(model.requests[0]?.interrupted)
      assert.strictEqual(backup.model.requests.length, 0)

      const started = yield* Deferred.make<void>()
      const streamModel = ScriptedChatModel.make({
        replies: [
          () => {
            Deferred.doneUnsafe(started, Effect.void)
            return { hang: true }
          }
        ]
      })
      const streamFiber = yield* Effect.forkChild(Stream.runDrain(agent.executeStream(question, streamModel)))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(streamFiber)
      assert.strictEqual(backup.model.requests.length, 0)
    })
  )

  it("needs at least one agent", () => {
    assert.throws(() => AgentFallback.make([]), /at least one agent/)
  })
})

describe("AgentFallback and tools that already ran", () => {
  const call = { id: "call_1", name: "send_email", arguments: '{"to":"ana"}' }
  const ran = [
    Message.assistant("", { toolCalls: [call] }),
    Message.toolResult({ toolCallId: "call_1", name: "send_email", content: "sent" })
  ]
  /** Fails after its tool ran, like a tool loop whose model goes down on the second step. */
  const failsAfterTool = Agent.make({
    name: "tools-then-down",
    execute: () =>
      Effect.fail(
        new Agent.AgentError({
          agent: "tools-then-down",
          reason: new Agent.Failed({ message: "model down after the tool ran" }),
          messages: [...ran, Message.assistant("partial")]
        })
      )
  })

  it.effect("keeps the calls that ran, in the output and in the next agent's context", () =>
    Effect.gen(function* () {
      const backup = answering("backup", "Done: the email was sent")
      const agent = AgentFallback.make([failsAfterTool, backup.agent])
      const messages = yield* agent.execute(question, ScriptedChatModel.make())
      assert.deepStrictEqual(withoutCallInfo(messages), [
        ...ran,
        Message.assistant("Done: the email was sent")
      ])
      assert.deepStrictEqual(backup.model.requests[0]?.messages, [Message.user("Hi"), ...ran])
      const events = yield* Stream.runCollect(agent.executeStream(question, ScriptedChatModel.make()))
      assert.deepStrictEqual(
        events.flatMap((event) => (event.type === "message" ? [event.message] : [])),
        messages
      )
    })
  )

  it.effect("when every agent fails, the error still carries the calls that ran", () =>
    Effect.gen(function* () {
      const down = SimpleAgent.make({ name: "down" })
      const agent = AgentFallback.make([failsAfterTool, down])
      const model = ScriptedChatModel.make({ replies: [unavailable, unavailable] })
      const error = yield* Effect.flip(agent.execute(question, model))
      assert.deepStrictEqual(error.messages, ran)
      assert.strictEqual(error.reason._tag, "ModelFailed")
      const streamed = yield* Effect.flip(Stream.runDrain(agent.executeStream(question, model)))
      assert.deepStrictEqual(streamed.messages, ran)
    })
  )
})

describe("AgentFallback and steering input a failed attempt took", () => {
  it.effect("keeps the injected message after the calls that ran, so the next agent answers it", () =>
    Effect.gen(function* () {
      const sent: Array<string> = []
      const email = Tool.make({
        name: "send_email",
        description: "Sends an email",
        parameters: Schema.Struct({ to: Schema.String }),
        handler: ({ to }) => Effect.sync(() => void sent.push(to)).pipe(Effect.as("sent"))
      })
      const inbox = [Message.user("Also copy Bob.")]
      const primary = ToolAgent.make({
        name: "primary",
        tools: [email],
        steering: () => Effect.sync(() => inbox.splice(0))
      })
      // The tool call, then the model is down on the step that would read the steering input.
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ name: "send_email", arguments: { to: "ana" } }] }, unavailable]
      })
      const backup = answering("backup", "Sent to Ana; copying Bob next.")
      const messages = yield* AgentFallback.make([primary, backup.agent]).execute(question, model)
      assert.deepStrictEqual(sent, ["ana"])
      assert.deepStrictEqual(
        withoutCallInfo(messages).map((message) => `${message.role}: ${Message.text(message)}`),
        ["assistant: ", "tool: sent", "user: Also copy Bob.", "assistant: Sent to Ana; copying Bob next."]
      )
      const seen = backup.model.requests[0]?.messages ?? []
      assert.deepStrictEqual(
        Array.from(seen, (message) => message.role),
        ["user", "assistant", "tool", "user"]
      )
      assert.strictEqual(Message.text(Array.from(seen).at(-1) as Message.Message), "Also copy Bob.")
    })
  )
})
