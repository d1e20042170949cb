/**
 * A runtime with a custom submind: a timer that reminds the agent, at the end
 * of whatever it is doing, to report progress; and a person's messages
 * arriving while it works.
 *
 * Runs offline on the scripted model: `node examples/runtime-timer.ts`.
 * Swap in a real model with `.useOpenAi({ model: "gpt-4o-mini" })`.
 */
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { ContextItem, RuntimeBuilder, Submind, TriggerEvent } from "@noema/runtime"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Effect, Fiber, Stream } from "effect"

// The timer's triggers become a note the agent reads when its current turn would end.
const reminders = Submind.make({
  name: "reminders",
  onTrigger: (trigger) =>
    Effect.succeed(
      trigger.type === "timer.tick"
        ? [
            ContextItem.make(
              "InTheEnd",
              [Message.user(`(timer) tick ${String(trigger.payload)}: report progress`)],
              { trigger }
            )
          ]
        : []
    )
})

const model = ScriptedChatModel.make({
  fallback: (request) => `I read: ${Message.text(request.messages.at(-1) as Message.Message)}`
})

const program = Effect.gen(function* () {
  const store = yield* MemoryStore.make()
  const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
  const runtime = yield* RuntimeBuilder.make()
    .registerSubminds(reminders)
    .useModel(model)
    .useSession(session)
    .build()
  // Print what happens: each finished turn's answer.
  const printer = yield* Effect.forkChild(
    Stream.runForEach(runtime.events, (event) =>
      Effect.sync(() => {
        if (event.type === "cycle-completed") {
          const answer = event.committed.at(-1)
          console.log(`turn ${event.cycle.number}: ${answer === undefined ? "" : Message.text(answer)}`)
        }
      })
    )
  )
  yield* Effect.yieldNow
  yield* runtime.start
  // The timer: three ticks, 20 ms apart, pushed as triggers (nothing polls the runtime).
  const timer = yield* Effect.forkChild(
    Effect.gen(function* () {
      for (let tick = 1; tick <= 3; tick++) {
        yield* Effect.sleep("20 millis")
        yield* runtime.receiveTrigger(TriggerEvent.make("timer.tick", tick, { source: "timer" }))
      }
    })
  )
  yield* runtime.receiveTrigger(TriggerEvent.fromUser("start the report"))
  yield* Fiber.join(timer)
  yield* Effect.sleep("100 millis")
  const report = yield* runtime.stop()
  yield* Fiber.interrupt(printer)
  const stored = yield* store.load(session.id)
  console.log(`stored: ${stored.messages.length} messages; left unprocessed: ${report.unprocessed.length}`)
})

Effect.runPromise(program)
