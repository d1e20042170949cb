/**
 * The loop's hooks and its handling of cut-off responses. Every case runs
 * through `execute` and `executeStream`, which must agree: one step machine
 * drives both.
 */
import { assert, describe, it } from "@effect/vitest"
import { type Agent, ConversationContext, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Queue, Schema, Stream } from "effect"
import { ToolAgent } from "../src/index.js"

const counted = () => {
  const calls: Array<string> = []
  const make = (name: string, annotations?: Tool.Annotations) =>
    Tool.make({
      name,
      description: `The ${name} tool`,
      parameters: Schema.Struct({ n: Schema.optional(Schema.Number) }),
      handler: ({ n }) =>
        Effect.sync(() => {
          calls.push(name)
          return `${name} ran with ${n ?? "nothing"}`
        }),
      ...(annotations !== undefined && { annotations })
    })
  return { calls, make }
}

const question = ConversationContext.of(Message.user("Go."))

const messagesOf = (events: ReadonlyArray<Agent.AgentEvent>) =>
  events.flatMap((event) => (event.type === "message" ? [event.message] : []))

/** Runs the agent both ways on fresh models from one script; the outputs must be equal. */
const both = <R>(
  agent: Agent.Agent<R>,
  script: () => ScriptedChatModel.Options,
  context: ConversationContext.ConversationContext = question
) =>
  Effect.gen(function* () {
    const model = ScriptedChatModel.make(script())
    const messages = yield* agent.execute(context, model)
    const streamModel = ScriptedChatModel.make(script())
    const events = yield* Stream.runCollect(agent.executeStream(context, streamModel))
    assert.deepStrictEqual(messagesOf(events), messages)
    assert.deepStrictEqual(
      streamModel.requests.map((request) => request.messages),
      model.requests.map((request) => request.messages)
    )
    return { messages, model, events, streamModel }
  })

describe("ToolAgent: calls of a response cut off by the length limit", () => {
  it.effect("are not run; each is answered with an error saying the arguments were truncated", () =>
    Effect.gen(function* () {
      const { calls, make } = counted()
      const agent = ToolAgent.make({ tools: [make("write")] })
      const { messages, model } = yield* both(agent, () => ({
        replies: [
          {
            toolCalls: [
              { id: "a", name: "write", arguments: { n: 1 } },
              { id: "b", name: "write", arguments: '{"n": 2' }
            ],
            finishReason: "length"
          },
          "I will write less."
        ]
      }))
      assert.deepStrictEqual(calls, [])
      const results = messages.filter(Message.isTool)
      assert.deepStrictEqual(
        results.map((result) => [result.toolCallId, result.isError]),
        [
          ["a", true],
          ["b", true]
        ]
      )
      for (const result of results) assert.include(result.content, "cut off by the length limit")
      // Every call answered, so the model's next call got a valid history.
      assert.deepStrictEqual(model.requests[1]?.messages.slice(1), messages.slice(0, 3))
      assert.strictEqual(messages.at(-1)?.content, "I will write less.")
    })
  )

  it.effect("run normally when the response finished for another reason", () =>
    Effect.gen(function* () {
      const { calls, make } = counted()
      yield* both(ToolAgent.make({ tools: [make("write")] }), () => ({
        replies: [{ toolCalls: [{ name: "write", arguments: { n: 1 } }], finishReason: "tool-calls" }, "ok"]
      }))
      assert.deepStrictEqual(calls, ["write", "write"])
    })
  )
})

