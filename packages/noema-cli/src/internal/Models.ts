/**
 * Models: what a turn runs on. The model the configuration names (the offline
 * one, or an OpenAI-compatible server with retries shown and capped), the
 * session's compaction for it, and the chat agent with its tools.
 */
import { PlanAgent, ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, Retry, type Tool } from "@noema/core"
import type { Session } from "@noema/session"
import { Duration, Effect } from "effect"
import {
  type ContextBudget,
  contextWindowShare,
  defaultContextBudget,
  defaultMaxRetryWait,
  type ModelConfig
} from "../CliConfig.js"
import * as OfflineModel from "../OfflineModel.js"
import * as BuiltinTools from "../tools/BuiltinTools.js"

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
  // The SDK is the heaviest import of all; only a real model pays for it.
  const { OpenAiChatModel } = await import("@noema/openai")
  const { Redacted } = await import("effect")
  const model = await Effect.runPromise(
    OpenAiChatModel.make({
      model: config.model,
      api: config.api,
      ...(config.baseUrl !== undefined && { baseURL: config.baseUrl }),
      ...(config.apiKey !== undefined && { apiKey: Redacted.make(config.apiKey) }),
      // Waiting for the first byte; a local model may need a while to load.
      timeout: "120 seconds",
      // Retried here instead, with the waits shown and capped.
      maxAttempts: 1
    })
  )
  return Retry.chatModel(model, {
    maxAttempts: 3,
    maxTotalDelay: Duration.seconds(options.maxRetryWait ?? defaultMaxRetryWait),
    ...(options.onRetry !== undefined && { onRetry: options.onRetry })
  })
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
export const makeAgent = (options: {
  readonly tools: boolean
  readonly cwd: string
  readonly mcpTools?: ReadonlyArray<Tool.Any>
  /** The plan workflow (`PlanAgent`, `/plan on`) instead of the tool loop. */
  readonly plan?: boolean
  /** The runtime's steering: messages typed during an answer join it between steps. */
  readonly steering?: ToolAgent.Steering
}): Agent.Agent => {
  const tools = [
    ...(options.tools ? BuiltinTools.make({ root: options.cwd }) : []),
    ...(options.mcpTools ?? [])
  ]
  return options.plan === true
    ? PlanAgent.make({ name: "noema", tools })
    : ToolAgent.make({
        name: "noema",
        tools,
        ...(options.steering !== undefined && { steering: options.steering })
      })
}
