/**
 * Usage: the tokens a conversation cost, summed from the messages it keeps.
 *
 * Every assistant message is one model call, and a model that reports usage
 * leaves it on that message (`AssistantMessage.usage`), so a session's usage is
 * already stored with its messages and is computed here rather than kept twice.
 * A call without a usage report (an older session, a server that sends none)
 * is counted as such, never as zero tokens: the totals cover `reportedCalls`
 * of `calls`.
 */
import { ChatModel, type Message } from "@noema/core"
import { Schema } from "effect"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

/** Tokens over some model calls. */
export interface Summary {
  /** Model calls (assistant messages). */
  readonly calls: number
  /** Calls that carried no usage report; their tokens are unknown, not zero. */
  readonly unreportedCalls: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly totalTokens: number
  /** Present when some call reported it. */
  readonly cachedInputTokens?: number
  /** Present when some call reported it. */
  readonly reasoningTokens?: number
}

/** One turn: a user message and everything up to the next one, with its usage. */
export interface Turn {
  /** 1-based, in conversation order. */
  readonly number: number
  readonly messages: ReadonlyArray<Message.Message>
  readonly usage: Summary
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/** The usage of all model calls among `messages`. */
export const ofMessages = (messages: Iterable<Message.Message>): Summary => {
  let calls = 0
  let unreportedCalls = 0
  let total: ChatModel.Usage | undefined
  for (const message of messages) {
    if (message.role !== "assistant") continue
    calls++
    if (message.usage === undefined) unreportedCalls++
    else total = ChatModel.addUsage(total, message.usage)
  }
  return {
    calls,
    unreportedCalls,
    inputTokens: total?.inputTokens ?? 0,
    outputTokens: total?.outputTokens ?? 0,
    totalTokens: total?.totalTokens ?? 0,
    ...(total?.cachedInputTokens !== undefined && { cachedInputTokens: total.cachedInputTokens }),
    ...(total?.reasoningTokens !== undefined && { reasoningTokens: total.reasoningTokens })
  }
}

/**
 * The conversation split into turns, each with its usage. A turn starts at a
 * user message; anything before the first user message (a system prompt)
 * belongs to the first turn.
 */
export const byTurn = (messages: Iterable<Message.Message>): Array<Turn> => {
  const groups: Array<Array<Message.Message>> = []
  let current: Array<Message.Message> | undefined
  for (const message of messages) {
    if (current === undefined || (message.role === "user" && current.some((m) => m.role === "user"))) {
      current = []
      groups.push(current)
    }
    current.push(message)
  }
  return groups.map((group, index) => ({ number: index + 1, messages: group, usage: ofMessages(group) }))
}

// ---------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------

const count = (value: number, singular: string, plural = `${singular}s`) =>
  `${value.toLocaleString("en-US")} ${value === 1 ? singular : plural}`

/**
 * One line for people: `1,200 in (800 cached) · 300 out (120 reasoning) · 3 calls`,
 * with `, 1 without usage report` when some call reported nothing. Zero cached
 * or reasoning tokens are left out (the `Summary` keeps them).
 */
export const format = (summary: Summary): string => {
  if (summary.calls === 0) return "no model calls"
  const tokens = (value: number) => value.toLocaleString("en-US")
  const unreported =
    summary.unreportedCalls > 0 ? `, ${tokens(summary.unreportedCalls)} without usage report` : ""
  if (summary.unreportedCalls === summary.calls)
    return `tokens unknown · ${count(summary.calls, "call")}${unreported}`
  // Servers report zero cached or reasoning tokens on every call; only a number says something.
  const cached =
    (summary.cachedInputTokens ?? 0) > 0 ? ` (${tokens(summary.cachedInputTokens ?? 0)} cached)` : ""
  const reasoning =
    (summary.reasoningTokens ?? 0) > 0 ? ` (${tokens(summary.reasoningTokens ?? 0)} reasoning)` : ""
  return (
    `${tokens(summary.inputTokens)} in${cached} · ${tokens(summary.outputTokens)} out${reasoning} · ` +
    `${count(summary.calls, "call")}${unreported}`
  )
}

// ---------------------------------------------------------------------------
// Cost
// ---------------------------------------------------------------------------

/** A model's prices in US dollars per million tokens; cached input at the input price unless given. */
export const Price = Schema.Struct({
  input: Schema.Number,
  output: Schema.Number,
  cachedInput: Schema.optionalKey(Schema.Number)
})
export type Price = typeof Price.Type

/**
 * Prices by model name, as a user keeps them (a JSON file: `{ "gpt-4.1-mini":
 * { "input": 0.4, "output": 1.6, "cachedInput": 0.1 } }`). noema ships none:
 * prices change, and a stale table would be a wrong bill.
 */
export const Prices = Schema.Record(Schema.String, Price)
export type Prices = typeof Prices.Type

export interface Cost {
  /** US dollars for the calls that could be priced. */
  readonly usd: number
  /** Calls priced (they had a usage report and a model with a price). */
  readonly pricedCalls: number
  /** Models that answered but have no price (their calls are not in `usd`). */
  readonly unpricedModels: ReadonlyArray<string>
  /** Calls without a usage report, or without the answering model (older sessions): not in `usd`. */
  readonly unknownCalls: number
}

/** A model's price: by its exact name, else by the name without a `-YYYY-MM-DD` snapshot date. */
export const priceOf = (prices: Prices, model: string): Price | undefined =>
  prices[model] ?? prices[model.replace(/-\d{4}-\d{2}-\d{2}$/, "")]

/** What the model calls among `messages` cost, at `prices`. */
export const cost = (messages: Iterable<Message.Message>, prices: Prices): Cost => {
  let usd = 0
  let pricedCalls = 0
  let unknownCalls = 0
  const unpriced = new Set<string>()
  for (const message of messages) {
    if (message.role !== "assistant") continue
    const usage = message.usage
    if (usage === undefined || message.model === undefined) {
      unknownCalls++
      continue
    }
    const price = priceOf(prices, message.model)
    if (price === undefined) {
      unpriced.add(message.model)
      continue
    }
    const cached = Math.min(usage.cachedInputTokens ?? 0, usage.inputTokens)
    usd +=
      ((usage.inputTokens - cached) * price.input +
        cached * (price.cachedInput ?? price.input) +
        usage.outputTokens * price.output) /
      1_000_000
    pricedCalls++
  }
  return { usd, pricedCalls, unpricedModels: [...unpriced].sort(), unknownCalls }
}

/** One line: `$0.0123`, with what was left out: `, no price for llama3.2`, `, 2 calls without usage`. */
export const formatCost = (value: Cost): string => {
  const amount =
    value.usd === 0 ? "$0" : value.usd < 0.01 ? `$${value.usd.toFixed(6)}` : `$${value.usd.toFixed(4)}`
  const notes: Array<string> = []
  if (value.unpricedModels.length > 0) notes.push(`no price for ${value.unpricedModels.join(", ")}`)
  if (value.unknownCalls > 0) notes.push(`${count(value.unknownCalls, "call")} without usage or model`)
  return notes.length === 0 ? amount : `${amount} (${notes.join("; ")})`
}
