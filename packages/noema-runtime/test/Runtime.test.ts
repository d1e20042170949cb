/**
 * The runtime's transitions, each with the scripted model and the TestClock
 * (time moves only when a test says so): what each model request contained,
 * what the session stored, and the history's validity.
 */
import { assert, describe, it } from "@effect/vitest"
import { Agent, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Deferred, Effect, Fiber, Schema } from "effect"
import { TestClock } from "effect/testing"
import * as ContextItem from "../src/ContextItem.js"
import * as Runtime from "../src/Runtime.js"
import type * as Submind from "../src/Submind.js"
import * as SubmindModule from "../src/Submind.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { assertValidHistory, assertValidRequests, count, settle, setup } from "./support.js"

const roles = (messages: ReadonlyArray<Message.Message>) => messages.map((message) => message.role)
const texts = (messages: ReadonlyArray<Message.Message>) =>
  messages.map((message) => `${message.role}:${Message.text(message)}`)

/** A tool that waits for the test to open its gate. */
const gatedTool = (gate: Deferred.Deferred<void>, started: Deferred.Deferred<void>) =>
  Tool.make({
    name: "slow",
    description: "Takes a while",
    parameters: Schema.Struct({}),
    handler: () =>
      Effect.gen(function* () {
        yield* Deferred.succeed(started, undefined)
        yield* Deferred.await(gate)
        return "slow done"
      })
  })

const slowCall = { toolCalls: [{ id: "call_slow", name: "slow", arguments: {} }] }

/** A submind turning `note` triggers into items of the given priority. */
const notes = (priority: ContextItem.ContextPriority): Submind.Submind => ({
  name: "notes",
  onTrigger: (trigger) =>
    Effect.succeed(
      trigger.type === "note"
        ? [ContextItem.make(priority, [Message.user(`note: ${String(trigger.payload)}`)], { trigger })]
        : []
    )
})

