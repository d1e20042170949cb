/**
 * AgentFallback: agents tried in turn until one succeeds.
 *
 * When an agent fails (an `AgentError`: the model is down, the loop ran out
 * of steps), the next one runs on the same context; when all fail, the last
 * error is the fallback's error. Interruption is not a failure: a cancelled
 * turn does not fall back. A failed attempt's messages are dropped, except
 * tool calls that already ran and input steering injected: an effect that
 * happened is never hidden and input is never lost, so those messages are kept
 * (in the output, and in the context the next agent sees, so it does not run
 * the calls again).
 */
import { Agent, ConversationContext, type Message } from "@noema/core"
import { Effect, Stream } from "effect"

export interface Options {
  /** Default `"fallback"`. */
  readonly name?: string
}

/**
 * What a failed attempt did that cannot be undone: its messages up to the last
 * one that is not the model's own, that is the last tool result (a call that
 * ran) or the last message steering injected (input already taken off its
 * queue). Only model output after it is dropped, which the next agent
 * produces again. Every call in that prefix is answered, so it is valid history.
 */
export const irrevocable = (messages: ReadonlyArray<Message.Message>): ReadonlyArray<Message.Message> => {
  const last = messages.findLastIndex((message) => message.role !== "assistant")
  return last < 0 ? [] : messages.slice(0, last + 1)
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const make = <const Agents extends ReadonlyArray<Agent.Agent<unknown>>>(
  agents: Agents,
  options: Options = {}
): Agent.Agent<Agent.Services<Agents[number]>> => {
  type R = Agent.Services<Agents[number]>
  const candidates = agents as ReadonlyArray<Agent.Agent<R>>
  const name = options.name ?? "fallback"
  if (candidates.length === 0) throw new RangeError(`AgentFallback "${name}" needs at least one agent`)

  const execute = (
    index: number,
    context: ConversationContext.ConversationContext,
    model: Parameters<Agent.Agent<R>["execute"]>[1],
    kept: ReadonlyArray<Message.Message>
  ): ReturnType<Agent.Agent<R>["execute"]> => {
    const agent = candidates[index] as Agent.Agent<R>
    const attempt = Effect.mapBoth(agent.execute(context, model), {
      onSuccess: (messages) => (kept.length === 0 ? messages : [...kept, ...messages]),
      onFailure: (error) => Agent.prependMessages(error, kept)
    })
    if (index === candidates.length - 1) return attempt
    return Effect.catch(attempt, (error) => {
      const effects = irrevocable(error.messages.slice(kept.length))
      return execute(
        index + 1,
        effects.length === 0 ? context : ConversationContext.concat(context, effects),
        model,
        [...kept, ...effects]
      )
    })
  }

  const executeStream = (
    index: number,
    context: ConversationContext.ConversationContext,
    model: Parameters<Agent.Agent<R>["execute"]>[1],
    kept: ReadonlyArray<Message.Message>
  ): ReturnType<Agent.Agent<R>["executeStream"]> =>
    Stream.suspend(() => {
      const agent = candidates[index] as Agent.Agent<R>
      // Live events (deltas, tool results) pass through; messages wait until the attempt
      // succeeds, so the streamed messages are exactly what `execute` returns.
      const messages: Array<Message.Message> = []
      const attempt = agent.executeStream(context, model).pipe(
        Stream.filter((event) => {
          if (event.type !== "message") return true
          messages.push(event.message)
          return false
        }),
        Stream.concat(Stream.suspend(() => Stream.fromArray(messages.map(messageEvent))))
      )
      if (index === candidates.length - 1)
        return Stream.mapError(attempt, (error) => Agent.prependMessages(error, kept))
      return Stream.catch(attempt, (error) => {
        const effects = irrevocable(error.messages)
        const next = executeStream(
          index + 1,
          effects.length === 0 ? context : ConversationContext.concat(context, effects),
          model,
          [...kept, ...effects]
        )
        return effects.length === 0 ? next : Stream.concat(Stream.fromArray(effects.map(messageEvent)), next)
      })
    })

  return Agent.make<R>({
    name,
    execute: (context, model) => execute(0, context, model, []),
    executeStream: (context, model) => executeStream(0, context, model, [])
  })
}

const messageEvent = (message: Message.Message): Agent.AgentEvent => ({ type: "message", message })
