/**
 * Compaction: a long session's older turns, summarised by the model.
 *
 * A session's history only grows; a model's context window does not. When
 * what a turn would send passes a token budget, the oldest turns are
 * summarised by the model into one system message that is committed to the
 * session like any turn, with a link to what it stands for (how many stored
 * messages, the first and last one's ids, the index the kept tail starts at).
 * Nothing is deleted: the originals stay in the store, `Session.context()`
 * still shows all of them, and `sessions show` / exports print them. What an
 * agent sees (`Session.transactionContext`) is the *compacted view*: the
 * latest summary, then the messages from its `keepFrom` on, without older
 * summaries (the latest one already covers them).
 *
 * The kept tail always starts at a user message, so a tool call is never
 * separated from its result. Token counts come from a `TokenCounter`: a
 * model's own tokenizer where there is one (the OpenAI adapter's), else core's
 * estimate, and the summary records which was used.
 *
 * The window views of core (`context.window(n)` in `prepareContext`) stay the
 * way to bound what an agent sees without a model call; compaction is for
 * keeping what was said, in fewer tokens.
 */
import { type ChatModel, ConversationContext, Message, TokenCounter } from "@noema/core"
import { Effect, Schema } from "effect"

// ---------------------------------------------------------------------------
// The summary message
// ---------------------------------------------------------------------------

/** The metadata key under which a summary message records what it replaced. */
export const metadataKey = "compaction"

/** What a summary stands for, kept in its metadata (`metadata.compaction`). */
export const SummaryInfo = Schema.Struct({
  /** Index, in the stored history, of the first message kept after the summary. */
  keepFrom: Schema.Number,
  /** How many stored messages the summary replaces (those before `keepFrom`, older summaries included). */
  replaced: Schema.Number,
  /** Ids of the first and last message it replaces, when they have ids. */
  firstId: Schema.optionalKey(Schema.String),
  lastId: Schema.optionalKey(Schema.String),
  /** Tokens of the compacted view before and after, as counted by `counter`. */
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  /** The counter's name, and whether it was the model's own tokenizer. */
  counter: Schema.String,
  exact: Schema.Boolean,
  /** The model that wrote the summary. */
  model: Schema.String
})
export type SummaryInfo = typeof SummaryInfo.Type

const decodeInfo = Schema.decodeUnknownOption(SummaryInfo)

/** What a summary message replaced, or `undefined` for any other message. */
export const summaryOf = (message: Message.Message): SummaryInfo | undefined => {
  if (message.role !== "system" || message.metadata === undefined) return undefined
  const value = message.metadata[metadataKey]
  if (value === undefined) return undefined
  const decoded = decodeInfo(value)
  return decoded._tag === "Some" ? decoded.value : undefined
}

export const isSummary = (message: Message.Message): boolean => summaryOf(message) !== undefined

/** The position of the latest summary in `history` (searching from the end), or -1. */
export const latestSummary = (history: ConversationContext.ConversationContext): number => {
  for (let index = history.length - 1; index >= 0; index--) {
    if (isSummary(history.at(index) as Message.Message)) return index
  }
  return -1
}

/**
 * The positions in `history` of the compacted view's messages, in order: the
 * summary at `summaryIndex`, then those from its `keepFrom` on that are not
 * summaries; without a summary, every position.
 */
export const viewPositions = (
  history: ConversationContext.ConversationContext,
  summaryIndex: number
): Array<number> => {
  const info = summaryIndex < 0 ? undefined : summaryOf(history.at(summaryIndex) as Message.Message)
  if (info === undefined) return Array.from({ length: history.length }, (_, index) => index)
  const positions = [summaryIndex]
  for (let index = info.keepFrom; index < history.length; index++) {
    if (index !== summaryIndex && !isSummary(history.at(index) as Message.Message)) positions.push(index)
  }
  return positions
}

/**
 * What an agent sees of `history` once compacted: the latest summary (at
 * `summaryIndex`, see `latestSummary`), then the stored messages from its
 * `keepFrom` on, without summaries. A live view: messages committed after the
 * summary show up in it. Without a summary, `history` itself.
 */
