/**
 * Compaction: older turns summarised by the model into one committed message
 * that links to what it replaced; the originals stay in the store; what the
 * agent sees is the summary and the kept tail; the tail always starts at a
 * user message, so no tool result is separated from its call.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConversationContext, Message, ModelError, TokenCounter } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Stream } from "effect"
import * as Compaction from "../src/Compaction.js"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Session from "../src/Session.js"
import { SessionStore } from "../src/SessionStore.js"
import * as SessionTesting from "../src/SessionTesting.js"

/** One token per word: budgets in tests are easy to reason about. */
const words = TokenCounter.make({
  name: "words",
  exact: true,
  countText: (text) => text.split(/\s+/).filter((word) => word.length > 0).length
})

const withMemoryStore = <A, E>(body: Effect.Effect<A, E, SessionStore>) =>
  Effect.flatMap(MemoryStore.make(), (store) => Effect.provideService(body, SessionStore, store))

/** A turn: a question, a tool call and its result, then an answer. */
const toolTurn = (index: number): Array<Message.Message> => [
  Message.user(`question ${index} about the weather in city number ${index}`),
  Message.assistant("", {
    toolCalls: [{ id: `call_${index}`, name: "weather", arguments: `{"city":${index}}` }]
  }),
  Message.toolResult({ toolCallId: `call_${index}`, name: "weather", content: `sunny in city ${index}` }),
  Message.assistant(`It is sunny in city ${index}, enjoy the day.`)
]

const sessionWithTurns = (count: number) =>
  Effect.gen(function* () {
    const session = yield* Session.create({ systemPrompt: "You are terse." })
    for (let index = 0; index < count; index++) {
      const transaction = session.begin()
      transaction.extend(toolTurn(index))
      yield* session.commit(transaction)
    }
    return session
  })

/** Every tool message follows the assistant message that asked for it (directly or after siblings). */
const assertValidHistory = (messages: Iterable<Message.Message>) =>
  assert.deepStrictEqual(ConversationContext.problems(messages), [])

describe("Compaction.plan", () => {
  it("leaves a history within its budget alone, and counts the system prompt", () => {
    const history = toolTurn(0)
    const result = Compaction.plan(
      // A live view, as sessions give.
      ConversationContext.fromArray(history),
      { budget: 1_000, counter: words, system: "You are terse." }
    )
    assert.strictEqual("_tag" in result && result._tag, "WithinBudget")
    const tight = Compaction.plan(ConversationContext.fromArray(history), { budget: 10, counter: words })
    // Over the budget, but a single turn has nothing older to summarise.
    assert.strictEqual("_tag" in tight && tight._tag, "NothingToSummarise")
  })

  it("cuts at a user message, keeping the newest turns that fit in keepTokens", () => {
    const history = [0, 1, 2, 3, 4].flatMap(toolTurn)
    const perTurn = words.countMessages(toolTurn(0)) - TokenCounter.perRequestOverhead
    const result = Compaction.plan(ConversationContext.fromArray(history), {
      budget: perTurn * 3,
      keepTokens: perTurn * 2,
      counter: words
    })
    assert.isFalse("_tag" in result)
    if ("_tag" in result) return
    // The last two turns are kept; the first three are summarised.
    assert.strictEqual(result.keepFrom, 12)
    assert.strictEqual(result.replaced.length, 12)
    assert.strictEqual(history[result.keepFrom]?.role, "user")
    assertValidHistory(history.slice(result.keepFrom))
  })

  it("keeps the latest turn whole even when it alone is over keepTokens", () => {
    const history = [0, 1, 2].flatMap(toolTurn)
    const result = Compaction.plan(ConversationContext.fromArray(history), {
      budget: 10,
      keepTokens: 1,
      counter: words
    })
    assert.isFalse("_tag" in result)
    if (!("_tag" in result)) assert.strictEqual(result.keepFrom, 8)
  })
})

