import { assert, describe, it } from "@effect/vitest"
import { type Agent, ConversationContext, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Context, Deferred, Effect, Fiber, Schema, Stream } from "effect"
import { ToolAgent } from "../src/index.js"
import { withoutCallInfo } from "./support.js"

const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(a + b)
})

class Boom extends Schema.TaggedError<Boom>()("Boom", { message: Schema.String }) {}

const explode = Tool.make({
  name: "explode",
  description: "Always fails",
  parameters: Schema.Struct({}),
  handler: () => Effect.fail(new Boom({ message: "the fuse was lit" }))
})

const question = ConversationContext.of(Message.user("What is 2 + 3?"))

const roles = (messages: ReadonlyArray<Message.Message>) => messages.map((message) => message.role)

/** Runs `effect` until it settles, failing the test instead of hanging if it never does. */
const within = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutOrElse(effect, {
    duration: "5 seconds",
    orElse: () => Effect.die(new Error("deadlocked: the calls did not run concurrently"))
  })

describe("ToolAgent", () => {
  it.effect("runs one tool step, then returns the model's answer", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ id: "c1", name: "add", arguments: { a: 2, b: 3 } }] }, "The sum is 5."]
      })
      const agent = ToolAgent.make({ system: "Use tools.", tools: [add] })
      const messages = yield* agent.execute(question, model)
      assert.deepStrictEqual(withoutCallInfo(messages), [
        Message.assistant("", { toolCalls: [{ id: "c1", name: "add", arguments: '{"a":2,"b":3}' }] }),
        Message.toolResult({ toolCallId: "c1", name: "add", content: "5" }),
        Message.assistant("The sum is 5.")
      ])
      assert.strictEqual(agent.name, "tool-agent")
      assert.deepStrictEqual(model.requests[0]?.request.tools, [add.definition])
      assert.deepStrictEqual(roles(model.requests[0]?.messages ?? []), ["system", "user"])
      assert.deepStrictEqual(model.requests[1]?.messages, [
        Message.system("Use tools."),
        Message.user("What is 2 + 3?"),
        ...messages.slice(0, 2)
      ])
    })
  )

  it.live("runs the calls of one step concurrently and keeps their results in call order", () =>
    Effect.gen(function* () {
      const bothStarted = yield* Deferred.make<void>()
      const secondFinished = yield* Deferred.make<void>()
      let started = 0
      const finished: Array<string> = []
      const lookup = Tool.make({
        name: "lookup",
        description: "Looks a key up",
        parameters: Schema.Struct({ key: Schema.String }),
        handler: ({ key }) =>
          Effect.gen(function* () {
            if (++started === 2) yield* Deferred.succeed(bothStarted, undefined)
            // Run one at a time, neither call gets past this line.
            yield* Deferred.await(bothStarted)
            if (key === "first") yield* Deferred.await(secondFinished)
            finished.push(key)
            if (key === "second") yield* Deferred.succeed(secondFinished, undefined)
            return `value of ${key}`
          })
      })
      const model = ScriptedChatModel.make({
        replies: [
          {
            toolCalls: [
              { id: "a", name: "lookup", arguments: { key: "first" } },
              { id: "b", name: "lookup", arguments: { key: "second" } }
            ]
          },
          "done"
        ]
      })
      const messages = yield* within(ToolAgent.make({ tools: [lookup] }).execute(question, model))
      assert.deepStrictEqual(finished, ["second", "first"])
      assert.deepStrictEqual(
        messages.filter(Message.isTool).map((message) => [message.toolCallId, message.content]),
        [
          ["a", "value of first"],
          ["b", "value of second"]
        ]
      )
    })
  )

  const inFlightProbe = () => {
    const counter = { current: 0, max: 0 }
    const tool = Tool.make({
      name: "work",
      description: "Takes a while",
      parameters: Schema.Struct({ n: Schema.Number }),
      handler: ({ n }) =>
        Effect.gen(function* () {
          counter.current++
          counter.max = Math.max(counter.max, counter.current)
          // Yielding lets every other call that may start, start.
          for (let i = 0; i < 5; i++) yield* Effect.yieldNow
          counter.current--
          return n
        })
    })
    const model = () =>
      ScriptedChatModel.make({
        replies: [
          { toolCalls: Array.from({ length: 6 }, (_, n) => ({ name: "work", arguments: { n } })) },
          "done"
        ]
      })
    return { counter, tool, model }
  }

  it.effect("never runs more calls at once than its concurrency", () =>
    Effect.gen(function* () {
      const limited = inFlightProbe()
      const messages = yield* ToolAgent.make({ tools: [limited.tool], concurrency: 2 }).execute(
        question,
        limited.model()
      )
      assert.strictEqual(limited.counter.max, 2)
      assert.deepStrictEqual(
        messages.filter(Message.isTool).map((message) => message.content),
        ["0", "1", "2", "3", "4", "5"]
      )
      // The probe does see more when more is allowed.
      const wide = inFlightProbe()
      yield* ToolAgent.make({ tools: [wide.tool], concurrency: 6 }).execute(question, wide.model())
      assert.strictEqual(wide.counter.max, 6)
      const streamed = inFlightProbe()
      yield* Stream.runDrain(
        ToolAgent.make({ tools: [streamed.tool], concurrency: 3 }).executeStream(question, streamed.model())
      )
      assert.strictEqual(streamed.counter.max, 3)
    })
  )

  it.effect("reports unknown tools, bad arguments and failing tools to the model and carries on", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          {
            toolCalls: [
              { id: "unknown", name: "divide", arguments: { a: 1, b: 0 } },
              { id: "mismatch", name: "add", arguments: { a: "two", b: 3 } },
              { id: "not-json", name: "add", arguments: "{a: 2" },
              { id: "failing", name: "explode" }
            ]
          },
          { toolCalls: [{ id: "fixed", name: "add", arguments: { a: 2, b: 3 } }] },
          "It is 5."
        ]
      })
      const messages = yield* ToolAgent.make({ tools: [add, explode] }).execute(question, model)
      const results = messages.filter(Message.isTool)
      assert.deepStrictEqual(
        results.map((result) => [result.toolCallId, result.isError]),
        [
          ["unknown", true],
          ["mismatch", true],
          ["not-json", true],
          ["failing", true],
          ["fixed", false]
        ]
      )
      assert.include(results[0]?.content, 'Unknown tool "divide"')
      assert.include(results[0]?.content, "add, explode")
      assert.include(results[1]?.content, 'Invalid arguments for tool "add"')
      assert.include(results[2]?.content, "not valid JSON")
      assert.include(results[3]?.content, "the fuse was lit")
      // The model read the errors in its next call.
      assert.deepStrictEqual(model.requests[1]?.messages.slice(1), messages.slice(0, 5))
      assert.strictEqual(messages.at(-1)?.content, "It is 5.")
    })
  )

  it.effect("fails with MaxStepsExceeded and everything produced after maxSteps model calls", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        fallback: { toolCalls: [{ name: "add", arguments: { a: 1, b: 1 } }] }
      })
      const agent = ToolAgent.make({ name: "looper", tools: [add], maxSteps: 3 })
      const error = yield* Effect.flip(agent.execute(question, model))
      assert.strictEqual(model.requests.length, 3)
      assert.strictEqual(error.agent, "looper")
      if (error.reason._tag !== "MaxStepsExceeded") return assert.fail(error.reason._tag)
      assert.strictEqual(error.reason.maxSteps, 3)
      // Every call made was answered, so the messages are a valid history to keep.
      assert.deepStrictEqual(roles(error.messages), [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool"
      ])

      const streamModel = ScriptedChatModel.make({
        fallback: { toolCalls: [{ name: "add", arguments: { a: 1, b: 1 } }] }
      })
      const events: Array<Agent.AgentEvent> = []
      const streamError = yield* agent.executeStream(question, streamModel).pipe(
        Stream.runForEach((event) => Effect.sync(() => events.push(event))),
        Effect.flip
      )
      assert.strictEqual(streamError.reason._tag, "MaxStepsExceeded")
      assert.deepStrictEqual(
        events.flatMap((event) => (event.type === "message" ? [event.message] : [])),
        streamError.messages
      )
    })
  )

  it.effect("a model failure mid-loop carries the messages produced before it", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ id: "c1", name: "add", arguments: { a: 1, b: 2 } }] }]
      })
      const error = yield* Effect.flip(ToolAgent.make({ tools: [add] }).execute(question, model))
      assert.strictEqual(error.reason._tag, "ModelFailed")
      assert.deepStrictEqual(roles(error.messages), ["assistant", "tool"])
    })
  )

  it.effect("reads the context once per model call and never changes or copies it", () =>
    Effect.gen(function* () {
      const history = Object.freeze(
        Array.from({ length: 100 }, (_, i) =>
          i % 2 === 0 ? Message.user(`q${i}`) : Message.assistant(`a${i}`)
        )
      )
      let reads = 0
      // A filter that keeps everything: it counts every message read through the view.
      const context = ConversationContext.fromArray(history).filter(() => {
        reads++
        return true
      })
      const script = (): ScriptedChatModel.Options => ({
        replies: [
          { toolCalls: [{ name: "add", arguments: { a: 1, b: 1 } }] },
          {
            toolCalls: [
              { name: "add", arguments: { a: 2, b: 2 } },
              { name: "add", arguments: { a: 3, b: 3 } }
            ]
          },
          "done"
        ]
      })
      const agent = ToolAgent.make({ system: "sys", tools: [add] })

      const model = ScriptedChatModel.make(script())
      const messages = yield* agent.execute(context, model)
      assert.strictEqual(messages.length, 6)
      // The scripted model snapshots each request: one read of the history per model call.
      assert.strictEqual(reads, 3 * history.length)
      assert.deepStrictEqual(
        model.requests.map((request) => request.messages.length),
        [101, 103, 106]
      )
      assert.strictEqual(history.length, 100)

      reads = 0
      const streamModel = ScriptedChatModel.make(script())
      yield* Stream.runDrain(agent.executeStream(context, streamModel))
      assert.strictEqual(reads, 3 * history.length)
      assert.deepStrictEqual(
        streamModel.requests.map((request) => request.messages.length),
        [101, 103, 106]
      )
    })
  )

  it.effect("streams deltas, tool calls, results, usage and messages in order", () =>
    Effect.gen(function* () {
      const script = (): ScriptedChatModel.Options => ({
        replies: [
          {
            text: "Let me add.",
            chunks: ["Let me", " add."],
            toolCalls: [{ id: "c1", name: "add", arguments: { a: 2, b: 3 } }]
          },
          { text: "It is 5.", chunks: ["It is", " 5."] }
        ]
      })
      const agent = ToolAgent.make({ tools: [add] })
      const events = yield* Stream.runCollect(agent.executeStream(question, ScriptedChatModel.make(script())))
      assert.deepStrictEqual(
        events.map((event) => {
          switch (event.type) {
            case "text-delta":
              return `delta ${event.delta}`
            case "tool-call":
              return `call ${event.toolCall.id}`
            case "tool-result":
              return `result ${event.message.content}`
            case "usage":
              return "usage"
            case "reasoning-delta":
              return `reasoning ${event.delta}`
            case "message":
              return `message ${event.message.role}`
            default:
              return event.type
          }
        }),
        [
          "delta Let me",
          "delta  add.",
          "call c1",
          "usage",
          "message assistant",
          "result 5",
          "message tool",
          "delta It is",
          "delta  5.",
          "usage",
          "message assistant"
        ]
      )
      // The streamed messages are exactly what `execute` returns.
      const executed = yield* agent.execute(question, ScriptedChatModel.make(script()))
      assert.deepStrictEqual(
        events.flatMap((event) => (event.type === "message" ? [event.message] : [])),
        executed
      )
    })
  )

  it.live("streams each tool result as it finishes, and the tool messages in call order", () =>
    Effect.gen(function* () {
      const release = yield* Deferred.make<void>()
      const lookup = Tool.make({
        name: "lookup",
        description: "Looks a key up",
        parameters: Schema.Struct({ key: Schema.String }),
        handler: ({ key }) =>
          key === "slow" ? Effect.as(Deferred.await(release), "slow value") : Effect.succeed("fast value")
      })
      const model = ScriptedChatModel.make({
        replies: [
          {
            toolCalls: [
              { id: "slow", name: "lookup", arguments: { key: "slow" } },
              { id: "fast", name: "lookup", arguments: { key: "fast" } }
            ]
          },
          "done"
        ]
      })
      const seen: Array<string> = []
      yield* within(
        ToolAgent.make({ tools: [lookup] })
          .executeStream(question, model)
          .pipe(
            Stream.runForEach((event) =>
              Effect.gen(function* () {
                if (event.type === "tool-result") {
                  seen.push(`result ${event.message.toolCallId}`)
                  // The slow call may only finish once the fast one was reported.
                  if (event.message.toolCallId === "fast") yield* Deferred.succeed(release, undefined)
                } else if (event.type === "message" && event.message.role === "tool") {
                  seen.push(`message ${event.message.toolCallId}`)
                }
              })
            )
          )
      )
      assert.deepStrictEqual(seen, ["result fast", "result slow", "message slow", "message fast"])
    })
  )

  /** A tool that waits forever; `bothStarted` opens once two calls run. */
  const waitingTool = Effect.gen(function* () {
    const bothStarted = yield* Deferred.make<void>()
    const counter = { started: 0, interrupted: 0 }
    const tool = Tool.make({
      name: "wait",
      description: "Waits forever",
      parameters: Schema.Struct({}),
      handler: () =>
        Effect.suspend(() =>
          ++counter.started === 2 ? Deferred.succeed(bothStarted, undefined) : Effect.void
        ).pipe(
          Effect.andThen(Effect.never),
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              counter.interrupted++
            })
          )
        )
    })
    return { tool, bothStarted, counter }
  })

  const waitTwice = (): ScriptedChatModel.Options => ({
    replies: [{ toolCalls: [{ name: "wait" }, { name: "wait" }] }, "unreachable"]
  })

  it.effect("interrupting the agent interrupts the running tools", () =>
    Effect.gen(function* () {
      const { tool, bothStarted, counter } = yield* waitingTool
      const model = ScriptedChatModel.make(waitTwice())
      const fiber = yield* Effect.forkChild(ToolAgent.make({ tools: [tool] }).execute(question, model))
      yield* Deferred.await(bothStarted)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(counter.interrupted, 2)
      assert.strictEqual(model.requests.length, 1)
    })
  )

  it.effect("interrupting the agent's stream interrupts the running tools", () =>
    Effect.gen(function* () {
      const { tool, bothStarted, counter } = yield* waitingTool
      const model = ScriptedChatModel.make(waitTwice())
      const fiber = yield* Effect.forkChild(
        Stream.runDrain(ToolAgent.make({ tools: [tool] }).executeStream(question, model))
      )
      yield* Deferred.await(bothStarted)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(counter.interrupted, 2)
      assert.strictEqual(model.requests.length, 1)
    })
  )

  it.effect("interrupting the agent interrupts the running model call", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [{ hang: true }, { hang: true }] })
      const agent = ToolAgent.make({ tools: [add] })
      const fiber = yield* Effect.forkChild(agent.execute(question, model))
      while (model.requests.length === 0) yield* Effect.yieldNow
      yield* Fiber.interrupt(fiber)
      assert.isTrue(model.requests[0]?.interrupted)

      const streamFiber = yield* Effect.forkChild(Stream.runDrain(agent.executeStream(question, model)))
      while (model.requests.length === 1) yield* Effect.yieldNow
      yield* Fiber.interrupt(streamFiber)
      assert.isTrue(model.requests[1]?.interrupted)
    })
  )

  it.effect("needs the services its tools need", () =>
    Effect.gen(function* () {
      class Rates extends Context.Service<Rates, { readonly euro: number }>()("@noema/agents/test/Rates") {}
      const convert = Tool.make({
        name: "convert",
        description: "Dollars to euros",
        parameters: Schema.Struct({ dollars: Schema.Number }),
        handler: ({ dollars }) => Rates.useSync((rates) => dollars * rates.euro)
      })
      const agent = ToolAgent.make({ tools: [add, convert] })
      // @ts-expect-error the agent needs Rates
      const _withoutServices: Agent.Agent<never> = agent
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ name: "convert", arguments: { dollars: 10 } }] }, "9 euros"]
      })
      const messages = yield* agent.execute(question, model).pipe(Effect.provideService(Rates, { euro: 0.9 }))
      assert.strictEqual(messages[1]?.content, "9")
    })
  )

  it("rejects bad limits and duplicate tool names", () => {
    assert.throws(() => ToolAgent.make({ tools: [add], maxSteps: 0 }), /maxSteps/)
    assert.throws(() => ToolAgent.make({ tools: [add], concurrency: 1.5 }), /concurrency/)
    assert.throws(() => ToolAgent.make({ tools: [add, add] }), /two tools named "add"/)
  })
})
