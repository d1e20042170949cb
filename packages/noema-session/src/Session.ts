/**
 * Session: one conversation's committed history, and the way turns join it.
 *
 * A session handle loads the history once and keeps it in memory; agents read
 * it through read-only views that never copy it. A turn collects its messages
 * in a core `Transaction` (the user's input, then the agent's output) and the
 * session commits them to the store all at once, or not at all: a turn that
 * fails, is interrupted, or whose stream is abandoned leaves no trace. If
 * another handle committed to the same session first, the commit fails with
 * `SessionConflictError` instead of appending to a history the agent never saw.
 *
 * The session is the one home of its system prompt (kept in its metadata): every
 * turn puts it ahead of the history, and nothing else adds one. `turnStream`
 * says how a turn ended with its last event, `committed`, carrying what was
 * stored; a commit that fails ends the stream with its typed error.
 */
import {
  type Agent,
  Approval,
  type ChatModel,
  ConversationContext,
  Message,
  Tracing,
  Transaction
} from "@noema/core"
import { Clock, Effect, Exit, Stream } from "effect"
import * as Compaction from "./Compaction.js"
import {
  mergeMetadata,
  type SessionAlreadyExistsError,
  SessionConflictError,
  type SessionInfo,
  type SessionNotFoundError,
  SessionStore,
  type Service as SessionStoreService,
  type CreateOptions as StoreCreateOptions,
  type StoreError
} from "./SessionStore.js"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

/** The metadata key holding a session's system prompt. */
export const systemPromptKey = "systemPrompt"

/**
 * The metadata key listing the tool calls the last turn left waiting for
 * approval. Calls left without a result and not listed there (a turn stored
 * ahead, whose process died) were interrupted, not waiting.
 */
export const awaitingApprovalKey = "awaitingApproval"

export type CommitError =
  | SessionConflictError
  | SessionNotFoundError
  | StoreError
  | Transaction.TransactionClosedError

/** A turn's failures: the agent's, the commit's, and a compaction's before it (see `TurnOptions.compaction`). */
export type TurnError = Agent.AgentError | CommitError | ChatModel.ChatModelError | Compaction.CompactionError

/** The last event of a turn that was stored: exactly the messages the store now holds for it. */
export interface Committed {
  readonly type: "committed"
  /** The turn's messages as stored: the input, then the agent's output, each with `id` and `createdAt`. */
  readonly messages: ReadonlyArray<Message.Message>
}

/** Before a turn: older turns were summarised and the summary committed (see `TurnOptions.compaction`). */
export interface Compacted {
  readonly type: "compacted"
  /** The summary message as stored; `Compaction.summaryOf` reads what it replaced. */
  readonly summary: Message.Message
  readonly info: Compaction.SummaryInfo
}

/**
 * What `turnStream` emits: `compacted` if the history was compacted first, the
 * agent's events, then `committed` once the turn is stored.
 */
export type TurnEvent = Compacted | Agent.AgentEvent | Committed

/** How `compact` ended: a summary committed, or why there was nothing to do. */
export type CompactResult =
  | { readonly compacted: true; readonly summary: Message.Message; readonly info: Compaction.SummaryInfo }
  | { readonly compacted: false; readonly skipped: Compaction.Skipped }

export type CompactError = CommitError | ChatModel.ChatModelError | Compaction.CompactionError

export interface CompactOptions extends Compaction.Options {
  /** Compact even when the history is within the budget (e.g. a user's `/compact`). */
  readonly force?: boolean
}

export interface CreateOptions extends StoreCreateOptions {
  /** Kept in the session's metadata (its one home) and put ahead of the history in every turn. */
  readonly systemPrompt?: string
}

