/**
 * AgentRouter: picks one agent for the conversation by looking at it.
 *
 * Routes are tried in order; the first whose `when` holds for the context
 * runs, and `otherwise` runs when none does. The chosen agent's messages,
 * events and errors are the router's own.
 */
import { Agent, type ConversationContext } from "@noema/core"
import { Effect, Stream } from "effect"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export interface Route<R = never> {
  readonly when: (context: ConversationContext.ConversationContext) => boolean
  readonly agent: Agent.Agent<R>
}

/** The services the agents of some routes need. */
export type Services<T> = T extends { readonly agent: Agent.Agent<infer R> } ? R : never

export interface Options<
  Routes extends ReadonlyArray<Route<unknown>>,
  Otherwise extends Agent.Agent<unknown>
> {
  /** Default `"router"`. */
  readonly name?: string
  readonly routes: Routes
  readonly otherwise: Otherwise
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

export const make = <
  const Routes extends ReadonlyArray<Route<unknown>>,
  Otherwise extends Agent.Agent<unknown>
>(
  options: Options<Routes, Otherwise>
): Agent.Agent<Services<Routes[number]> | Agent.Services<Otherwise>> => {
  type R = Services<Routes[number]> | Agent.Services<Otherwise>
  const routes = options.routes as ReadonlyArray<Route<R>>
  const otherwise = options.otherwise as Agent.Agent<R>
  const choose = (context: ConversationContext.ConversationContext): Agent.Agent<R> =>
    routes.find((route) => route.when(context))?.agent ?? otherwise
  return Agent.make<R>({
    name: options.name ?? "router",
    // Chosen when the agent runs, not when the effect is built, so a reused effect re-reads the context.
    execute: (context, model) => Effect.suspend(() => choose(context).execute(context, model)),
    executeStream: (context, model) => Stream.suspend(() => choose(context).executeStream(context, model))
  })
}
