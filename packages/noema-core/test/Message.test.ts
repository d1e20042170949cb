import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Message } from "../src/index.js"

const samples: ReadonlyArray<Message.Message> = [
  Message.system("You are helpful."),
  Message.user(""),
  Message.user('Ünïcødé ✓ 日本語 🚀 "quotes" \\ back\nslash', { id: "m1", createdAt: 1_700_000_000_000 }),
  Message.assistant("Let me check.", {
    toolCalls: [
      { id: "call_1", name: "get_weather", arguments: '{"city":"Zürich"}' },
      { id: "call_2", name: "noop", arguments: "" }
    ]
  }),
  Message.assistant("", { refusal: "I can't do that." }),
  Message.toolResult({ toolCallId: "call_1", name: "get_weather", content: "18°C" }),
  Message.toolResult({ toolCallId: "call_2", name: "noop", content: "boom", isError: true }),
  Message.user("with metadata", {
    metadata: { source: "cli", tags: ["a", "b"], nested: { n: 1, ok: true, none: null } }
  })
]

describe("Message", () => {
  it.effect("round-trips every kind through JSON losslessly", () =>
    Effect.gen(function* () {
      for (const message of samples) {
        const decoded = yield* Message.fromJson(Message.toJson(message))
        assert.deepStrictEqual(decoded, message)
        assert.deepStrictEqual(
          Message.decodeSync(JSON.parse(JSON.stringify(Message.encode(message)))),
          message
        )
      }
    })
  )

  it("normalises an empty tool-call list away", () => {
    assert.deepStrictEqual(Message.assistant("hi", { toolCalls: [] }), { role: "assistant", content: "hi" })
    assert.isFalse(Message.hasToolCalls(Message.assistant("hi", { toolCalls: [] })))
    assert.isTrue(Message.hasToolCalls(samples[3] as Message.Message))
  })

  it.effect("rejects invalid messages with a clear error", () =>
    Effect.gen(function* () {
      const wrongRole = yield* Effect.flip(Message.fromJson('{"role":"robot","content":"x"}'))
      assert.strictEqual(wrongRole._tag, "MessageDecodeError")
      const notJson = yield* Effect.flip(Message.fromJson("{nope"))
      assert.match(notJson.message, /Invalid message JSON/)
      const missing = yield* Effect.flip(Message.decode({ role: "tool", content: "x" }))
      assert.match(missing.message, /toolCallId/)
      assert.throws(() => Message.decodeSync({ role: "user" }), /Invalid message/)
    })
  )

  it("guards and renders", () => {
    assert.isTrue(Message.isSystem(samples[0] as Message.Message))
    assert.isTrue(Message.isTool(samples[5] as Message.Message))
    assert.strictEqual(Message.toText(samples[6] as Message.Message), "tool noop (error): boom")
    assert.match(Message.toText(samples[3] as Message.Message), /get_weather\(\{"city":"Zürich"\}\)/)
  })
})
