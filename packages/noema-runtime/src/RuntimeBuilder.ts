/**
 * RuntimeBuilder: a runtime from its parts, and nothing else exposed.
 *
 * `registerSubminds`, `registerTools`, `useOpenAi(options)` or
 * `useModel(anyChatModel)`, `useSession(session)`, then `build()`. The agent
 * of every cycle is a `ToolAgent` over the registered tools whose steering is
 * the runtime's (items joining a running turn). The built-in subminds are
 * always there, first: `userMessages` (`user.message` triggers become user
 * messages) and `approvalDecisions` (`approval.decision` triggers answer the
 * calls waiting for approval).
 */
import { ToolAgent } from "@noema/agents"
import type { ChatModel, Tool } from "@noema/core"
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

export interface Builder {
  registerSubminds(...subminds: ReadonlyArray<Submind.Submind>): Builder
  registerTools(...tools: ReadonlyArray<Tool.Any>): Builder
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
}

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
      const tools = state.tools
      return yield* Runtime.make({
        session,
        model,
        subminds: [Submind.userMessages, Submind.approvalDecisions, ...state.subminds],
        agent: (steering) => ToolAgent.make({ name: "runtime", tools, steering })
      })
    })
})

/** An empty builder. */
export const make = (): Builder =>
  builderOf({ subminds: [], tools: [], model: undefined, session: undefined })