describe("Session.compact", () => {
  it.effect("commits a summary linked to what it replaced; the store keeps every original", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = yield* sessionWithTurns(5)
        const model = ScriptedChatModel.make({ replies: ["The user asked about cities 0 to 2; all sunny."] })
        const perTurn = words.countMessages(toolTurn(0)) - TokenCounter.perRequestOverhead
        const result = yield* session.compact(model, {
          budget: perTurn * 3,
          keepTokens: perTurn * 2,
          counter: words
        })
        assert.isTrue(result.compacted)
        if (!result.compacted) return
        assert.deepInclude(result.info, { keepFrom: 12, replaced: 12, counter: "words", exact: true })
        assert.strictEqual(result.info.firstId, session.context().at(0)?.id)
        assert.strictEqual(result.info.lastId, session.context().at(11)?.id)
        assert.isBelow(result.info.tokensAfter, result.info.tokensBefore)
        assert.include(
          (result.summary as Message.SystemMessage).content,
          "Summary of the earlier conversation (12 messages"
        )

        // The summariser saw the replaced turns as a transcript, tool calls and results spelled out.
        const request = model.requests[0]
        const transcript = Message.text(request?.messages.at(-1) as Message.Message)
        assert.include(transcript, "User: question 0")
        assert.include(transcript, 'Assistant called weather({"city":0})')
        assert.include(transcript, "Tool result (weather): sunny in city 2")
        assert.notInclude(transcript, "question 3")

        // Nothing deleted: 20 originals + the summary, in the store and in context().
        const stored = yield* store.load(session.id)
        assert.strictEqual(stored.messages.length, 21)
        assert.strictEqual(session.context().length, 21)

        // What an agent sees: system prompt, the summary, then the kept turns 3 and 4.
        const seen = session.transactionContext(session.begin()).toArray()
        assert.deepStrictEqual(
          seen.map((message) => message.role),
          [
            "system",
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant"
          ]
        )
        assert.strictEqual((seen[0] as Message.SystemMessage).content, "You are terse.")
        assert.isTrue(Compaction.isSummary(seen[1] as Message.Message))
        assert.include(Message.text(seen[2] as Message.Message), "question 3")
        assertValidHistory(seen)

        // Reopened from the store, the session shows the same compacted view.
        const reopened = yield* Session.open(session.id)
        assert.deepStrictEqual(reopened.compactedContext().toArray(), session.compactedContext().toArray())
      })
    )
  )

  it.effect("a later compaction summarises the earlier summary too, and new turns join the view", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const session = yield* sessionWithTurns(4)
        const model = ScriptedChatModel.make({ replies: ["First summary.", "Second summary."] })
        const perTurn = words.countMessages(toolTurn(0)) - TokenCounter.perRequestOverhead
        const options = { budget: perTurn * 2, keepTokens: perTurn, counter: words }
        const first = yield* session.compact(model, options)
        assert.isTrue(first.compacted)
        for (let index = 4; index < 7; index++) {
          const transaction = session.begin()
          transaction.extend(toolTurn(index))
          yield* session.commit(transaction)
        }
        // The view after the first compaction: its summary, turn 3, and the new turns 4..6.
        assert.strictEqual(session.compactedContext().length, 1 + 4 * 4)
        const second = yield* session.compact(model, options)
        assert.isTrue(second.compacted)
        if (!second.compacted) return
        // The second summariser saw the first summary (not the turns it replaced) and turns 3 to 5.
        const transcript = Message.text(model.requests[1]?.messages.at(-1) as Message.Message)
        assert.include(transcript, "First summary.")
        assert.notInclude(transcript, "question 0")
        assert.include(transcript, "question 5")
        assert.notInclude(transcript, "question 6")
        // It stands for every stored message before turn 6 (the first summary included).
        assert.strictEqual(second.info.keepFrom, 4 * 6 + 1)
        assert.strictEqual(second.info.replaced, 4 * 6 + 1)
        const view = session.compactedContext().toArray()
        assert.strictEqual(view.length, 1 + 4)
        assert.include(Message.text(view[0] as Message.Message), "Second summary.")
        assert.include(Message.text(view[1] as Message.Message), "question 6")
        assert.strictEqual(session.context().length, 7 * 4 + 2)
      })
    )
  )

  it.effect("an empty summary or a failing model changes nothing", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = yield* sessionWithTurns(3)
        const options = { budget: 1, keepTokens: 1, counter: words }
        const empty = yield* Effect.exit(
          session.compact(ScriptedChatModel.make({ replies: ["  "] }), options)
        )
        assert.isTrue(Exit.isFailure(empty))
        const failing = yield* Effect.exit(
          session.compact(
            ScriptedChatModel.make({
              replies: [{ fail: new ModelError.Unavailable({ message: "overloaded" }) }]
            }),
            options
          )
        )
        assert.isTrue(Exit.isFailure(failing))
        assert.strictEqual((yield* store.load(session.id)).messages.length, 12)
        assert.strictEqual(session.compactedContext().length, 12)
      })
    )
  )
})

describe("Session.turnStream with compaction", () => {
  it.effect("compacts first, says so, and the agent sees the summary and the kept tail", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const session = yield* sessionWithTurns(4)
        const model = ScriptedChatModel.make({ replies: ["Older turns: sunny everywhere.", "Noted."] })
        const perTurn = words.countMessages(toolTurn(0)) - TokenCounter.perRequestOverhead
        const events = yield* Stream.runCollect(
          session.turnStream(SessionTesting.replyAgent(), model, "and tomorrow?", {
            compaction: { budget: perTurn * 3, keepTokens: perTurn, counter: words }
          })
        )
        assert.deepStrictEqual([events[0]?.type, events.at(-1)?.type], ["compacted", "committed"])
        const sent = model.requests[1]?.messages ?? []
        assert.deepStrictEqual(
          sent.map((message) => message.role),
          ["system", "system", "user", "assistant", "tool", "assistant", "user"]
        )
        assert.include(Message.text(sent[1] as Message.Message), "sunny everywhere")
        assertValidHistory(sent)
        // Within the budget now: the next turn does not compact again.
        const again = yield* Stream.runCollect(
          session.turnStream(
            SessionTesting.replyAgent(),
            ScriptedChatModel.make({ replies: ["Sure."] }),
            "thanks",
            {
              compaction: { budget: perTurn * 3, keepTokens: perTurn, counter: words }
            }
          )
        )
        assert.notStrictEqual(again[0]?.type, "compacted")
      })
    )
  )

  it.effect("a summary that fails fails the turn, and nothing of it is stored", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = yield* sessionWithTurns(3)
        const model = ScriptedChatModel.make({ replies: [""] })
        const exit = yield* Effect.exit(
          session.turn(SessionTesting.replyAgent(), model, "next", {
            compaction: { budget: 1, keepTokens: 1, counter: words }
          })
        )
        assert.isTrue(Exit.isFailure(exit))
        assert.strictEqual((yield* store.load(session.id)).messages.length, 12)
      })
    )
  )
})