export interface TurnOptions {
  /**
   * Shapes what the agent sees, e.g. `(context) => context.window(200)` for a
   * long history. It receives system prompt + history + pending; keep it a view.
   * (There is no per-turn system prompt: the session's own is the one a turn
   * uses; change it with `setSystemPrompt`.)
   */
  readonly prepareContext?: (
    context: ConversationContext.ConversationContext
  ) => ConversationContext.ConversationContext
  /**
   * Cancels the turn while the agent runs: aborting it stops the agent (and its
   * model request) and the turn is rolled back, as if it had been interrupted.
   * Once the agent has finished the turn is being stored and aborting no longer
   * stops it: the commit runs to its end and the turn still reports it
   * (`turnStream`'s `committed` event, `turn`'s result). This is how a caller
   * cancels without the race that interrupting during the commit has: an
   * interrupted commit completes too, but its result never reaches the caller.
   */
  readonly signal?: AbortSignal
  /**
   * Before the agent runs, compacts the history if system prompt + compacted
   * history pass `budget` tokens: older turns are summarised by `model` (the
   * turn's own model unless given) and the summary is committed on its own
   * (see `Compaction`). A failed summary fails the turn; nothing of it is stored.
   */
  readonly compaction?: Compaction.Options & { readonly model?: ChatModel.Service }
  /**
   * What an interrupted `turnStream` leaves (default `"rollback"`: nothing).
   * `"keep-seen"` commits what already happened: the input, the complete
   * messages, the text streamed so far as an assistant message marked
   * `metadata.interrupted`, and for each tool call that started without a
   * result an error result saying it was interrupted and may have partially
   * run. A turn interrupted before anything was produced still leaves nothing.
   */
  readonly onInterrupt?: "rollback" | "keep-seen"
  /**
   * Store a tool call before it runs (`turnStream`): when the agent produces an
   * assistant message with tool calls, the turn so far is written to the store
   * at once, so a process killed while the tool runs leaves the call on record.
   * The turn still reads as one: the handle shows it when it ends, and a call
   * left without a result (the process died, the turn failed or was
   * interrupted) is answered "interrupted; may have partially run" (at once,
   * or before the next turn of any handle).
   */
  readonly checkpointToolCalls?: boolean
}

/** A turn's input: text (a user message), a message, or several messages (e.g. a runtime's context items). */
export type TurnInput = string | Message.Message | ReadonlyArray<Message.Message>

/** Decisions on waiting tool calls, by tool call id. */
export type Decisions = ReadonlyMap<string, Approval.Decision> | Readonly<Record<string, Approval.Decision>>

export interface Session {
  readonly id: string
  /** What the handle knows about the session (refreshed by its own commits and `reload`). */
  readonly info: SessionInfo
  readonly title: string | undefined
  readonly systemPrompt: string | undefined
  /** The committed history, all of it (summaries and what they replaced): a live, read-only view (no copy). */
  context(): ConversationContext.ConversationContext
  /**
   * What a turn's agent sees of the history: `context()` once compacted (the
   * latest summary, then what it kept and everything after); `context()` itself
   * when the session was never compacted. A live view.
   */
  compactedContext(): ConversationContext.ConversationContext
  /** A transaction for a turn; commit it with `commit` or discard it with `rollback`. */
  begin(): Transaction.Transaction
  /** What an agent sees during the turn: system prompt + compacted history + pending, all live views. */
  transactionContext(
    transaction: Transaction.Transaction,
    options?: TurnOptions
  ): ConversationContext.ConversationContext
  /**
   * Stores all of the transaction's messages, or none. Messages get an `id` and
   * `createdAt` if they have none. Whatever happens, the transaction is finished.
   */
  commit(transaction: Transaction.Transaction): Effect.Effect<ReadonlyArray<Message.Message>, CommitError>
  rollback(transaction: Transaction.Transaction): Effect.Effect<void>
  /**
   * Summarises older turns with `model` and commits the summary, if system
   * prompt + compacted history pass `options.budget` tokens (or always, with
   * `force`). The originals stay in the store; see `Compaction`.
   */
  compact(model: ChatModel.Service, options: CompactOptions): Effect.Effect<CompactResult, CompactError>
  /**
   * Adds `input` (text is a user message), runs the agent on the history plus
   * the turn so far and commits everything it produced. On failure or
   * interruption nothing is stored. Returns the turn's committed messages.
   */
  turn<R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    input: TurnInput,
    options?: TurnOptions
  ): Effect.Effect<ReadonlyArray<Message.Message>, TurnError, R>
  /**
   * `turn`, streaming the agent's events. When the agent is done the turn is
   * committed and the stream ends with a `committed` event holding the stored
   * messages; a commit that fails ends the stream with its `CommitError`
   * instead (e.g. `SessionConflictError`). Interrupting or abandoning the
   * stream before the commit rolls the turn back; an interruption landing
   * during the commit does not stop it (see `TurnOptions.signal`).
   */
  turnStream<R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    input: TurnInput,
    options?: TurnOptions
  ): Stream.Stream<TurnEvent, TurnError, R>
  /**
   * The tool calls the last turn left waiting for a person's approval (its
   * agent stopped at them; see core's `Approval`). Empty when nothing waits.
   */
  pendingApprovals(): ReadonlyArray<Message.ToolCall>
  /**
   * Goes on with a turn that stopped for approval: runs `agent` on the history
   * (no new input) with `decisions` for the waiting calls, by tool call id, and
   * commits what it produces (the calls' results, then the rest of the loop).
   * A call without a decision keeps waiting. Nothing waiting: nothing runs, `[]`.
   * (A new `turn` instead rejects what was waiting, so the history stays valid.)
   */
  resume<R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    decisions: Decisions,
    options?: TurnOptions
  ): Effect.Effect<ReadonlyArray<Message.Message>, TurnError, R>
  /** `resume`, streaming the agent's events; ends with `committed`, as `turnStream`. */
  resumeStream<R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    decisions: Decisions,
    options?: TurnOptions
  ): Stream.Stream<TurnEvent, TurnError, R>
  setTitle(title: string): Effect.Effect<SessionInfo, SessionNotFoundError | StoreError>
  /** Sets (or with `undefined` removes) the session's system prompt. */
  setSystemPrompt(prompt: string | undefined): Effect.Effect<SessionInfo, SessionNotFoundError | StoreError>
  /** Reads the session again from the store (after a conflict, to continue from what others committed). */
  reload(): Effect.Effect<void, SessionNotFoundError | StoreError>
  /** The session as JSON: its information and every message. */
  exportJson(): string
  /** The session as a Markdown transcript. */
  exportMarkdown(): string
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/** A handle on an existing session. */
export const open = (id: string): Effect.Effect<Session, SessionNotFoundError | StoreError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const stored = yield* store.load(id)
    return make(store, stored.info, stored.messages)
  })

