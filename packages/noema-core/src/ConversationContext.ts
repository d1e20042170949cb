/**
 * ConversationContext: a read-only view over a conversation's messages.
 *
 * Agents read history through this interface and cannot change it. Views
 * compose without copying: a window (last N), a filter (a predicate, e.g.
 * without system messages) and a concatenation (system prompt + history +
 * pending) all read through to the messages underneath, so building one costs
 * O(1) and reading it costs O(what it shows), not O(history). A view is live:
 * it reflects its source as the source is when the view is read.
 */
import { dual } from "effect/Function"
import type { Message, SystemMessage } from "./Message.js"
import * as Messages from "./Message.js"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export interface ConversationContext extends Iterable<Message> {
  /** Number of messages in the view. O(1) for array, window and concatenated views. */
  readonly length: number
  readonly isEmpty: boolean
  /**
   * The message at `index` (negative counts from the end), or `undefined`.
   * O(1) on indexed views; a filtered view scans its source.
   */
  at(index: number): Message | undefined
  /** The last message, if any. */
  readonly last: Message | undefined
  /** True when `at` is O(1) (array, window over indexed, concatenation of indexed). */
  readonly indexed: boolean
  /** The last `count` messages (a view). */
  window(count: number): ConversationContext
  /** All but the first `count` messages (a view; live: it grows as its source does). */
  skip(count: number): ConversationContext
  /** Only the messages matching `predicate` (a view). */
  filter(predicate: (message: Message) => boolean): ConversationContext
  /** This view followed by `others` (a view). */
  concat(...others: ReadonlyArray<ConversationContext | ReadonlyArray<Message>>): ConversationContext
  /** A copy of the messages as an array (the only operation that copies). */
  toArray(): Array<Message>
}

// ---------------------------------------------------------------------------
// Implementations (views share one base so every view has the combinators)
// ---------------------------------------------------------------------------

const TypeId: unique symbol = Symbol.for("@noema/core/ConversationContext")

abstract class Base implements ConversationContext {
  readonly [TypeId] = TypeId
  abstract readonly length: number
  abstract readonly indexed: boolean
  abstract at(index: number): Message | undefined
  abstract [Symbol.iterator](): Iterator<Message>

  get isEmpty(): boolean {
    return this.length === 0
  }
  get last(): Message | undefined {
    return this.at(-1)
  }
  window(count: number): ConversationContext {
    return windowView(this, count)
  }
  skip(count: number): ConversationContext {
    return skipView(this, count)
  }
  filter(predicate: (message: Message) => boolean): ConversationContext {
    return new FilterView(this, predicate)
  }
  concat(...others: ReadonlyArray<ConversationContext | ReadonlyArray<Message>>): ConversationContext {
    return concatAll([this, ...others.map(from)])
  }
  toArray(): Array<Message> {
    return Array.from(this)
  }
  toJSON(): unknown {
    return this.toArray()
  }
}

const normaliseIndex = (index: number, length: number): number => (index < 0 ? length + index : index)

// Every view keeps what it reads through in `#private` fields: a view's public
// surface reaches no array (nor any other view), so nothing can be pushed into
// the history it shows.

class ArrayView extends Base {
  readonly indexed = true
  readonly #messages: ReadonlyArray<Message>
  constructor(messages: ReadonlyArray<Message>) {
    super()
    this.#messages = messages
  }
  get length(): number {
    return this.#messages.length
  }
  at(index: number): Message | undefined {
    const messages = this.#messages
    const i = normaliseIndex(index, messages.length)
    return i >= 0 && i < messages.length ? messages[i] : undefined
  }
  [Symbol.iterator](): Iterator<Message> {
    return this.#messages[Symbol.iterator]()
  }
}

