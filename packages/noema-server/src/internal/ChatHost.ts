/**
 * ChatHost: the chats the page holds with the agent, one per session, each on
 * the session's runtime (`@noema/runtime`, built by `ChatAgent.runtime`: the
 * one `noema chat` runs turns on), and the clients following them.
 *
 * A chat is the runtime, not a request: a message is a trigger (`send`), Stop
 * and Escape a `user.cancel` trigger (`cancel`), Approve and Reject an
 * `approval.decision` trigger (`decide`). The runtime runs one turn at a time
 * per session; at most `maxQueued` messages wait behind it (past that, the
 * message is refused, not dropped). The turn runs in the host's scope, so a
 * client that goes away mid-stream takes nothing with it: the turn goes on
 * and is stored as it would be, and the next client of the session is told
 * the turn so far (`state`, then the turn's frames) and follows it.
 *
 * Memory is bounded: at most `maxChats` runtimes are live (an idle chat with no
 * client makes room for a new one, least recently used first; when none is
 * idle, the new one is refused), `maxClients` clients in all, and a client is
 * handed at most `clientBytes` of frames it has not taken (a client that stops
 * reading is sent `resync` and let go: it reads the session again and comes
 * back). The frames of the turn under way are kept for clients that join (text
 * deltas merged: about the turn's own size).
 *
 * Before a turn starts on an idle chat the session is read again, so a turn
 * another process made meanwhile (`noema chat --session` in a terminal) is part
 * of the history the agent sees. When the server stops (its scope closes:
 * Ctrl-C), each runtime is stopped: the turn under way is interrupted and what
 * was seen of it is stored, marked interrupted (the runtime's "keep-seen"), and
 * the messages still waiting (acknowledged with 202, never answered) are
 * stored as the user's messages, so nothing a person was told was taken is lost.
 */
import { type Approval, Message } from "@noema/core"
import { type Runtime as AgentRuntime, ContextItem, TriggerEvent } from "@noema/runtime"
import { Session, SessionStore } from "@noema/session"
import { Cause, Deferred, Effect, Queue, Schema, type Scope, Semaphore, Stream } from "effect"
import * as ChatJson from "../ChatJson.js"

/** What the Chat view talks to (`Server.Options.chat`): `noema serve` gives `noema chat`'s. */
export interface ChatAgent {
  /** The runtime a session's turns run on, not started (the host starts and stops it). */
  readonly runtime: (session: Session.Session) => Effect.Effect<AgentRuntime.Runtime, unknown>
  /** The system prompt a session started in the page gets. */
  readonly systemPrompt?: string
  /** What the page says it talks to: the model and its tools. */
  readonly description: string
}

export interface Options {
  readonly agent: ChatAgent
  readonly sessions: SessionStore.Service
  /** Who a decision made in the page is recorded as. */
  readonly approver: string
  /** Most runtimes live at once. Default 16. */
  readonly maxChats?: number
  /** Most messages waiting behind a session's turn. Default 8. */
  readonly maxQueued?: number
  /** Most clients following chats, in all. Default 64. */
  readonly maxClients?: number
  /** Most bytes of frames handed to a client and not taken yet. Default 256 KiB. */
  readonly clientBytes?: number
  /** How often an idle client is sent a keep-alive, so a gone one is noticed. Default 15 s. */
  readonly keepAliveMs?: number
  /** Told what went wrong stopping a chat (the server's log). */
  readonly log: (line: string) => void
}

/** Why the host did not do what a request asked. */
export class ChatRefused extends Schema.TaggedError<ChatRefused>()("ChatRefused", {
  reason: Schema.Literals(["NoSession", "QueueFull", "TooManyChats", "TooManyClients"]),
  detail: Schema.String
}) {
  override get message() {
    return this.detail
  }
}

/** A frame as sent: a chat frame, or a keep-alive nobody listens to. */
export type SseFrame =
  | { readonly event: "chat"; readonly data: ChatJson.Frame }
  | { readonly event: "keep-alive"; readonly data: "" }

