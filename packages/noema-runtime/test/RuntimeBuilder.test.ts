import { assert, describe, it } from "@effect/vitest"
import { PlanAgent, ToolAgent } from "@noema/agents"
import { Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Deferred, Effect, Schema, Stream } from "effect"
import type * as Runtime from "../src/Runtime.js"
import * as RuntimeBuilder from "../src/RuntimeBuilder.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { assertValidHistory, count, waitFor } from "./support.js"

const json = (value: unknown) => JSON.stringify(value)
const draft = (...titles: ReadonlyArray<string>) =>
  json({ thoughts: "t", goal: "g", steps: titles.map((title) => ({ title, detail: title })) })
const review = (decision: "continue" | "finish") =>
  json({ thoughts: "t", outcome: "done", summary: "s", decision, remainingSteps: null })
const send = (text: string) => ({ toolCalls: [{ name: PlanAgent.sendMessageToolName, arguments: { text } }] })
const texts = (messages: ReadonlyArray<Message.Message>) =>
  messages.map((message) => `${message.role}:${Message.text(message)}`)

/** A tool that says it started, then waits for the gate (forever if it is never opened). */
const gated = (gate: Deferred.Deferred<void>, started: Deferred.Deferred<void>, interrupted: Array<string>) =>
  Tool.make({
    name: "slow",
    description: "Takes a while",
    parameters: Schema.Struct({}),
    handler: () =>
      Deferred.succeed(started, undefined).pipe(
        Effect.andThen(Deferred.await(gate)),
        Effect.as("slow done"),
        Effect.onInterrupt(() => Effect.sync(() => void interrupted.push("slow")))
      )
  })
const slowCall = { toolCalls: [{ id: "call_slow", name: "slow", arguments: {} }] }

/** A built runtime on a fresh memory session, its events recorded from the start. */
const built = (configure: (builder: RuntimeBuilder.Builder) => RuntimeBuilder.Builder) =>
  Effect.gen(function* () {
    const store = yield* MemoryStore.make()
    const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
    const runtime = yield* configure(RuntimeBuilder.make().useSession(session)).build()
    const events: Array<Runtime.RuntimeEvent> = []
    const subscription = yield* runtime.subscribe
    yield* Effect.forkChild(
      Stream.runForEach(subscription, (event) => Effect.sync(() => void events.push(event)))
    )
    yield* runtime.start
    return { runtime, session, events }
  })