describe("Runtime", () => {
  it.effect("idle + a message: a cycle starts at once and its turn is committed", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["Hello!"] })
      const { runtime, events, stored } = yield* setup({ model })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("hi"))
      yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
      assert.deepStrictEqual(texts(yield* stored()), ["user:hi", "assistant:Hello!"])
      const report = yield* runtime.stop()
      assert.deepStrictEqual(report.unprocessed, [])
      assert.deepStrictEqual(
        events.map((event) => event.type).filter((type) => type !== "turn"),
        ["started", "idle", "trigger", "cycle-started", "cycle-completed", "idle", "stopped"]
      )
    })
  )

  it.effect(
    "running + ForNextTurn: joins at the next model call, after the results of the calls already made",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const model = ScriptedChatModel.make({ replies: [slowCall, "Both done."] })
        const { runtime, events, stored } = yield* setup({ model, tools: [gatedTool(gate, started)] })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("do the slow thing"))
        yield* Deferred.await(started)
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("and then this"))
        yield* Deferred.succeed(gate, undefined)
        yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
        // One cycle, two model calls; the second saw the tool's result, then the new message.
        assert.strictEqual(count(events, "cycle-started"), 1)
        assert.strictEqual(count(events, "injected"), 1)
        assert.deepStrictEqual(roles(model.requests[1]?.messages ?? []), [
          "user",
          "assistant",
          "tool",
          "user"
        ])
        const history = yield* stored()
        assert.deepStrictEqual(texts(history), [
          "user:do the slow thing",
          "assistant:",
          "tool:slow done",
          "user:and then this",
          "assistant:Both done."
        ])
        assertValidHistory(history)
        yield* runtime.stop()
      })
  )

  it.effect("running + InTheEnd: joins when the loop would finish, which then goes on", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const model = ScriptedChatModel.make({ replies: [slowCall, "Slow is done.", "Noted the note."] })
      const { runtime, events, stored } = yield* setup({
        model,
        tools: [gatedTool(gate, started)],
        subminds: [notes("InTheEnd")]
      })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("go"))
      yield* Deferred.await(started)
      yield* runtime.receiveTrigger(TriggerEvent.make("note", "remember milk"))
      yield* Deferred.succeed(gate, undefined)
      yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
      // Not at the tool boundary: only once the model answered without tools.
      assert.deepStrictEqual(roles(model.requests[1]?.messages ?? []), ["user", "assistant", "tool"])
      assert.deepStrictEqual(texts(yield* stored()), [
        "user:go",
        "assistant:",
        "tool:slow done",
        "assistant:Slow is done.",
        "user:note: remember milk",
        "assistant:Noted the note."
      ])
      yield* runtime.stop()
    })
  )

  it.effect(
    "running + Interruption: the turn stops, the started call is recorded as interrupted, a new cycle starts with the item first",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const model = ScriptedChatModel.make({ replies: [slowCall, "Stopped; what now?"] })
        const { runtime, events, stored } = yield* setup({ model, tools: [gatedTool(gate, started)] })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("do the slow thing"))
        yield* Deferred.await(started)
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("stop that!", { interrupt: true }))
        yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the second cycle")
        assert.strictEqual(count(events, "cycle-interrupted"), 1)
        const history = yield* stored()
        assert.deepStrictEqual(roles(history), ["user", "assistant", "tool", "user", "assistant"])
        const interrupted = history[2] as Message.ToolMessage
        assert.isTrue(interrupted.isError)
        assert.include(interrupted.content, "interrupted; it may have partially run")
        assert.strictEqual(Message.text(history[3] as Message.Message), "stop that!")
        assertValidHistory(history)
        assertValidRequests(model)
        yield* runtime.stop()
      })
  )

  it.effect(
    "an interruption before anything was seen rolls the turn back: its items go back to the front",
    () =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: [{ hang: true }, "Answering both."] })
        const { runtime, events, stored } = yield* setup({ model })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("first"))
        yield* settle(events, () => model.requests.length === 1, "the first model call")
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("urgent", { interrupt: true }))
        yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the second cycle")
        const interrupted = events.find((event) => event.type === "cycle-interrupted")
        assert.deepStrictEqual(interrupted?.type === "cycle-interrupted" && interrupted.kept, [])
        // The interruption first, then the rolled-back item.
        assert.deepStrictEqual(texts(yield* stored()), [
          "user:urgent",
          "user:first",
          "assistant:Answering both."
        ])
        yield* runtime.stop()
      })
  )

  it.effect("text already streamed is kept, marked interrupted", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ["one two three four five six seven eight nine ten", "OK."],
        chunkDelay: "20 millis"
      })
      const { runtime, events, stored } = yield* setup({ model })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("count"))
      // Time passes a word at a time until two words have streamed; the rest has not.
      const deltas = () =>
        events.filter((event) => event.type === "turn" && event.event.type === "text-delta").length
      for (let tick = 0; tick < 10 && deltas() < 2; tick++) {
        yield* TestClock.adjust("20 millis")
        yield* Effect.repeat(Effect.yieldNow, { times: 50 })
      }
      assert.isAtLeast(deltas(), 2)
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("enough", { interrupt: true }))
      // The second answer streams as time passes too.
      for (let tick = 0; tick < 20 && count(events, "cycle-completed") === 0; tick++) {
        yield* TestClock.adjust("20 millis")
        yield* Effect.repeat(Effect.yieldNow, { times: 50 })
      }
      yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the second cycle")
      const history = yield* stored()
      assert.deepStrictEqual(roles(history), ["user", "assistant", "user", "assistant"])
      const partial = history[1] as Message.AssistantMessage
      assert.match(Message.text(partial), /^one two/)
      assert.notInclude(Message.text(partial), "ten")
      assert.deepStrictEqual(partial.metadata, { interrupted: true })
      yield* runtime.stop()
    })
  )

  it.effect(
    "stop cancels the running cycle and reports every item left; triggers after stop are refused",
    () =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: [{ hang: true }] })
        const { runtime, events } = yield* setup({ model, subminds: [notes("InTheEnd")] })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("first"))
        yield* settle(events, () => model.requests.length === 1, "the model call")
        yield* runtime.receiveTrigger(TriggerEvent.make("note", "later"))
        const report = yield* runtime.stop()
        assert.deepStrictEqual(
          report.unprocessed.map((item) => Message.text(item.messages[0] as Message.Message)),
          ["first", "note: later"]
        )
        assert.strictEqual(events.at(-1)?.type, "stopped")
        const refused = yield* Effect.flip(runtime.receiveTrigger(TriggerEvent.fromUser("too late")))
        assert.strictEqual(refused._tag, "RuntimeNotRunning")
        assert.deepStrictEqual(yield* runtime.stop(), { unprocessed: [] })
      })
  )

  it.effect("a trigger still being mapped when stop runs is refused, not queued after the report", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [] })
      // A submind that takes a second (of test time) to map its trigger.
      const thinking = yield* Deferred.make<void>()
      const slow: Submind.Submind = {
        name: "slow",
        onTrigger: (trigger) =>
          Deferred.succeed(thinking, undefined).pipe(
            Effect.andThen(Effect.sleep("1 second")),
            Effect.as([ContextItem.make("InTheEnd", [Message.user("thought about it")], { trigger })])
          )
      }
      const { runtime, events } = yield* setup({ model, subminds: [slow] })
      yield* runtime.start
      const sent = yield* Effect.forkChild(runtime.receiveTrigger(TriggerEvent.make("note", "x")))
      yield* Deferred.await(thinking)
      const report = yield* runtime.stop()
      assert.deepStrictEqual(report.unprocessed, [])
      yield* TestClock.adjust("1 second")
      // Without the check, the item would be queued after `stop` reported, and lost silently.
      const refused = yield* Effect.flip(Fiber.join(sent))
      assert.strictEqual(refused._tag, "RuntimeNotRunning")
      assert.strictEqual(model.requests.length, 0)
      assert.strictEqual(events.at(-1)?.type, "stopped")
    })
  )

  it.effect("stop hears out the hooks it set off (the cancelled cycle's) before onStopped", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [{ hang: true }] })
      const heard: Array<string> = []
      const { runtime, events } = yield* setup({
        model,
        subminds: [
          {
            name: "journal",
            // Takes a moment (of test time) to write down that the cycle was interrupted.
            onCycleInterrupted: (cycle) =>
              Effect.as(Effect.sleep("1 second"), undefined).pipe(
                Effect.andThen(Effect.sync(() => void heard.push(`interrupted ${cycle.number}`)))
              ),
            onStopped: () => Effect.sync(() => void heard.push("stopped"))
          }
        ]
      })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("first"))
      yield* settle(events, () => model.requests.length === 1, "the model call")
      const stopping = yield* Effect.forkChild(runtime.stop())
      yield* settle(events, (all) => count(all, "cycle-interrupted") === 1, "the cancelled cycle")
      yield* TestClock.adjust("1 second")
      const report = yield* Fiber.join(stopping)
      assert.deepStrictEqual(heard, ["interrupted 1", "stopped"])
      assert.strictEqual(report.unprocessed.length, 1)
    })
  )

  it.effect(
    "stop with running: finish lets the cycle finish (items joining it included) and commits it",
    () =>
      Effect.gen(function* () {
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const model = ScriptedChatModel.make({ replies: [slowCall, "All done."] })
        const { runtime, events, stored } = yield* setup({
          model,
          tools: [gatedTool(gate, started)],
          subminds: [notes("InTheEnd")]
        })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("do the slow thing"))
        yield* Deferred.await(started)
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("and this"))
        const stopping = yield* Effect.forkChild(runtime.stop({ running: "finish" }))
        yield* settle(events, () => true, "")
        yield* Deferred.succeed(gate, undefined)
        const report = yield* Fiber.join(stopping)
        assert.deepStrictEqual(report.unprocessed, [])
        assert.strictEqual(count(events, "cycle-completed"), 1)
        assert.strictEqual(count(events, "cycle-interrupted"), 0)
        const history = yield* stored()
        assert.deepStrictEqual(texts(history), [
          "user:do the slow thing",
          "assistant:",
          "tool:slow done",
          "user:and this",
          "assistant:All done."
        ])
        assertValidHistory(history)
        assert.strictEqual(events.at(-1)?.type, "stopped")
      })
  )

  it.effect(
    "an item a submind built by hand (messages without ids) is not run twice after an interruption kept it",
    () =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({
          replies: ["one two three four five six seven eight nine ten", "OK."],
          chunkDelay: "20 millis"
        })
        const raw: Submind.Submind = {
          name: "raw",
          onTrigger: (trigger) =>
            Effect.succeed(
              trigger.type === "note"
                ? [{ id: "note-1", priority: "ForNextTurn" as const, messages: [Message.user("the note")] }]
                : []
            )
        }
        const { runtime, events, stored } = yield* setup({ model, subminds: [raw] })
        yield* runtime.start
        yield* runtime.receiveTrigger(TriggerEvent.make("note", null))
        const deltas = () =>
          events.filter((event) => event.type === "turn" && event.event.type === "text-delta").length
        for (let tick = 0; tick < 10 && deltas() < 2; tick++) {
          yield* TestClock.adjust("20 millis")
          yield* Effect.repeat(Effect.yieldNow, { times: 50 })
        }
        yield* runtime.receiveTrigger(TriggerEvent.fromUser("enough", { interrupt: true }))
        for (let tick = 0; tick < 20 && count(events, "cycle-completed") === 0; tick++) {
          yield* TestClock.adjust("20 millis")
          yield* Effect.repeat(Effect.yieldNow, { times: 50 })
        }
        yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the second cycle")
        const history = yield* stored()
        // The note was kept with the interrupted turn; it leaves the bucket, and is stored once.
        assert.deepStrictEqual(
          history.filter((message) => message.role === "user").map((message) => Message.text(message)),
          ["the note", "enough"]
        )
        assertValidHistory(history)
        const report = yield* runtime.stop()
        assert.deepStrictEqual(report.unprocessed, [])
      })
  )

  it.effect("items an agent took through steering but did not store stay queued when its turn commits", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [] })
      const gate = yield* Deferred.make<void>()
      const waiting = yield* Deferred.make<void>()
      const store = yield* MemoryStore.make()
      const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
      // A careless agent: it polls the steering (taking the items) and answers without them.
      const runtime = yield* Runtime.make({
        session,
        model,
        subminds: [SubmindModule.userMessages],
        agent: (steering) =>
          Agent.make({
            name: "careless",
            execute: () =>
              Effect.gen(function* () {
                yield* Deferred.succeed(waiting, undefined)
                yield* Deferred.await(gate)
                yield* steering({ final: true })
                return [Message.assistant("answered")]
              })
          })
      })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("first"))
      yield* Deferred.await(waiting)
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("second"))
      yield* Deferred.succeed(gate, undefined)
      const report = yield* Effect.gen(function* () {
        // The second message runs in a cycle of its own (the agent answers it there).
        for (let attempt = 0; attempt < 5_000; attempt++) {
          const loaded = yield* store.load(session.id)
          if (loaded.messages.length >= 4) break
          yield* Effect.yieldNow
        }
        return yield* runtime.stop({ running: "finish" })
      })
      const loaded = yield* store.load(session.id)
      assert.deepStrictEqual(texts(loaded.messages), [
        "user:first",
        "assistant:answered",
        "user:second",
        "assistant:answered"
      ])
      assert.deepStrictEqual(report.unprocessed, [])
    })
  )

  it.effect("a failing or hanging hook is reported and harms no other submind", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["fine"] })
      const seen: Array<string> = []
      const { runtime, events, stored } = yield* setup({
        model,
        hookTimeout: "50 millis",
        subminds: [
          { name: "broken", onTrigger: () => Effect.die(new Error("boom")) },
          { name: "stuck", onTrigger: () => Effect.never, onCycleStarted: () => Effect.never },
          {
            name: "healthy",
            onTrigger: (trigger) => Effect.sync(() => void seen.push(trigger.type)).pipe(Effect.as([])),
            onCycleCompleted: () => Effect.sync(() => void seen.push("completed"))
          }
        ]
      })
      yield* runtime.start
      // The stuck submind holds the trigger until its hook times out: time must pass for that.
      const sent = yield* Effect.forkChild(runtime.receiveTrigger(TriggerEvent.fromUser("hi")))
      yield* settle(events, () => true, "")
      yield* TestClock.adjust("60 millis")
      yield* Fiber.join(sent)
      yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the cycle")
      yield* TestClock.adjust("60 millis")
      yield* settle(events, () => seen.includes("completed"), "the healthy hook")
      const failures = events.flatMap((event) =>
        event.type === "hook-failed" ? [`${event.submind}.${event.hook}`] : []
      )
      assert.includeMembers(failures, ["broken.onTrigger", "stuck.onTrigger"])
      assert.include(seen, "user.message")
      assert.deepStrictEqual(texts(yield* stored()), ["user:hi", "assistant:fine"])
      yield* runtime.stop()
    })
  )

  it.effect("a failed turn drops its items and says which", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [{ fail: { _tag: "Unavailable", message: "down" } as never }, "Back."]
      })
      const { runtime, events, stored } = yield* setup({ model })
      yield* runtime.start
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("are you there?"))
      yield* settle(events, (all) => count(all, "cycle-failed") === 1, "the failure")
      const failed = events.find((event) => event.type === "cycle-failed")
      assert.strictEqual(failed?.type === "cycle-failed" && failed.dropped.length, 1)
      assert.deepStrictEqual(yield* stored(), [])
      yield* runtime.receiveTrigger(TriggerEvent.fromUser("now?"))
      yield* settle(events, (all) => count(all, "cycle-completed") === 1, "the next cycle")
      assert.deepStrictEqual(texts(yield* stored()), ["user:now?", "assistant:Back."])
      yield* runtime.stop()
    })
  )
})