/** The messages of a source from a start that depends on its length (a window, a skip) to its end. */
class TailView extends Base {
  readonly #source: ConversationContext
  readonly #start: (sourceLength: number) => number
  constructor(source: ConversationContext, start: (sourceLength: number) => number) {
    super()
    this.#source = source
    this.#start = start
  }
  get indexed(): boolean {
    return this.#source.indexed
  }
  get length(): number {
    const sourceLength = this.#source.length
    return sourceLength - this.#start(sourceLength)
  }
  at(index: number): Message | undefined {
    const sourceLength = this.#source.length
    const start = this.#start(sourceLength)
    const length = sourceLength - start
    const i = normaliseIndex(index, length)
    return i >= 0 && i < length ? this.#source.at(start + i) : undefined
  }
  *[Symbol.iterator](): Iterator<Message> {
    const source = this.#source
    const sourceLength = source.length
    const start = this.#start(sourceLength)
    if (source.indexed) {
      for (let i = start; i < sourceLength; i++) yield source.at(i) as Message
      return
    }
    // A non-indexed source (a filter) can only be walked from the start.
    let i = 0
    for (const message of source) {
      if (i++ >= start) yield message
    }
  }
}

const checkCount = (what: string, count: number): void => {
  if (!Number.isInteger(count) || count < 0) {
    throw new RangeError(`A ${what} must be a non-negative integer, got ${count}`)
  }
}

/** The last `count` messages of `source`. */
const windowView = (source: ConversationContext, count: number): ConversationContext => {
  checkCount("window size", count)
  return new TailView(source, (length) => Math.max(0, length - count))
}

/** All but the first `count` messages of `source`. */
const skipView = (source: ConversationContext, count: number): ConversationContext => {
  checkCount("skip count", count)
  return new TailView(source, (length) => Math.min(count, length))
}