/** A new session. */
export const create = (
  options: CreateOptions = {}
): Effect.Effect<
  Session,
  SessionAlreadyExistsError | SessionNotFoundError | SessionConflictError | StoreError,
  SessionStore
> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const { systemPrompt, ...storeOptions } = options
    const info = yield* store.create(
      systemPrompt === undefined
        ? storeOptions
        : { ...storeOptions, metadata: { ...storeOptions.metadata, [systemPromptKey]: systemPrompt } }
    )
    return make(store, info, [])
  })

/**
 * A new session that is stored with its first committed turn, not before:
 * until then it is in no list, and a process that stops before that commit
 * (killed, cancelled, failed) leaves nothing behind. The session and its first
 * turn are stored in one step (`SessionStore.create` with `messages`). A title
 * or prompt set before the first commit is stored with it. Its id is random.
 */
export const draft = (options: Omit<CreateOptions, "id"> = {}): Effect.Effect<Session, never, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const now = yield* Clock.currentTimeMillis
    const { systemPrompt, title, metadata } = options
    const info: SessionInfo = {
      id: crypto.randomUUID(),
      ...(title !== undefined && { title }),
      createdAt: now,
      updatedAt: now,
      messageCount: 0,
      metadata:
        systemPrompt === undefined ? { ...metadata } : { ...metadata, [systemPromptKey]: systemPrompt }
    }
    return make(store, info, [], { stored: false })
  })

/** A handle on the session `id`, created (with `options`) if it does not exist yet. */
export const openOrCreate = (
  id: string,
  options: Omit<CreateOptions, "id"> = {}
): Effect.Effect<Session, SessionNotFoundError | SessionConflictError | StoreError, SessionStore> =>
  open(id).pipe(
    Effect.catchTag("SessionNotFoundError", () =>
      // Someone may create it between our look and our create: then open theirs.
      create({ ...options, id }).pipe(Effect.catchTag("SessionAlreadyExistsError", () => open(id)))
    )
  )

// ---------------------------------------------------------------------------
// Implementation
// ---------------------------------------------------------------------------

const toInput = (input: TurnInput): ReadonlyArray<Message.Message> =>
  typeof input === "string"
    ? [Message.user(input)]
    : Array.isArray(input)
      ? input
      : [input as Message.Message]

/** The result a call gets when its turn was interrupted after it started. */
export const interruptedCallResult = (call: Message.ToolCall): Message.ToolMessage =>
  Message.toolResult({
    toolCallId: call.id,
    name: call.name,
    content: `The call of "${call.name}" was interrupted; it may have partially run.`,
    isError: true,
    metadata: { interrupted: true }
  })

/**
 * What an interrupted turn showed: its completed messages, the text streamed
 * since the last one as an assistant message marked `interrupted`, and an
 * "interrupted; may have partially run" result for every call that started
 * without an answer. Valid history: every call answered, in order.
 */
export const seenOfInterrupted = (
  produced: ReadonlyArray<Message.Message>,
  partialText: string
): Array<Message.Message> => {
  const seen: Array<Message.Message> = []
  const open = new Map<string, Message.ToolCall>()
  const closeCalls = () => {
    for (const call of open.values()) seen.push(interruptedCallResult(call))
    open.clear()
  }
  for (const message of produced) {
    if (message.role === "tool") open.delete(message.toolCallId)
    else closeCalls()
    seen.push(message)
    if (message.role === "assistant") for (const call of message.toolCalls ?? []) open.set(call.id, call)
  }
  closeCalls()
  if (partialText.length > 0) seen.push(Message.assistant(partialText, { metadata: { interrupted: true } }))
  return seen
}

