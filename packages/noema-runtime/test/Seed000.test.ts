/**
 * Seed 000's flows (the event-driven runtime), run as written with noema's names:
 * `ViMateAgentBuilder` is `RuntimeBuilder` (`.RegisterSubminds` -> `registerSubminds`,
 * `.RegisterTools` -> `registerTools`, `.UseOpenAi` -> `useOpenAi`, `.Build` -> `build`),
 * `StartAsync/StopAsync/ReceiveTriggerAsync` are `start/stop/receiveTrigger`, `SubmindBase`
 * is a `Submind` of hooks, the MSAF workflow is `PlanAgent` (`usePlanAgent`), and
 * `user.sendMessage` is the tool `user_sendMessage`. Left out on purpose: the .NET
 * validation commands (dotnet restore/build/run), and `useOpenAi` against the real API
 * (no network here; the builder is given a scripted model with `useModel`).
 */
import { assert, describe, it } from "@effect/vitest"
import { PlanAgent } from "@noema/agents"
import { Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Deferred, Effect, Schema, Stream } from "effect"
import * as ContextItem from "../src/ContextItem.js"
import type * as Runtime from "../src/Runtime.js"
import * as RuntimeBuilder from "../src/RuntimeBuilder.js"
import * as Submind from "../src/Submind.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { count, waitFor } from "./support.js"

const json = (value: unknown) => JSON.stringify(value)
const draft = (...titles: ReadonlyArray<string>) =>
  json({ thoughts: "t", goal: "g", steps: titles.map((title) => ({ title, detail: title })) })
const review = (decision: "continue" | "finish") =>
  json({ thoughts: "t", outcome: "done", summary: "s", decision, remainingSteps: null })
const send = (text: string) => ({ toolCalls: [{ name: PlanAgent.sendMessageToolName, arguments: { text } }] })

const recording = (runtime: Runtime.Runtime) =>
  Effect.gen(function* () {
    const events: Array<Runtime.RuntimeEvent> = []
    const subscription = yield* runtime.subscribe
    yield* Effect.forkChild(
      Stream.runForEach(subscription, (event) => Effect.sync(() => void events.push(event)))
    )
    return events
  })

const newSession = Effect.flatMap(MemoryStore.make(), (store) =>
  Effect.provideService(Session.create(), SessionStore.SessionStore, store)
)

describe("seed 000, as written", () => {
  it.live(
    "Console Sample: build, start, each line a TriggerEvent, replies via user.sendMessage, /exit stops",
    () =>
      Effect.gen(function* () {
        const session = yield* newSession
        // The plan-driven workflow: think/plan, execute step, validate, loop, finalize, notify.
        const model = ScriptedChatModel.make({
          replies: [
            draft("Look it up"),
            "Lisbon has 545k people.",
            review("finish"),
            send("About 545 thousand."),
            draft("Note it"),
            "noted",
            review("finish"),
            // Work the user need not hear about: the notify decision sends nothing.
            "nothing to say"
          ]
        })
        const runtime = yield* RuntimeBuilder.make()
          .useModel(model)
          .useSession(session)
          .usePlanAgent()
          .build()
        const events = yield* recording(runtime)
        yield* runtime.start
        const printed: Array<string> = []
        const lines = ["How many people live in Lisbon?", "remember that", "/exit"]
        for (const line of lines) {
          if (line === "/exit") break
          yield* runtime.receiveTrigger(TriggerEvent.fromUser(line))
          const cycles = count(events, "cycle-completed") + 1
          yield* waitFor(events, (all) => count(all, "cycle-completed") === cycles, `cycle ${cycles}`)
          const last = events.findLast((event) => event.type === "cycle-completed")
          if (last?.type !== "cycle-completed") continue
          // What the user is sent is the last committed assistant message that carries the notify decision.
          const reply = last.committed.at(-1)
          if (reply?.role === "assistant" && (reply.metadata?.plan as { notified?: boolean })?.notified)
            printed.push(Message.text(reply))
        }
        const report = yield* runtime.stop()
        assert.deepStrictEqual(printed, ["About 545 thousand."])
        assert.deepStrictEqual(report.unprocessed, [])
        // Stopped: triggers are refused.
        const refused = yield* Effect.flip(runtime.receiveTrigger(TriggerEvent.fromUser("late")))
        assert.strictEqual(refused._tag, "RuntimeNotRunning")
      })
  )

  it.live(
    "Context bucket: Interruption before ForNextTurn before InTheEnd, FIFO within each; idle starts at once",
    () =>
      Effect.gen(function* () {
        const session = yield* newSession
        const gate = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const slow = Tool.make({
          name: "slow",
          description: "Takes a while",
          parameters: Schema.Struct({}),
          handler: () =>
            Deferred.succeed(started, undefined).pipe(
              Effect.andThen(Deferred.await(gate)),
              Effect.as("slow done")
            )
        })
        // A submind that maps a generic `note` trigger to an item of the priority it names.
        const notes = Submind.make({
          name: "notes",
          onTrigger: (trigger) =>
            Effect.sync(() => {
              if (trigger.type !== "note") return []
              const { text, priority } = trigger.payload as {
                text: string
                priority: ContextItem.ContextPriority
              }
              return [ContextItem.make(priority, [Message.user(text)], { trigger })]
            })
        })
        const note = (text: string, priority: ContextItem.ContextPriority) =>
          TriggerEvent.make("note", { text, priority }, { source: "notes" })
        const model = ScriptedChatModel.make({
          replies: [{ toolCalls: [{ id: "c1", name: "slow", arguments: {} }] }, "first done", "second done"]
        })
        const runtime = yield* RuntimeBuilder.make()
          .registerSubminds(notes)
          .registerTools(slow)
          .useModel(model)
          .useSession(session)
          .build()
        const events = yield* recording(runtime)
        yield* runtime.start
        // Idle: the context starts a cycle immediately.
        yield* runtime.receiveTrigger(note("start", "ForNextTurn"))
        yield* Deferred.await(started)
        // Running: InTheEnd items wait for the loop's end, ForNextTurn ones join at the next boundary.
        yield* runtime.receiveTrigger(note("end-1", "InTheEnd"))
        yield* runtime.receiveTrigger(note("next-1", "ForNextTurn"))
        yield* runtime.receiveTrigger(note("next-2", "ForNextTurn"))
        yield* Deferred.succeed(gate, undefined)
        yield* waitFor(
          events,
          () =>
            session
              .context()
              .toArray()
              .some((m) => Message.text(m) === "end-1"),
          "end-1"
        )
        yield* waitFor(events, (all) => count(all, "idle") >= 1 && model.requests.length >= 3, "the end")
        const users = session
          .context()
          .toArray()
          .filter((message) => message.role === "user")
          .map(Message.text)
        assert.deepStrictEqual(users, ["start", "next-1", "next-2", "end-1"])
        // The ForNextTurn items reached the model before the InTheEnd one.
        const secondRequest = model.requests[1]!.messages.map(Message.text)
        assert.includeMembers(secondRequest, ["next-1", "next-2"])
        assert.notInclude(secondRequest, "end-1")
        yield* runtime.stop()
      })
  )
})
