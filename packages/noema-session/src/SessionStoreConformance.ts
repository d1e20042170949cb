/**
 * SessionStoreConformance: the behaviour every session store must show.
 *
 * One suite, every backend (memory, SQLite, later Postgres): a store's test
 * gives a way to make a fresh, empty store and runs each case. The cases check
 * the store contract directly (round trips, order, listing, metadata,
 * optimistic concurrency) and through `Session` (atomic turns, conflicts
 * between handles, no trace of failed, interrupted or abandoned turns). They
 * do not depend on a test runner:
 *
 * ```ts
 * for (const testCase of SessionStoreConformance.cases) {
 *   it.effect(testCase.name, () => testCase.run(SqliteStore.make({ filename })))
 * }
 * ```
 *
 * or, for a backend given as a layer, `testCase.run(SessionStoreConformance.fromLayer(layer))`.
 */
import assert from "node:assert/strict"
import { Agent, Message, ModelError } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Context, Effect, Fiber, Layer, Result, type Scope, Stream } from "effect"
import * as Session from "./Session.js"
import {
  type Service,
  SessionAlreadyExistsError,
  SessionConflictError,
  SessionNotFoundError,
  SessionStore,
  StoreError
} from "./SessionStore.js"
import * as SessionTesting from "./SessionTesting.js"

/** Makes a fresh, empty store; it may hold resources until the scope closes. */
export type MakeStore = Effect.Effect<Service, unknown, Scope.Scope>

/**
 * A store from a layer, built afresh for each case (so the layer must give an empty
 * store each time it is built: a new file, a new database or schema):
 *
 * ```ts
 * const makeStore = SessionStoreConformance.fromLayer(Layer.suspend(() => SqliteStore.layer({ filename: fresh() })))
 * for (const testCase of SessionStoreConformance.cases) it.effect(testCase.name, () => testCase.run(makeStore))
 * ```
 */
export const fromLayer = (layer: Layer.Layer<SessionStore, unknown>): MakeStore =>
  Effect.map(Layer.build(layer), (context) => Context.get(context, SessionStore))