class FilterView extends Base {
  readonly indexed = false
  readonly #source: ConversationContext
  readonly #predicate: (message: Message) => boolean
  constructor(source: ConversationContext, predicate: (message: Message) => boolean) {
    super()
    this.#source = source
    this.#predicate = predicate
  }
  get length(): number {
    const predicate = this.#predicate
    let count = 0
    for (const message of this.#source) if (predicate(message)) count++
    return count
  }
  override get isEmpty(): boolean {
    const predicate = this.#predicate
    for (const message of this.#source) if (predicate(message)) return false
    return true
  }
  at(index: number): Message | undefined {
    const source = this.#source
    const predicate = this.#predicate
    if (index < 0) {
      // Walk backwards over an indexed source so `last` stays cheap on long histories.
      if (source.indexed) {
        let seen = 0
        for (let i = source.length - 1; i >= 0; i--) {
          const message = source.at(i) as Message
          if (predicate(message) && --seen === index) return message
        }
        return undefined
      }
      return this.toArray().at(index)
    }
    let i = 0
    for (const message of source) {
      if (predicate(message) && i++ === index) return message
    }
    return undefined
  }
  *[Symbol.iterator](): Iterator<Message> {
    const predicate = this.#predicate
    for (const message of this.#source) if (predicate(message)) yield message
  }
}

class ConcatView extends Base {
  readonly #parts: ReadonlyArray<ConversationContext>
  private constructor(parts: ReadonlyArray<ConversationContext>) {
    super()
    this.#parts = parts
  }
  /** The concatenation of `parts`, nested concatenations flattened (so a turn-by-turn build-up stays one level deep). */
  static of(parts: ReadonlyArray<ConversationContext>): ConversationContext {
    const flat: Array<ConversationContext> = []
    for (const part of parts) {
      if (part instanceof ConcatView) flat.push(...part.#parts)
      else if (part !== emptyView) flat.push(part)
    }
    if (flat.length === 0) return emptyView
    if (flat.length === 1) return flat[0] as ConversationContext
    return new ConcatView(flat)
  }
  get indexed(): boolean {
    return this.#parts.every((part) => part.indexed)
  }
  get length(): number {
    let length = 0
    for (const part of this.#parts) length += part.length
    return length
  }
  at(index: number): Message | undefined {
    let i = normaliseIndex(index, index < 0 ? this.length : 0)
    if (i < 0) return undefined
    for (const part of this.#parts) {
      const length = part.length
      if (i < length) return part.at(i)
      i -= length
    }
    return undefined
  }
  *[Symbol.iterator](): Iterator<Message> {
    for (const part of this.#parts) yield* part
  }
}

const emptyView: ConversationContext = new ArrayView([])

const concatAll = (parts: ReadonlyArray<ConversationContext>): ConversationContext => ConcatView.of(parts)

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const empty: ConversationContext = emptyView

/** A view over an array, without copying it. Later changes to the array are visible. */
export const fromArray = (messages: ReadonlyArray<Message>): ConversationContext => new ArrayView(messages)

export const of = (...messages: ReadonlyArray<Message>): ConversationContext => new ArrayView(messages)

export const isConversationContext = (value: unknown): value is ConversationContext =>
  typeof value === "object" && value !== null && TypeId in value

/** A context as is, or a view over an array of messages. */
export const from = (input: ConversationContext | ReadonlyArray<Message>): ConversationContext =>
  isConversationContext(input) ? input : new ArrayView(input as ReadonlyArray<Message>)

// ---------------------------------------------------------------------------
// Combinators (data-first or pipeable)
// ---------------------------------------------------------------------------

/** The last `count` messages. */
export const window: {
  (count: number): (self: ConversationContext) => ConversationContext
  (self: ConversationContext, count: number): ConversationContext
} = dual(2, windowView)

/** All but the first `count` messages. */
export const skip: {
  (count: number): (self: ConversationContext) => ConversationContext
  (self: ConversationContext, count: number): ConversationContext
} = dual(2, skipView)

export const filter: {
  (predicate: (message: Message) => boolean): (self: ConversationContext) => ConversationContext
  (self: ConversationContext, predicate: (message: Message) => boolean): ConversationContext
} = dual(
  2,
  (self: ConversationContext, predicate: (message: Message) => boolean) => new FilterView(self, predicate)
)

const notSystem = (message: Message) => message.role !== "system"

/** Everything but system messages. */
export const withoutSystem = (self: ConversationContext): ConversationContext =>
  new FilterView(self, notSystem)

export const concat = (
  ...parts: ReadonlyArray<ConversationContext | ReadonlyArray<Message>>
): ConversationContext => concatAll(parts.map(from))

/** The context followed by more messages. */
export const append: (
  ...messages: ReadonlyArray<Message>
) => (self: ConversationContext) => ConversationContext =
  (...messages) =>
  (self) =>
    concatAll([self, new ArrayView(messages)])

/**
 * The usual shape of what a model sees: an optional system prompt, the
 * history, then messages not yet committed. Nothing is copied.
 */
export const compose = (options: {
  readonly system?: string | SystemMessage | undefined
  readonly history?: ConversationContext | ReadonlyArray<Message>
  readonly pending?: ConversationContext | ReadonlyArray<Message>
}): ConversationContext => {
  const parts: Array<ConversationContext> = []
  if (options.system !== undefined) {
    parts.push(
      new ArrayView([typeof options.system === "string" ? Messages.system(options.system) : options.system])
    )
  }
  if (options.history !== undefined) parts.push(from(options.history))
  if (options.pending !== undefined) parts.push(from(options.pending))
  return concatAll(parts)
}

export const toArray = (self: Iterable<Message>): Array<Message> => Array.from(self)

/**
 * Why `messages` is not a history a model may be sent, or none: each tool
 * result must follow the assistant message that made its call (only other
 * results between), and every call must have its result before the next
 * message and at the end. Sessions, agents and the runtime keep this true.
 */
export const problems = (messages: Iterable<Message>): Array<string> => {
  const found: Array<string> = []
  let open = new Set<string>()
  let index = 0
  for (const message of messages) {
    if (message.role === "tool") {
      if (!open.delete(message.toolCallId)) {
        found.push(`message ${index}: the result of ${message.toolCallId} does not follow its call`)
      }
    } else {
      if (open.size > 0)
        found.push(`message ${index}: calls ${[...open].join(", ")} have no result before it`)
      open = new Set(message.role === "assistant" ? (message.toolCalls ?? []).map((call) => call.id) : [])
    }
    index++
  }
  if (open.size > 0) found.push(`the end: calls ${[...open].join(", ")} have no result`)
  return found
}

/** The last message with the given role, searching backwards. */
export const lastOfRole = <R extends Message["role"]>(
  self: ConversationContext,
  role: R
): Extract<Message, { role: R }> | undefined => {
  if (self.indexed) {
    for (let i = self.length - 1; i >= 0; i--) {
      const message = self.at(i) as Message
      if (message.role === role) return message as Extract<Message, { role: R }>
    }
    return undefined
  }
  let found: Message | undefined
  for (const message of self) if (message.role === role) found = message
  return found as Extract<Message, { role: R }> | undefined
}
