/**
 * Seed 002's own examples (the core design: read-only context, agent as a pure
 * function, the transaction), run as written with noema's names: `ChatMessage` is
 * `Message`, `session.transaction_context(&tx)` is `session.transactionContext(tx)`,
 * `WindowedContext::new(messages, 10)` is `ConversationContext.window(messages, 10)`,
 * `FilteredContext::without_system` is `ConversationContext.withoutSystem`,
 * `ComposedContext::new().with_system(..).with_messages(..)` is `ConversationContext.compose`.
 * Left out on purpose: the Rust-only points (`async_trait`, `impl Iterator`, zero-copy
 * borrows); noema's views are live and copy nothing, which the window test checks.
 */
import { assert, describe, it } from "@effect/vitest"
import { AgentPipeline, SimpleAgent } from "@noema/agents"
import { Agent, ConversationContext, Message, Transaction } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect } from "effect"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Session from "../src/Session.js"
import { SessionStore } from "../src/SessionStore.js"

const texts = (messages: Iterable<Message.Message>) =>
  Array.from(messages, (message) => `${message.role}:${Message.text(message)}`)

const withSession = <A, E>(body: (session: Session.Session) => Effect.Effect<A, E, SessionStore>) =>
  Effect.flatMap(MemoryStore.make(), (store) =>
    Effect.provideService(Effect.flatMap(Session.create(), body), SessionStore, store)
  )

/** The seed's `is_valid(tx.pending())`: here, an answer that is not empty. */
const isValid = (pending: ConversationContext.ConversationContext) =>
  pending.toArray().some((message) => message.role === "assistant" && Message.text(message).length > 0)

describe("seed 002, as written", () => {
  it.effect("Typical Flow: add input, agent sees committed + pending, extend, commit", () =>
    withSession((session) =>
      Effect.gen(function* () {
        const agent = SimpleAgent.make()
        const model = ScriptedChatModel.make({ replies: ["Hi there."] })
        // 1. Session adds user input to transaction
        const tx = session.begin()
        tx.add(Message.user("Hello"))
        // 2. Session creates context (committed + pending)
        const context = session.transactionContext(tx)
        // 3. Agent executes (sees user input in context)
        const messages = yield* agent.execute(context, model)
        assert.deepStrictEqual(texts(model.requests[0]!.messages), ["user:Hello"])
        // 4. Session adds agent's output to transaction
        tx.extend(messages)
        // 5. Session validates and commits (or rolls back)
        assert.isTrue(isValid(tx.pending))
        yield* session.commit(tx)
        assert.deepStrictEqual(texts(session.context()), ["user:Hello", "assistant:Hi there."])
        // Consumed on commit: it cannot be reused.
        assert.throws(() => tx.add(Message.user("again")), /committed/)
      })
    )
  )

  it.effect("Typical Flow, the other branch: an invalid turn is rolled back and nothing is stored", () =>
    withSession((session) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: [""] })
        const tx = session.begin()
        tx.add(Message.user("Hello"))
        tx.extend(yield* SimpleAgent.make().execute(session.transactionContext(tx), model))
        assert.isFalse(isValid(tx.pending))
        yield* session.rollback(tx)
        assert.strictEqual(tx.state, "rolled-back")
        assert.strictEqual(session.context().length, 0)
        assert.throws(() => tx.commit(), /rolled-back/)
      })
    )
  )

  it.effect("Transaction: dropped without commit or rollback, it warns and loses its messages", () =>
    Effect.sync(() => {
      const reports: Array<Transaction.UnfinishedReport> = []
      {
        using tx = Transaction.make({ onUnfinished: (report) => reports.push(report) })
        tx.add(Message.user("lost"))
      }
      assert.deepStrictEqual(
        reports.map((report) => [report.pendingCount, report.detectedBy]),
        [[1, "dispose"]]
      )
    })
  )

  it.effect("Composability: AgentPipeline.new().add(Search).add(Summarize).add(Translate)", () =>
    Effect.gen(function* () {
      // Each stage sees the context plus what the stages before it produced.
      const seen: Array<Array<string>> = []
      const stage = (name: string, reply: string) =>
        Agent.make({
          name,
          execute: (context) =>
            Effect.sync(() => {
              seen.push(texts(context))
              return [Message.assistant(reply)]
            })
        })
      const pipeline = AgentPipeline.make([])
        .add(stage("search", "found: tea is from China"))
        .add(stage("summarize", "summary: tea, China"))
        .add(stage("translate", "resumo: chá, China"))
      const context = ConversationContext.of(Message.user("tea origin, in Portuguese"))
      const messages = yield* pipeline.execute(context, ScriptedChatModel.make())
      assert.deepStrictEqual(texts(messages), [
        "assistant:found: tea is from China",
        "assistant:summary: tea, China",
        "assistant:resumo: chá, China"
      ])
      assert.deepStrictEqual(seen, [
        ["user:tea origin, in Portuguese"],
        ["user:tea origin, in Portuguese", "assistant:found: tea is from China"],
        [
          "user:tea origin, in Portuguese",
          "assistant:found: tea is from China",
          "assistant:summary: tea, China"
        ]
      ])
    })
  )

  it.effect("Testability: a mock context of one user message, a mock model", () =>
    Effect.gen(function* () {
      const context = ConversationContext.of(Message.user("test input"))
      const mockModel = ScriptedChatModel.make({ replies: ["test output"] })
      const messages = yield* SimpleAgent.make().execute(context, mockModel)
      assert.deepStrictEqual(texts(messages), ["assistant:test output"])
      assert.deepStrictEqual(texts(mockModel.requests[0]!.messages), ["user:test input"])
    })
  )

  it("Flexibility: windowed, filtered and composed contexts over the same messages", () => {
    const messages: Array<Message.Message> = [Message.system("old rules")]
    for (let i = 1; i <= 12; i++) messages.push(Message.user(`m${i}`))
    const windowed = ConversationContext.window(ConversationContext.fromArray(messages), 10) // Last 10 only
    assert.deepStrictEqual(
      texts(windowed),
      Array.from({ length: 10 }, (_, i) => `user:m${i + 3}`)
    )
    const filtered = ConversationContext.withoutSystem(ConversationContext.fromArray(messages)) // No system msgs
    assert.strictEqual(filtered.length, 12)
    assert.isFalse(texts(filtered).includes("system:old rules"))
    const composed = ConversationContext.compose({ system: "You are helpful", history: filtered })
    assert.deepStrictEqual(texts(composed).slice(0, 2), ["system:You are helpful", "user:m1"])
    // Views, not copies: a message added later shows in each of them.
    messages.push(Message.user("m13"))
    assert.strictEqual(windowed.last && Message.text(windowed.last), "m13")
    assert.strictEqual(composed.length, 14)
  })

  it("Safe: the context is read-only (an agent cannot change history through it)", () => {
    const context = ConversationContext.of(Message.user("history"))
    assert.notProperty(context, "push")
    const copy = context.toArray()
    copy.push(Message.user("injected"))
    assert.deepStrictEqual(texts(context), ["user:history"])
  })
})
