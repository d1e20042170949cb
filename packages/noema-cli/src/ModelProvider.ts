/**
 * ModelProvider: which API the CLI's model server speaks, `--provider` /
 * `NOEMA_PROVIDER`: `openai` (the default: OpenAI and every compatible server)
 * or `anthropic` (Claude, through `@noema/anthropic`).
 *
 * The provider decides where the rest of the model's configuration is read
 * from (its API key variable, its base URL variable, its default model and
 * address) and which adapter is built; `CliConfig.resolveModel` keeps the
 * choice as `provider`, next to the OpenAI API flavour, so a run can record it.
 */
import type { ChatModel } from "@noema/core"
import { UsageError } from "./CliArguments.js"

export type Provider = "openai" | "anthropic"

export interface Settings {
  /** How the provider is named to people. */
  readonly label: string
  /** The model used when none is named. */
  readonly defaultModel: string
  /** Where the API key is read from when `--api-key` is not given. */
  readonly apiKeyVariable: string
  /** Read after `NOEMA_BASE_URL` when `--base-url` is not given. */
  readonly baseUrlVariable: string
  /** The provider's own address, when no base URL is configured. */
  readonly defaultBaseUrl: string
}

export const settings: Readonly<Record<Provider, Settings>> = {
  openai: {
    label: "OpenAI",
    defaultModel: "gpt-4o-mini",
    apiKeyVariable: "OPENAI_API_KEY",
    baseUrlVariable: "OPENAI_BASE_URL",
    defaultBaseUrl: "https://api.openai.com/v1"
  },
  anthropic: {
    label: "Anthropic",
    defaultModel: "claude-sonnet-5-5",
    apiKeyVariable: "ANTHROPIC_API_KEY",
    baseUrlVariable: "ANTHROPIC_BASE_URL",
    defaultBaseUrl: "https://api.anthropic.com"
  }
}

const isProvider = (value: string): value is Provider => value === "openai" || value === "anthropic"

/** `--provider` over `NOEMA_PROVIDER` (empty values unset), default `openai`; any other name is a `UsageError`. */
export const resolve = (flag: string | undefined, environment: string | undefined): Provider => {
  const fromFlag = flag?.trim() ?? ""
  const value = fromFlag !== "" ? fromFlag : (environment?.trim() ?? "")
  if (value === "") return "openai"
  if (isProvider(value)) return value
  const from = fromFlag !== "" ? "--provider" : "NOEMA_PROVIDER"
  throw new UsageError(`${from}: "${value}" is not a provider noema speaks (use openai or anthropic)`)
}

/** Claude through `@noema/anthropic`, with the adapter's own retries off (the CLI retries, as for OpenAI). */
export const makeAnthropic = async (config: {
  readonly model: string
  readonly baseUrl: string | undefined
  readonly apiKey: string | undefined
}): Promise<ChatModel.Service> => {
  // The SDK is heavy; only a session that uses Claude loads it.
  const { AnthropicChatModel } = await import("@noema/anthropic")
  const { Effect, Redacted } = await import("effect")
  return Effect.runPromise(
    AnthropicChatModel.make({
      model: config.model,
      ...(config.baseUrl !== undefined && { baseURL: config.baseUrl }),
      ...(config.apiKey !== undefined && { apiKey: Redacted.make(config.apiKey) }),
      // Waiting for the first byte; a long prompt may need a while.
      timeout: "120 seconds",
      maxAttempts: 1
    })
  )
}
