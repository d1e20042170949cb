import { assert, describe, it } from "@effect/vitest"
import { PlanAgent, ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, ConversationContext, Message } from "@noema/core"
import { Effect, Stream } from "effect"
import * as OfflineModel from "../src/OfflineModel.js"
import * as BuiltinTools from "../src/tools/BuiltinTools.js"

const tools = BuiltinTools.all
const definitions = tools.map((tool) => tool.definition)

const decide = (messages: ReadonlyArray<Message.Message>, withTools = true) =>
  OfflineModel.decide({ messages, ...(withTools && { tools: definitions }) })

describe("OfflineModel", () => {
  it("recognises arithmetic, in symbols or words, and asks for the calculator", () => {
    assert.deepStrictEqual(decide([Message.user("What is 2+2?")]), {
      type: "tool-call",
      name: "calculator",
      arguments: { expression: "2+2" }
    })
    assert.deepStrictEqual(OfflineModel.findExpression("calculate (3 + 4) * 2 please"), "(3 + 4) * 2")
    assert.deepStrictEqual(OfflineModel.findExpression("what is 6 times 7"), "6 * 7")
    assert.deepStrictEqual(OfflineModel.findExpression("sqrt(16)"), "sqrt(16)")
    assert.deepStrictEqual(OfflineModel.findExpression("what's 1/0?"), "1/0")
    assert.isUndefined(OfflineModel.findExpression("I have 2 cats"))
    assert.isUndefined(OfflineModel.findExpression("what is -5"))
    assert.isUndefined(OfflineModel.findExpression("hello there"))
  })

  it("asks for the clock and the file tool", () => {
    assert.deepStrictEqual(decide([Message.user("What time is it?")]), {
      type: "tool-call",
      name: "current_time",
      arguments: {}
    })
    assert.deepStrictEqual(decide([Message.user("what's the time in Tokyo?")]), {
      type: "tool-call",
      name: "current_time",
      arguments: { timezone: "Asia/Tokyo" }
    })
    assert.deepStrictEqual(decide([Message.user("Please read README.md")]), {
      type: "tool-call",
      name: "read_file",
      arguments: { path: "README.md" }
    })
    assert.deepStrictEqual(decide([Message.user('show me the file "src/index.ts"')]), {
      type: "tool-call",
      name: "read_file",
      arguments: { path: "src/index.ts" }
    })
  })

  it("says so instead of calling a tool it was not given", () => {
    const decision = decide([Message.user("What is 2+2?")], false)
    assert.strictEqual(decision.type, "text")
    assert.match((decision as { text: string }).text, /tools are turned off/)
  })

  it("remembers what the user said earlier in the conversation", () => {
    const history = [
      Message.user("Hi, my name is Ada Lovelace."),
      Message.assistant("Nice to meet you, Ada Lovelace. I'll remember that."),
      Message.user("What's my name?")
    ]
    assert.deepStrictEqual(decide(history), { type: "text", text: "Your name is Ada Lovelace." })
    assert.deepStrictEqual(decide([Message.user("what is my name")]), {
      type: "text",
      text: "You haven't told me your name yet."
    })
  })

  it("never claims to be a real model", () => {
    const decision = decide([Message.user("Are you an AI?")])
    assert.match((decision as { text: string }).text, /offline model.*not a language model/)
  })

  it.effect("drives the real tool loop: calculator call, result, answer from the result", () =>
    Effect.gen(function* () {
      const agent = ToolAgent.make({ tools })
      const model = OfflineModel.make()
      const messages = yield* agent.execute(ConversationContext.of(Message.user("what is 2+2?")), model)
      assert.strictEqual(messages.length, 3)
      const [call, result, answer] = messages
      assert.isTrue(call !== undefined && Message.hasToolCalls(call))
      if (call !== undefined && Message.hasToolCalls(call)) {
        assert.strictEqual(call.toolCalls[0]?.name, "calculator")
        assert.deepStrictEqual(JSON.parse(call.toolCalls[0]?.arguments ?? ""), { expression: "2+2" })
      }
      assert.deepInclude(result, { role: "tool", name: "calculator", content: "4", isError: false })
      assert.deepInclude(answer, { role: "assistant", content: "2 + 2 = 4" })
    })
  )

  it.effect("streams word by word and reports usage", () =>
    Effect.gen(function* () {
      const model = OfflineModel.make()
      const chunks = yield* Stream.runCollect(model.stream({ messages: [Message.user("hello")] }))
      const deltas = chunks.filter((chunk) => chunk.type === "text-delta")
      assert.isAbove(deltas.length, 5)
      assert.isTrue(chunks.some((chunk) => chunk.type === "usage"))
      const response = yield* model.complete({ messages: [Message.user("hello")] })
      assert.strictEqual(deltas.map((chunk) => (chunk as { delta: string }).delta).join(""), response.text)
      assert.strictEqual(model.provider, "offline")
    })
  )

  it.effect("answers from tool errors too", () =>
    Effect.gen(function* () {
      const agent = ToolAgent.make({ tools })
      const events = yield* Stream.runCollect(
        agent.executeStream(ConversationContext.of(Message.user("what is 1/0")), OfflineModel.make())
      )
      const results = events.filter(
        (event): event is Extract<Agent.AgentEvent, { type: "tool-result" }> => event.type === "tool-result"
      )
      assert.strictEqual(results.length, 1)
      assert.isTrue(results[0]?.message.isError)
      const last = events.at(-1)
      assert.strictEqual(last?.type, "message")
      if (last?.type === "message")
        assert.match(Message.text(last.message), /^I couldn't calculate 1 \/ 0: .*division by zero/)
    })
  )

  it("is a ChatModel made through core", () => {
    const model: ChatModel.Service = OfflineModel.make()
    assert.isTrue(OfflineModel.isOffline(model))
  })

  it.effect(
    "drives the plan workflow offline: a one-step plan, the step with the tools, the review, the answer",
    () =>
      Effect.gen(function* () {
        const agent = PlanAgent.make({ tools })
        const events = Array.from(
          yield* Stream.runCollect(
            agent.executeStream(
              ConversationContext.of(Message.user("what is 6 times 7?")),
              OfflineModel.make()
            )
          )
        )
        const messages = events.flatMap((event) => (event.type === "message" ? [event.message] : []))
        const answer = messages.at(-1) as Message.Message
        assert.strictEqual(Message.text(answer), "6 * 7 = 42")
        const plan = PlanAgent.planOf(answer)
        assert.deepInclude(plan, { goal: "what is 6 times 7?", stopReason: "finished", notified: true })
        assert.deepStrictEqual(
          plan?.steps.map((step) => [step.title, step.status]),
          [["Answer the request", "done"]]
        )
        assert.isTrue(messages.some((message) => message.role === "tool" && message.content === "42"))
      })
  )
})

describe("OfflineModel.requestParts (the planner's tasks)", () => {
  it("splits a request where the user joined its parts, and nowhere else", () => {
    assert.deepStrictEqual(OfflineModel.requestParts("what is 2+2; what time is it"), [
      "what is 2+2",
      "what time is it"
    ])
    assert.deepStrictEqual(OfflineModel.requestParts("read README.md and then summarise it."), [
      "read README.md",
      "summarise it"
    ])
    assert.deepStrictEqual(OfflineModel.requestParts("Compute 3*7. Then write a note"), [
      "Compute 3*7",
      "Then write a note"
    ])
    assert.deepStrictEqual(OfflineModel.requestParts("bread and butter"), ["bread and butter"])
  })
})