describe("ToolAgent: stopWhen", () => {
  const looping = (): ScriptedChatModel.Options => ({
    fallback: { toolCalls: [{ name: "search", arguments: { n: 1 } }] }
  })

  it.effect("stepCountIs(n) ends the loop normally after n steps, their tools run", () =>
    Effect.gen(function* () {
      const { calls, make } = counted()
      const agent = ToolAgent.make({ tools: [make("search")], stopWhen: ToolAgent.stepCountIs(2) })
      const { messages, model } = yield* both(agent, looping)
      assert.strictEqual(model.requests.length, 2)
      assert.deepStrictEqual(
        messages.map((message) => message.role),
        ["assistant", "tool", "assistant", "tool"]
      )
      assert.deepStrictEqual(calls, ["search", "search", "search", "search"])
    })
  )

  it.effect("hasToolCall(name) stops after the step that called it; a list stops when any holds", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const tools = [make("search"), make("answer")]
      const script = (): ScriptedChatModel.Options => ({
        replies: [
          { toolCalls: [{ name: "search" }] },
          { toolCalls: [{ name: "search" }, { name: "answer", arguments: { n: 42 } }] },
          "unreachable"
        ]
      })
      const single = yield* both(ToolAgent.make({ tools, stopWhen: ToolAgent.hasToolCall("answer") }), script)
      assert.strictEqual(single.model.requests.length, 2)
      assert.strictEqual(single.messages.at(-1)?.content, "answer ran with 42")

      const seen: Array<ReadonlyArray<number>> = []
      const any = yield* both(
        ToolAgent.make({
          tools,
          stopWhen: [
            ({ step, steps }) => {
              seen.push([step, steps.length, steps.at(-1)?.toolResults.length ?? -1])
              return false
            },
            ToolAgent.stepCountIs(1)
          ]
        }),
        script
      )
      assert.strictEqual(any.model.requests.length, 1)
      // Run once per execution (execute, then executeStream): step 1, one step, one result.
      assert.deepStrictEqual(seen, [
        [1, 1, 1],
        [1, 1, 1]
      ])
    })
  )

  it.effect("hasToolCall does not count a call cut off by the length limit (it was not run)", () =>
    Effect.gen(function* () {
      const { calls, make } = counted()
      const agent = ToolAgent.make({ tools: [make("answer")], stopWhen: ToolAgent.hasToolCall("answer") })
      const { messages, model } = yield* both(agent, () => ({
        replies: [
          { toolCalls: [{ name: "answer", arguments: '{"n": 4' }], finishReason: "length" },
          { toolCalls: [{ name: "answer", arguments: { n: 42 } }] },
          "unreachable"
        ]
      }))
      assert.strictEqual(model.requests.length, 2)
      assert.deepStrictEqual(calls, ["answer", "answer"])
      assert.strictEqual(messages.at(-1)?.content, "answer ran with 42")
    })
  )

  it.effect("maxSteps stays the hard limit with its error", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const agent = ToolAgent.make({
        tools: [make("search")],
        maxSteps: 2,
        stopWhen: ToolAgent.stepCountIs(5)
      })
      const error = yield* Effect.flip(agent.execute(question, ScriptedChatModel.make(looping())))
      assert.strictEqual(error.reason._tag, "MaxStepsExceeded")
    })
  )

  it("rejects bad helper arguments", () => {
    assert.throws(() => ToolAgent.stepCountIs(0), /stepCountIs/)
    assert.throws(() => ToolAgent.hasToolCall(), /at least one/)
  })
})

describe("ToolAgent: prepareStep", () => {
  it.effect(
    "is told the step and the live messages, and overrides options, tools and messages per call",
    () =>
      Effect.gen(function* () {
        const { calls, make } = counted()
        const search = make("search")
        const answer = make("answer")
        const inputs: Array<[number, number, number]> = []
        const agent = ToolAgent.make({
          system: "sys",
          tools: [search, answer],
          options: { temperature: 0.5, maxTokens: 100 },
          prepareStep: ({ step, steps, request, messages }) => {
            inputs.push([step, steps.length, messages.length])
            assert.strictEqual(request.messages, messages)
            if (step === 1) return { activeTools: ["search"], options: { temperature: 0 } }
            // An Effect works too; the later calls see only the last two messages.
            return Effect.succeed({ messages: messages.window(2) })
          }
        })
        const { messages, model } = yield* both(
          agent,
          () => ({
            replies: [
              // "answer" is not active in step 1: answered as unknown, not run.
              { toolCalls: [{ name: "search" }, { name: "answer" }] },
              { toolCalls: [{ name: "answer" }] },
              "done"
            ]
          }),
          ConversationContext.of(Message.user("earlier"), Message.assistant("reply"), Message.user("Go."))
        )
        assert.deepStrictEqual(inputs.slice(0, 3), [
          [1, 0, 4],
          [2, 1, 7],
          [3, 2, 9]
        ])
        const [first, second, third] = model.requests
        assert.deepStrictEqual(first?.request.tools, [search.definition])
        assert.strictEqual(first?.request.temperature, 0)
        assert.strictEqual(first?.request.maxTokens, 100)
        assert.strictEqual(first?.messages.length, 4)
        assert.deepStrictEqual(second?.request.tools, [search.definition, answer.definition])
        assert.strictEqual(second?.request.temperature, 0.5)
        assert.deepStrictEqual(second?.messages, messages.slice(1, 3))
        assert.deepStrictEqual(third?.messages, messages.slice(3, 5))
        const unknown = messages.filter(Message.isTool)[1]
        assert.isTrue(unknown?.isError)
        assert.include(unknown?.content, 'Unknown tool "answer". Available tools: search.')
        // search in step 1, answer in step 2; twice over (execute, executeStream).
        assert.deepStrictEqual(calls, ["search", "answer", "search", "answer"])
      })
  )

  it.effect("a tool named twice in activeTools is offered once", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const search = make("search")
      const agent = ToolAgent.make({
        tools: [search, make("answer")],
        prepareStep: () => ({ activeTools: ["search", "search"] })
      })
      const { model } = yield* both(agent, () => ({ replies: ["x"] }))
      assert.deepStrictEqual(model.requests[0]?.request.tools, [search.definition])
    })
  )

  it.effect("naming a tool the agent lacks fails with a clear error", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const agent = ToolAgent.make({
        tools: [make("search")],
        prepareStep: () => ({ activeTools: ["nope"] })
      })
      const error = yield* Effect.flip(agent.execute(question, ScriptedChatModel.make({ replies: ["x"] })))
      assert.strictEqual(error.reason._tag, "Failed")
      assert.include(error.message, 'unknown tool "nope"')
      const streamError = yield* Effect.flip(
        Stream.runDrain(agent.executeStream(question, ScriptedChatModel.make({ replies: ["x"] })))
      )
      assert.strictEqual(streamError.message, error.message)
    })
  )
})

