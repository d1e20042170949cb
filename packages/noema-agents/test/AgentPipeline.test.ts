import { assert, describe, it } from "@effect/vitest"
import { Agent, ConversationContext, Message, ModelError, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Context, Effect, Schema, Stream } from "effect"
import { AgentPipeline, SimpleAgent, ToolAgent } from "../src/index.js"

const question = ConversationContext.of(Message.user("Tell me about otters"))

const contents = (messages: ReadonlyArray<Message.Message>) => messages.map((message) => message.content)

/** A stage written as a plain async function: it summarises what it sees. */
const summariser = Agent.fromAsync("summariser", async ({ context, model }) => {
  const response = await model.complete({ messages: context, maxTokens: 20 })
  return [Message.assistant(`${response.text} (from ${context.length} messages)`)]
})

describe("AgentPipeline", () => {
  it.effect("runs stages in order, each seeing the context and the earlier output", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["Otters hold hands.", "Cute.", "Mignon."] })
      const pipeline = AgentPipeline.make([
        SimpleAgent.make({ name: "researcher" }),
        summariser,
        SimpleAgent.make({ name: "translator", system: "Translate to French." })
      ])
      const messages = yield* pipeline.execute(question, model)
      assert.deepStrictEqual(contents(messages), ["Otters hold hands.", "Cute. (from 2 messages)", "Mignon."])
      assert.deepStrictEqual(
        model.requests.map((request) => contents(request.messages)),
        [
          ["Tell me about otters"],
          ["Tell me about otters", "Otters hold hands."],
          ["Translate to French.", "Tell me about otters", "Otters hold hands.", "Cute. (from 2 messages)"]
        ]
      )
      assert.strictEqual(model.requests[1]?.request.maxTokens, 20)
      assert.strictEqual(question.length, 1)
      assert.strictEqual(pipeline.name, "pipeline")
    })
  )

  it.effect("streams each stage's events in order; its messages are what execute returns", () =>
    Effect.gen(function* () {
      const script = () => ScriptedChatModel.make({ replies: ["Otters hold hands.", "Cute.", "Mignon."] })
      const pipeline = AgentPipeline.make([SimpleAgent.make(), summariser]).add(SimpleAgent.make())
      assert.strictEqual(pipeline.agents.length, 3)
      const events = yield* Stream.runCollect(pipeline.executeStream(question, script()))
      assert.deepStrictEqual(
        events.filter((event) => event.type === "text-delta").map((event) => event.delta),
        // The async stage does not stream: its text arrives whole.
        ["Otters ", "hold ", "hands.", "Cute. (from 2 messages)", "Mignon."]
      )
      const streamed = events.flatMap((event) => (event.type === "message" ? [event.message] : []))
      assert.deepStrictEqual(streamed, yield* pipeline.execute(question, script()))
    })
  )

  it.effect("a streaming stage sees the earlier stages' output, never its own twice", () =>
    Effect.gen(function* () {
      const add = Tool.make({
        name: "add",
        description: "Adds",
        parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
        handler: ({ a, b }) => Effect.succeed(a + b)
      })
      const model = ScriptedChatModel.make({
        replies: ["Plan: add.", { toolCalls: [{ id: "c1", name: "add", arguments: { a: 1, b: 2 } }] }, "3"]
      })
      const pipeline = AgentPipeline.make([SimpleAgent.make(), ToolAgent.make({ tools: [add] })])
      yield* Stream.runDrain(pipeline.executeStream(question, model))
      assert.deepStrictEqual(
        model.requests.map((request) => request.messages.map((message) => message.role)),
        [["user"], ["user", "assistant"], ["user", "assistant", "assistant", "tool"]]
      )
    })
  )

  it.effect("a failing stage's error carries the earlier stages' messages and its own", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ["Otters hold hands.", { fail: new ModelError.Unavailable({ message: "overloaded" }) }]
      })
      const pipeline = AgentPipeline.make([SimpleAgent.make(), SimpleAgent.make({ name: "second" })])
      const error = yield* Effect.flip(pipeline.execute(question, model))
      assert.strictEqual(error.agent, "second")
      assert.strictEqual(error.reason._tag, "ModelFailed")
      assert.deepStrictEqual(contents(error.messages), ["Otters hold hands."])

      const streamModel = ScriptedChatModel.make({
        replies: ["Otters hold hands.", { fail: new ModelError.Unavailable({ message: "overloaded" }) }]
      })
      const streamError = yield* Effect.flip(Stream.runDrain(pipeline.executeStream(question, streamModel)))
      assert.deepStrictEqual(contents(streamError.messages), ["Otters hold hands."])
    })
  )

  it.effect("an empty pipeline produces nothing", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make()
      assert.deepStrictEqual(yield* AgentPipeline.make([]).execute(question, model), [])
      assert.strictEqual(model.requests.length, 0)
    })
  )

  it.effect("needs the services of all its stages", () =>
    Effect.gen(function* () {
      class Clock extends Context.Service<Clock, { readonly now: string }>()("@noema/agents/test/Clock") {}
      const time = Tool.make({
        name: "time",
        description: "The time",
        parameters: Schema.Struct({}),
        handler: () => Clock.useSync((clock) => clock.now)
      })
      const pipeline = AgentPipeline.make([summariser]).add(ToolAgent.make({ tools: [time] }))
      // @ts-expect-error the pipeline needs Clock
      const _withoutServices: Agent.Agent<never> = pipeline
      const model = ScriptedChatModel.make({
        replies: ["Sure.", { toolCalls: [{ name: "time" }] }, "It is noon."]
      })
      const messages = yield* pipeline
        .execute(question, model)
        .pipe(Effect.provideService(Clock, { now: "12:00" }))
      assert.deepStrictEqual(contents(messages), ["Sure. (from 1 messages)", "", "12:00", "It is noon."])
    })
  )
})
