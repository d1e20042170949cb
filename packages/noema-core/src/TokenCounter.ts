/**
 * TokenCounter: how many tokens a conversation costs a model.
 *
 * Budgets (compaction, context windows) are in tokens, and only a model's own
 * tokenizer knows them exactly. A counter says whether it is exact
 * (`exact: true`, e.g. the OpenAI adapter's, with the model's real BPE
 * encoding) or an estimate, so a caller never mistakes one for the other.
 * `estimate` is the default for any model without a tokenizer: about four
 * characters of English text per token, plus a few tokens per message for
 * the role and framing. It is an estimate, said so, and errs slightly high
 * for English prose; code, non-Latin scripts and JSON cost more per character
 * and are counted at a denser rate.
 */
import type { Message } from "./Message.js"
import * as Messages from "./Message.js"

export interface TokenCounter {
  /** What counts: an encoding's or a model's name, or "estimate". */
  readonly name: string
  /** True when the count is the model's own tokenizer's; false for an estimate. */
  readonly exact: boolean
  /** Tokens of a piece of text alone. */
  readonly countText: (text: string) => number
  /**
   * Tokens of these messages as a request sends them: each message's text, tool
   * calls and framing, plus the few tokens that prime the answer.
   */
  readonly countMessages: (messages: Iterable<Message>) => number
  /**
   * Tokens of the texts joined into one (`countText(texts.join(""))`), counted without joining
   * them: a caller measuring what it may not keep builds nothing. Only a counter whose count is
   * made of its parts' has it (the estimate; not a tokenizer, whose tokens cross the seams).
   */
  readonly countJoined?: (texts: ReadonlyArray<string>) => number
}

/** Tokens a chat request adds per message (role and delimiters) in OpenAI's chat format. */
export const perMessageOverhead = 3
/** Tokens every chat request adds once, to prime the answer. */
export const perRequestOverhead = 3
/** What a file part is counted as when its size in tokens cannot be known (an image's low-detail cost). */
export const filePartTokens = 85

/** The texts a message sends: content, reasoning, tool call names and arguments, tool results. */
export const textsOf = (message: Message): Array<string> => {
  switch (message.role) {
    case "system":
      return [message.content]
    case "tool":
      return [message.name, message.content]
    case "user":
      return typeof message.content === "string"
        ? [message.content]
        : message.content.flatMap((part) => (part.type === "text" ? [part.text] : []))
    case "assistant": {
      const texts = typeof message.content === "string" ? [message.content] : []
      if (typeof message.content !== "string") {
        for (const part of message.content) {
          if (part.type === "text") texts.push(part.text)
          else if (part.type === "reasoning") texts.push(part.text)
        }
      }
      if (message.refusal !== undefined) texts.push(message.refusal)
      for (const call of message.toolCalls ?? []) texts.push(call.name, call.arguments)
      return texts
    }
  }
}

const fileParts = (message: Message): number => Messages.files(message).length

/**
 * A counter from a text tokenizer: every message is its texts' tokens plus
 * `perMessageOverhead` (and a tool call's framing), every request `perRequestOverhead`.
 */
export const make = (options: {
  readonly name: string
  readonly exact: boolean
  readonly countText: (text: string) => number
  readonly countJoined?: (texts: ReadonlyArray<string>) => number
}): TokenCounter => {
  const countText = options.countText
  return {
    name: options.name,
    exact: options.exact,
    countText,
    ...(options.countJoined === undefined ? {} : { countJoined: options.countJoined }),
    countMessages: (messages) => {
      let total = perRequestOverhead
      for (const message of messages) {
        total += perMessageOverhead + fileParts(message) * filePartTokens
        for (const text of textsOf(message)) total += countText(text)
        if (message.role === "assistant") total += (message.toolCalls?.length ?? 0) * perMessageOverhead
      }
      return total
    }
  }
}

/**
 * Whether the UTF-16 code unit `code` is one tokenizers split finely: anything outside ASCII
 * letters, digits and white space (`\s` as a regular expression reads it: the Unicode spaces
 * and line terminators too).
 */
const isDense = (code: number): boolean => {
  if (code < 128)
    return !(
      (code >= 97 && code <= 122) ||
      (code >= 65 && code <= 90) ||
      (code >= 48 && code <= 57) ||
      code === 32 ||
      (code >= 9 && code <= 13)
    )
  return !(
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000 ||
    code === 0xfeff
  )
}

/**
 * About four characters per token for plain text, one per token for
 * punctuation, symbols and non-Latin characters (code, JSON, CJK). An
 * estimate, not a count: use a model's own counter where there is one.
 * Counted in one pass over the code units: a global `match` built an array of
 * every dense character (a planner run estimates about 300 texts).
 */
export const estimateText = (text: string): number => estimateOf(text.length, denseUnits(text))

/**
 * `estimateText` of the texts joined, without joining them: the estimate is made of the code
 * units' counts, which add up across the seams (counting a joined string made a flat copy of it).
 */
export const estimateJoined = (texts: ReadonlyArray<string>): number => {
  let length = 0
  let dense = 0
  for (let i = 0; i < texts.length; i++) {
    const text = texts[i] as string
    length += text.length
    dense += denseUnits(text)
  }
  return estimateOf(length, dense)
}

const denseUnits = (text: string): number => {
  let count = 0
  for (let i = 0; i < text.length; i++) if (isDense(text.charCodeAt(i))) count++
  return count
}

const estimateOf = (length: number, dense: number): number =>
  length === 0 ? 0 : Math.ceil((length - dense) / 4 + dense)

/** The default counter for models without a tokenizer: `estimateText` per text. */
export const estimate: TokenCounter = make({
  name: "estimate",
  exact: false,
  countText: estimateText,
  countJoined: estimateJoined
})