export interface Case {
  readonly name: string
  readonly run: (makeStore: MakeStore) => Effect.Effect<void, unknown>
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const withStore =
  (body: (store: Service) => Effect.Effect<void, unknown, SessionStore>) =>
  (makeStore: MakeStore): Effect.Effect<void, unknown> =>
    Effect.scoped(
      Effect.flatMap(makeStore, (store) => Effect.provideService(body(store), SessionStore, store))
    )

/** An agent that answers with the model's text, streaming it as it comes. */
const replyAgent = SessionTesting.replyAgent("conformance-agent")

const contents = (messages: Iterable<Message.Message>): Array<string> =>
  Array.from(messages, (message) => `${message.role}: ${Message.text(message)}`)

const storedContents = (store: Service, id: string) =>
  Effect.map(store.load(id), (stored) => contents(stored.messages))

const { hangingModel } = SessionTesting

/**
 * Lets the forked turn run on from the model's reply to where it waits (the reply
 * is chosen just before the model starts waiting), so the interruption meets the
 * model call itself.
 */
const settle = Effect.repeat(Effect.yieldNow, { times: 20 })

const failureOf = <A, E>(result: Result.Result<A, E>): E => {
  assert.ok(Result.isFailure(result), "expected a failure")
  return result.failure
}

const unicode = [
  "héllo wörld — 你好, мир, مرحبا 🌍🏳️‍🌈👩🏽‍💻",
  "combining: a\u0301 e\u0308, zero width:\u200b, right-to-left: \u202eabc\u202c",
  "quotes \"double\" 'single' `back`, backslash \\ and \\n literally",
  "control: line1\nline2\r\n\ttab \u0000 nul \u0007 bell",
  "lone surrogate \ud83d here"
].join(" | ")

const everyKind: ReadonlyArray<Message.Message> = [
  Message.system("You are a careful assistant."),
  Message.user(unicode),
  Message.user(""),
  Message.assistant("", {
    toolCalls: [
      { id: "call_1", name: "get_weather", arguments: JSON.stringify({ city: "Lisboa", unit: "°C" }) },
      { id: "call_2", name: "get_time", arguments: "{}" }
    ]
  }),
  Message.toolResult({ toolCallId: "call_1", name: "get_weather", content: "22 °C, sunny ☀️" }),
  Message.toolResult({ toolCallId: "call_2", name: "get_time", content: "clock broke", isError: true }),
  Message.assistant("Partly: it is 22 °C.", {
    toolCalls: [{ id: "call_3", name: "retry", arguments: '{"a":[1,2,{"b":null}]}' }]
  }),
  Message.assistant("", { refusal: "I can't help with that." }),
  Message.user("with everything", {
    id: "message-fixed-id",
    createdAt: 1_700_000_000_123,
    metadata: { source: "cli", tags: ["a", "b"], nested: { depth: 2, ok: true, nothing: null, pi: 3.25 } }
  }),
  Message.assistant("x".repeat(100_000))
]

// ---------------------------------------------------------------------------
// Store contract
// ---------------------------------------------------------------------------

const storeCases: ReadonlyArray<Case> = [
  {
    name: "create: a new session is empty and untitled; id, title and metadata can be given",
    run: withStore((store) =>
      Effect.gen(function* () {
        const first = yield* store.create()
        assert.ok(first.id.length > 0)
        assert.equal(first.messageCount, 0)
        assert.equal(first.title, undefined)
        assert.deepEqual(first.metadata, {})
        assert.ok(first.updatedAt >= first.createdAt)
        const second = yield* store.create()
        assert.notEqual(second.id, first.id, "generated ids are unique")

        const metadata = { project: "noema", tags: ["x", "y"], nested: { n: 1, ok: true, none: null } }
        const custom = yield* store.create({ id: "custom-id", title: "Custom", metadata })
        assert.equal(custom.id, "custom-id")
        assert.equal(custom.title, "Custom")
        assert.deepEqual(custom.metadata, metadata)
        assert.deepEqual(yield* store.info("custom-id"), custom)

        const duplicate = yield* Effect.flip(store.create({ id: "custom-id", title: "Other" }))
        assert.ok(duplicate instanceof SessionAlreadyExistsError)
        assert.equal((yield* store.info("custom-id")).title, "Custom", "the existing session is untouched")
      })
    )
  },
  {
    name: "round trip: every kind of message comes back exactly as it went in",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        const info = yield* store.append(id, 0, everyKind)
        assert.equal(info.messageCount, everyKind.length)
        const stored = yield* store.load(id)
        assert.deepEqual(stored.messages, everyKind)
        assert.deepEqual(stored.info, info)
        for (const message of stored.messages) assert.deepEqual(Message.decodeSync(message), message)
      })
    )
  },
  {
    name: "order: appends keep their order, turn after turn",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        const expected: Array<string> = []
        for (let turn = 0; turn < 25; turn++) {
          const messages = [0, 1, 2, 3].map((k) => Message.user(`turn ${turn} message ${k}`))
          const info = yield* store.append(id, turn * 4, messages)
          assert.equal(info.messageCount, (turn + 1) * 4)
          expected.push(...contents(messages))
        }
        assert.deepEqual(yield* storedContents(store, id), expected)
        assert.equal((yield* store.info(id)).messageCount, 100)
      })
    )
  },
  {
    name: "append: a batch of hundreds of messages is stored whole and in order, or not at all",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        const batch = Array.from({ length: 150 }, (_, k) => Message.user(`message ${k}`))
        const info = yield* store.append(id, 0, batch)
        assert.equal(info.messageCount, 150)
        const stale = Array.from({ length: 130 }, (_, k) => Message.assistant(`stale ${k}`))
        const conflict = yield* Effect.flip(store.append(id, 100, stale))
        assert.ok(conflict instanceof SessionConflictError, `expected a conflict, got ${String(conflict)}`)
        const next = Array.from({ length: 70 }, (_, k) => Message.assistant(`next ${k}`))
        yield* store.append(id, 150, next)
        assert.deepEqual(yield* storedContents(store, id), contents([...batch, ...next]))
        assert.equal((yield* store.info(id)).messageCount, 220)
      })
    )
  },
  {
    name: "append: answers with what the store then holds, each session with its own metadata",
    run: withStore((store) =>
      Effect.gen(function* () {
        const first = yield* store.create({ metadata: { owner: "first" } })
        const second = yield* store.create({ title: "Second", metadata: { owner: "second", n: 2 } })
        for (let turn = 0; turn < 3; turn++) {
          for (const session of [first, second]) {
            const answer = yield* store.append(session.id, turn * 2, [
              Message.user(`question ${turn}`),
              Message.assistant(`answer ${turn}`)
            ])
            assert.deepEqual(answer, yield* store.info(session.id))
            assert.equal(answer.createdAt, session.createdAt)
          }
        }
        assert.equal((yield* store.info(first.id)).title, "question 0")
        assert.deepEqual((yield* store.info(first.id)).metadata, { owner: "first" })
        assert.equal((yield* store.info(second.id)).title, "Second")
        assert.deepEqual((yield* store.info(second.id)).metadata, { owner: "second", n: 2 })
        yield* store.updateMetadata(first.id, { metadata: { owner: null, topic: "weather" } })
        const afterUpdate = yield* store.append(first.id, 6, [Message.user("more")])
        assert.deepEqual(afterUpdate.metadata, { topic: "weather" })
        assert.deepEqual(afterUpdate, yield* store.info(first.id))
      })
    )
  },
  {
    name: "append: a stale expected count is a SessionConflictError and stores nothing",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        yield* store.append(id, 0, [Message.user("one"), Message.assistant("two")])
        for (const stale of [0, 1, 3]) {
          const error = yield* Effect.flip(store.append(id, stale, [Message.user("late")]))
          assert.ok(error instanceof SessionConflictError, `expected a conflict, got ${String(error)}`)
          assert.equal(error.sessionId, id)
          assert.equal(error.expectedMessageCount, stale)
          assert.equal(error.actualMessageCount, 2)
          assert.ok(!error.message.includes("\n"), "the message is one line")
        }
        assert.deepEqual(yield* storedContents(store, id), ["user: one", "assistant: two"])
        assert.equal((yield* store.info(id)).messageCount, 2)
      })
    )
  },
  {
    name: "append: a message without a message's shape is refused and nothing of the batch is stored",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        const broken = { role: "user", content: 42 } as unknown as Message.Message
        const error = yield* Effect.flip(store.append(id, 0, [Message.user("fine"), broken]))
        assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`)
        assert.equal(error.reason._tag, "InvalidMessage")
        assert.deepEqual(yield* storedContents(store, id), [])
      })
    )
  },
  {
    name: "append: what is stored reads back as it was written: a NaN is refused, keys a message does not have are dropped",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create()
        // JSON would write the NaN as null, and the session would no longer load.
        const notANumber = { ...Message.user("when?"), createdAt: Number.NaN }
        const error = yield* Effect.flip(store.append(id, 0, [notANumber]))
        assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`)
        assert.equal(error.reason._tag, "InvalidMessage")
        assert.deepEqual(yield* storedContents(store, id), [])
        const extra = { ...Message.user("hello"), notAField: 1 } as Message.Message
        const plain = Message.assistant("hi", {
          metadata: { nested: [1, "two", { three: null }] },
          createdAt: 5
        })
        yield* store.append(id, 0, [extra, plain])
        const { messages } = yield* store.load(id)
        assert.deepEqual(messages, [Message.user("hello"), plain])
      })
    )
  },
  {
    name: "create with messages: the session and its first turn are stored together, or nothing is",
    run: withStore((store) =>
      Effect.gen(function* () {
        const info = yield* store.create({
          id: "with-turn",
          metadata: { source: "test" },
          messages: [Message.user("Is this stored at once?"), Message.assistant("Yes.")]
        })
        assert.equal(info.messageCount, 2)
        assert.equal(info.title, "Is this stored at once?")
        assert.deepEqual(info.metadata, { source: "test" })
        assert.deepEqual(yield* storedContents(store, "with-turn"), [
          "user: Is this stored at once?",
          "assistant: Yes."
        ])
        const broken = { role: "user", content: 42 } as unknown as Message.Message
        const error = yield* Effect.flip(
          store.create({ id: "refused", messages: [Message.user("fine"), broken] })
        )
        assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`)
        assert.equal(error.reason._tag, "InvalidMessage")
        assert.ok((yield* Effect.flip(store.info("refused"))) instanceof SessionNotFoundError)
        assert.deepEqual(
          (yield* store.list()).map((session) => session.id),
          ["with-turn"]
        )
      })
    )
  },
  {
    name: "create with its own times: a copied session keeps when it was made and last changed",
    run: withStore((store) =>
      Effect.gen(function* () {
        const createdAt = Date.UTC(2024, 0, 2, 3, 4, 5, 678)
        const updatedAt = Date.UTC(2025, 6, 8, 9, 10, 11, 121)
        const turn = [
          Message.user("From another store", { id: "m-1", createdAt: createdAt + 1 }),
          Message.assistant("Kept.")
        ]
        const info = yield* store.create({
          id: "copied",
          title: "A copied session",
          metadata: { source: "archive" },
          createdAt,
          updatedAt,
          messages: turn
        })
        const expected = {
          id: "copied",
          title: "A copied session",
          createdAt,
          updatedAt,
          messageCount: 2,
          metadata: { source: "archive" }
        }
        assert.deepEqual(info, expected)
        assert.deepEqual(yield* store.info("copied"), expected)
        const loaded = yield* store.load("copied")
        assert.deepEqual(loaded.info, expected)
        assert.deepEqual(loaded.messages, turn)
        // Without messages too.
        const empty = yield* store.create({ id: "copied-empty", createdAt, updatedAt })
        assert.equal(empty.createdAt, createdAt)
        assert.equal((yield* store.info("copied-empty")).updatedAt, updatedAt)
      })
    )
  },
  {
    name: "missing sessions: every operation fails with SessionNotFoundError",
    run: withStore((store) =>
      Effect.gen(function* () {
        const attempts: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
          store.load("missing"),
          store.info("missing"),
          store.append("missing", 0, [Message.user("hi")]),
          store.delete("missing"),
          store.updateMetadata("missing", { title: "x" })
        ]
        for (const attempt of attempts) {
          const error = yield* Effect.flip(attempt)
          assert.ok(error instanceof SessionNotFoundError, `expected not found, got ${String(error)}`)
          assert.equal(error.sessionId, "missing")
        }
        assert.deepEqual(yield* store.list(), [])
      })
    )
  },
  {
    name: "list: most recently changed first, with title, times, message count and metadata",
    run: withStore((store) =>
      Effect.gen(function* () {
        const a = yield* store.create({ id: "a", metadata: { n: 1 } })
        yield* store.create({ id: "b", title: "Bee" })
        yield* store.create({ id: "c" })
        const ids = () => Effect.map(store.list(), (sessions) => sessions.map((session) => session.id))
        assert.deepEqual(yield* ids(), ["c", "b", "a"])
        yield* store.append("a", 0, [Message.user("What is noema?"), Message.assistant("A framework.")])
        assert.deepEqual(yield* ids(), ["a", "c", "b"])
        yield* store.updateMetadata("b", { metadata: { pinned: true } })
        assert.deepEqual(yield* ids(), ["b", "a", "c"])
        const listed = yield* store.list()
        const byId = new Map(listed.map((session) => [session.id, session]))
        assert.equal(byId.get("a")?.messageCount, 2)
        assert.equal(byId.get("a")?.title, "What is noema?")
        assert.deepEqual(byId.get("a")?.metadata, { n: 1 })
        assert.equal(byId.get("a")?.createdAt, a.createdAt)
        assert.equal(byId.get("b")?.title, "Bee")
        assert.deepEqual(byId.get("b")?.metadata, { pinned: true })
        assert.equal(byId.get("c")?.messageCount, 0)
        for (const session of listed) assert.ok(session.updatedAt >= session.createdAt)
      })
    )
  },
  {
    name: "delete: removes the session and its messages; the id can be used again",
    run: withStore((store) =>
      Effect.gen(function* () {
        yield* store.create({ id: "gone" })
        yield* store.create({ id: "kept" })
        yield* store.append("gone", 0, [Message.user("secret"), Message.assistant("noted")])
        yield* store.append("kept", 0, [Message.user("keep me")])
        yield* store.delete("gone")
        assert.ok((yield* Effect.flip(store.load("gone"))) instanceof SessionNotFoundError)
        assert.deepEqual(
          (yield* store.list()).map((session) => session.id),
          ["kept"]
        )
        assert.deepEqual(yield* storedContents(store, "kept"), ["user: keep me"])
        const again = yield* store.create({ id: "gone" })
        assert.equal(again.messageCount, 0)
        assert.deepEqual(yield* storedContents(store, "gone"), [], "no old message comes back")
        yield* store.append("gone", 0, [Message.user("fresh")])
        assert.deepEqual(yield* storedContents(store, "gone"), ["user: fresh"])
      })
    )
  },
  {
    name: "updateMetadata: sets the title, merges keys, removes keys set to null, keeps the messages",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { id } = yield* store.create({ metadata: { keep: "yes", drop: 1, replace: "old" } })
        yield* store.append(id, 0, [Message.user("hello")])
        const updated = yield* store.updateMetadata(id, {
          title: "Renamed",
          metadata: { replace: "new", drop: null, added: { deep: [1, "two"] } }
        })
        assert.equal(updated.title, "Renamed")
        assert.deepEqual(updated.metadata, { keep: "yes", replace: "new", added: { deep: [1, "two"] } })
        assert.equal(updated.messageCount, 1)
        assert.deepEqual(yield* store.info(id), updated)
        const untouchedTitle = yield* store.updateMetadata(id, { metadata: { more: true } })
        assert.equal(untouchedTitle.title, "Renamed")
        // Metadata changes are not turns: the expected count for the next append is unchanged.
        yield* store.append(id, 1, [Message.assistant("still in order")])
        assert.deepEqual(yield* storedContents(store, id), ["user: hello", "assistant: still in order"])
      })
    )
  },
  {
    name: "title: defaults to the first user message, shortened; an existing title is never replaced",
    run: withStore((store) =>
      Effect.gen(function* () {
        const plain = yield* store.create()
        const first = yield* store.append(plain.id, 0, [
          Message.system("system text is not a title"),
          Message.user("  Plan   a trip\nto Lisbon  "),
          Message.assistant("Sure.")
        ])
        assert.equal(first.title, "Plan a trip to Lisbon")
        const later = yield* store.append(plain.id, 3, [Message.user("Something else entirely")])
        assert.equal(later.title, "Plan a trip to Lisbon")

        const long = yield* store.create()
        const longText = "Please summarise the following very long document about the history of Lisbon "
        const titled = yield* store.append(long.id, 0, [Message.user(longText.repeat(5))])
        assert.ok(titled.title !== undefined && titled.title.length <= 60, `too long: ${titled.title}`)
        assert.ok(titled.title.endsWith("…"))
        assert.ok(longText.startsWith(titled.title.slice(0, -1).trimEnd()))

        const named = yield* store.create({ title: "Mine" })
        assert.equal((yield* store.append(named.id, 0, [Message.user("not the title")])).title, "Mine")
      })
    )
  }
]

// ---------------------------------------------------------------------------
// Sessions on the store
// ---------------------------------------------------------------------------

const sessionCases: ReadonlyArray<Case> = [
  {
    name: "session: context is a live view of the history; transactionContext adds system prompt and pending",
    run: withStore((store) =>
      Effect.gen(function* () {
        const session = yield* Session.create({ systemPrompt: "Be brief." })
        const history = session.context()
        assert.equal(history.length, 0)
        const transaction = session.begin()
        transaction.add(Message.user("hi"))
        const view = session.transactionContext(transaction)
        assert.deepEqual(contents(view), ["system: Be brief.", "user: hi"])
        transaction.add(Message.assistant("hello"))
        assert.equal(view.length, 3, "the pending part is live")
        const committed = yield* session.commit(transaction)
        assert.equal(transaction.state, "committed")
        assert.equal(history.length, 2, "a view taken before the commit shows it: not a copy")
        assert.deepEqual(contents(history), ["user: hi", "assistant: hello"])
        for (const message of committed) {
          assert.equal(typeof message.id, "string")
          assert.equal(typeof message.createdAt, "number")
        }
        assert.equal(session.info.messageCount, 2)
        assert.equal(session.info.title, "hi")

        const reopened = yield* Session.open(session.id)
        assert.deepEqual(reopened.context().toArray(), committed)
        assert.equal(reopened.systemPrompt, "Be brief.", "the system prompt lives in the metadata")
        assert.deepEqual((yield* store.load(session.id)).messages, committed)
      })
    )
  },
  {
    name: "session: commit keeps the ids and creation times messages already have",
    run: withStore(() =>
      Effect.gen(function* () {
        const session = yield* Session.create()
        const transaction = session.begin()
        transaction.add(Message.user("fixed", { id: "m-1", createdAt: 42 }))
        transaction.add(Message.assistant("stamped"))
        const [first, second] = yield* session.commit(transaction)
        assert.deepEqual(first, Message.user("fixed", { id: "m-1", createdAt: 42 }))
        assert.ok(second?.id !== undefined && second.id !== "m-1")
      })
    )
  },
  {
    name: "session: handles committing concurrently: exactly one wins, the others conflict, nothing interleaves",
    run: withStore((store) =>
      Effect.gen(function* () {
        const first = yield* Session.create()
        const handles = [first]
        for (let i = 1; i < 6; i++) handles.push(yield* Session.open(first.id))
        const transactions = handles.map((handle, i) => {
          const transaction = handle.begin()
          transaction.extend([Message.user(`question ${i}`), Message.assistant(`answer ${i}`)])
          return transaction
        })
        const results = yield* Effect.all(
          handles.map((handle, i) =>
            Effect.result(handle.commit(transactions[i] as (typeof transactions)[number]))
          ),
          { concurrency: "unbounded" }
        )
        const winners = results.flatMap((result, i) => (Result.isSuccess(result) ? [i] : []))
        assert.equal(winners.length, 1, "exactly one commit wins")
        const winner = winners[0] as number
        results.forEach((result, i) => {
          if (i === winner) return
          const error = failureOf(result)
          assert.ok(error instanceof SessionConflictError, `expected a conflict, got ${String(error)}`)
          assert.equal(error.expectedMessageCount, 0)
          assert.equal(error.actualMessageCount, 2)
          assert.equal(transactions[i]?.state, "rolled-back", "the loser's transaction is finished")
          assert.equal(handles[i]?.context().length, 0, "the loser's history is not polluted")
        })
        assert.deepEqual(yield* storedContents(store, first.id), [
          `user: question ${winner}`,
          `assistant: answer ${winner}`
        ])

        const loser = handles[winner === 0 ? 1 : 0] as Session.Session
        yield* loser.reload()
        assert.equal(loser.context().length, 2)
        const retry = loser.begin()
        retry.add(Message.user("after reload"))
        yield* loser.commit(retry)
        assert.equal((yield* store.info(first.id)).messageCount, 3)
      })
    )
  },
  {
    name: "session: a transaction begun before another commit of the same handle conflicts",
    run: withStore((store) =>
      Effect.gen(function* () {
        const session = yield* Session.create()
        const early = session.begin()
        early.add(Message.user("early"))
        const late = session.begin()
        late.add(Message.user("late"))
        yield* session.commit(late)
        const error = yield* Effect.flip(session.commit(early))
        assert.ok(error instanceof SessionConflictError)
        assert.deepEqual(yield* storedContents(store, session.id), ["user: late"])
      })
    )
  },
  {
    name: "session: commits to different sessions do not conflict",
    run: withStore((store) =>
      Effect.gen(function* () {
        const sessions = [yield* Session.create(), yield* Session.create(), yield* Session.create()]
        yield* Effect.all(
          sessions.map((session, i) => {
            const transaction = session.begin()
            transaction.add(Message.user(`for ${i}`))
            return session.commit(transaction)
          }),
          { concurrency: "unbounded" }
        )
        for (const [i, session] of sessions.entries()) {
          assert.deepEqual(yield* storedContents(store, session.id), [`user: for ${i}`])
        }
      })
    )
  },
  {
    name: "session: rollback leaves no trace",
    run: withStore((store) =>
      Effect.gen(function* () {
        const session = yield* Session.create()
        const transaction = session.begin()
        transaction.extend([Message.user("never mind"), Message.assistant("ok")])
        yield* session.rollback(transaction)
        assert.equal(transaction.state, "rolled-back")
        assert.equal(session.context().length, 0)
        assert.equal((yield* store.info(session.id)).messageCount, 0)
        assert.deepEqual(yield* storedContents(store, session.id), [])
        const next = session.begin()
        next.add(Message.user("real"))
        yield* session.commit(next)
        assert.deepEqual(yield* storedContents(store, session.id), ["user: real"])
      })
    )
  },
  {
    name: "draft: stored with its first committed turn, not before; a failed or rolled-back turn leaves nothing",
    run: withStore((store) =>
      Effect.gen(function* () {
        const session = yield* Session.draft({ systemPrompt: "Be brief." })
        yield* session.setTitle("Planned")
        const failing = ScriptedChatModel.make({
          replies: [{ fail: new ModelError.Unavailable({ message: "down" }) }, "Stored now."]
        })
        yield* Effect.flip(session.turn(replyAgent, failing, "First try"))
        const rolledBack = session.begin()
        rolledBack.add(Message.user("never mind"))
        yield* session.rollback(rolledBack)
        assert.deepEqual(yield* store.list(), [])
        assert.ok((yield* Effect.flip(store.info(session.id))) instanceof SessionNotFoundError)
        yield* session.turn(replyAgent, failing, "Second try")
        assert.deepEqual(
          failing.requests[1]?.messages.map((message) => message.role),
          ["system", "user"]
        )
        const stored = yield* store.info(session.id)
        assert.equal(stored.title, "Planned")
        assert.equal(stored.metadata[Session.systemPromptKey], "Be brief.")
        assert.deepEqual(yield* storedContents(store, session.id), [
          "user: Second try",
          "assistant: Stored now."
        ])
        // From then on it is an ordinary session: later turns append.
        yield* session.turn(replyAgent, ScriptedChatModel.make({ replies: ["Again."] }), "Third")
        assert.equal((yield* store.info(session.id)).messageCount, 4)
        assert.equal((yield* store.list()).length, 1)
      })
    )
  },
  {
    name: "turn: commits the input and the agent's messages; the model saw system prompt, history and input",
    run: withStore((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["Hello there!", "Second answer"] })
        const session = yield* Session.create({ systemPrompt: "You are terse." })
        const first = yield* session.turn(replyAgent, model, "Hi")
        assert.deepEqual(contents(first), ["user: Hi", "assistant: Hello there!"])
        yield* session.turn(replyAgent, model, Message.user("Again"))
        assert.deepEqual(contents(model.requests[1]?.messages ?? []), [
          "system: You are terse.",
          "user: Hi",
          "assistant: Hello there!",
          "user: Again"
        ])
        assert.deepEqual(yield* storedContents(store, session.id), [
          "user: Hi",
          "assistant: Hello there!",
          "user: Again",
          "assistant: Second answer"
        ])
        const windowed = ScriptedChatModel.make({ replies: ["Third"] })
        yield* session.turn(replyAgent, windowed, "Last", {
          prepareContext: (context) => context.window(2)
        })
        assert.deepEqual(contents(windowed.requests[0]?.messages ?? []), [
          "assistant: Second answer",
          "user: Last"
        ])
      })
    )
  },
  {
    name: "turn: a failing model leaves no trace, and the next turn works",
    run: withStore((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({
          replies: [{ fail: new ModelError.Unavailable({ message: "down for maintenance" }) }, "Back"]
        })
        const session = yield* Session.create()
        const error = yield* Effect.flip(session.turn(replyAgent, model, "Are you there?"))
        assert.ok(error instanceof Agent.AgentError, `expected an AgentError, got ${String(error)}`)
        assert.equal(error.reason._tag, "ModelFailed")
        assert.equal(session.context().length, 0)
        assert.equal((yield* store.info(session.id)).messageCount, 0)
        yield* session.turn(replyAgent, model, "Now?")
        assert.deepEqual(yield* storedContents(store, session.id), ["user: Now?", "assistant: Back"])
      })
    )
  },
  {
    name: "turn: an interrupted turn leaves no trace, and the next turn works",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { model, received } = hangingModel()
        const session = yield* Session.create()
        const fiber = yield* Effect.forkChild(session.turn(replyAgent, model, "Take your time"))
        yield* received.await
        yield* settle
        yield* Fiber.interrupt(fiber)
        assert.equal(model.requests[0]?.interrupted, true, "the model call was cancelled")
        assert.equal(session.context().length, 0)
        assert.deepEqual(yield* storedContents(store, session.id), [])
        model.enqueue("Quick one")
        yield* session.turn(replyAgent, model, "Faster?")
        assert.deepEqual(yield* storedContents(store, session.id), ["user: Faster?", "assistant: Quick one"])
      })
    )
  },
  {
    name: "turnStream: streams the agent's events and commits only when the stream completes",
    run: withStore((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["Streaming is fun to watch"] })
        const session = yield* Session.create()
        const countsDuringStream: Array<number> = []
        const events = yield* Stream.runCollect(
          session
            .turnStream(replyAgent, model, "Stream please")
            .pipe(
              Stream.tap((event) =>
                event.type === "committed"
                  ? Effect.void
                  : Effect.map(
                      store.info(session.id),
                      (info) => void countsDuringStream.push(info.messageCount)
                    )
              )
            )
        )
        const deltas = events.flatMap((event) => (event.type === "text-delta" ? [event.delta] : []))
        assert.ok(deltas.length > 1, "text arrives in several deltas")
        assert.equal(deltas.join(""), "Streaming is fun to watch")
        assert.equal(events.at(-2)?.type, "message")
        assert.equal(events.at(-1)?.type, "committed")
        assert.ok(
          countsDuringStream.every((count) => count === 0),
          "nothing is stored while the stream runs"
        )
        assert.deepEqual(yield* storedContents(store, session.id), [
          "user: Stream please",
          "assistant: Streaming is fun to watch"
        ])
        assert.deepEqual(contents(session.context()), yield* storedContents(store, session.id))
      })
    )
  },
  {
    name: "turnStream: the agent's context does not grow with its own output while it runs",
    run: withStore((store) =>
      Effect.gen(function* () {
        // A two-step agent, like a tool loop: it emits a message, then reads its context again.
        const twoStep = Agent.make({
          name: "two-step",
          executeStream: (context) =>
            Stream.suspend(() => {
              const first = Message.assistant("step one")
              return Stream.concat(
                Stream.make({ type: "message" as const, message: first }),
                Stream.sync(() => ({
                  type: "message" as const,
                  message: Message.assistant(`context had ${context.length} messages`)
                }))
              )
            })
        })
        const session = yield* Session.create()
        yield* Stream.runDrain(session.turnStream(twoStep, ScriptedChatModel.make(), "Go"))
        assert.deepEqual(yield* storedContents(store, session.id), [
          "user: Go",
          "assistant: step one",
          "assistant: context had 1 messages"
        ])
      })
    )
  },
  {
    name: "turnStream: interrupting the stream rolls the turn back",
    run: withStore((store) =>
      Effect.gen(function* () {
        const { model, received } = hangingModel()
        const session = yield* Session.create()
        const fiber = yield* Effect.forkChild(Stream.runDrain(session.turnStream(replyAgent, model, "Wait")))
        yield* received.await
        yield* settle
        yield* Fiber.interrupt(fiber)
        assert.equal(model.requests[0]?.interrupted, true, "the model stream was cancelled")
        assert.equal(session.context().length, 0)
        assert.deepEqual(yield* storedContents(store, session.id), [])
      })
    )
  },
  {
    name: "turnStream: a consumer that stops early rolls the turn back",
    run: withStore((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["several words of answer", "complete"] })
        const session = yield* Session.create()
        const firstOnly = yield* Stream.runCollect(
          Stream.take(session.turnStream(replyAgent, model, "Start"), 1)
        )
        assert.equal(firstOnly.length, 1)
        assert.deepEqual(yield* storedContents(store, session.id), [])
        yield* Stream.runDrain(session.turnStream(replyAgent, model, "Again"))
        assert.deepEqual(yield* storedContents(store, session.id), ["user: Again", "assistant: complete"])
      })
    )
  },
  {
    name: "turnStream: a stream that fails midway leaves no trace",
    run: withStore((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({
          replies: [
            {
              stream: [{ type: "text-delta", delta: "Partial ans" }],
              failAfter: new ModelError.Network({ message: "connection reset" })
            }
          ]
        })
        const session = yield* Session.create()
        const seen: Array<Session.TurnEvent> = []
        const error = yield* Effect.flip(
          Stream.runForEach(session.turnStream(replyAgent, model, "Go"), (event) =>
            Effect.sync(() => void seen.push(event))
          )
        )
        assert.ok(error instanceof Agent.AgentError, `expected an AgentError, got ${String(error)}`)
        assert.deepEqual(seen, [{ type: "text-delta", delta: "Partial ans" }])
        assert.deepEqual(yield* storedContents(store, session.id), [])
      })
    )
  },
  {
    name: "session: title, system prompt and metadata changes persist and reach new handles and turns",
    run: withStore(() =>
      Effect.gen(function* () {
        const session = yield* Session.create()
        assert.equal(session.systemPrompt, undefined)
        yield* session.setTitle("Renamed")
        yield* session.setSystemPrompt("Answer in French.")
        assert.equal(session.title, "Renamed")
        const other = yield* Session.open(session.id)
        assert.equal(other.title, "Renamed")
        assert.equal(other.systemPrompt, "Answer in French.")
        const model = ScriptedChatModel.make({ replies: ["Bonjour", "Hello"] })
        yield* other.turn(replyAgent, model, "Hello")
        assert.deepEqual(contents(model.requests[0]?.messages ?? []), [
          "system: Answer in French.",
          "user: Hello"
        ])
        assert.equal(other.title, "Renamed", "an explicit title is not replaced by the first message")
        yield* other.setSystemPrompt(undefined)
        assert.equal(other.systemPrompt, undefined)
        yield* other.turn(replyAgent, model, "Again")
        assert.equal(model.requests[1]?.messages[0]?.role, "user")
      })
    )
  },
  {
    name: "session: a system message in the history (as release 0.1 recorded prompts) is sent once, as history",
    run: withStore((store) =>
      Effect.gen(function* () {
        const session = yield* Session.create()
        const recorded = session.begin()
        recorded.add(Message.system("Recorded prompt"))
        yield* session.commit(recorded)
        assert.equal(session.systemPrompt, undefined)
        const model = ScriptedChatModel.make({ replies: ["ok", "ok"] })
        yield* session.turn(replyAgent, model, "Hi")
        assert.deepEqual(contents(model.requests[0]?.messages ?? []), ["system: Recorded prompt", "user: Hi"])
        assert.equal((yield* store.info(session.id)).messageCount, 3)
        // The session's own prompt (its one home) goes first; the recorded message stays history.
        yield* session.setSystemPrompt("Current prompt")
        yield* session.turn(replyAgent, model, "Again")
        assert.deepEqual(contents(model.requests[1]?.messages ?? []).slice(0, 2), [
          "system: Current prompt",
          "system: Recorded prompt"
        ])
      })
    )
  },
  {
    name: "session: openOrCreate opens an existing session or creates a missing one",
    run: withStore(() =>
      Effect.gen(function* () {
        const created = yield* Session.openOrCreate("named", { systemPrompt: "First" })
        assert.equal(created.id, "named")
        const transaction = created.begin()
        transaction.add(Message.user("remember me"))
        yield* created.commit(transaction)
        const opened = yield* Session.openOrCreate("named", { systemPrompt: "Ignored" })
        assert.deepEqual(contents(opened.context()), ["user: remember me"])
        assert.equal(opened.systemPrompt, "First")
        assert.ok((yield* Effect.flip(Session.open("absent"))) instanceof SessionNotFoundError)
      })
    )
  },
  {
    name: "export: JSON holds the session and every message; Markdown is a readable transcript",
    run: withStore(() =>
      Effect.gen(function* () {
        const session = yield* Session.create({ title: "Weather chat", systemPrompt: "Be helpful." })
        const transaction = session.begin()
        transaction.extend(everyKind.slice(1, 7))
        yield* session.commit(transaction)

        const json = JSON.parse(session.exportJson()) as {
          format: string
          session: { id: string; title: string; messageCount: number }
          messages: Array<unknown>
        }
        assert.equal(json.format, "noema-session")
        assert.equal(json.session.id, session.id)
        assert.equal(json.session.title, "Weather chat")
        assert.equal(json.session.messageCount, 6)
        assert.deepEqual(json.messages.map(Message.decodeSync), session.context().toArray())

        const markdown = session.exportMarkdown()
        assert.ok(markdown.startsWith("# Weather chat\n"))
        for (const expected of [
          session.id,
          "## System prompt",
          "Be helpful.",
          "## User",
          unicode,
          "## Assistant",
          "Tool call `get_weather` (`call_1`)",
          "## Tool result: get_weather",
          "## Tool result: get_time (error)",
          "22 °C, sunny ☀️"
        ]) {
          assert.ok(markdown.includes(expected), `the transcript contains ${JSON.stringify(expected)}`)
        }
      })
    )
  }
]

export const cases: ReadonlyArray<Case> = [...storeCases, ...sessionCases]