export interface Stats {
  readonly chats: number
  readonly clients: number
  /** Bytes of frames handed to clients and not taken yet, for the client with the most. */
  readonly largestHeldBytes: number
}

interface Client {
  readonly queue: Queue.Queue<readonly [ChatJson.Frame, number], Cause.Done>
  held: number
  closed: boolean
}

interface Chat {
  readonly session: Session.Session
  readonly runtime: AgentRuntime.Runtime
  /** A trigger was sent and the runtime has not said `idle` since. */
  running: boolean
  /** Messages taken and not yet in a turn, by trigger id. */
  readonly queued: Map<string, string>
  /** The frames of the turn under way, for a client that joins. */
  turn: Array<ChatJson.Frame>
  readonly clients: Set<Client>
  used: number
  /** Held while a trigger is sent: the session is read again only before a turn starts, never during one. */
  readonly sending: Semaphore.Semaphore
}

const userTexts = (items: ReadonlyArray<ContextItem.ContextItem>) =>
  items.flatMap((item) =>
    item.messages.flatMap((message) => (message.role === "user" ? [Message.text(message)] : []))
  )

const triggerIds = (items: ReadonlyArray<ContextItem.ContextItem>) =>
  items.flatMap((item) => (item.trigger === undefined ? [] : [item.trigger.id]))

/** Why a turn failed, as the chat says it (no stack, no path: the error's own message). */
const failureText = (cause: unknown, decided: boolean): string => {
  const error = Cause.isCause(cause) ? Cause.squash(cause) : cause
  if (error instanceof SessionStore.SessionConflictError)
    return `another noema changed this session meanwhile, so your ${decided ? "decision" : "message"} was not saved; the session is reloaded with the other turns`
  return error instanceof Error ? error.message : String(error)
}

const sizeOf = (frame: ChatJson.Frame) => JSON.stringify(frame).length + 32

