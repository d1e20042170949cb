import { assert } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, ConversationContext, type Message, type Tool } from "@noema/core"
import type { ScriptedChatModel } from "@noema/core/testing"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Effect, Fiber, Stream } from "effect"
import * as Runtime from "../src/Runtime.js"
import type * as RuntimeBuilder from "../src/RuntimeBuilder.js"
import * as Submind from "../src/Submind.js"

/** The runtime's default agent (the builder's): the tool loop, steered by the runtime. */
export const toolAgent = ({ tools, steering }: RuntimeBuilder.AgentParts): Agent.Agent =>
  ToolAgent.make({ name: "runtime", tools, steering })

/** A runtime on a fresh memory session, its events recorded from the start. */
export const setup = (options: {
  readonly model: ChatModel.Service
  readonly tools?: ReadonlyArray<Tool.Any>
  /** The cycles' agent, made as the builder makes it (default: `toolAgent`). */
  readonly agent?: (parts: RuntimeBuilder.AgentParts) => Agent.Agent
  readonly subminds?: ReadonlyArray<Submind.Submind>
  readonly hookTimeout?: string
}) =>
  Effect.gen(function* () {
    const store = yield* MemoryStore.make()
    const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
    const runtime = yield* Runtime.make({
      session,
      model: options.model,
      subminds: [Submind.userMessages, Submind.approvalDecisions, ...(options.subminds ?? [])],
      agent: (steering) => (options.agent ?? toolAgent)({ tools: options.tools ?? [], steering }),
      ...(options.hookTimeout !== undefined && { hookTimeout: options.hookTimeout as never })
    })
    const events: Array<Runtime.RuntimeEvent> = []
    // Subscribed once `subscribe` returns: the recorder misses nothing published after it.
    const subscription = yield* runtime.subscribe
    const recorder = yield* Effect.forkChild(
      Stream.runForEach(subscription, (event) => Effect.sync(() => void events.push(event)))
    )
    const stored = () => Effect.map(store.load(session.id), (loaded) => loaded.messages)
    return { runtime, session, store, events, recorder, stored }
  })

/**
 * Lets the runtime's fibers run (no time passes: under `TestClock` only
 * `TestClock.adjust` moves time) until `predicate` holds of the recorded events.
 */
export const settle = (
  events: ReadonlyArray<Runtime.RuntimeEvent>,
  predicate: (events: ReadonlyArray<Runtime.RuntimeEvent>) => boolean,
  what: string
) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < 5_000; attempt++) {
      if (predicate(events)) return
      yield* Effect.yieldNow
    }
    assert.fail(`never reached: ${what}; events: ${events.map((event) => event.type).join(", ")}`)
  })

/** Waits (real time, bounded) until `predicate` holds of the recorded events. */
export const waitFor = (
  events: ReadonlyArray<Runtime.RuntimeEvent>,
  predicate: (events: ReadonlyArray<Runtime.RuntimeEvent>) => boolean,
  what: string
) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < 400; attempt++) {
      if (predicate(events)) return
      yield* Effect.sleep("5 millis")
    }
    assert.fail(`timed out waiting for ${what}; events: ${events.map((event) => event.type).join(", ")}`)
  })

export const count = (events: ReadonlyArray<Runtime.RuntimeEvent>, type: Runtime.RuntimeEvent["type"]) =>
  events.filter((event) => event.type === type).length

/** The invariant of every stored history (core's `ConversationContext.problems`). */
export const assertValidHistory = (messages: ReadonlyArray<Message.Message>) =>
  assert.deepStrictEqual(ConversationContext.problems(messages), [])

/** The invariant, before every model request: each request's messages answer every tool call. */
export const assertValidRequests = (model: ScriptedChatModel.ScriptedChatModel) => {
  for (const request of model.requests) {
    assert.deepStrictEqual(ConversationContext.problems(request.messages), [], `request ${request.index}`)
  }
}

export const stopRecorder = (recorder: Fiber.Fiber<void>) => Fiber.interrupt(recorder)
