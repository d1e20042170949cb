/**
 * ChatHost's bounds, without a browser: a client that stops reading holds at
 * most `clientBytes` and is let go with `resync` while the turn goes on and is
 * stored; at most `maxChats` runtimes live, an idle one without clients making
 * room and a busy one never closed for it.
 */
import { ToolAgent } from "@noema/agents"
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Runtime as AgentRuntime, Submind } from "@noema/runtime"
import { MemoryStore, type SessionStore } from "@noema/session"
import { Effect, Exit, Scope, Stream } from "effect"
import { describe, expect, it } from "vitest"
import * as ChatHost from "../src/internal/ChatHost.js"

const longAnswer = Array.from({ length: 2000 }, (_, index) => `word${index}`).join(" ")

const hostWith = (sessions: SessionStore.Service, options: Partial<ChatHost.Options> = {}) =>
  ChatHost.make({
    agent: {
      description: "test",
      runtime: (session) =>
        AgentRuntime.make({
          session,
          model: ScriptedChatModel.make({ fallback: longAnswer }),
          subminds: [Submind.userMessages, Submind.approvalDecisions],
          agent: (steering) => ToolAgent.make({ name: "noema", tools: [], steering })
        })
    },
    sessions,
    approver: "test",
    log: () => {},
    ...options
  })

const eventually = (check: () => boolean) =>
  Effect.gen(function* () {
    for (let tries = 0; tries < 2000 && !check(); tries++) yield* Effect.sleep("10 millis")
    expect(check()).toBe(true)
  })

describe("ChatHost", () => {
  it("lets a client that stops reading go with resync, holding at most clientBytes; the turn is stored all the same", async () => {
    const clientBytes = 4096
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const sessions = yield* MemoryStore.make()
          const host = yield* hostWith(sessions, { clientBytes })
          const id = yield* host.create
          const clientScope = yield* Scope.make()
          const frames = yield* host.join(id).pipe(Scope.provide(clientScope))
          let largest = 0
          // The client reads nothing while the 2,000-word answer streams.
          yield* host.send(id, "go on, at length", false)
          yield* eventually(() => {
            largest = Math.max(largest, host.stats().largestHeldBytes)
            return host.stats().largestHeldBytes === 0 && largest > 0
          })
          expect(largest).toBeLessThanOrEqual(clientBytes)
          // What it was handed ends with resync: it reads the session again and comes back.
          const taken = yield* Stream.runCollect(Stream.filter(frames, (frame) => frame.event === "chat"))
          expect(taken.at(-1)).toEqual({ event: "chat", data: { type: "resync" } })
          expect(taken.length).toBeLessThan(200)
          yield* Scope.close(clientScope, Exit.void)
          yield* eventually(() => host.stats().clients === 0)
          const answer = yield* Effect.gen(function* () {
            for (let tries = 0; tries < 2000; tries++) {
              // Stored with its first turn: until then there is no such session.
              const loaded = yield* Effect.option(sessions.load(id))
              const last = loaded._tag === "Some" ? loaded.value.messages.at(-1) : undefined
              if (last?.role === "assistant") return Message.text(last)
              yield* Effect.sleep("10 millis")
            }
            return undefined
          })
          expect(answer).toBe(longAnswer)
        })
      )
    )
  }, 60_000)

  it("keeps at most maxChats runtimes: an idle chat without clients makes room, one with a client does not", async () => {
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const sessions = yield* MemoryStore.make()
          const host = yield* hostWith(sessions, { maxChats: 1 })
          const first = yield* host.create
          yield* host.create
          expect(host.stats().chats).toBe(1)
          // The second is live and followed: a third finds no room.
          const followed = yield* host.create
          const clientScope = yield* Scope.make()
          yield* host.join(followed).pipe(Scope.provide(clientScope))
          const refused = yield* Effect.flip(host.create)
          expect(refused).toBeInstanceOf(ChatHost.ChatRefused)
          expect((refused as ChatHost.ChatRefused).reason).toBe("TooManyChats")
          yield* Scope.close(clientScope, Exit.void)
          // A closed draft (never stored) is gone: asking for it again says so.
          const gone = yield* Effect.flip(host.send(first, "hello?", false))
          expect((gone as ChatHost.ChatRefused).reason).toBe("NoSession")
        })
      )
    )
  }, 60_000)
})
