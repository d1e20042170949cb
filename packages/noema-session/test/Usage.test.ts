import { assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import * as Usage from "../src/Usage.js"

const usage = (
  inputTokens: number,
  outputTokens: number,
  extra: Partial<Message.Usage> = {}
): Message.Usage => ({
  inputTokens,
  outputTokens,
  totalTokens: inputTokens + outputTokens,
  ...extra
})

const conversation: ReadonlyArray<Message.Message> = [
  Message.system("Be brief."),
  Message.user("What is 2+2?"),
  Message.assistant("", {
    toolCalls: [{ id: "c1", name: "calculator", arguments: '{"expression":"2+2"}' }],
    usage: usage(100, 10, { cachedInputTokens: 40 })
  }),
  Message.toolResult({ toolCallId: "c1", name: "calculator", content: "4", isError: false }),
  Message.assistant("4", { usage: usage(120, 5) }),
  Message.user("And 3+3?"),
  // An older session's answer: no usage was recorded.
  Message.assistant("6"),
  Message.user("Think hard."),
  Message.assistant("Done.", { usage: usage(200, 50, { reasoningTokens: 30 }) })
]

describe("Usage.ofMessages", () => {
  it("sums the reported calls and counts the unreported ones instead of adding zero", () => {
    assert.deepStrictEqual(Usage.ofMessages(conversation), {
      calls: 4,
      unreportedCalls: 1,
      inputTokens: 420,
      outputTokens: 65,
      totalTokens: 485,
      cachedInputTokens: 40,
      reasoningTokens: 30
    })
  })

  it("leaves cached and reasoning tokens out when no call reported them", () => {
    const summary = Usage.ofMessages([Message.user("hi"), Message.assistant("hello", { usage: usage(3, 2) })])
    assert.deepStrictEqual(summary, {
      calls: 1,
      unreportedCalls: 0,
      inputTokens: 3,
      outputTokens: 2,
      totalTokens: 5
    })
  })

  it("has no calls for a conversation without answers", () => {
    assert.deepStrictEqual(Usage.ofMessages([Message.user("hi")]), {
      calls: 0,
      unreportedCalls: 0,
      inputTokens: 0,
      outputTokens: 0,
      totalTokens: 0
    })
  })
})

describe("Usage.byTurn", () => {
  it("starts a turn at each user message, the system prompt in the first", () => {
    const turns = Usage.byTurn(conversation)
    assert.deepStrictEqual(
      turns.map((turn) => [turn.number, turn.messages.length]),
      [
        [1, 5],
        [2, 2],
        [3, 2]
      ]
    )
    assert.deepStrictEqual(turns[0]?.messages[0], conversation[0])
    assert.deepStrictEqual(
      turns.map((turn) => [
        turn.usage.calls,
        turn.usage.unreportedCalls,
        turn.usage.inputTokens,
        turn.usage.outputTokens
      ]),
      [
        [2, 0, 220, 15],
        [1, 1, 0, 0],
        [1, 0, 200, 50]
      ]
    )
    assert.strictEqual(turns[2]?.usage.reasoningTokens, 30)
    assert.isUndefined(turns[1]?.usage.reasoningTokens)
  })

  it("has no turns for no messages", () => {
    assert.deepStrictEqual(Usage.byTurn([]), [])
  })
})

describe("Usage.format", () => {
  it("says what is known and how many calls reported nothing", () => {
    assert.strictEqual(
      Usage.format(Usage.ofMessages(conversation)),
      "420 in (40 cached) · 65 out (30 reasoning) · 4 calls, 1 without usage report"
    )
    assert.strictEqual(
      Usage.format(Usage.ofMessages([Message.assistant("x", { usage: usage(1200, 1) })])),
      "1,200 in · 1 out · 1 call"
    )
    assert.strictEqual(
      Usage.format(Usage.ofMessages([Message.assistant("x")])),
      "tokens unknown · 1 call, 1 without usage report"
    )
    assert.strictEqual(
      Usage.format(
        Usage.ofMessages([
          Message.assistant("x", { usage: usage(5, 1, { cachedInputTokens: 0, reasoningTokens: 0 }) })
        ])
      ),
      "5 in · 1 out · 1 call"
    )
    assert.strictEqual(Usage.format(Usage.ofMessages([])), "no model calls")
  })
})

describe("Usage.cost", () => {
  const prices: Usage.Prices = {
    "gpt-4.1-mini": { input: 0.4, output: 1.6, cachedInput: 0.1 },
    "gpt-4.1": { input: 2, output: 8 }
  }

  it("prices each call by its model: cached input at its own price, snapshot names as their model", () => {
    const messages = [
      Message.user("hi"),
      Message.assistant("a", {
        model: "gpt-4.1-mini",
        usage: usage(1_000_000, 500_000, { cachedInputTokens: 200_000 })
      }),
      Message.assistant("b", { model: "gpt-4.1-2025-04-14", usage: usage(100_000, 10_000) })
    ]
    const cost = Usage.cost(messages, prices)
    // 800k * 0.4 + 200k * 0.1 + 500k * 1.6 = 0.32 + 0.02 + 0.8; 100k * 2 + 10k * 8 = 0.2 + 0.08
    assert.closeTo(cost.usd, 1.14 + 0.28, 1e-9)
    assert.deepStrictEqual([cost.pricedCalls, cost.unknownCalls, cost.unpricedModels], [2, 0, []])
    assert.strictEqual(Usage.formatCost(cost), "$1.4200")
  })

  it("says what it could not price: models without a price, calls without usage or model", () => {
    const cost = Usage.cost(
      [
        Message.assistant("a", { model: "llama3.2", usage: usage(10, 10) }),
        Message.assistant("b", { usage: usage(10, 10) }),
        Message.assistant("c", { model: "gpt-4.1" }),
        Message.assistant("d", { model: "gpt-4.1", usage: usage(1000, 100) })
      ],
      prices
    )
    assert.deepStrictEqual([cost.pricedCalls, cost.unknownCalls, cost.unpricedModels], [1, 2, ["llama3.2"]])
    assert.strictEqual(
      Usage.formatCost(cost),
      "$0.002800 (no price for llama3.2; 2 calls without usage or model)"
    )
  })
})
