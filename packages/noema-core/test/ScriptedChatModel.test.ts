import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { ConversationContext, Message, ModelError } from "../src/index.js"
import { ChatModelConformance, ScriptedChatModel } from "../src/testing.js"

const harness: ChatModelConformance.Harness = {
  prepare: (scenario) =>
    Effect.sync(() => {
      const reply = ((): ScriptedChatModel.Reply => {
        switch (scenario.kind) {
          case "text":
            return {
              text: scenario.text,
              usage: {
                inputTokens: scenario.usage.inputTokens,
                outputTokens: scenario.usage.outputTokens,
                totalTokens: scenario.usage.inputTokens + scenario.usage.outputTokens
              }
            }
          case "tool-calls":
            return { toolCalls: scenario.calls }
          case "refusal":
            return { refusal: scenario.refusal }
          case "failure": {
            const message = `scripted ${scenario.failure}`
            switch (scenario.failure) {
              case "rate-limited":
                return {
                  fail: new ModelError.RateLimited({
                    message,
                    ...(scenario.retryAfterSeconds !== undefined && {
                      retryAfterMillis: scenario.retryAfterSeconds * 1000
                    })
                  })
                }
              case "authentication":
                return { fail: new ModelError.Authentication({ message }) }
              case "invalid-request":
                return { fail: new ModelError.InvalidRequest({ message }) }
              case "unavailable":
                return { fail: new ModelError.Unavailable({ message, status: 503 }) }
            }
            throw new Error("unreachable")
          }
          case "drop-mid-stream":
            return {
              stream: [{ type: "text-delta", delta: scenario.text.slice(0, 5) }],
              failAfter: new ModelError.Network({ message: "connection reset" })
            }
          case "hang":
            return { hang: true }
        }
      })()
      const model = ScriptedChatModel.make({ replies: [reply] })
      const awaitRequest = (predicate: () => boolean) =>
        Effect.gen(function* () {
          while (!predicate()) yield* Effect.yieldNow
        })
      return {
        model,
        requestReceived: awaitRequest(() => model.requests.length > 0),
        requestCancelled: awaitRequest(() => model.requests[0]?.interrupted === true)
      }
    })
}

describe("ScriptedChatModel", () => {
  describe("passes the ChatModel conformance suite", () => {
    for (const testCase of ChatModelConformance.cases) {
      it.effect(testCase.name, () => testCase.run(harness))
    }
  })

  it.effect("records requests with message snapshots", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["a", (request) => `seen ${request.messages.length}`] })
      const history: Array<Message.Message> = [Message.user("1")]
      const context = ConversationContext.fromArray(history)
      yield* model.complete({ messages: context, temperature: 0 })
      history.push(Message.assistant("a"), Message.user("2"))
      const second = yield* model.complete({ messages: context })
      assert.strictEqual(second.text, "seen 3")
      assert.strictEqual(model.requests[0]?.messages.length, 1, "the snapshot did not change")
      assert.strictEqual(model.requests[0]?.request.temperature, 0)
      assert.strictEqual(model.remaining, 0)
    })
  )

  it.effect("fails clearly when the script runs out, unless there is a fallback", () =>
    Effect.gen(function* () {
      const empty = ScriptedChatModel.make()
      const error = yield* Effect.flip(empty.complete({ messages: [] }))
      assert.match(error.message, /no reply left for request #1/)
      const withFallback = ScriptedChatModel.make({ fallback: "always" })
      assert.strictEqual((yield* withFallback.complete({ messages: [] })).text, "always")
      withFallback.enqueue("queued")
      assert.strictEqual((yield* withFallback.complete({ messages: [] })).text, "queued")
    })
  )

  it.effect("streams tool-call arguments in fragments", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ name: "calc", arguments: { expression: "2+2" } }] }]
      })
      const chunks = yield* Stream.runCollect(model.stream({ messages: [] }))
      assert.isAbove(chunks.filter((chunk) => chunk.type === "tool-call-delta").length, 1)
      const call = chunks.find((chunk) => chunk.type === "tool-call")
      assert.deepStrictEqual(call, {
        type: "tool-call",
        toolCall: { id: "call_0_0", name: "calc", arguments: '{"expression":"2+2"}' }
      })
    })
  )
})
