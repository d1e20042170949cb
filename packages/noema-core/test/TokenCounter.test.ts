import { assert, describe, it } from "@effect/vitest"
import { Message, TokenCounter } from "../src/index.js"

describe("TokenCounter", () => {
  it("estimates about four characters a token for prose, denser for symbols, and says it is an estimate", () => {
    assert.isFalse(TokenCounter.estimate.exact)
    assert.strictEqual(TokenCounter.estimate.name, "estimate")
    assert.strictEqual(TokenCounter.estimateText(""), 0)
    assert.strictEqual(TokenCounter.estimateText("abcd efgh"), 3)
    // Punctuation and JSON cost a token each.
    assert.strictEqual(TokenCounter.estimateText('{"a":1}'), 6)
    assert.isAbove(TokenCounter.estimateText("東京は晴れ"), 4)
  })

  it("reads as dense exactly what /[^A-Za-z0-9\\s]/ does, for every UTF-16 code unit", () => {
    // The estimate counts in one pass; it must keep the regular expression's reading (Unicode
    // spaces and line terminators are not dense; a lone surrogate is).
    const dense = /[^A-Za-z0-9\s]/
    const mismatched: Array<number> = []
    for (let code = 0; code <= 0xffff; code++) {
      const char = String.fromCharCode(code)
      // "aaa" + char: 3 letters are one token, so char decides whether it is 1 or 2.
      const expected = dense.test(char) ? 2 : 1
      if (TokenCounter.estimateText(`aaa${char}`) !== expected) mismatched.push(code)
    }
    assert.deepStrictEqual(mismatched, [])
    const mixed = 'Tâche: {"a": [1, 2]}\u00a0\u3000東京\n\t😀 done.'
    const denseCount = mixed.match(/[^A-Za-z0-9\s]/g)?.length ?? 0
    assert.strictEqual(
      TokenCounter.estimateText(mixed),
      Math.ceil((mixed.length - denseCount) / 4 + denseCount)
    )
  })

  it("estimates texts joined as the joined text, without joining them; a tokenizer cannot say", () => {
    // Fractions that only add up across the seams: 1 + 2 + 3 plain units are 6/4, not three ceilings.
    const cases: ReadonlyArray<ReadonlyArray<string>> = [
      [],
      [""],
      ["a", "bc", "def"],
      ["[message: 2026-01-01 note]\n", "history item 1", "\nOutput: ", "done."],
      ['{"a":', " [1, 2]}\u00a0", "\u3000東京\n\t😀", "", " done."]
    ]
    for (const texts of cases)
      assert.strictEqual(
        TokenCounter.estimate.countJoined?.(texts),
        TokenCounter.estimateText(texts.join("")),
        JSON.stringify(texts)
      )
    assert.strictEqual(TokenCounter.estimateJoined(["a", "bc", "def"]), 2)
    const letters = TokenCounter.make({ name: "letters", exact: true, countText: (text) => text.length })
    assert.isUndefined(letters.countJoined)
  })

  it("counts every text a request sends, with per-message and per-request framing", () => {
    const letters = TokenCounter.make({ name: "letters", exact: true, countText: (text) => text.length })
    const messages = [
      Message.system("ab"),
      Message.user([
        { type: "text", text: "cd" },
        { type: "file", uri: "data:image/png;base64,AAAA", mediaType: "image/png" }
      ]),
      Message.assistant(
        [
          { type: "reasoning", text: "ef" },
          { type: "text", text: "gh" }
        ],
        {
          toolCalls: [{ id: "c1", name: "ij", arguments: "kl" }]
        }
      ),
      Message.toolResult({ toolCallId: "c1", name: "ij", content: "mn" })
    ]
    const expected =
      TokenCounter.perRequestOverhead +
      4 * TokenCounter.perMessageOverhead +
      TokenCounter.filePartTokens +
      TokenCounter.perMessageOverhead + // the tool call's framing
      2 * 8 // ab cd ef gh ij kl ij mn
    assert.strictEqual(letters.countMessages(messages), expected)
    assert.strictEqual(letters.countMessages([]), TokenCounter.perRequestOverhead)
  })
})
