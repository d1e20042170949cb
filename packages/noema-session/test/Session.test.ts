/**
 * How a turn reports its end: `turnStream`'s `committed` event, a commit that
 * fails as a typed error, cancellation through `TurnOptions.signal`, an
 * interruption during the commit; and the session as the one home of the
 * system prompt. (Store behaviour is the conformance suite's.)
 */
import { assert, describe, it } from "@effect/vitest"
import type { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Cause, Effect, Exit, Fiber, Stream } from "effect"
import * as MemoryStore from "../src/MemoryStore.js"
import * as Session from "../src/Session.js"
import { SessionConflictError, SessionStore } from "../src/SessionStore.js"
import * as SessionTesting from "../src/SessionTesting.js"

const replyAgent = SessionTesting.replyAgent("test-agent")

const contents = (messages: Iterable<Message.Message>): Array<string> =>
  Array.from(messages, (message) => `${message.role}: ${message.content}`)

const holdingStore = Effect.map(MemoryStore.make(), SessionTesting.holdingStore)

const withMemoryStore = <A, E>(body: Effect.Effect<A, E, SessionStore>) =>
  Effect.flatMap(MemoryStore.make(), (store) => Effect.provideService(body, SessionStore, store))

const { hangingModel } = SessionTesting

const settle = Effect.repeat(Effect.yieldNow, { times: 20 })

describe("Session.turnStream", () => {
  it.effect("ends with a committed event holding exactly the stored messages, with ids", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const session = yield* Session.create()
        const events = yield* Stream.runCollect(
          session.turnStream(replyAgent, ScriptedChatModel.make({ replies: ["Four."] }), "2 + 2?")
        )
        const last = events.at(-1)
        assert.strictEqual(last?.type, "committed")
        if (last?.type !== "committed") return
        assert.strictEqual(events.filter((event) => event.type === "committed").length, 1)
        const stored = yield* store.load(session.id)
        assert.deepStrictEqual(last.messages, stored.messages)
        assert.deepStrictEqual(contents(last.messages), ["user: 2 + 2?", "assistant: Four."])
        for (const message of last.messages) {
          assert.isString(message.id)
          assert.isNumber(message.createdAt)
        }
        assert.deepStrictEqual(session.context().toArray(), [...last.messages])
      })
    )
  )

  it.effect("a second turn's committed event holds only that turn", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["One", "Two"] })
        const session = yield* Session.create()
        yield* Stream.runDrain(session.turnStream(replyAgent, model, "first"))
        const events = yield* Stream.runCollect(session.turnStream(replyAgent, model, "second"))
        const last = events.at(-1)
        assert.strictEqual(last?.type, "committed")
        if (last?.type === "committed") {
          assert.deepStrictEqual(contents(last.messages), ["user: second", "assistant: Two"])
          assert.deepStrictEqual(last.messages, session.context().toArray().slice(2))
        }
      })
    )
  )

  it.effect("a commit conflict fails the stream with SessionConflictError and no committed event", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const mine = yield* Session.create()
        const theirs = yield* Session.open(mine.id)
        yield* theirs.turn(replyAgent, ScriptedChatModel.make({ replies: ["Theirs"] }), "from elsewhere")
        const seen: Array<Session.TurnEvent> = []
        const error = yield* Effect.flip(
          Stream.runForEach(
            mine.turnStream(replyAgent, ScriptedChatModel.make({ replies: ["Mine"] }), "from here"),
            (event) => Effect.sync(() => void seen.push(event))
          )
        )
        assert.instanceOf(error, SessionConflictError)
        assert.isFalse(seen.some((event) => event.type === "committed"))
        assert.isTrue(
          seen.some((event) => event.type === "message"),
          "the agent's events came first"
        )
        assert.deepStrictEqual(contents((yield* store.load(mine.id)).messages), [
          "user: from elsewhere",
          "assistant: Theirs"
        ])
      })
    )
  )

  it.effect("interrupting the stream during the commit still stores the turn", () =>
    Effect.gen(function* () {
      const held = yield* holdingStore
      yield* Effect.provideService(
        Effect.gen(function* () {
          const session = yield* Session.create()
          held.hold()
          const fiber = yield* Effect.forkChild(
            Stream.runDrain(
              session.turnStream(replyAgent, ScriptedChatModel.make({ replies: ["Saved"] }), "Go")
            )
          )
          yield* held.entered.await
          const interrupting = yield* Effect.forkChild(Fiber.interrupt(fiber))
          yield* settle
          held.release()
          yield* Fiber.join(interrupting)
          assert.deepStrictEqual(contents((yield* held.store.load(session.id)).messages), [
            "user: Go",
            "assistant: Saved"
          ])
          assert.deepStrictEqual(contents(session.context()), ["user: Go", "assistant: Saved"])
        }),
        SessionStore,
        held.store
      )
    })
  )

  it.effect("aborting the signal while the agent runs cancels the model call and stores nothing", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const { model, received } = hangingModel()
        const session = yield* Session.create()
        const controller = new AbortController()
        const fiber = yield* Effect.forkChild(
          Effect.exit(
            Stream.runCollect(session.turnStream(replyAgent, model, "Wait", { signal: controller.signal }))
          )
        )
        yield* received.await
        yield* settle
        controller.abort()
        const exit = yield* Fiber.join(fiber)
        assert.isTrue(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause), String(exit))
        assert.strictEqual(model.requests[0]?.interrupted, true, "the model stream was cancelled")
        assert.strictEqual(session.context().length, 0)
        assert.deepStrictEqual((yield* store.load(session.id)).messages, [])
      })
    )
  )

  it.effect(
    "aborting the signal during the commit does not stop it: the stream still ends with committed",
    () =>
      Effect.gen(function* () {
        const held = yield* holdingStore
        yield* Effect.provideService(
          Effect.gen(function* () {
            const session = yield* Session.create()
            held.hold()
            const controller = new AbortController()
            const fiber = yield* Effect.forkChild(
              Stream.runCollect(
                session.turnStream(replyAgent, ScriptedChatModel.make({ replies: ["Kept"] }), "Go", {
                  signal: controller.signal
                })
              )
            )
            yield* held.entered.await
            controller.abort()
            yield* settle
            held.release()
            const events = yield* Fiber.join(fiber)
            const last = events.at(-1)
            assert.strictEqual(last?.type, "committed")
            if (last?.type === "committed") {
              assert.deepStrictEqual(last.messages, (yield* held.store.load(session.id)).messages)
            }
          }),
          SessionStore,
          held.store
        )
      })
  )
})