export const view = (
  history: ConversationContext.ConversationContext,
  summaryIndex: number = latestSummary(history)
): ConversationContext.ConversationContext => {
  if (summaryIndex < 0) return history
  const summary = history.at(summaryIndex) as Message.Message
  const info = summaryOf(summary)
  if (info === undefined) return history
  // Between `keepFrom` and the summary: a fixed stretch (the history only grows), copied once.
  const kept: Array<Message.Message> = []
  for (let index = info.keepFrom; index < summaryIndex; index++) {
    const message = history.at(index) as Message.Message
    if (!isSummary(message)) kept.push(message)
  }
  return ConversationContext.concat(
    ConversationContext.of(summary),
    kept,
    ConversationContext.filter(history.skip(summaryIndex + 1), (message) => !isSummary(message))
  )
}

// ---------------------------------------------------------------------------
// Planning
// ---------------------------------------------------------------------------

export interface Options {
  /**
   * Tokens a turn may send (system prompt and the compacted history) before
   * the history is compacted. Leave room for the model's answer.
   */
  readonly budget: number
  /**
   * Tokens of recent history kept word for word after a compaction; older
   * turns are summarised. Default: a third of `budget`. The latest turn is
   * always kept whole, even when it alone is larger.
   */
  readonly keepTokens?: number
  /** Counts tokens; default core's `TokenCounter.estimate` (an estimate, recorded as such). */
  readonly counter?: TokenCounter.TokenCounter
  /** The summariser's instructions, replacing the default ones. */
  readonly instructions?: string
  /** The summary's length limit, in tokens of the model's answer (default 1,000). */
  readonly maxSummaryTokens?: number
}

/** What a compaction would do: summarise `replaced`, keep the stored history from `keepFrom`. */
export interface Plan {
  /** The messages of the compacted view to summarise (an older summary first, if there is one). */
  readonly replaced: ReadonlyArray<Message.Message>
  /** Index in the stored history of the first message kept. */
  readonly keepFrom: number
  /** How many stored messages come before `keepFrom`. */
  readonly replacedStored: number
  readonly firstId: string | undefined
  readonly lastId: string | undefined
  readonly tokensBefore: number
}

/** Why nothing was compacted. */
export type Skipped =
  | { readonly _tag: "WithinBudget"; readonly tokens: number; readonly budget: number }
  | { readonly _tag: "NothingToSummarise"; readonly tokens: number }
  /** The last turn left tool calls waiting for approval: the history ends unanswered, so it is not cut now. */
  | { readonly _tag: "WaitingForApproval" }

/**
 * Each message's tokens, remembered per counter: messages are immutable and a
 * session keeps the same objects, so a long history is tokenised once, not
 * before every turn.
 */
const counted = new WeakMap<TokenCounter.TokenCounter, WeakMap<Message.Message, number>>()

const tokensOf = (counter: TokenCounter.TokenCounter, message: Message.Message): number => {
  let cache = counted.get(counter)
  if (cache === undefined) {
    cache = new WeakMap()
    counted.set(counter, cache)
  }
  let tokens = cache.get(message)
  if (tokens === undefined) {
    tokens = counter.countMessages([message]) - TokenCounter.perRequestOverhead
    cache.set(message, tokens)
  }
  return tokens
}

const defaultKeep = (options: Options): number => options.keepTokens ?? Math.floor(options.budget / 3)

/**
 * Where to cut `history` (the stored messages; `system` is the session's
 * prompt, counted but never summarised): the earliest user message of the
 * compacted view whose tail fits in `keepTokens`, or the latest user message
 * when even the last turn does not. `force` plans even within the budget.
 */
export const plan = (
  history: ConversationContext.ConversationContext,
  options: Options & { readonly system?: string | undefined; readonly force?: boolean }
): Plan | Skipped => {
  const counter = options.counter ?? TokenCounter.estimate
  const positions = viewPositions(history, latestSummary(history))
  const messages = positions.map((index) => history.at(index) as Message.Message)
  const systemTokens =
    options.system === undefined ? 0 : counter.countMessages([Message.system(options.system)])
  const perMessage = messages.map((message) => tokensOf(counter, message))
  const tokens =
    systemTokens + perMessage.reduce((sum, value) => sum + value, 0) + TokenCounter.perRequestOverhead
  if (tokens <= options.budget && options.force !== true) {
    return { _tag: "WithinBudget", tokens, budget: options.budget }
  }
  const keep = defaultKeep(options)
  // Walk back over turns (each starts at a user message), keeping while the tail fits.
  let cut = -1
  let tail = 0
  for (let index = messages.length - 1; index > 0; index--) {
    tail += perMessage[index] as number
    if ((messages[index] as Message.Message).role !== "user") continue
    if (cut === -1 || tail <= keep) cut = index
    if (tail > keep) break
  }
  if (cut <= 0) return { _tag: "NothingToSummarise", tokens }
  const keepFrom = positions[cut] as number
  const first = history.at(0)
  const last = history.at(keepFrom - 1)
  return {
    replaced: messages.slice(0, cut),
    keepFrom,
    replacedStored: keepFrom,
    firstId: first?.id,
    lastId: last?.id,
    tokensBefore: tokens
  }
}