/** Completes by interrupting once `signal` aborts (at once if it already has). */
const abortion = (signal: AbortSignal): Effect.Effect<never> =>
  Effect.callback<never>((resume) => {
    const onAbort = () => resume(Effect.interrupt)
    if (signal.aborted) onAbort()
    else signal.addEventListener("abort", onAbort, { once: true })
    return Effect.sync(() => signal.removeEventListener("abort", onAbort))
  })

const systemPromptOf = (info: SessionInfo): string | undefined => {
  const value = info.metadata[systemPromptKey]
  return typeof value === "string" ? value : undefined
}

/**
 * A transaction begun by a handle, carrying which handle (`owner`) and how much history it was
 * begun on. Kept on the transaction rather than in a `WeakMap` beside it: a turn per commit
 * would add an entry to the map each time, and V8's weak tables cost more than the commit's own
 * bookkeeping (measured ~2 us per turn).
 */
class HandleTransaction extends Transaction.Transaction {
  readonly owner: object
  readonly baseCount: number
  constructor(owner: object, baseCount: number) {
    super()
    this.owner = owner
    this.baseCount = baseCount
  }
}

/**
 * A handle over `messages` (which it takes over: they are its committed
 * history). `stored: false` makes a draft: the store has no such session yet,
 * and the first commit creates it with its turn (see `draft`).
 */
