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

  it("run rejects with the agent's error, and settles an agent that answers later", async () => {
    const error = Agent.modelFailed(
      "failing",
      ChatModel.error("scripted", new ModelError.Network({ kind: "connect", message: "refused" }))
    )
    const failing = Agent.make({ name: "failing", execute: () => Effect.fail(error) })
    const context = ConversationContext.of(Message.user("ping"))
    const model = ScriptedChatModel.make()
    let caught: unknown
    await Agent.run(failing, context, model).catch((cause) => {
      caught = cause
    })
    assert.strictEqual(caught, error)
    const later = Agent.make({
      name: "later",
      execute: () =>
        Effect.as(
          Effect.promise(() => new Promise((done) => setTimeout(done, 5))),
          [Message.assistant("late")]
        )
    })
    assert.strictEqual((await Agent.run(later, context, model))[0]?.content, "late")
  })

  it("run stops the agent when its signal aborts", async () => {
    const controller = new AbortController()
    let interrupted = false
    const waiting = Agent.make({
      name: "waiting",
      execute: () => Effect.onInterrupt(Effect.never, () => Effect.sync(() => (interrupted = true)))
    })
    const run = Agent.run(waiting, ConversationContext.of(Message.user("ping")), ScriptedChatModel.make(), {
      signal: controller.signal
    })
    controller.abort()
    let rejected = false
    await run.catch(() => {
      rejected = true
    })
    assert.isTrue(rejected && interrupted)
  })

  describe("runStream, from plain async code", () => {
    const context = ConversationContext.of(Message.user("x"))
    const model = ScriptedChatModel.make()
    const delta = (text: string): Agent.AgentEvent => ({ type: "text-delta", delta: text })

    /** An agent streaming `stream`, and whether the stream's finalizer has run. */
    const streaming = (stream: Stream.Stream<Agent.AgentEvent, Agent.AgentError>) => {
      const state = { finalized: false }
      const agent = Agent.make({
        name: "streaming",
        executeStream: () =>
          Stream.ensuring(
            stream,
            Effect.sync(() => {
              state.finalized = true
            })
          )
      })
      return { agent, state }
    }

    it("yields every event in order across batches, then stays done", async () => {
      const { agent, state } = streaming(
        Stream.concat(Stream.make(delta("a"), delta("b")), Stream.fromEffect(Effect.succeed(delta("c"))))
      )
      const iterator = Agent.runStream(agent, context, model)[Symbol.asyncIterator]()
      const seen: Array<Agent.AgentEvent> = []
      for (let result = await iterator.next(); result.done !== true; result = await iterator.next()) {
        seen.push(result.value)
      }
      assert.deepStrictEqual(seen, [delta("a"), delta("b"), delta("c")])
      assert.isTrue(state.finalized)
      assert.deepStrictEqual(await iterator.next(), { done: true, value: undefined })
    })

    it("a failure rejects with the agent's error once the stream is closed", async () => {
      const failure = new Agent.AgentError({
        agent: "streaming",
        reason: new Agent.Failed({ message: "no" }),
        messages: []
      })
      const { agent, state } = streaming(Stream.concat(Stream.make(delta("a")), Stream.fail(failure)))
      const seen: Array<Agent.AgentEvent> = []
      let caught: unknown
      try {
        for await (const event of Agent.runStream(agent, context, model)) seen.push(event)
      } catch (error) {
        caught = error
      }
      assert.deepStrictEqual(seen, [delta("a")])
      assert.strictEqual(caught, failure)
      assert.isTrue(state.finalized)
    })

    it("leaving the loop while the next event is awaited interrupts it and runs the finalizers", async () => {
      let waiting!: () => void
      const waits = new Promise<void>((resolve) => {
        waiting = resolve
      })
      const { agent, state } = streaming(
        Stream.concat(
          Stream.make(delta("a")),
          Stream.fromEffect(
            Effect.andThen(
              Effect.sync(() => waiting()),
              Effect.never
            )
          )
        )
      )
      const iterator = Agent.runStream(agent, context, model)[Symbol.asyncIterator]()
      assert.deepStrictEqual(await iterator.next(), { done: false, value: delta("a") })
      const pending = iterator.next()
      await waits
      assert.isFalse(state.finalized)
      assert.deepStrictEqual(await iterator.return?.(), { done: true, value: undefined })
      assert.isTrue(state.finalized)
      assert.deepStrictEqual(await pending, { done: true, value: undefined })
    })
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
