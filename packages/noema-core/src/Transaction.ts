/**
 * Transaction: messages of a turn that are not committed yet.
 *
 * A turn's messages (the user's input, the agent's output) collect here; the
 * session then commits them all at once or rolls them all back. A transaction
 * is finished exactly once: after `commit` or `rollback` any use fails with a
 * `TransactionClosedError`. A transaction left unfinished is reported (when
 * disposed with `using`, when its Effect scope closes, or when it is
 * garbage-collected), never dropped in silence.
 */
import { Effect, Schema, type Scope } from "effect"
import type { ConversationContext } from "./ConversationContext.js"
import * as Context from "./ConversationContext.js"
import type { Message } from "./Message.js"

// ---------------------------------------------------------------------------
// Errors and reports
// ---------------------------------------------------------------------------

export class TransactionClosedError extends Schema.TaggedError<TransactionClosedError>()(
  "TransactionClosedError",
  {
    transactionId: Schema.String,
    state: Schema.Literals(["committed", "rolled-back"]),
    operation: Schema.String
  }
) {
  override get message(): string {
    return `Cannot ${this.operation}: transaction ${this.transactionId} was already ${this.state}`
  }
}

export interface UnfinishedReport {
  readonly transactionId: string
  /** How many messages were pending when it was found unfinished. */
  readonly pendingCount: number
  /** How it was found: disposed (`using` / scope close) or garbage-collected. */
  readonly detectedBy: "dispose" | "garbage-collection"
}

export type UnfinishedReporter = (report: UnfinishedReport) => void

const defaultReporter: UnfinishedReporter = (report) => {
  console.warn(
    `[noema] transaction ${report.transactionId} was never committed or rolled back ` +
      `(${report.pendingCount} pending message(s) discarded, found by ${report.detectedBy})`
  )
}

let globalReporter: UnfinishedReporter = defaultReporter

/** Where unfinished transactions are reported by default (console.warn). Returns the previous reporter. */
export const setUnfinishedReporter = (reporter: UnfinishedReporter): UnfinishedReporter => {
  const previous = globalReporter
  globalReporter = reporter
  return previous
}

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export type State = "open" | "committed" | "rolled-back"

// The state lives apart from the Transaction object so the GC registry can
// hold it without keeping the transaction itself alive.
interface Internal {
  readonly id: string
  readonly messages: Array<Message>
  state: State
  readonly reporter: UnfinishedReporter | undefined
}

const registry = new FinalizationRegistry<Internal>((internal) => {
  if (internal.state === "open") {
    ;(internal.reporter ?? globalReporter)({
      transactionId: internal.id,
      pendingCount: internal.messages.length,
      detectedBy: "garbage-collection"
    })
  }
})

let counter = 0

export class Transaction implements Disposable {
  readonly #internal: Internal
  readonly #pending: ConversationContext

  constructor(options?: { readonly id?: string; readonly onUnfinished?: UnfinishedReporter }) {
    this.#internal = {
      id: options?.id ?? `tx-${Date.now().toString(36)}-${(counter++).toString(36)}`,
      messages: [],
      state: "open",
      reporter: options?.onUnfinished
    }
    this.#pending = Context.fromArray(this.#internal.messages)
    registry.register(this, this.#internal, this)
  }

  get id(): string {
    return this.#internal.id
  }

  get state(): State {
    return this.#internal.state
  }

  get isOpen(): boolean {
    return this.#internal.state === "open"
  }

  #ensureOpen(operation: string): void {
    const state = this.#internal.state
    if (state !== "open") {
      throw new TransactionClosedError({ transactionId: this.#internal.id, state, operation })
    }
  }

  add(message: Message): this {
    this.#ensureOpen("add")
    this.#internal.messages.push(message)
    return this
  }

  extend(messages: Iterable<Message>): this {
    this.#ensureOpen("extend")
    for (const message of messages) this.#internal.messages.push(message)
    return this
  }

  /** The pending messages, as a live read-only view (no copy). */
  get pending(): ConversationContext {
    this.#ensureOpen("read pending messages")
    return this.#pending
  }

  /** Finishes the transaction and hands over its messages. */
  commit(): ReadonlyArray<Message> {
    this.#ensureOpen("commit")
    this.#finish("committed")
    // Hand the messages over and empty the live buffer: a pending view taken
    // earlier (e.g. inside a session's "committed + pending" context) must not
    // show them a second time next to the history they were committed to.
    const messages = this.#internal.messages.slice()
    this.#internal.messages.length = 0
    return messages
  }

  /** Finishes the transaction, discarding its messages. */
  rollback(): void {
    this.#ensureOpen("roll back")
    this.#finish("rolled-back")
    this.#internal.messages.length = 0
  }

  #finish(state: "committed" | "rolled-back"): void {
    this.#internal.state = state
    registry.unregister(this)
  }

  /** `using tx = Transaction.make()`: an unfinished transaction is reported and rolled back. */
  [Symbol.dispose](): void {
    if (this.#internal.state !== "open") return
    const pendingCount = this.#internal.messages.length
    this.rollback()
    ;(this.#internal.reporter ?? globalReporter)({
      transactionId: this.#internal.id,
      pendingCount,
      detectedBy: "dispose"
    })
  }
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const make = (options?: {
  readonly id?: string
  readonly onUnfinished?: UnfinishedReporter
}): Transaction => new Transaction(options)

/**
 * A transaction tied to the current scope: if the scope closes while it is
 * still open (the body failed, was interrupted, or forgot), it is rolled back
 * and reported.
 */
export const scoped = (options?: {
  readonly id?: string
  readonly onUnfinished?: UnfinishedReporter
}): Effect.Effect<Transaction, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => new Transaction(options)),
    (transaction) => Effect.sync(() => transaction[Symbol.dispose]())
  )

export const isTransaction = (value: unknown): value is Transaction => value instanceof Transaction
