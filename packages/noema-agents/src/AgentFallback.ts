/**
 * AgentFallback: agents tried in turn until one succeeds.
 *
 * When an agent fails (an `AgentError`: the model is down, the loop ran out
 * of steps), the next one runs on the same context; when all fail, the last
 * error is the fallback's error. Interruption is not a failure: a cancelled
 * turn does not fall back. Only the successful agent's messages are returned;
 * a failed attempt's messages stay in its error.
 */
import { Agent, type Message } from "@noema/core"
import { Effect, Stream } from "effect"

export interface Options {
  /** Default `"fallback"`. */
  readonly name?: string
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

  const execute = (index: number): Agent.Agent<R>["execute"] => {
    const agent = candidates[index] as Agent.Agent<R>
    if (index === candidates.length - 1) return agent.execute
    const next = execute(index + 1)
    return (context, model) => Effect.catch(agent.execute(context, model), () => next(context, model))
  }

  const executeStream = (index: number): Agent.Agent<R>["executeStream"] => {
    const agent = candidates[index] as Agent.Agent<R>
    const next = index === candidates.length - 1 ? undefined : executeStream(index + 1)
    return (context, model) =>
      Stream.suspend(() => {
        // Live events (deltas, tool results) pass through; messages wait until the attempt
        // succeeds, so the streamed messages are exactly what `execute` returns.
        const messages: Array<Message.Message> = []
        const attempt = agent.executeStream(context, model).pipe(
          Stream.filter((event) => {
            if (event.type !== "message") return true
            messages.push(event.message)
            return false
          }),
          Stream.concat(
            Stream.suspend(() =>
              Stream.fromArray(messages.map((message): Agent.AgentEvent => ({ type: "message", message })))
            )
          )
        )
        return next === undefined ? attempt : Stream.catch(attempt, () => next(context, model))
      })
  }

  return Agent.make<R>({ name, execute: execute(0), executeStream: executeStream(0) })
}
