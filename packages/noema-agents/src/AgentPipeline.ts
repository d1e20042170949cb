/**
 * AgentPipeline: agents run one after another over the same conversation.
 *
 * Each agent sees the original context followed by everything the agents
 * before it produced (a view, nothing is copied), so the output of one stage
 * is the input of the next: search, then summarise, then translate. The
 * pipeline returns all the messages its stages produced, and streams each
 * stage's events in order. If a stage fails, the error carries the messages of
 * the stages before it as well as the failing stage's own.
 */
import { Agent, ConversationContext, type Message } from "@noema/core"
import { Effect, Stream } from "effect"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export interface AgentPipeline<R = never> extends Agent.Agent<R> {
  readonly agents: ReadonlyArray<Agent.Agent<R>>
  /** A new pipeline with `agent` as its last stage (this one is unchanged). */
  add<R2>(agent: Agent.Agent<R2>): AgentPipeline<R | R2>
}

export interface Options {
  /** Default `"pipeline"`. */
  readonly name?: string
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const build = <R>(name: string, agents: ReadonlyArray<Agent.Agent<R>>): AgentPipeline<R> => {
  const execute: Agent.Agent<R>["execute"] = (context, model) =>
    Effect.gen(function* () {
      const produced: Array<Message.Message> = []
      const view = ConversationContext.concat(context, produced)
      for (const agent of agents) {
        const messages = yield* Effect.mapError(agent.execute(view, model), (error) =>
          Agent.prependMessages(error, produced)
        )
        for (const message of messages) produced.push(message)
      }
      return produced
    })

  const executeStream: Agent.Agent<R>["executeStream"] = (context, model) =>
    Stream.suspend(() => {
      const produced: Array<Message.Message> = []
      const view = ConversationContext.concat(context, produced)
      const stage = (agent: Agent.Agent<R>): Stream.Stream<Agent.AgentEvent, Agent.AgentError, R> =>
        Stream.suspend(() => {
          // Held back until the stage ends: the running stage must not see its own output
          // in the view it was given.
          const own: Array<Message.Message> = []
          return agent.executeStream(view, model).pipe(
            Stream.map((event) => {
              if (event.type === "message") own.push(event.message)
              return event
            }),
            Stream.mapError((error) => Agent.prependMessages(error, produced)),
            Stream.concat(
              Stream.fromEffectDrain(
                Effect.sync(() => {
                  for (const message of own) produced.push(message)
                })
              )
            )
          )
        })
      return Stream.fromArray(agents).pipe(Stream.flatMap(stage))
    })

  const agent = Agent.make<R>({ name, execute, executeStream })
  return {
    ...agent,
    agents,
    add: <R2>(next: Agent.Agent<R2>) => build<R | R2>(name, [...agents, next])
  }
}

/** A pipeline of `agents`, run in order. */
export const make = <const Agents extends ReadonlyArray<Agent.Agent<unknown>>>(
  agents: Agents,
  options: Options = {}
): AgentPipeline<Agent.Services<Agents[number]>> =>
  build(options.name ?? "pipeline", agents as ReadonlyArray<Agent.Agent<Agent.Services<Agents[number]>>>)