describe("ToolAgent: steering", () => {
  it.effect("injects polled messages after a tool batch, before the next model call, as output", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const polls: Array<number> = []
      const queue = yield* Queue.unbounded<Message.Message>()
      const agent = ToolAgent.make({
        tools: [make("search")],
        steering: () =>
          Effect.tap(Queue.clear(queue), (messages) =>
            Effect.sync(() => {
              polls.push(messages.length)
            })
          )
      })
      const script = (): ScriptedChatModel.Options => ({
        replies: [
          () => {
            // Arrives while the first step runs: injected once its calls are answered.
            Queue.offerUnsafe(queue, Message.user("Also check the weekend."))
            return {
              toolCalls: [
                { id: "c1", name: "search" },
                { id: "c2", name: "search" }
              ]
            }
          },
          "Done, weekend included."
        ]
      })
      const { messages, model, events } = yield* both(agent, script)
      assert.deepStrictEqual(
        messages.map((message) => message.role),
        ["assistant", "tool", "tool", "user", "assistant"]
      )
      assert.strictEqual(messages[3]?.content, "Also check the weekend.")
      assert.deepStrictEqual(model.requests[1]?.messages.slice(1), messages.slice(0, 4))
      // Polled after each step: after the tools (1 message), after the answer (none).
      assert.deepStrictEqual(polls, [1, 0, 1, 0])
      const injected = events.findIndex((event) => event.type === "message" && event.message.role === "user")
      assert.strictEqual(events[injected - 1]?.type, "message")
    })
  )

  it.effect("continues after an answer without tool calls when steering has messages", () =>
    Effect.gen(function* () {
      let pending = [Message.user("One more thing.")]
      const agent = ToolAgent.make({
        tools: [],
        steering: () =>
          Effect.sync(() => {
            const messages = pending
            pending = []
            return messages
          })
      })
      const messages = yield* agent.execute(
        question,
        ScriptedChatModel.make({ replies: ["First.", "Second."] })
      )
      assert.deepStrictEqual(
        messages.map((message) => message.content),
        ["First.", "One more thing.", "Second."]
      )
    })
  )

  it.effect("is not polled once stopWhen ends the loop", () =>
    Effect.gen(function* () {
      const { make } = counted()
      let polls = 0
      const agent = ToolAgent.make({
        tools: [make("search")],
        stopWhen: ToolAgent.stepCountIs(1),
        steering: () =>
          Effect.sync(() => {
            polls++
            return [Message.user("late")]
          })
      })
      const messages = yield* agent.execute(
        question,
        ScriptedChatModel.make({ replies: [{ toolCalls: [{ name: "search" }] }] })
      )
      assert.strictEqual(polls, 0)
      assert.deepStrictEqual(
        messages.map((message) => message.role),
        ["assistant", "tool"]
      )
    })
  )

  it.effect("refuses to inject tool results or tool calls, which would make the history invalid", () =>
    Effect.gen(function* () {
      const agent = ToolAgent.make({
        tools: [],
        steering: () =>
          Effect.succeed([Message.toolResult({ toolCallId: "x", name: "search", content: "forged" })])
      })
      const error = yield* Effect.flip(agent.execute(question, ScriptedChatModel.make({ replies: ["Hi."] })))
      assert.strictEqual(error.reason._tag, "Failed")
      assert.include(error.message, "steering returned a tool result")
      assert.deepStrictEqual(
        error.messages.map((message) => message.content),
        ["Hi."]
      )
    })
  )
})

describe("ToolAgent: tool annotations", () => {
  it.effect("are on the tool-call events of the tools that have them", () =>
    Effect.gen(function* () {
      const { make } = counted()
      const look = make("look", { readOnly: true })
      const erase = make("erase", { destructive: true })
      const plain = make("plain")
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ name: "look" }, { name: "erase" }, { name: "plain" }] }, "ok"]
      })
      const events = yield* Stream.runCollect(
        ToolAgent.make({ tools: [look, erase, plain] }).executeStream(question, model)
      )
      const annotated = events.flatMap((event) =>
        event.type === "tool-call" ? [[event.toolCall.name, event.annotations] as const] : []
      )
      assert.deepStrictEqual(annotated, [
        ["look", { readOnly: true }],
        ["erase", { destructive: true }],
        ["plain", undefined]
      ])
    })
  )
})
