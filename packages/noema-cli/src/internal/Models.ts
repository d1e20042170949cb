/**
 * Models: what a turn runs on. The model the configuration names (the offline
 * one, an OpenAI-compatible server or Anthropic's, with retries shown and capped),
 * the model of a command that runs one outside a chat (`commandModel`), the
 * session's compaction for it, and the chat agent with its tools.
 *
 * The offline-model notice is not said here: the frame says it, for every command
 * that takes the model flags (`Frame.runner`).
 */
import { ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, Retry, type Tool } from "@noema/core"
import type { Session } from "@noema/session"
import { Duration, Effect, Stream } from "effect"
import {
  type ContextBudget,
  contextWindowShare,
  defaultContextBudget,
  defaultMaxRetryWait,
  type ModelConfig,
  type ModelFlags,
  resolveMaxRetryWait,
  resolveModel
} from "../CliConfig.js"
import type * as CliError from "../CliError.js"
import * as ModelProvider from "../ModelProvider.js"
import * as OfflineModel from "../OfflineModel.js"
import * as BuiltinTools from "../tools/BuiltinTools.js"
import type * as Frame from "./Frame.js"
import { RetryNotice } from "./RetryNotice.js"

export interface ModelOptions {
  readonly interactive: boolean
  /** The cap on one call's retry waits, in seconds (`CliConfig.resolveMaxRetryWait`). */
  readonly maxRetryWait?: number
  /** Told of each retry before its wait (`RetryNotice`). */
  readonly onRetry?: Retry.Options["onRetry"]
}

export const makeModel = async (config: ModelConfig, options: ModelOptions): Promise<ChatModel.Service> => {
  if (config.kind === "offline") {
    // A short pause between words shows the stream in a terminal; scripts get the answer at once.
    return OfflineModel.make(options.interactive ? { wordDelay: "12 millis" } : {})
  }
  const model =
    config.provider === "anthropic" ? await ModelProvider.makeAnthropic(config) : await makeOpenAi(config)
  return Retry.chatModel(model, {
    maxAttempts: 3,
    maxTotalDelay: Duration.seconds(options.maxRetryWait ?? defaultMaxRetryWait),
    ...(options.onRetry !== undefined && { onRetry: options.onRetry })
  })
}

const makeOpenAi = async (
  config: Extract<ModelConfig, { readonly kind: "openai" }>
): Promise<ChatModel.Service> => {
  // The SDK is the heaviest import of all; only a real model pays for it.
  const { OpenAiChatModel } = await import("@noema/openai")
  const { Redacted } = await import("effect")
  return Effect.runPromise(
    OpenAiChatModel.make({
      model: config.model,
      api: config.api,
      ...(config.baseUrl !== undefined && { baseURL: config.baseUrl }),
      ...(config.apiKey !== undefined && { apiKey: Redacted.make(config.apiKey) }),
      // Waiting for the first byte; a local model may need a while to load.
      timeout: "120 seconds",
      // Retried by `makeModel` instead, with the waits shown and capped.
      maxAttempts: 1
    })
  )
}

/**
 * The model of a command that runs it outside a chat (`ask`, `run`, `runs`, `worker`,
 * `serve`, `plan`, `routine`), as the user configured it: each retry shown on stderr as it
 * comes (`RetryNotice`), and the context its failures are told in (`CliError.describe`: the
 * server, the cap on retry waits), given to the frame too, which tells a failure that ends
 * the command in it.
 */
export interface CommandModel {
  readonly config: ModelConfig
  readonly model: ChatModel.Service
  readonly errors: CliError.Context
  /** Stops a retry countdown still shown (at the end of the command). */
  readonly dispose: () => void
}

export const commandModel = async (
  flags: ModelFlags,
  frame: Pick<Frame.Shape, "io" | "tellFailuresWith">
): Promise<CommandModel> => {
  const { io } = frame
  const config = resolveModel(flags, io.env)
  const maxRetryWait = resolveMaxRetryWait(flags, io.env)
  const errors = { baseUrl: config.kind === "openai" ? config.baseUrl : undefined, maxRetryWait }
  frame.tellFailuresWith(errors)
  const notice = new RetryNotice(io.stderr, io.env)
  const model = await makeModel(config, { interactive: false, maxRetryWait, onRetry: notice.onRetry })
  return { config, model, errors, dispose: () => notice.dispose() }
}

/**
 * `model`, telling `onFailure` of every call that fails in the end (after its retries): for
 * a command whose model is called deep inside another system (a run's stages), which keeps
 * only the failure's message, to tell the failure itself as `ask` does.
 */
export const observeFailures = (
  model: ChatModel.Service,
  onFailure: (error: ChatModel.ChatModelError) => void
): ChatModel.Service => {
  const tell = (error: ChatModel.ChatModelError) => Effect.sync(() => onFailure(error))
  return {
    ...model,
    complete: (request) => Effect.tapError(model.complete(request), tell),
    stream: (request) => Stream.tapError(model.stream(request), tell)
  }
}

/** What a turn's compaction needs (`Session.TurnOptions["compaction"]`); a budget of 0 means never automatically. */
export type CompactionSettings = NonNullable<Session.TurnOptions["compaction"]>

/**
 * When and how the CLI compacts a session for `config`'s model: at the
 * configured budget (0: never before a turn, only on `/compact`), or (`auto`)
 * at `contextWindowShare` of the model's context window when OpenAI's
 * catalogue knows it, else at `defaultContextBudget`. Tokens are counted with
 * the model's own encoding when there is one, else estimated. The tokenizer is
 * loaded here, when first needed, not at start-up.
 */
export const makeCompaction = async (
  config: ModelConfig,
  budget: ContextBudget
): Promise<CompactionSettings> => {
  if (config.kind === "offline") {
    return { budget: budget.kind === "tokens" ? budget.tokens : defaultContextBudget }
  }
  const { OpenAiTokens } = await import("@noema/openai")
  const [counter, limits] = await Effect.runPromise(
    Effect.all([OpenAiTokens.counter(config.model), OpenAiTokens.limits(config.model)])
  )
  const tokens =
    budget.kind === "tokens"
      ? budget.tokens
      : limits === undefined
        ? defaultContextBudget
        : Math.floor(limits.contextWindow * contextWindowShare)
  return { budget: tokens, counter }
}

/** The settings as a turn takes them: none when compaction before turns is off. */
export const turnCompaction = (settings: CompactionSettings): CompactionSettings | undefined =>
  settings.budget > 0 ? settings : undefined

/** The built-in tools (unless `--no-tools`) and the MCP servers' tools (`--mcp`). */
export const tools = (options: {
  readonly tools: boolean
  readonly cwd: string
  readonly mcpTools?: ReadonlyArray<Tool.Any>
}): ReadonlyArray<Tool.Any> => [
  ...(options.tools ? BuiltinTools.make({ root: options.cwd }) : []),
  ...(options.mcpTools ?? [])
]

/** The tool loop over `tools(options)`, for a one-off turn (`ask`; chat's agent is its runtime's). */
export const makeAgent = (options: Parameters<typeof tools>[0]): Agent.Agent =>
  ToolAgent.make({ name: "noema", tools: tools(options) })
