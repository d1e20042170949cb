import { assert, describe, it } from "@effect/vitest"
import { Message, TokenCounter } from "@noema/core"
import { Effect } from "effect"
import { OpenAiTokens } from "../src/index.js"

describe("OpenAiTokens", () => {
  it.effect("counts with the model's own encoding, exactly", () =>
    Effect.gen(function* () {
      const gpt4o = yield* OpenAiTokens.counter("gpt-4o-mini")
      assert.isTrue(gpt4o.exact)
      assert.strictEqual(gpt4o.name, "gpt-4o-mini (o200k_base)")
      // tiktoken's o200k_base: "Hello, world!" is 4 tokens, and 4 with cl100k_base too;
      // the encodings differ on other text, e.g. a run of spaces and CJK.
      assert.strictEqual(gpt4o.countText("Hello, world!"), 4)
      const gpt4 = yield* OpenAiTokens.counter("gpt-4")
      assert.strictEqual(gpt4.name, "gpt-4 (cl100k_base)")
      const sample = "東京の天気は晴れです。 明日も晴れるでしょう。"
      assert.notStrictEqual(gpt4o.countText(sample), gpt4.countText(sample))
      // A snapshot name counts as its model.
      const dated = yield* OpenAiTokens.counter("gpt-4o-2024-08-06")
      assert.isTrue(dated.exact)
      // Whole requests: texts plus framing.
      const messages = [Message.system("You are terse."), Message.user("Hello, world!")]
      assert.strictEqual(
        gpt4o.countMessages(messages),
        TokenCounter.perRequestOverhead +
          2 * TokenCounter.perMessageOverhead +
          gpt4o.countText("You are terse.") +
          4
      )
    })
  )

  it.effect("falls back to the estimate, said so, for models it does not know", () =>
    Effect.gen(function* () {
      const local = yield* OpenAiTokens.counter("llama3.1:8b")
      assert.strictEqual(local, TokenCounter.estimate)
      assert.isFalse(local.exact)
      assert.isUndefined(yield* OpenAiTokens.limits("llama3.1:8b"))
    })
  )

  it.effect("knows OpenAI models' context windows", () =>
    Effect.gen(function* () {
      const limits = yield* OpenAiTokens.limits("gpt-4o-mini")
      assert.strictEqual(limits?.contextWindow, 128_000)
      assert.strictEqual(limits?.maxOutputTokens, 16_384)
    })
  )
})