describe("Session.turn", () => {
  it.effect("aborting the signal cancels the turn and stores nothing", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const store = yield* SessionStore
        const { model, received } = hangingModel()
        const session = yield* Session.create()
        const controller = new AbortController()
        const fiber = yield* Effect.forkChild(
          Effect.exit(session.turn(replyAgent, model, "Wait", { signal: controller.signal }))
        )
        yield* received.await
        yield* settle
        controller.abort()
        const exit = yield* Fiber.join(fiber)
        assert.isTrue(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause), String(exit))
        assert.strictEqual(model.requests[0]?.interrupted, true)
        assert.deepStrictEqual((yield* store.load(session.id)).messages, [])
      })
    )
  )
})

describe("the system prompt", () => {
  const systemMessages = (model: ScriptedChatModel.ScriptedChatModel, index: number) =>
    contents(model.requests[index]?.messages ?? []).filter((line) => line.startsWith("system: "))

  it.effect("a turn's request carries exactly one system message: the session's", () =>
    withMemoryStore(
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["a", "b", "c"] })
        const session = yield* Session.create({ systemPrompt: "Be terse." })
        yield* Stream.runDrain(session.turnStream(replyAgent, model, "one"))
        assert.deepStrictEqual(systemMessages(model, 0), ["system: Be terse."])
        yield* session.setSystemPrompt("Be verbose.")
        yield* session.turn(replyAgent, model, "two")
        assert.deepStrictEqual(systemMessages(model, 1), ["system: Be verbose."])
        // The session's history does not record it: it lives in the metadata alone.
        assert.deepStrictEqual(systemMessages(model, 1).length, 1)
        assert.isFalse(contents(session.context()).some((line) => line.startsWith("system: ")))
        yield* session.setSystemPrompt(undefined)
        yield* session.turn(replyAgent, model, "three")
        assert.deepStrictEqual(systemMessages(model, 2), [])
      })
    )
  )

  it("TurnOptions has no per-turn system prompt", () => {
    // @ts-expect-error the session is the one home of the system prompt
    const options: Session.TurnOptions = { systemPrompt: "Just this once." }
    assert.isDefined(options)
  })
})
