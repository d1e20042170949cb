/**
 * OpenAiClient: a configured connection to OpenAI or to any server that speaks
 * its wire format (Ollama, vLLM, llama.cpp server, LM Studio) through `baseURL`.
 *
 * It owns the official `openai` SDK instance and the settings chat models and
 * embedders share: credentials, timeout, extra headers and the retry policy.
 * The SDK's own retries are switched off: core's `Retry` owns
 * retries, so they honour `retry-after` and never replay a stream that already
 * produced output. Secrets stay `Redacted` until the SDK is built, and every
 * error message produced from this client is scrubbed of the key and of the
 * credentials in any URL it quotes.
 */
import { Printable, Retry } from "@noema/core"
import { Config, Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import OpenAI from "openai"
import { joiningFetch, markJoining } from "./internal/abort.js"
import { dispatchingFetch } from "./internal/transport.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/** With `Retry.ClientOptions`: `maxAttempts`, `retryBaseDelay`, `retryMaxDelay`. */
export interface Options extends Retry.ClientOptions {
  /** Default: `OPENAI_API_KEY`. Optional for a non-OpenAI `baseURL` (a placeholder is sent). */
  readonly apiKey?: Redacted.Redacted<string>
  /** Default: `OPENAI_BASE_URL`, else `https://api.openai.com/v1`. */
  readonly baseURL?: string
  /** Default: `OPENAI_ORG_ID`. */
  readonly organization?: string
  /** Default: `OPENAI_PROJECT_ID`. */
  readonly project?: string
  /** How long to wait for a response to start (the SDK's default is 10 minutes). */
  readonly timeout?: Duration.Input
  /** Extra headers sent with every request. */
  readonly headers?: Readonly<Record<string, string>>
  /**
   * The provider's name in errors and `ChatModel.provider` (e.g. `"ollama"`), and a
   * second key read from `providerOptions`. Default `"openai"`.
   */
  readonly provider?: string
}

/** The API key sent to servers that need none (the SDK refuses to run without one). */
export const placeholderApiKey = "no-api-key"

// ---------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------

export interface Client {
  /** The underlying SDK, with its retries off. */
  readonly sdk: OpenAI
  readonly provider: string
  readonly baseURL: string
  readonly retry: Retry.Options
  /** Removes the API key (and anything that looks like an OpenAI key) from text. */
  readonly scrub: (text: string) => string
}

export class OpenAiClient extends Context.Service<OpenAiClient, Client>()("@noema/openai/OpenAiClient") {}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const isOpenAiHost = (baseURL: string): boolean => {
  try {
    const host = new URL(baseURL).hostname
    return host === "openai.com" || host.endsWith(".openai.com")
  } catch {
    return false
  }
}

const keyPattern = /\bsk-[A-Za-z0-9_*.-]{6,}/g

/**
 * What every message of this client goes through: the API key cut out, and the credentials
 * of any URL (fetch quotes the base URL, user and password included, when it refuses one).
 */
const scrubberFor = (apiKey: string): ((text: string) => string) => {
  // Short keys would also match ordinary words; OpenAI's are far longer than 8 characters.
  const exact = apiKey.length >= 8 && apiKey !== placeholderApiKey ? apiKey : undefined
  return (text) => {
    const withoutKey = exact === undefined ? text : text.split(exact).join("[redacted]")
    return Printable.redactUrls(withoutKey.replace(keyPattern, "sk-[redacted]"))
  }
}

type LogLevel = "off" | "error" | "warn" | "info" | "debug"

const logLevels: ReadonlyArray<string> = ["off", "error", "warn", "info", "debug"]

const isLogLevel = (value: string): value is LogLevel => logLevels.includes(value)

/** The SDK logs failures we already report as typed errors; it stays quiet unless `OPENAI_LOG` asks. */
const toLogLevel = (value: string | undefined): LogLevel =>
  value !== undefined && isLogLevel(value) ? value : "off"

const optionalString = (name: string) =>
  Config.option(Config.String(name)).pipe(Config.map(Option.getOrUndefined))

/**
 * Builds the SDK from fully resolved settings. Explicit `null`s keep the SDK from
 * reading its own environment variables behind our back.
 */
const build = (
  options: Options & { readonly apiKey: Redacted.Redacted<string>; readonly logLevel: LogLevel }
): Client => {
  const apiKey = Redacted.value(options.apiKey)
  const sdk = new OpenAI({
    apiKey,
    // Requests carry noema's abort signal to this fetch, not to the SDK (see internal/abort.ts),
    // and go to undici's dispatcher without fetch's WHATWG layer (see internal/transport.ts).
    fetch: joiningFetch(dispatchingFetch(globalThis.fetch)),
    logLevel: options.logLevel,
    baseURL: options.baseURL ?? "https://api.openai.com/v1",
    organization: options.organization ?? null,
    project: options.project ?? null,
    maxRetries: 0,
    ...(options.timeout !== undefined && {
      timeout: Duration.toMillis(Duration.fromInputUnsafe(options.timeout))
    }),
    ...(options.headers !== undefined && { defaultHeaders: { ...options.headers } })
  })
  markJoining(sdk)
  return {
    sdk,
    provider: options.provider ?? "openai",
    baseURL: sdk.baseURL,
    retry: Retry.fromClientOptions(options),
    scrub: scrubberFor(apiKey)
  }
}

/**
 * A client from options, with what they leave out read from the environment
 * (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`, and
 * `OPENAI_LOG` for the SDK's own logging, off by default) through
 * Effect's `ConfigProvider`. Fails with a `ConfigError` when OpenAI itself is the
 * target and no API key is configured.
 */
export const make = Effect.fnUntraced(function* (options: Options = {}) {
  const baseURL = options.baseURL ?? (yield* optionalString("OPENAI_BASE_URL"))
  const configuredKey =
    options.apiKey ?? Option.getOrUndefined(yield* Config.option(Config.Redacted("OPENAI_API_KEY")))
  const apiKey =
    configuredKey ??
    (baseURL === undefined || isOpenAiHost(baseURL)
      ? // Read again without a fallback, so the failure names the missing variable.
        yield* Config.Redacted("OPENAI_API_KEY")
      : Redacted.make(placeholderApiKey))
  const organization = options.organization ?? (yield* optionalString("OPENAI_ORG_ID"))
  const project = options.project ?? (yield* optionalString("OPENAI_PROJECT_ID"))
  const logLevel = toLogLevel(yield* optionalString("OPENAI_LOG"))
  return build({
    ...options,
    apiKey,
    logLevel,
    ...(baseURL !== undefined && { baseURL }),
    ...(organization !== undefined && { organization }),
    ...(project !== undefined && { project })
  })
})

/** The client as a service, for chat models and embedders that share one configuration. */
export const layer = (options: Options = {}): Layer.Layer<OpenAiClient, Config.ConfigError> =>
  Layer.effect(OpenAiClient, make(options))
