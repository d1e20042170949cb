/**
 * RuntimeBuilder: a runtime from its parts, and nothing else exposed.
 *
 * `registerSubminds`, `registerTools`, `useOpenAi(options)` or
 * `useModel(anyChatModel)`, `useSession(session)`, then `build()`. The agent
 * of every cycle is chosen here, once: a `ToolAgent` over the registered tools
 * by default, the plan-driven workflow with `usePlanAgent(options)` (think,
 * plan, execute each step, review, loop, finalize, notify), or any agent with
 * `useAgent(parts => agent)`. Whichever it is, it is made from the registered
 * tools and the runtime's steering (items joining a running turn), so every
 * agent gets the runtime's priorities the same way. The built-in subminds are
 * always there, first: `userMessages` (`user.message` triggers become user
 * messages) and `approvalDecisions` (`approval.decision` triggers answer the
 * calls waiting for approval).
 */
import { PlanAgent, ToolAgent } from "@noema/agents"
import type { Agent, ChatModel, Tool } from "@noema/core"
import type { Session } from "@noema/session"
import { Effect, Redacted, Schema } from "effect"
import * as Runtime from "./Runtime.js"
import * as Submind from "./Submind.js"

export interface OpenAiOptions {
  readonly model: string
  readonly apiKey?: string
  /** Any OpenAI-compatible server (Ollama, vLLM, ...). */
  readonly baseURL?: string
}

/** The builder lacks a part (a model, a session), or the model could not be made. */
export class RuntimeBuildError extends Schema.TaggedError<RuntimeBuildError>()("RuntimeBuildError", {
  reason: Schema.String
}) {
  override get message(): string {
    return this.reason
  }
}

/** What the turn's agent is made from: the registered tools and the runtime's steering. */
export interface AgentParts {
  readonly tools: ReadonlyArray<Tool.Any>
  /** Give it to the agent (`ToolAgent`'s and `PlanAgent`'s `steering`): items join the running turn through it. */
  readonly steering: ToolAgent.Steering
}

/** PlanAgent's options but its tools and steering, which are the runtime's. */
export type PlanAgentOptions = Omit<PlanAgent.Options<ReadonlyArray<Tool.Any>>, "tools" | "steering">

/** When and how the history is compacted before a turn (`Session.TurnOptions.compaction`). */
export type Compaction = NonNullable<Session.TurnOptions["compaction"]>

export interface Builder {
  registerSubminds(...subminds: ReadonlyArray<Submind.Submind>): Builder
  registerTools(...tools: ReadonlyArray<Tool.Any>): Builder
  /** Every cycle runs this agent, made once from the parts (the last `use...Agent` wins). */
  useAgent(make: (parts: AgentParts) => Agent.Agent): Builder
  /** Every cycle runs the plan-driven workflow (`PlanAgent`) over the registered tools. */
  usePlanAgent(options?: PlanAgentOptions): Builder
  /** Compacts the session's history before a turn when it passes a budget (see `Compaction`). */
  useCompaction(compaction: Compaction): Builder
  useOpenAi(options: OpenAiOptions): Builder
  useModel(model: ChatModel.Service): Builder
  useSession(session: Session.Session): Builder
  /** The runtime, not started. Fails (with a `RuntimeBuildError`) without a model or a session. */
  build(): Effect.Effect<Runtime.Runtime, RuntimeBuildError>
}

interface State {
  readonly subminds: ReadonlyArray<Submind.Submind>
  readonly tools: ReadonlyArray<Tool.Any>
  readonly model: Effect.Effect<ChatModel.Service, RuntimeBuildError> | undefined
  readonly session: Session.Session | undefined
  readonly agent: (parts: AgentParts) => Agent.Agent
  readonly compaction: Compaction | undefined
}

/** The default: the tool loop, its steering the runtime's. */
const toolAgent = ({ tools, steering }: AgentParts): Agent.Agent =>
  ToolAgent.make({ name: "runtime", tools, steering })

const builderOf = (state: State): Builder => ({
  registerSubminds: (...subminds) => builderOf({ ...state, subminds: [...state.subminds, ...subminds] }),
  registerTools: (...tools) => builderOf({ ...state, tools: [...state.tools, ...tools] }),
  useModel: (model) => builderOf({ ...state, model: Effect.succeed(model) }),
  useOpenAi: (options) =>
    builderOf({
      ...state,
      model: Effect.flatMap(
        Effect.promise(() => import("@noema/openai")),
        ({ OpenAiChatModel }) =>
          OpenAiChatModel.make({
            model: options.model,
            ...(options.apiKey !== undefined && { apiKey: Redacted.make(options.apiKey) }),
            ...(options.baseURL !== undefined && { baseURL: options.baseURL })
          }).pipe(
            Effect.mapError(
              (error) => new RuntimeBuildError({ reason: `the model could not be made: ${String(error)}` })
            )
          )
      )
    }),
  useSession: (session) => builderOf({ ...state, session }),
  useAgent: (make) => builderOf({ ...state, agent: make }),
  usePlanAgent: (options = {}) =>
    builderOf({
      ...state,
      agent: ({ tools, steering }) => PlanAgent.make({ name: "runtime", ...options, tools, steering })
    }),
  useCompaction: (compaction) => builderOf({ ...state, compaction }),
  build: () =>
    Effect.gen(function* () {
      if (state.model === undefined) {
        return yield* Effect.fail(
          new RuntimeBuildError({ reason: "the runtime needs a model: useModel or useOpenAi" })
        )
      }
      const session = state.session
      if (session === undefined) {
        return yield* Effect.fail(
          new RuntimeBuildError({ reason: "the runtime needs a session: useSession" })
        )
      }
      const model = yield* state.model
      const { tools, agent, compaction } = state
      return yield* Runtime.make({
        session,
        model,
        subminds: [Submind.userMessages, Submind.approvalDecisions, ...state.subminds],
        agent: (steering) => agent({ tools, steering }),
        ...(compaction !== undefined && { turnOptions: { compaction } })
      })
    })
})

/** An empty builder. */
export const make = (): Builder =>
  builderOf({
    subminds: [],
    tools: [],
    model: undefined,
    session: undefined,
    agent: toolAgent,
    compaction: undefined
  })