export const make = (
  store: SessionStoreService,
  initialInfo: SessionInfo,
  messages: Array<Message.Message>,
  options?: { readonly stored?: boolean }
): Session => {
  let info = initialInfo
  let stored = options?.stored ?? true
  const committed = messages
  const history = ConversationContext.fromArray(committed)
  // The latest summary's position, and the compacted view it gives (rebuilt only when it moves).
  let summaryIndex = Compaction.latestSummary(history)
  let compacted = Compaction.view(history, summaryIndex)
  const noteSummaries = (from: number) => {
    for (let index = committed.length - 1; index >= from; index--) {
      if (Compaction.isSummary(committed[index] as Message.Message)) {
        summaryIndex = index
        compacted = Compaction.view(history, summaryIndex)
        return
      }
    }
  }
  // Stamps the transactions this handle begins (see `HandleTransaction`).
  const owner: object = {}
  /** How much history `transaction` was begun on: committing it on top of more is a conflict. */
  const baseCount = (transaction: Transaction.Transaction): number =>
    transaction instanceof HandleTransaction && transaction.owner === owner
      ? transaction.baseCount
      : committed.length

  const transactionContext = (transaction: Transaction.Transaction, options?: TurnOptions) => {
    const composed = ConversationContext.compose({
      system: systemPromptOf(info),
      history: compacted,
      pending: transaction.pending
    })
    return options?.prepareContext === undefined ? composed : options.prepareContext(composed)
  }

  /** The turn to store: the pending messages, each given an id and a time if it has none. */
  const stamp = (pending: ConversationContext.ConversationContext, now: number): Array<Message.Message> => {
    const length = pending.length
    const stamped = new Array<Message.Message>(length)
    for (let index = 0; index < length; index++) {
      const message = pending.at(index) as Message.Message
      stamped[index] =
        message.id !== undefined && message.createdAt !== undefined
          ? message
          : { ...message, id: message.id ?? crypto.randomUUID(), createdAt: message.createdAt ?? now }
    }
    return stamped
  }

  const finish = (transaction: Transaction.Transaction) => {
    if (transaction.isOpen) transaction.rollback()
  }

  // What a transaction already wrote to the store ahead of its commit (stamped), by transaction.
  const storedAhead = new WeakMap<Transaction.Transaction, Array<Message.Message>>()

  /**
   * Writes `messages` (the transaction's pending messages, then what the agent
   * produced so far) to the store now, beyond what was written ahead before.
   * The handle's history does not change until the commit: the agent running
   * the turn must not meet its own output twice.
   */
  const storeAhead = (
    transaction: Transaction.Transaction,
    messages: ReadonlyArray<Message.Message>
  ): Effect.Effect<void, CommitError> =>
    Effect.uninterruptible(
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const prefix = storedAhead.get(transaction) ?? []
        const base = baseCount(transaction)
        if (base !== committed.length) {
          return Effect.fail(
            new SessionConflictError({
              sessionId: info.id,
              expectedMessageCount: base,
              actualMessageCount: committed.length
            })
          )
        }
        const fresh = stamp(ConversationContext.fromArray(messages).skip(prefix.length), now)
        if (fresh.length === 0) return Effect.void
        const write = stored ? store.append(info.id, base + prefix.length, fresh) : createWith(fresh)
        return Effect.map(write, (updated) => {
          stored = true
          info = updated
          storedAhead.set(transaction, [...prefix, ...fresh])
        })
      })
    )

  const commit = (
    transaction: Transaction.Transaction
  ): Effect.Effect<ReadonlyArray<Message.Message>, CommitError> => {
    const effect = commitUntraced(transaction)
    // The options as a function: built only when a tracer is installed, not on every commit.
    return Tracing.withSpan(effect, Tracing.SpanNames.commit, spanOptions, () =>
      Effect.tap(effect, (turn) => Effect.annotateCurrentSpan(Tracing.Attributes.messageCount, turn.length))
    )
  }

  const spanOptions = (): Tracing.SpanOptions => ({ attributes: { [Tracing.Attributes.sessionId]: info.id } })

  /** A turn's span also says where the turn begins in the history, so its trace and its messages meet. */
  const turnSpanOptions = (): Tracing.SpanOptions => ({
    attributes: {
      [Tracing.Attributes.sessionId]: info.id,
      [Tracing.Attributes.messageSeq]: committed.length
    }
  })

  const commitUntraced = (
    transaction: Transaction.Transaction
  ): Effect.Effect<ReadonlyArray<Message.Message>, CommitError> =>
    // Uninterruptible: once the store has the turn, the handle must record it too.
    Effect.uninterruptible(
      Effect.clockWith((clock): Effect.Effect<ReadonlyArray<Message.Message>, CommitError> => {
        const now = clock.currentTimeMillisUnsafe()
        if (!transaction.isOpen) {
          return Effect.fail(
            new Transaction.TransactionClosedError({
              transactionId: transaction.id,
              state: transaction.state as "committed" | "rolled-back",
              operation: "commit"
            })
          )
        }
        const base = baseCount(transaction)
        if (base !== committed.length) {
          finish(transaction)
          return Effect.fail(
            new SessionConflictError({
              sessionId: info.id,
              expectedMessageCount: base,
              actualMessageCount: committed.length
            })
          )
        }
        // Messages written ahead keep their ids; only the rest is stamped and written now.
        const ahead = storedAhead.get(transaction) ?? []
        const pending = transaction.pending
        const rest = stamp(ahead.length === 0 ? pending : pending.skip(ahead.length), now)
        const turn = ahead.length === 0 ? rest : [...ahead, ...rest]
        if (turn.length === 0) {
          transaction.commit()
          return Effect.succeed(turn)
        }
        const write =
          rest.length === 0
            ? Effect.succeed(info)
            : stored
              ? store.append(info.id, base + ahead.length, rest)
              : createWith(rest)
        return Effect.matchCauseEffect(write, {
          onFailure: (cause) => {
            finish(transaction)
            return Effect.failCause(cause)
          },
          onSuccess: (updated) => {
            stored = true
            transaction.commit()
            const from = committed.length
            for (let index = 0; index < turn.length; index++) committed.push(turn[index] as Message.Message)
            noteSummaries(from)
            info = updated
            return Effect.succeed(turn)
          }
        })
      })
    )

  const begin = (): Transaction.Transaction => new HandleTransaction(owner, committed.length)

  /** A draft's first commit: the session and its turn, stored in one step. */
  const createWith = (turn: ReadonlyArray<Message.Message>) =>
    store
      .create({
        id: info.id,
        ...(info.title !== undefined && { title: info.title }),
        metadata: info.metadata,
        messages: turn
      })
      // A random UUID that is already taken is nothing a caller could act on.
      .pipe(Effect.catchTag("SessionAlreadyExistsError", Effect.die))

  const updateInfo = (update: Parameters<SessionStoreService["updateMetadata"]>[1]) =>
    stored
      ? Effect.map(store.updateMetadata(info.id, update), (updated) => {
          info = updated
          return updated
        })
      : Effect.sync(() => {
          // A draft keeps its changes until its first commit stores them with it.
          info = {
            ...info,
            ...(update.title !== undefined && { title: update.title }),
            metadata: mergeMetadata(info.metadata, update.metadata)
          }
          return info
        })

  const compact: Session["compact"] = (model, options) =>
    Effect.suspend(() => {
      if (Approval.pendingCalls(history).length > 0) {
        return Effect.succeed<CompactResult>({ compacted: false, skipped: { _tag: "WaitingForApproval" } })
      }
      const system = systemPromptOf(info)
      const planned = Compaction.plan(history, { ...options, system })
      if ("_tag" in planned) return Effect.succeed<CompactResult>({ compacted: false, skipped: planned })
      return Effect.flatMap(Compaction.summarise(model, planned, { ...options, system }), (summary) => {
        const transaction = begin()
        transaction.add(summary)
        return Effect.map(commit(transaction), (stored): CompactResult => {
          const message = stored[0] as Message.Message
          return {
            compacted: true,
            summary: message,
            info: Compaction.summaryOf(message) as Compaction.SummaryInfo
          }
        })
      })
    })

  /** The compaction a turn asks for, before it begins; `undefined` when it asks for none. */
  const compactBeforeTurn = (model: ChatModel.Service, options: TurnOptions | undefined) => {
    const compaction = options?.compaction
    if (compaction === undefined) return undefined
    return compact(compaction.model ?? model, compaction)
  }

  const turnUntraced: Session["turn"] = (agent, model, input, options) => {
    const compaction = compactBeforeTurn(model, options)
    const run = turnAfterCompaction(agent, model, input, options)
    return compaction === undefined ? run : Effect.andThen(compaction, run)
  }

  /** The ids the session lists as waiting for approval; `undefined` when it keeps no list (older turns). */
  const awaitingIds = (): ReadonlyArray<string> | undefined => {
    const value = info.metadata[awaitingApprovalKey]
    return Array.isArray(value) ? value.filter((id): id is string => typeof id === "string") : undefined
  }

  /** The calls without a result at the end of the history that wait for approval (not interrupted ones). */
  const waitingForApproval = (): ReadonlyArray<Message.ToolCall> => {
    const calls = Approval.pendingCalls(history)
    const ids = awaitingIds()
    return ids === undefined ? calls : calls.filter((call) => ids.includes(call.id))
  }

  /**
   * A new turn's transaction: the input, after answering what the last turn
   * left without a result: rejected if it waited for approval (the user moved
   * on), "interrupted; may have partially run" if its turn never ended (stored
   * ahead, then the process died). Resuming (`input` undefined): nothing.
   */
  const beginTurn = (input: TurnInput | undefined) => {
    const transaction = begin()
    if (input !== undefined) {
      const waiting = new Set(waitingForApproval().map((call) => call.id))
      for (const call of Approval.pendingCalls(history)) {
        transaction.add(waiting.has(call.id) ? Approval.superseded(call) : interruptedCallResult(call))
      }
      transaction.extend(toInput(input))
    }
    return transaction
  }

  /**
   * Records which calls the turn left waiting for approval, when that changes.
   * `keepList`: write the (empty) list even where the session keeps none yet,
   * so a call stored ahead and left open reads as interrupted, not waiting.
   */
  const noteAwaiting = (ids: ReadonlyArray<string>, keepList = false) => {
    const current = awaitingIds()
    if (ids.length === 0 && current === undefined && !keepList) return Effect.void
    if (ids.length === 0 && current !== undefined && current.length === 0) return Effect.void
    if (current !== undefined && current.length === ids.length && ids.every((id) => current.includes(id)))
      return Effect.void
    return Effect.asVoid(updateInfo({ metadata: { [awaitingApprovalKey]: [...ids] } }))
  }

  const turnAfterCompaction = <R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    input: TurnInput | undefined,
    options: TurnOptions | undefined,
    approvals?: Approval.Service
  ): Effect.Effect<ReadonlyArray<Message.Message>, TurnError, R> =>
    Effect.suspend(() => {
      const transaction = beginTurn(input)
      const run = agent.execute(transactionContext(transaction, options), model)
      const execute =
        approvals === undefined ? run : Effect.provideService(run, Approval.Approvals, approvals)
      const signal = options?.signal
      return (signal === undefined ? execute : Effect.raceFirst(execute, abortion(signal))).pipe(
        Effect.flatMap((produced) => {
          transaction.extend(produced)
          return commit(transaction)
        }),
        Effect.onExit(() => Effect.sync(() => finish(transaction)))
      )
    })

  const turnStreamUntraced: Session["turnStream"] = (agent, model, input, options) => {
    const compaction = compactBeforeTurn(model, options)
    const run = turnStreamAfterCompaction(agent, model, input, options)
    if (compaction === undefined) return run
    const compactedEvent = Stream.flatMap(Stream.fromEffect(compaction), (result) =>
      result.compacted
        ? Stream.succeed<TurnEvent>({ type: "compacted", summary: result.summary, info: result.info })
        : Stream.empty
    )
    return Stream.concat(compactedEvent, run)
  }

  const turnStreamAfterCompaction = <R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    input: TurnInput | undefined,
    options: TurnOptions | undefined,
    approvals?: Approval.Service
  ): Stream.Stream<TurnEvent, TurnError, R> =>
    Stream.suspend(() => {
      const transaction = beginTurn(input)
      // The agent's output joins the transaction only once the agent is done, as in
      // `turn`: the agent's context is committed + pending, and an agent that reads
      // its context between steps must not meet its own output there as well.
      const produced: Array<Message.Message> = []
      // Text streamed since the last complete message: seen, if the turn is interrupted now.
      let partialText = ""
      // Calls the agent stopped at, waiting for approval.
      const awaiting: Array<string> = []
      const checkpoint = options?.checkpointToolCalls === true
      const stream = agent.executeStream(transactionContext(transaction, options), model)
      const agentEvents = (
        approvals === undefined ? stream : Stream.provideService(stream, Approval.Approvals, approvals)
      ).pipe(
        Stream.tap((event) => {
          if (event.type === "approval-request") awaiting.push(event.toolCall.id)
          if (event.type === "message") {
            produced.push(event.message)
            partialText = ""
            // A call is on record before it runs (the agent runs it after this event).
            if (checkpoint && Message.hasToolCalls(event.message)) {
              return Effect.andThen(
                storeAhead(transaction, [...transaction.pending, ...produced]),
                // Until the turn ends, nothing of it waits for approval: a call left open was interrupted.
                noteAwaiting([], true)
              )
            }
          } else if (event.type === "text-delta") partialText += event.delta
          return Effect.void
        })
      )
      // The signal cancels the agent only: once the commit begins, the turn is finished and reported.
      const signal = options?.signal
      const events = signal === undefined ? agentEvents : Stream.interruptWhen(agentEvents, abortion(signal))
      const commitProduced = Effect.suspend(() => {
        transaction.extend(produced)
        return Effect.tap(commit(transaction), () => noteAwaiting(awaiting))
      })
      // The commit is the stream's last step: a consumer that stops early never reaches it.
      const committedEvent = Stream.fromEffect(
        Effect.map(commitProduced, (messages): TurnEvent => ({ type: "committed", messages }))
      )
      const keepSeen = options?.onInterrupt === "keep-seen"
      return Stream.concat(events, committedEvent).pipe(
        Stream.onExit((exit) => {
          if (!transaction.isOpen) return Effect.void
          // Part of the turn is in the store already: it is closed there, its open calls answered.
          const ahead = storedAhead.get(transaction) !== undefined
          if (!ahead && (!keepSeen || !Exit.hasInterrupts(exit)))
            return Effect.sync(() => finish(transaction))
          // Interrupted: what was seen (and what started) is kept, honestly marked; nothing seen, nothing kept.
          const seen = seenOfInterrupted(produced, keepSeen && Exit.hasInterrupts(exit) ? partialText : "")
          if (seen.length === 0) return Effect.sync(() => finish(transaction))
          transaction.extend(seen)
          return Effect.ignore(commit(transaction))
        })
      )
    })

  const resumeUntraced = <R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    decisions: Decisions,
    options: TurnOptions | undefined
  ): Effect.Effect<ReadonlyArray<Message.Message>, TurnError, R> =>
    Effect.suspend(() =>
      Approval.pendingCalls(history).length === 0
        ? Effect.succeed([])
        : turnAfterCompaction(agent, model, undefined, options, Approval.fromDecisions(decisions))
    )

  const resumeStreamUntraced = <R>(
    agent: Agent.Agent<R>,
    model: ChatModel.Service,
    decisions: Decisions,
    options: TurnOptions | undefined
  ): Stream.Stream<TurnEvent, TurnError, R> =>
    Stream.suspend(() =>
      Approval.pendingCalls(history).length === 0
        ? Stream.succeed<TurnEvent>({ type: "committed", messages: [] })
        : turnStreamAfterCompaction(agent, model, undefined, options, Approval.fromDecisions(decisions))
    )

  const session: Session = {
    get id() {
      return info.id
    },
    get info() {
      return info
    },
    get title() {
      return info.title
    },
    get systemPrompt() {
      return systemPromptOf(info)
    },
    context: () => history,
    compactedContext: () => compacted,
    begin,
    transactionContext,
    commit,
    rollback: (transaction) => Effect.sync(() => finish(transaction)),
    compact,

    turn: (agent, model, input, options) =>
      Tracing.withSpan(turnUntraced(agent, model, input, options), Tracing.SpanNames.turn, turnSpanOptions()),

    turnStream: (agent, model, input, options) =>
      Tracing.withSpanStream(
        turnStreamUntraced(agent, model, input, options),
        Tracing.SpanNames.turn,
        turnSpanOptions()
      ),

    pendingApprovals: () => waitingForApproval(),

    resume: (agent, model, decisions, options) =>
      Tracing.withSpan(
        resumeUntraced(agent, model, decisions, options),
        Tracing.SpanNames.turn,
        turnSpanOptions()
      ),

    resumeStream: (agent, model, decisions, options) =>
      Tracing.withSpanStream(
        resumeStreamUntraced(agent, model, decisions, options),
        Tracing.SpanNames.turn,
        turnSpanOptions()
      ),

    setTitle: (title) => updateInfo({ title }),
    setSystemPrompt: (prompt) => updateInfo({ metadata: { [systemPromptKey]: prompt ?? null } }),

    reload: () =>
      // A draft has nothing stored to read back.
      stored
        ? Effect.map(store.load(info.id), (loaded) => {
            // Replace in place: views handed out earlier keep reading the live array.
            committed.length = 0
            for (const message of loaded.messages) committed.push(message)
            summaryIndex = Compaction.latestSummary(history)
            compacted = Compaction.view(history, summaryIndex)
            info = loaded.info
          })
        : Effect.void,

    exportJson: () => exportJson(info, committed),
    exportMarkdown: () => exportMarkdown(info, committed)
  }
  return session
}

