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
  Message.user([
    Message.textPart("What is in this picture?"),
    Message.filePart({
      uri: "https://example.com/cat.png",
      mediaType: "image/png",
      name: "cat.png",
      sha256: "ab12",
      size: 2048
    })
  ]),
  Message.assistant([Message.reasoningPart("The user greets me."), Message.textPart("Hello!")], {
    finishReason: "stop",
    rawFinishReason: "stop",
    usage: { inputTokens: 3, outputTokens: 9, totalTokens: 12, reasoningTokens: 5 }
  }),
  Message.assistant(
    [
      Message.reasoningPart("Signed thinking.", { anthropic: { signature: "EqQBCkgIARABGAIiQ" } }),
      Message.reasoningPart("", { anthropic: { redactedData: "EmwKAhgBEgy3va3pzix" } }),
      Message.textPart("Done.")
    ],
    {
      usage: {
        inputTokens: 30,
        outputTokens: 2,
        totalTokens: 32,
        cachedInputTokens: 10,
        cacheWriteInputTokens: 15
      }
    }
  ),
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

describe("Message content", () => {
  const reasoned = Message.assistant([
    Message.reasoningPart("Think "),
    Message.textPart("Hello"),
    Message.reasoningPart("again."),
    Message.filePart({ uri: "file:///tmp/out.csv", mediaType: "text/csv", name: "out.csv" }),
    Message.textPart(", world")
  ])

  it("keeps the text-only form a plain string", () => {
    assert.deepStrictEqual(Message.user("hi"), { role: "user", content: "hi" })
    assert.deepStrictEqual(Message.assistant("hi"), { role: "assistant", content: "hi" })
  })

  it("reads the answer text without reasoning or files, from either form", () => {
    assert.strictEqual(Message.text(reasoned), "Hello, world")
    assert.strictEqual(Message.text(Message.user("plain")), "plain")
    assert.strictEqual(Message.text(Message.toolResult({ toolCallId: "c", name: "t", content: "42" })), "42")
  })

  it("reads reasoning and files apart", () => {
    assert.strictEqual(Message.reasoning(reasoned), "Think again.")
    assert.strictEqual(Message.reasoning(Message.assistant("no thoughts")), "")
    assert.deepStrictEqual(Message.files(reasoned), [
      { type: "file", uri: "file:///tmp/out.csv", mediaType: "text/csv", name: "out.csv" }
    ])
    assert.deepStrictEqual(Message.files(Message.user("none")), [])
  })

  it("gives the content as parts, whatever its form", () => {
    assert.deepStrictEqual(Message.parts(Message.user("hi")), [{ type: "text", text: "hi" }])
    assert.deepStrictEqual(Message.parts(Message.assistant("")), [])
    assert.strictEqual(Message.parts(reasoned), reasoned.content)
  })

  it("renders files and keeps reasoning out of toText", () => {
    assert.strictEqual(Message.toText(reasoned), "assistant: Hello, world [file out.csv]")
  })

  it("rejects reasoning in a user message and malformed parts, with a one-line error", () => {
    for (const bad of [
      { role: "user", content: [{ type: "reasoning", text: "no" }] },
      { role: "assistant", content: [{ type: "file", uri: "x" }] },
      { role: "assistant", content: [{ type: "video", text: "x" }] },
      { role: "assistant", content: "x", finishReason: "exploded" },
      // Provider metadata is a JSON object per provider, never a bare value.
      {
        role: "assistant",
        content: [{ type: "reasoning", text: "x", providerMetadata: { anthropic: "sig" } }]
      }
    ]) {
      assert.throws(() => Message.decodeSync(bad), Message.MessageDecodeError)
    }
  })
})