// ---------------------------------------------------------------------------
// Summarising
// ---------------------------------------------------------------------------

export const defaultInstructions = [
  "You compact a conversation between a user and an AI assistant so the assistant can continue it.",
  "Write a summary that keeps everything needed to go on: the user's goals and preferences, facts",
  "and decisions established, names, numbers, file paths and identifiers, what tools were used and",
  "what they returned, questions still open and what the assistant was about to do. Leave out",
  "pleasantries and repetition. Write in the conversation's language, in plain prose or short",
  "bullet points, without a preamble."
].join(" ")

/** The summary message's text: what it is, then the model's summary. */
export const summaryText = (replaced: number, summary: string): string =>
  `Summary of the earlier conversation (${replaced} messages, kept in the session's store):\n\n${summary.trim()}`

/** A message as a transcript entry for the summariser (roles as words, tool calls and results spelled out). */
const transcriptEntry = (message: Message.Message): string => {
  switch (message.role) {
    case "system":
      return isSummary(message) ? message.content : `System: ${message.content}`
    case "user":
      return `User: ${Message.text(message)}`
    case "tool":
      return `Tool result (${message.name}${message.isError ? ", error" : ""}): ${message.content}`
    case "assistant": {
      const lines: Array<string> = []
      const text = Message.text(message)
      if (text.length > 0) lines.push(`Assistant: ${text}`)
      if (message.refusal !== undefined) lines.push(`Assistant refused: ${message.refusal}`)
      for (const call of message.toolCalls ?? [])
        lines.push(`Assistant called ${call.name}(${call.arguments})`)
      return lines.join("\n")
    }
  }
}

export const transcript = (messages: ReadonlyArray<Message.Message>): string =>
  messages
    .map(transcriptEntry)
    .filter((entry) => entry.length > 0)
    .join("\n\n")

export class CompactionError extends Schema.TaggedError<CompactionError>()("CompactionError", {
  message: Schema.String
}) {}

/**
 * Asks `model` for a summary of `plan.replaced` and returns the summary
 * message to commit (not yet committed): a system message whose metadata
 * (`compaction`) links it to what it replaced. An empty summary is a
 * `CompactionError`; the model's failures are its own typed errors.
 */
export const summarise = (
  model: ChatModel.Service,
  compaction: Plan,
  options: Options & { readonly system?: string | undefined }
): Effect.Effect<Message.SystemMessage, ChatModel.ChatModelError | CompactionError> =>
  Effect.gen(function* () {
    const counter = options.counter ?? TokenCounter.estimate
    const response = yield* model.complete({
      messages: [
        Message.system(options.instructions ?? defaultInstructions),
        Message.user(`The conversation so far:\n\n${transcript(compaction.replaced)}`)
      ],
      maxTokens: options.maxSummaryTokens ?? 1_000
    })
    const text = response.text.trim()
    if (text.length === 0) {
      return yield* Effect.fail(
        new CompactionError({ message: `${model.model} returned an empty summary; nothing was compacted` })
      )
    }
    const content = summaryText(compaction.replacedStored, text)
    const replacedTokens = counter.countMessages(compaction.replaced) - TokenCounter.perRequestOverhead
    const summaryTokens = counter.countMessages([Message.system(content)]) - TokenCounter.perRequestOverhead
    const info: SummaryInfo = {
      keepFrom: compaction.keepFrom,
      replaced: compaction.replacedStored,
      ...(compaction.firstId !== undefined && { firstId: compaction.firstId }),
      ...(compaction.lastId !== undefined && { lastId: compaction.lastId }),
      tokensBefore: compaction.tokensBefore,
      tokensAfter: compaction.tokensBefore - replacedTokens + summaryTokens,
      counter: counter.name,
      exact: counter.exact,
      model: response.model ?? model.model
    }
    return Message.system(content, { metadata: { [metadataKey]: info } })
  })
