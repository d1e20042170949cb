/**
 * AnthropicClient: a configured connection to Anthropic's Messages API (or to
 * any server that speaks it, such as a gateway or a local test server)
 * through the official `@anthropic-ai/sdk`.
 *
 * It owns the SDK instance and what every request shares: the API key, the
 * `anthropic-version` and `anthropic-beta` headers, timeout, extra headers and
 * the retry policy. The SDK's own retries are off: core's `Retry` owns them,
 * so they honour `retry-after` and never replay a stream that already gave
 * output. The key stays `Redacted` until the SDK is built, the SDK reads no
 * credential, URL or log level from the environment behind our back, and
 * every message made from this client's failures is scrubbed of the key.
 */

import Anthropic from "@anthropic-ai/sdk"
import { Printable, Retry } from "@noema/core"
import { Config, Context, Duration, Effect, Layer, Option, Redacted } from "effect"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** With `Retry.ClientOptions`: `maxAttempts`, `retryBaseDelay`, `retryMaxDelay`. */
export interface Options extends Retry.ClientOptions {
  /** Default: `ANTHROPIC_API_KEY`. Optional for a non-Anthropic `baseURL` (a placeholder is sent). */
  readonly apiKey?: Redacted.Redacted<string>
  /** Default: `ANTHROPIC_BASE_URL`, else `https://api.anthropic.com` (no `/v1`: the SDK adds it). */
  readonly baseURL?: string
  /** The `anthropic-version` header. Default: the SDK's own (the version it was written for). */
  readonly version?: string
  /** Beta features, sent as one `anthropic-beta` header (e.g. `"interleaved-thinking-2025-05-14"`). */
  readonly betas?: ReadonlyArray<string>
  /** How long to wait for a response to start (the SDK's default is 10 minutes). */
  readonly timeout?: Duration.Input
  /** Extra headers sent with every request. */
  readonly headers?: Readonly<Record<string, string>>
  /** The provider's name in errors and `ChatModel.provider`, and the `providerOptions` key read. Default `"anthropic"`. */
  readonly provider?: string
}

/** The API key sent to servers that need none (the SDK sends none at all otherwise, and Anthropic's API wants one). */
export const placeholderApiKey = "no-api-key"

export const defaultBaseURL = "https://api.anthropic.com"

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------

export interface Client {
  /** The underlying SDK, with its retries off. */
  readonly sdk: Anthropic
  readonly provider: string
  readonly baseURL: string
  readonly retry: Retry.Options
  /** Removes the API key (and anything that looks like an Anthropic key) from text. */
  readonly scrub: (text: string) => string
}

export class AnthropicClient extends Context.Service<AnthropicClient, Client>()(
  "@noema/anthropic/AnthropicClient"
) {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const isAnthropicHost = (baseURL: string): boolean => {
  try {
    const host = new URL(baseURL).hostname
    return host === "anthropic.com" || host.endsWith(".anthropic.com")
  } catch {
    return false
  }
}

const keyPattern = /\bsk-ant-[A-Za-z0-9_*.-]{6,}/g

const scrubberFor = (apiKey: string): ((text: string) => string) => {
  // Short keys would also match ordinary words; Anthropic's are far longer than 8 characters.
  const exact = apiKey.length >= 8 && apiKey !== placeholderApiKey ? apiKey : undefined
  return (text) => {
    const withoutKey = exact === undefined ? text : text.split(exact).join("[redacted]")
    return Printable.redactUrls(withoutKey.replace(keyPattern, "sk-ant-[redacted]"))
  }
}

type LogLevel = "off" | "error" | "warn" | "info" | "debug"

const logLevels: ReadonlyArray<string> = ["off", "error", "warn", "info", "debug"]

/** The SDK logs failures we already report as typed errors; it stays quiet unless `ANTHROPIC_LOG` asks. */
const toLogLevel = (value: string | undefined): LogLevel =>
  value !== undefined && logLevels.includes(value) ? (value as LogLevel) : "off"

const optionalString = (name: string) =>
  Config.option(Config.String(name)).pipe(Config.map(Option.getOrUndefined))

/** The headers every request carries: the version and betas asked for, then the caller's own. */
const headersOf = (options: Options): Record<string, string> => ({
  ...(options.version !== undefined && { "anthropic-version": options.version }),
  ...(options.betas !== undefined &&
    options.betas.length > 0 && { "anthropic-beta": options.betas.join(",") }),
  ...options.headers
})

const build = (
  options: Options & {
    readonly apiKey: Redacted.Redacted<string>
    readonly baseURL: string
    readonly logLevel: LogLevel
  }
): Client => {
  const apiKey = Redacted.value(options.apiKey)
  const sdk = new Anthropic({
    apiKey,
    baseURL: options.baseURL,
    logLevel: options.logLevel,
    maxRetries: 0,
    // core traces every call (`chat {model}`); a second span per request from the SDK would only repeat it.
    openTelemetry: false,
    defaultHeaders: headersOf(options),
    ...(options.timeout !== undefined && {
      timeout: Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
    })
  })
  return {
    sdk,
    provider: options.provider ?? "anthropic",
    baseURL: options.baseURL,
    retry: Retry.fromClientOptions(options),
    scrub: scrubberFor(apiKey)
  }
}

/**
 * A client from options, with what they leave out read from the environment
 * (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, and `ANTHROPIC_LOG` for the SDK's
 * own logging, off by default) through Effect's `ConfigProvider`. Fails with a
 * `ConfigError` naming `ANTHROPIC_API_KEY` when Anthropic itself is the target
 * and no key is configured.
 */
export const make = Effect.fnUntraced(function* (options: Options = {}) {
  const baseURL = options.baseURL ?? (yield* optionalString("ANTHROPIC_BASE_URL")) ?? defaultBaseURL
  const configuredKey =
    options.apiKey ?? Option.getOrUndefined(yield* Config.option(Config.Redacted("ANTHROPIC_API_KEY")))
  const apiKey =
    configuredKey ??
    (isAnthropicHost(baseURL)
      ? // Read again without a fallback, so the failure names the missing variable.
        yield* Config.Redacted("ANTHROPIC_API_KEY")
      : Redacted.make(placeholderApiKey))
  const logLevel = toLogLevel(yield* optionalString("ANTHROPIC_LOG"))
  return build({ ...options, apiKey, baseURL, logLevel })
})

/** The client as a service, for chat models that share one configuration. */
export const layer = (options: Options = {}): Layer.Layer<AnthropicClient, Config.ConfigError> =>
  Layer.effect(AnthropicClient, make(options))
