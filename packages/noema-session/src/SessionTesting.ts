/**
 * SessionTesting: the pieces tests of sessions and of code running turns keep
 * needing, so each is written once: an agent that answers with the model's
 * text, a model whose reply never comes, and a store whose commits can be held
 * at the moment they reach the store (to act while a commit is in flight,
 * without relying on timing).
 */
import { Agent, ChatModel, Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Latch, Stream } from "effect"
import type { Service } from "./SessionStore.js"

/** An agent that answers with the model's text (streamed as text deltas, then the message). */
export const replyAgent = (name = "reply-agent"): Agent.Agent =>
  Agent.make({
    name,
    execute: (context, model) =>
      model.complete({ messages: context }).pipe(
        Effect.map((response): ReadonlyArray<Message.Message> => [ChatModel.toMessage(response)]),
        Effect.mapError((error) => Agent.modelFailed(name, error))
      ),
    executeStream: (context, model) =>
      Stream.suspend(() => {
        let text = ""
        const deltas = model.stream({ messages: context }).pipe(
          Stream.mapError((error) => Agent.modelFailed(name, error)),
          Stream.flatMap((chunk): Stream.Stream<Agent.AgentEvent> => {
            if (chunk.type !== "text-delta") return Stream.empty
            text += chunk.delta
            return Stream.make({ type: "text-delta", delta: chunk.delta })
          })
        )
        return Stream.concat(
          deltas,
          Stream.sync((): Agent.AgentEvent => ({ type: "message", message: Message.assistant(text) }))
        )
      })
  })

export interface HangingModel {
  readonly model: ScriptedChatModel.ScriptedChatModel
  /** Opens once the request reached the model. */
  readonly received: Latch.Latch
}

/** A model whose first reply never comes (until the request is cancelled). */
export const hangingModel = (): HangingModel => {
  const received = Latch.makeUnsafe(false)
  const model = ScriptedChatModel.make({
    replies: [
      () => {
        received.openUnsafe()
        return { hang: true }
      }
    ]
  })
  return { model, received }
}

export interface HoldingStore {
  /** `store`, whose `append` waits once `hold` was called. */
  readonly store: Service
  /** Opens when an append reached the store and waits. */
  readonly entered: Latch.Latch
  /** From now on every append waits until `release`. */
  readonly hold: () => void
  /** Lets the waiting appends (and every later one) through. */
  readonly release: () => void
}

/** `store` with commits that can be held just before they are stored. */
export const holdingStore = (store: Service): HoldingStore => {
  const entered = Latch.makeUnsafe(false)
  const released = Latch.makeUnsafe(false)
  let holding = false
  return {
    store: {
      ...store,
      append: (id, expected, messages) =>
        holding
          ? Effect.andThen(
              Effect.andThen(
                Effect.sync(() => entered.openUnsafe()),
                released.await
              ),
              store.append(id, expected, messages)
            )
          : store.append(id, expected, messages)
    },
    entered,
    hold: () => {
      holding = true
    },
    release: () => released.openUnsafe()
  }
}
