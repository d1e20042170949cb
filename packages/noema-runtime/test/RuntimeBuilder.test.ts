import { assert, describe, it } from "@effect/vitest"
import { Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Effect, Schema } from "effect"
import type * as Runtime from "../src/Runtime.js"
import * as RuntimeBuilder from "../src/RuntimeBuilder.js"
import * as TriggerEvent from "../src/TriggerEvent.js"
import { waitFor } from "./support.js"

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
})
