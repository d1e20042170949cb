/**
 * The turn runner of `ask`: its outcome is what the session
 * reported (the `committed` event, a typed failure, a cancellation), never a
 * guess from the history's length.
 */
import { assert, describe, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { Agent, type Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { SessionTesting } from "@noema/session/testing"
import { Effect, Fiber } from "effect"
import * as TurnRunner from "../src/TurnRunner.js"

const agent = ToolAgent.make({ name: "test", tools: [] })

const contents = (messages: Iterable<Message.Message>): Array<string> =>
  Array.from(messages, (message) => `${message.role}: ${message.content}`)

/** Records what the runner drew, in order. */
const recorder = () => {
  const calls: Array<string> = []
  const renderer: TurnRunner.Renderer = {
    start: () => void calls.push("start"),
    event: (event) => void calls.push(event.type),
    end: () => void calls.push("end")
  }
  return { calls, renderer }
}

const holdingStore = Effect.map(MemoryStore.make(), SessionTesting.holdingStore)

const inStore =
  (store: SessionStore.Service) =>
  <A, E>(effect: Effect.Effect<A, E, SessionStore.SessionStore>) =>
    Effect.provideService(effect, SessionStore.SessionStore, store)

const { hangingModel } = SessionTesting

describe("TurnRunner.run", () => {
  it.effect(
    "a stored turn is Committed with exactly the stored messages; the renderer never sees `committed`",
    () =>
      Effect.gen(function* () {
        const store = yield* MemoryStore.make()
        const session = yield* inStore(store)(Session.create())
        const { calls, renderer } = recorder()
        const outcome = yield* TurnRunner.run({
          session,
          agent,
          model: ScriptedChatModel.make({ replies: ["Hello."] }),
          input: "Hi",
          renderer
        })
        assert.strictEqual(outcome._tag, "Committed")
        if (outcome._tag !== "Committed") return
        assert.isFalse(outcome.cancelRequested)
        assert.deepStrictEqual(outcome.messages, (yield* store.load(session.id)).messages)
        assert.deepStrictEqual(contents(outcome.messages), ["user: Hi", "assistant: Hello."])
        assert.isTrue(outcome.messages.every((message) => message.id !== undefined))
        assert.strictEqual(calls[0], "start")
        assert.strictEqual(calls.at(-1), "end")
        assert.notInclude(calls, "committed")
        assert.include(calls, "text-delta")
      })
  )

  it.effect("a commit conflict is Failed with SessionConflictError, and nothing is saved", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.make()
      const mine = yield* inStore(store)(Session.create())
      const theirs = yield* inStore(store)(Session.open(mine.id))
      yield* theirs.turn(agent, ScriptedChatModel.make({ replies: ["Theirs."] }), "elsewhere")
      const { calls, renderer } = recorder()
      const outcome = yield* TurnRunner.run({
        session: mine,
        agent,
        model: ScriptedChatModel.make({ replies: ["Mine."] }),
        input: "here",
        renderer
      })
      assert.strictEqual(outcome._tag, "Failed")
      if (outcome._tag === "Failed") assert.instanceOf(outcome.error, SessionStore.SessionConflictError)
      assert.strictEqual(calls.at(-1), "end")
      assert.deepStrictEqual(contents((yield* store.load(mine.id)).messages), [
        "user: elsewhere",
        "assistant: Theirs."
      ])
    })
  )

  it.effect("a failing model is Failed with the AgentError", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.make()
      const session = yield* inStore(store)(Session.create())
      const outcome = yield* TurnRunner.run({
        session,
        agent,
        model: ScriptedChatModel.make({ replies: [] }),
        input: "Hi"
      })
      assert.strictEqual(outcome._tag, "Failed")
      if (outcome._tag === "Failed") assert.instanceOf(outcome.error, Agent.AgentError)
      assert.deepStrictEqual((yield* store.load(session.id)).messages, [])
    })
  )

  it.effect("Ctrl-C while the model answers is Cancelled: the request is aborted and nothing is saved", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.make()
      const session = yield* inStore(store)(Session.create())
      const { model, received } = hangingModel()
      const controller = new AbortController()
      const fiber = yield* Effect.forkChild(
        TurnRunner.run({ session, agent, model, input: "Wait", signal: controller.signal })
      )
      yield* received.await
      yield* Effect.repeat(Effect.yieldNow, { times: 20 })
      controller.abort()
      const outcome = yield* Fiber.join(fiber)
      assert.deepStrictEqual(outcome, { _tag: "Cancelled" })
      assert.strictEqual(model.requests[0]?.interrupted, true)
      assert.deepStrictEqual((yield* store.load(session.id)).messages, [])
    })
  )

  it.effect("Ctrl-C during the commit: the turn is saved and reported Committed, with cancelRequested", () =>
    Effect.gen(function* () {
      const held = yield* holdingStore
      const session = yield* inStore(held.store)(Session.create())
      held.hold()
      const controller = new AbortController()
      const fiber = yield* Effect.forkChild(
        TurnRunner.run({
          session,
          agent,
          model: ScriptedChatModel.make({ replies: ["Done."] }),
          input: "Go",
          signal: controller.signal
        })
      )
      yield* held.entered.await
      controller.abort()
      yield* Effect.repeat(Effect.yieldNow, { times: 20 })
      held.release()
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome._tag, "Committed")
      if (outcome._tag !== "Committed") return
      assert.isTrue(outcome.cancelRequested)
      assert.deepStrictEqual(outcome.messages, (yield* held.store.load(session.id)).messages)
      assert.deepStrictEqual(contents(outcome.messages), ["user: Go", "assistant: Done."])
    })
  )
})