describe("RuntimeBuilder", () => {
  it.live("builds a runtime from subminds, tools, a model and a session", () =>
    Effect.gen(function* () {
      const store = yield* MemoryStore.make()
      const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
      const echo = Tool.make({
        name: "echo",
        description: "Echoes",
        parameters: Schema.Struct({ text: Schema.String }),
        handler: ({ text }) => Effect.succeed(text)
      })
      const started: Array<string> = []
      const model = ScriptedChatModel.make({
        replies: [{ toolCalls: [{ name: "echo", arguments: { text: "hey" } }] }, "Echoed."]
      })
      const runtime = yield* RuntimeBuilder.make()
        .registerTools(echo)
        .registerSubminds({
          name: "watcher",
          onStarted: () => Effect.sync(() => void started.push("watcher"))
        })
        .useModel(model)
        .useSession(session)
        .build()
      const events: Array<Runtime.RuntimeEvent> = []
      yield* runtime.start
      assert.deepStrictEqual(started, ["watcher"])
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("echo hey"))
      yield* waitFor(events, () => session.context().length === 4, "the turn")
      assert.deepStrictEqual(
        session
          .context()
          .toArray()
          .map((message) => `${message.role}:${Message.text(message)}`),
        ["user:echo hey", "assistant:", "tool:hey", "assistant:Echoed."]
      )
      yield* runtime.stop()
    })
  )

  it.effect("refuses to build without a model or a session", () =>
    Effect.gen(function* () {
      const noModel = yield* Effect.flip(RuntimeBuilder.make().build())
      assert.strictEqual(noModel._tag, "RuntimeBuildError")
      assert.include(noModel.message, "needs a model")
      const noSession = yield* Effect.flip(RuntimeBuilder.make().useModel(ScriptedChatModel.make()).build())
      assert.include(noSession.message, "needs a session")
    })
  )

  it.live(
    "usePlanAgent: a queued message joins the plan at its next step, through the runtime's steering",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const model = ScriptedChatModel.make({
          replies: [
            draft("Fetch", "Report"),
            slowCall,
            "fetched",
            review("continue"),
            "reported",
            review("finish"),
            send("Here it is, and Rome too.")
          ]
        })
        const { runtime, session, events } = yield* built((builder) =>
          builder
            .registerTools(gated(gate, started, []))
            .useModel(model)
            .usePlanAgent({ maxReplans: 1 })
        )
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("fetch it"))
        yield* Deferred.await(started)
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("and Rome too"))
        yield* Deferred.succeed(gate, undefined)
        yield* waitFor(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
        // One cycle: the message joined the running plan after step 1, before its review.
        assert.strictEqual(count(events, "cycle-started"), 1)
        assert.strictEqual(count(events, "injected"), 1)
        const history = session.context().toArray()
        assertValidHistory(history)
        assert.deepStrictEqual(texts(history.filter((message) => message.role !== "system")), [
          "user:fetch it",
          "assistant:",
          "tool:slow done",
          "assistant:fetched",
          "user:and Rome too",
          "assistant:reported",
          "assistant:Here it is, and Rome too."
        ])
        // The review of step 1 and the executor of step 2 saw it.
        const sawIt = (index: number) =>
          texts(model.requests[index]?.messages ?? []).includes("user:and Rome too")
        assert.isTrue(sawIt(3) && sawIt(4))
        assert.isFalse(sawIt(2))
        yield* runtime.stop()
      })
  )

  it.live("usePlanAgent: an Interruption cancels the step under way; the plan starts again with it", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const interrupted: Array<string> = []
      const model = ScriptedChatModel.make({
        replies: [draft("Fetch"), slowCall, draft("Other"), "did the other", review("finish"), send("Done.")]
      })
      const { runtime, session, events } = yield* built((builder) =>
        builder
          .registerTools(gated(gate, started, interrupted))
          .useModel(model)
          .usePlanAgent()
      )
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("fetch it"))
      yield* Deferred.await(started)
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("stop, do the other", { interrupt: true }))
      yield* waitFor(events, (all) => count(all, "cycle-completed") === 1, "the second cycle")
      assert.deepStrictEqual(interrupted, ["slow"])
      assert.strictEqual(count(events, "cycle-interrupted"), 1)
      const second = events.filter((event) => event.type === "cycle-started")[1]
      assert.strictEqual(
        second?.type === "cycle-started" &&
          Message.text(second.cycle.items[0]?.messages[0] as Message.Message),
        "stop, do the other"
      )
      // What the step did is kept, its call answered as interrupted; the new plan follows.
      const history = session.context().toArray()
      assertValidHistory(history)
      const tool = history.find((message) => message.role === "tool")
      assert.include(Message.text(tool as Message.Message), "interrupted")
      assert.strictEqual(Message.text(history.at(-1) as Message.Message), "Done.")
      yield* runtime.stop()
    })
  )

  it.live("useAgent: the agent is made from the registered tools and the runtime's steering", () =>
    Effect.gen(function* () {
      const echo = Tool.make({
        name: "echo",
        description: "Echoes",
        parameters: Schema.Struct({}),
        handler: () => Effect.succeed("echo")
      })
      const seen: Array<ReadonlyArray<string>> = []
      const model = ScriptedChatModel.make({ replies: ["From my agent."] })
      const { runtime, session, events } = yield* built((builder) =>
        builder
          .registerTools(echo)
          .useModel(model)
          .usePlanAgent()
          .useAgent(({ tools, steering }) => {
            seen.push(tools.map((tool) => tool.name))
            return ToolAgent.make({ name: "mine", tools, steering })
          })
      )
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("hi"))
      yield* waitFor(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
      // The last choice wins: one plain model call, no plan.
      assert.deepStrictEqual(seen, [["echo"]])
      assert.strictEqual(model.requests.length, 1)
      assert.deepStrictEqual(texts(session.context().toArray()), ["user:hi", "assistant:From my agent."])
      yield* runtime.stop()
    })
  )

  it.live("useCompaction: a cycle compacts the history first when it passes the budget", () =>
    Effect.gen(function* () {
      const long = (word: string) => `${word} `.repeat(60).trim()
      const model = ScriptedChatModel.make({
        replies: [long("one"), long("two"), "Summary: one, two.", "Three."]
      })
      const { runtime, session, events } = yield* built((builder) =>
        builder.useModel(model).useCompaction({ budget: 60, keepTokens: 1 })
      )
      for (const [index, text] of ["first", "second", "third"].entries()) {
        yield* runtime.receiveTrigger(TriggerEvent.fromUser(text))
        yield* waitFor(events, (all) => count(all, "cycle-completed") === index + 1, `cycle ${index + 1}`)
      }
      const compacted = events.flatMap((event) =>
        event.type === "turn" && event.event.type === "compacted" ? [event.cycle] : []
      )
      assert.isAtLeast(compacted.length, 1)
      // The last request carried the summary instead of the older turns.
      const sent = texts(model.requests.at(-1)?.messages ?? [])
      assert.isTrue(sent.some((line) => line.includes("Summary: one, two.")))
      assert.isFalse(sent.some((line) => line.includes(long("one"))))
      assert.strictEqual(Message.text(session.context().toArray().at(-1) as Message.Message), "Three.")
      yield* runtime.stop()
    })
  )

  describe("replies reach a runtime's client the same way whichever agent runs", () => {
    const modes = {
      ToolAgent: {
        configure: (builder: RuntimeBuilder.Builder) => builder,
        replies: [slowCall, "The answer."]
      },
      PlanAgent: {
        configure: (builder: RuntimeBuilder.Builder) => builder.usePlanAgent(),
        replies: [draft("Work"), slowCall, "working notes", review("finish"), send("The answer.")]
      }
    }
    for (const [mode, { configure, replies }] of Object.entries(modes)) {
      it.live(mode, () =>
        Effect.gen(function* () {
          const gate = yield* Deferred.make<void>()
          yield* Deferred.succeed(gate, undefined)
          const model = ScriptedChatModel.make({ replies })
          const { runtime, session, events } = yield* built((builder) =>
            configure(builder.registerTools(gated(gate, Deferred.makeUnsafe<void>(), [])).useModel(model))
          )
          yield* runtime.receiveTrigger(TriggerEvent.fromUser("question"))
          yield* waitFor(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
          // The text the client streams is the reply, and it is the turn's last message, stored as an
          // assistant message with nothing else in it (no user_sendMessage call is stored).
          const streamed = events
            .flatMap((event) =>
              event.type === "turn" && event.event.type === "text-delta" ? [event.event.delta] : []
            )
            .join("")
          assert.strictEqual(streamed, "The answer.")
          const last = session.context().toArray().at(-1) as Message.AssistantMessage
          assert.strictEqual(last.role, "assistant")
          assert.strictEqual(Message.text(last), "The answer.")
          assert.isFalse(Message.hasToolCalls(last))
          const calls = session
            .context()
            .toArray()
            .flatMap((message) => (message.role === "assistant" ? (message.toolCalls ?? []) : []))
          assert.deepStrictEqual(
            calls.map((call) => call.name),
            ["slow"]
          )
          yield* runtime.stop()
        })
      )
    }
  })
})