export const make = Effect.fnUntraced(function* (options: Options) {
  const maxChats = options.maxChats ?? 16
  const maxQueued = options.maxQueued ?? 8
  const maxClients = options.maxClients ?? 64
  const clientBytes = options.clientBytes ?? 256 * 1024
  const keepAliveMs = options.keepAliveMs ?? 15_000
  const scope = yield* Effect.scope
  const chats = new Map<string, Chat>()
  const opening = yield* Semaphore.make(1)
  let clock = 0
  let clientCount = 0
  const withStore = Effect.provideService(SessionStore.SessionStore, options.sessions)

  /** Hands `frame` to `client`, or lets a client that holds too much go with `resync`. */
  const deliver = (chat: Chat, client: Client, frame: ChatJson.Frame) => {
    if (client.closed) return
    const size = sizeOf(frame)
    if (client.held + size > clientBytes) {
      client.closed = true
      chat.clients.delete(client)
      Queue.offerUnsafe(client.queue, [{ type: "resync" }, 0])
      Queue.endUnsafe(client.queue)
      return
    }
    client.held += size
    Queue.offerUnsafe(client.queue, [frame, size])
  }

  const broadcast = (chat: Chat, frame: ChatJson.Frame) => {
    for (const client of chat.clients) deliver(chat, client, frame)
  }

  /** Keeps a frame of the turn under way, text deltas merged into one. */
  const remember = (chat: Chat, frame: ChatJson.Frame) => {
    const last = chat.turn.at(-1)
    if (frame.type === "text" && last?.type === "text")
      chat.turn[chat.turn.length - 1] = { type: "text", delta: last.delta + frame.delta }
    else chat.turn.push(frame)
  }

  const inTurn = (chat: Chat, frame: ChatJson.Frame) => {
    remember(chat, frame)
    broadcast(chat, frame)
  }

  const turnFrame = (event: Session.TurnEvent): ChatJson.Frame | undefined => {
    switch (event.type) {
      case "text-delta":
        return { type: "text", delta: event.delta }
      case "tool-call":
        return { type: "tool-call", call: ChatJson.callOf(event.toolCall) }
      case "approval-request":
        return { type: "approval-request", call: ChatJson.callOf(event.toolCall) }
      case "tool-result":
        return ChatJson.resultOf(event.message)
      case "compacted":
        return {
          type: "compacted",
          line: `the ${event.info.replaced} messages before were summarised for the model`
        }
      default:
        return undefined
    }
  }

  /** What the runtime did, as frames for the chat's clients. */
  const onEvent = (chat: Chat, event: AgentRuntime.RuntimeEvent) => {
    switch (event.type) {
      case "trigger":
        if (event.running)
          for (const item of event.items)
            for (const text of userTexts([item]))
              if (item.trigger !== undefined) broadcast(chat, { type: "queued", id: item.trigger.id, text })
        return
      case "cycle-started": {
        for (const id of triggerIds(event.cycle.items)) chat.queued.delete(id)
        chat.turn = []
        inTurn(chat, {
          type: "turn-started",
          cycle: event.cycle.number,
          ids: triggerIds(event.cycle.items),
          messages: userTexts(event.cycle.items)
        })
        return
      }
      case "turn": {
        const frame = turnFrame(event.event)
        if (frame !== undefined) inTurn(chat, frame)
        return
      }
      case "injected":
        for (const id of triggerIds(event.items)) chat.queued.delete(id)
        inTurn(chat, { type: "injected", ids: triggerIds(event.items), messages: userTexts(event.items) })
        return
      case "cycle-completed":
        chat.turn = []
        broadcast(chat, {
          type: "turn-ended",
          cycle: event.cycle.number,
          outcome: "completed",
          message: null
        })
        return
      case "cycle-interrupted":
        chat.turn = []
        broadcast(chat, {
          type: "turn-ended",
          cycle: event.cycle.number,
          outcome: event.kept.length > 0 ? "interrupted" : "cancelled",
          message:
            event.kept.length > 0
              ? "interrupted; what was shown is kept, marked interrupted"
              : "cancelled; nothing of this turn was saved"
        })
        return
      case "cycle-failed":
        for (const id of triggerIds(event.dropped)) chat.queued.delete(id)
        chat.turn = []
        broadcast(chat, {
          type: "turn-ended",
          cycle: event.cycle.number,
          outcome: "failed",
          message: failureText(event.error, event.cycle.items.some(ContextItem.hasDecisions))
        })
        return
      case "decision-refused":
        broadcast(chat, { type: "decision-refused", message: event.error.message })
        return
      case "idle":
        chat.running = false
        chat.turn = []
        broadcast(chat, { type: "idle", pending: chat.session.pendingApprovals().map(ChatJson.callOf) })
        return
      default:
        return
    }
  }

  /** Follows the runtime's events in the host's scope; returns once subscribed, so nothing is missed. */
  const follow = (chat: Chat) =>
    Effect.gen(function* () {
      const subscribed = yield* Deferred.make<void>()
      yield* Effect.forkIn(
        Effect.scoped(
          Effect.gen(function* () {
            const events = yield* chat.runtime.subscribe
            yield* Deferred.succeed(subscribed, undefined)
            yield* Stream.runForEach(
              Stream.takeUntil(events, (event) => event.type === "stopped"),
              (event) => Effect.sync(() => onEvent(chat, event))
            )
          })
        ),
        scope
      )
      yield* Deferred.await(subscribed)
    })

  /** Stores the messages a stopped runtime never answered: they were acknowledged, so they are kept. */
  const storeUnanswered = (session: Session.Session, items: ReadonlyArray<ContextItem.ContextItem>) =>
    Effect.gen(function* () {
      const stored = new Set(
        session
          .context()
          .toArray()
          .flatMap((message) => (message.id === undefined ? [] : [message.id]))
      )
      const messages = items.flatMap((item) =>
        item.messages.filter((message) => message.id === undefined || !stored.has(message.id))
      )
      if (messages.length === 0) return
      const transaction = session.begin().extend(messages)
      yield* session.commit(transaction)
    })

  /** Stops a chat's runtime (the turn under way interrupted, kept as seen) and stores what waited. */
  const close = (id: string, chat: Chat) =>
    Effect.gen(function* () {
      chats.delete(id)
      const report = yield* chat.runtime.stop()
      yield* storeUnanswered(chat.session, report.unprocessed)
      for (const client of chat.clients) {
        client.closed = true
        Queue.endUnsafe(client.queue)
      }
    }).pipe(
      Effect.catchCause((cause) =>
        Effect.sync(() =>
          options.log(`noema server: stopping the chat of session ${id}: ${Cause.pretty(cause)}\n`)
        )
      )
    )

  /** Room for one more live chat: the least recently used idle one without clients is closed. */
  const makeRoom = Effect.suspend(() => {
    if (chats.size < maxChats) return Effect.void
    let oldest: [string, Chat] | undefined
    for (const entry of chats) {
      const chat = entry[1]
      if (chat.running || chat.clients.size > 0 || chat.queued.size > 0) continue
      if (oldest === undefined || chat.used < oldest[1].used) oldest = entry
    }
    if (oldest === undefined)
      return Effect.fail(
        new ChatRefused({
          reason: "TooManyChats",
          detail: `${maxChats} chats are going on in this server; try again when one is done`
        })
      )
    return close(...oldest)
  })

  /** A live chat on `session`: its runtime made, followed and started. */
  const start = (session: Session.Session) =>
    Effect.gen(function* () {
      yield* makeRoom
      const runtime = yield* options.agent.runtime(session)
      const chat: Chat = {
        session,
        runtime,
        running: false,
        queued: new Map(),
        turn: [],
        clients: new Set(),
        used: ++clock,
        sending: Semaphore.makeUnsafe(1)
      }
      yield* follow(chat)
      yield* runtime.start
      chats.set(session.id, chat)
      return chat
    })

  /** The live chat of session `id`, started on the stored session if it is not live yet. */
  const open = (id: string) =>
    Effect.suspend(() => {
      const live = chats.get(id)
      if (live !== undefined) {
        live.used = ++clock
        return Effect.succeed(live)
      }
      return opening.withPermits(1)(
        Effect.suspend(() => {
          const again = chats.get(id)
          if (again !== undefined) return Effect.succeed(again)
          return Session.open(id).pipe(
            withStore,
            Effect.catchTag("SessionNotFoundError", () =>
              Effect.fail(new ChatRefused({ reason: "NoSession", detail: `no session ${id}` }))
            ),
            Effect.flatMap(start)
          )
        })
      )
    })

  /** Reads the session again before a turn on an idle chat: another process may have added to it. */
  const beforeTurn = (chat: Chat) =>
    Effect.suspend(() => {
      chat.used = ++clock
      if (chat.running) return Effect.void
      chat.running = true
      // A draft (never stored yet) has nothing to read again.
      return chat.session.context().length === 0 && chat.session.info.messageCount === 0
        ? Effect.void
        : Effect.catchTag(chat.session.reload(), "SessionNotFoundError", () => Effect.void)
    })

  /** A trigger for `chat`; a refused one leaves the chat as it was. */
  const trigger = (chat: Chat, event: TriggerEvent.TriggerEvent, wasRunning: boolean) =>
    Effect.tapError(chat.runtime.receiveTrigger(event), () =>
      Effect.sync(() => {
        chat.queued.delete(event.id)
        if (!wasRunning) chat.running = false
      })
    )

  yield* Effect.addFinalizer(() =>
    Effect.forEach([...chats], ([id, chat]) => close(id, chat), { discard: true, concurrency: "unbounded" })
  )

  return {
    description: options.agent.description,
    maxQueued,
    /** A new session (stored with its first turn) and its live chat. */
    create: opening
      .withPermits(1)(
        Effect.flatMap(
          withStore(
            Session.draft(
              options.agent.systemPrompt === undefined ? {} : { systemPrompt: options.agent.systemPrompt }
            )
          ),
          start
        )
      )
      .pipe(Effect.map((chat) => chat.session.id)),

    send: (id: string, text: string, interrupt: boolean) =>
      Effect.flatMap(open(id), (chat) =>
        chat.sending.withPermits(1)(
          Effect.gen(function* () {
            if (!interrupt && chat.running && chat.queued.size >= maxQueued)
              return yield* new ChatRefused({
                reason: "QueueFull",
                detail: `${maxQueued} messages already wait for this turn to end; send again once it has`
              })
            const wasRunning = chat.running
            yield* beforeTurn(chat)
            const event = TriggerEvent.fromUser(text, { interrupt, source: "panel" })
            // Waiting only behind a turn: on an idle chat the message starts one at once.
            if (wasRunning) chat.queued.set(event.id, text)
            yield* trigger(chat, event, wasRunning)
            return { id: event.id, queued: wasRunning }
          })
        )
      ),

    /** Stops the turn under way (what was shown is kept, marked interrupted); false when none runs. */
    cancel: (id: string) =>
      Effect.suspend(() => {
        const chat = chats.get(id)
        if (chat === undefined || !chat.running) return Effect.succeed({ running: false })
        return Effect.as(
          Effect.ignore(chat.runtime.receiveTrigger(TriggerEvent.cancel({ source: "panel" }))),
          {
            running: true
          }
        )
      }),

    decide: (id: string, decisions: Readonly<Record<string, Approval.Decision>>) =>
      Effect.flatMap(open(id), (chat) =>
        chat.sending.withPermits(1)(
          Effect.gen(function* () {
            const wasRunning = chat.running
            yield* beforeTurn(chat)
            yield* trigger(chat, TriggerEvent.decide(decisions, { source: options.approver }), wasRunning)
            return Object.keys(decisions)
          })
        )
      ),

    /** The frames for a new client of session `id`: where the chat is, then what happens, until the scope closes. */
    join: (
      id: string
    ): Effect.Effect<Stream.Stream<SseFrame>, ChatRefused | SessionStore.StoreError | unknown, Scope.Scope> =>
      Effect.gen(function* () {
        const chat = yield* open(id)
        const queue = yield* Queue.unbounded<readonly [ChatJson.Frame, number], Cause.Done>()
        const client = yield* Effect.acquireRelease(
          Effect.sync(() => {
            if (clientCount >= maxClients) return undefined
            clientCount++
            const client: Client = { queue, held: 0, closed: false }
            chat.clients.add(client)
            return client
          }),
          (client) =>
            Effect.sync(() => {
              if (client === undefined) return
              clientCount--
              client.closed = true
              chat.clients.delete(client)
            })
        )
        if (client === undefined)
          return yield* new ChatRefused({
            reason: "TooManyClients",
            detail: "the chats have as many clients as they take; try again shortly"
          })
        deliver(chat, client, {
          type: "state",
          session_id: chat.session.id,
          running: chat.running,
          queued: [...chat.queued].map(([queuedId, text]) => ({ id: queuedId, text })),
          pending: chat.running ? [] : chat.session.pendingApprovals().map(ChatJson.callOf)
        })
        for (const frame of chat.turn) deliver(chat, client, frame)
        const frames = Stream.fromQueue(client.queue).pipe(
          Stream.map(([frame, size]): SseFrame => {
            client.held -= size
            return { event: "chat", data: frame }
          })
        )
        const keepAlive = Stream.tick(keepAliveMs).pipe(
          Stream.drop(1),
          Stream.map((): SseFrame => ({ event: "keep-alive", data: "" }))
        )
        return Stream.merge(frames, keepAlive, { haltStrategy: "left" })
      }),

    stats: (): Stats => {
      let largestHeldBytes = 0
      for (const chat of chats.values())
        for (const client of chat.clients) largestHeldBytes = Math.max(largestHeldBytes, client.held)
      return { chats: chats.size, clients: clientCount, largestHeldBytes }
    }
  }
})

export type ChatHost = Effect.Success<ReturnType<typeof make>>
