/**
 * Routes: what the API's handlers share (the store, the executor, how to tell
 * the worker), and how a handler's failure becomes the API's answer.
 *
 * A handler runs the library's effects as they are; `answer` turns their
 * failures into refusals by the one mapping (`Failures`), and a failure that
 * is the server's own (a store that cannot be read) into a defect, which the
 * gate answers with a 500 and logs.
 */
import type { Executor, Pipeline, PlanPipeline, RunsStore } from "@noema/runs"
import type { SessionStore, TraceStore, Usage } from "@noema/session"
import { Effect } from "effect"
import type * as ApiError from "../ApiError.js"
import type { Resources, Routines } from "../Server.js"
import type { ChatHost } from "./ChatHost.js"
import type { Failures } from "./Failures.js"
import type * as FeedClients from "./FeedClients.js"

export interface Context {
  readonly store: RunsStore.Service
  readonly executor: Executor.Executor
  readonly workspace: string
  /** Told when a run may be carried on (a new run, an approval, a retry). */
  readonly wake: () => void
  /** Who an approval made here is recorded as. */
  readonly approver: string
  /** Plans a request's stages (`"plan": true`); without it such a request is refused. */
  readonly plan:
    | ((request: string, approval: PlanPipeline.Approval) => Effect.Effect<Pipeline.Pipeline, unknown>)
    | undefined
  readonly feed: FeedClients.FeedClients
  readonly failures: Failures
  /** The conversations shown in the Sessions view; without it, that view says the server has none. */
  readonly sessions: SessionStore.Service | undefined
  /** The models' prices, for the cost of a session's turns. */
  readonly prices: Usage.Prices | undefined
  /** The Chat view's chats with the agent; without it, that view says the server has none. */
  readonly chat: ChatHost | undefined
  /** The turns' traces the Traces view shows; without it, that view says the server has none. */
  readonly traces: TraceStore.Service | undefined
  /** What the Plans and Resources views read; without it, those views say the server has none. */
  readonly resources: Resources | undefined
  /** What the Routines view reads; without it, that view says the server has none. */
  readonly routines: Routines | undefined
}

export type { Resources, Routines }

/** `effect`, its failures answered as refusals (or, the server's own, as defects). */
export const answer = <A, R>(
  context: Context,
  effect: Effect.Effect<A, unknown, R>
): Effect.Effect<A, ApiError.ApiError, R> =>
  Effect.catch(effect, (error) => {
    const refused = context.failures.refusal(error)
    return refused === undefined ? Effect.die(error) : Effect.fail(refused)
  })