// ---------------------------------------------------------------------------
// Export
// ---------------------------------------------------------------------------

/** The JSON export format: `{ format, version, session: info, messages }`. */
export const exportJson = (info: SessionInfo, messages: Iterable<Message.Message>): string =>
  JSON.stringify(
    { format: "noema-session", version: 1, session: info, messages: Array.from(messages) },
    null,
    2
  )

/** A fence longer than any run of backticks in `text`, so the text cannot close it. */
const fenced = (text: string, language = ""): string => {
  const longest = Math.max(2, ...Array.from(text.matchAll(/`+/g), (match) => match[0].length))
  const fence = "`".repeat(longest + 1)
  return `${fence}${language}\n${text}\n${fence}`
}

const heading: Record<Message.Role, string> = {
  system: "System",
  user: "User",
  assistant: "Assistant",
  tool: "Tool"
}

/** A file part as a Markdown line: a link (unless the bytes are inline), its type and size. */
const fileLine = (file: Message.FilePart): string => {
  const name = file.name ?? file.uri.split("/").at(-1) ?? "file"
  const label = file.uri.startsWith("data:") ? `\`${name}\` (inline)` : `[${name}](<${file.uri}>)`
  return `Attached file: ${label}, ${file.mediaType}${file.size === undefined ? "" : `, ${file.size} bytes`}`
}

/** A readable transcript: a title, the session's details, then one section per message. */
export const exportMarkdown = (info: SessionInfo, messages: Iterable<Message.Message>): string => {
  const lines: Array<string> = [
    `# ${info.title ?? "Untitled session"}`,
    "",
    `- Session: \`${info.id}\``,
    `- Created: ${new Date(info.createdAt).toISOString()}`,
    `- Updated: ${new Date(info.updatedAt).toISOString()}`,
    `- Messages: ${info.messageCount}`
  ]
  const systemPrompt = systemPromptOf(info)
  if (systemPrompt !== undefined) lines.push("", "## System prompt", "", systemPrompt)
  for (const message of messages) {
    lines.push("")
    switch (message.role) {
      case "tool":
        lines.push(
          `## Tool result: ${message.name}${message.isError ? " (error)" : ""}`,
          "",
          `Call \`${message.toolCallId}\`:`,
          "",
          fenced(message.content)
        )
        break
      case "assistant": {
        lines.push(`## ${heading.assistant}`)
        const reasoning = Message.reasoning(message)
        if (reasoning.length > 0)
          lines.push("", "<details><summary>Reasoning</summary>", "", reasoning, "", "</details>")
        const text = Message.text(message)
        if (text.length > 0) lines.push("", text)
        for (const file of Message.files(message)) lines.push("", fileLine(file))
        if (message.refusal !== undefined) lines.push("", `> Refused: ${message.refusal}`)
        for (const call of message.toolCalls ?? []) {
          lines.push("", `Tool call \`${call.name}\` (\`${call.id}\`):`, "", fenced(call.arguments, "json"))
        }
        break
      }
      case "user":
        lines.push(`## ${heading.user}`, "", Message.text(message))
        for (const file of Message.files(message)) lines.push("", fileLine(file))
        break
      default:
        lines.push(`## ${heading[message.role]}`, "", message.content)
    }
  }
  return `${lines.join("\n")}\n`
}
