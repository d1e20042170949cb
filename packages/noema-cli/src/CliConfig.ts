/**
 * CliConfig: where the CLI keeps its files and which model it talks to.
 *
 * The model comes from flags, then the environment, in that order:
 * `--model` / `NOEMA_MODEL`, `--base-url` / `NOEMA_BASE_URL` (then
 * `OPENAI_BASE_URL`), `--api-key` / `OPENAI_API_KEY`. With neither an API key
 * nor a base URL there is nothing to talk to, so the CLI falls back to the
 * built-in offline model and says so. Resolution is a pure function of the
 * flags and the environment, so it is tested without touching either.
 *
 * The session database comes from `--database` / `NOEMA_DATABASE_URL`: a
 * `postgres://` or `postgresql://` URL, or a SQLite file path; by default
 * `$NOEMA_HOME/noema.db`. A URL's password stays `Redacted`; `describeDatabase`
 * is how the database is named in any message.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Printable } from "@noema/core"
import { Usage } from "@noema/session"
import { Postgres } from "@noema/sql"
import { Redacted, Schema } from "effect"
import { UsageError } from "./CliArguments.js"
import * as ModelProvider from "./ModelProvider.js"

export type Environment = Readonly<Record<string, string | undefined>>

export interface ModelFlags {
  readonly model?: string | undefined
  readonly baseUrl?: string | undefined
  readonly apiKey?: string | undefined
  /** `--max-retry-wait SECONDS`. */
  readonly maxRetryWait?: string | undefined
  /** `--context-budget TOKENS`. */
  readonly contextBudget?: string | undefined
  /** `--api chat|responses`. */
  readonly api?: string | undefined
  /** `--provider openai|anthropic`. */
  readonly provider?: string | undefined
}

/** The model used when an API key or base URL is configured but no model name. */
export const defaultModel = ModelProvider.settings.openai.defaultModel

/** The name that selects the offline model explicitly (`--model offline`). */
export const offlineModelName = "offline"

export type Source = "flag" | "environment" | "default"

export type ModelConfig =
  | {
      readonly kind: "offline"
      /** `unconfigured`: nothing was set; `requested`: `--model offline` / `NOEMA_MODEL=offline`. */
      readonly reason: "unconfigured" | "requested"
      /** The model server configured before `/model offline`, so `/model NAME` can go back to it. */
      readonly server?: Extract<ModelConfig, { readonly kind: "openai" }>
    }
  | {
      readonly kind: "openai"
      readonly model: string
      /** Undefined means OpenAI itself (another provider's own address is filled in). */
      readonly baseUrl: string | undefined
      /** Undefined is fine for local servers (Ollama, llama.cpp), which need no key. */
      readonly apiKey: string | undefined
      /** Chat Completions (what every compatible server speaks) or OpenAI's Responses API. */
      readonly api: "chat" | "responses"
      /** Which API the server speaks: OpenAI's (and compatible servers') or Anthropic's (`ModelProvider`). */
      readonly provider: ModelProvider.Provider
      readonly sources: {
        readonly model: Source
        readonly baseUrl: Source
        readonly apiKey: Source
      }
    }

/** Empty values count as unset, so `NOEMA_MODEL= noema chat` behaves like leaving it out. */
const present = (value: string | undefined): string | undefined =>
  value === undefined || value.trim() === "" ? undefined : value.trim()

const pick = (
  flag: string | undefined,
  ...environment: ReadonlyArray<string | undefined>
): { readonly value: string | undefined; readonly source: Source } => {
  const fromFlag = present(flag)
  if (fromFlag !== undefined) return { value: fromFlag, source: "flag" }
  for (const candidate of environment) {
    const value = present(candidate)
    if (value !== undefined) return { value, source: "environment" }
  }
  return { value: undefined, source: "default" }
}

const isHttpUrl = (value: string): boolean => {
  try {
    const url = new URL(value)
    return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== ""
  } catch {
    return false
  }
}

/** Which model to use, from flags over the environment; a base URL that is not a URL is a `UsageError`. */
export const resolveModel = (flags: ModelFlags, env: Environment): ModelConfig => {
  const provider = ModelProvider.resolve(flags.provider, env.NOEMA_PROVIDER)
  const { apiKeyVariable, baseUrlVariable } = ModelProvider.settings[provider]
  const model = pick(flags.model, env.NOEMA_MODEL)
  const baseUrl = pick(flags.baseUrl, env.NOEMA_BASE_URL, env[baseUrlVariable])
  const apiKey = pick(flags.apiKey, env[apiKeyVariable])
  if (baseUrl.value !== undefined && !isHttpUrl(baseUrl.value)) {
    const from = baseUrl.source === "flag" ? "--base-url" : `NOEMA_BASE_URL / ${baseUrlVariable}`
    throw new UsageError(
      `${from}: "${Printable.redactUrl(baseUrl.value)}" is not an http(s) URL (e.g. http://localhost:11434/v1)`
    )
  }
  const api = pick(flags.api, env.NOEMA_OPENAI_API)
  if (api.value !== undefined && api.value !== "chat" && api.value !== "responses") {
    const from = api.source === "flag" ? "--api" : "NOEMA_OPENAI_API"
    throw new UsageError(`${from}: "${api.value}" is not an API noema speaks (use chat or responses)`)
  }
  if (model.value === offlineModelName) return { kind: "offline", reason: "requested" }
  if (apiKey.value === undefined && baseUrl.value === undefined) {
    if (provider !== "openai")
      throw new UsageError(`the ${provider} provider needs ${apiKeyVariable} (or --api-key / --base-url)`)
    // A model named on the command line is asked for: running the offline one instead would hide the mistake.
    if (model.source === "flag")
      throw new UsageError(
        `--model ${model.value} names no model server: give --base-url (or NOEMA_BASE_URL), or OPENAI_API_KEY for OpenAI`
      )
    return { kind: "offline", reason: "unconfigured" }
  }
  return {
    kind: "openai",
    model: model.value ?? ModelProvider.settings[provider].defaultModel,
    // Spelled out for other providers, so every message names their server (undefined means OpenAI's).
    baseUrl:
      baseUrl.value ?? (provider === "openai" ? undefined : ModelProvider.settings[provider].defaultBaseUrl),
    apiKey: apiKey.value,
    api: api.value === "responses" ? "responses" : "chat",
    provider,
    sources: { model: model.source, baseUrl: baseUrl.source, apiKey: apiKey.source }
  }
}

/** How long, in seconds, the retries of one model call may wait in all, unless configured. */
export const defaultMaxRetryWait = 60

/**
 * The cap on retry waits: `--max-retry-wait` / `NOEMA_MAX_RETRY_WAIT`, in
 * seconds (0 means a server's `retry-after` is never waited for). A value that
 * is not a number of seconds is a `UsageError`.
 */
export const resolveMaxRetryWait = (flags: ModelFlags, env: Environment): number => {
  const chosen = pick(flags.maxRetryWait, env.NOEMA_MAX_RETRY_WAIT)
  if (chosen.value === undefined) return defaultMaxRetryWait
  const seconds = Number(chosen.value)
  if (!Number.isFinite(seconds) || seconds < 0) {
    const from = chosen.source === "flag" ? "--max-retry-wait" : "NOEMA_MAX_RETRY_WAIT"
    throw new UsageError(`${from}: "${chosen.value}" is not a number of seconds (e.g. 60)`)
  }
  return seconds
}

/** The budget when the model's context window is not known (an estimate's worth of tokens). */
export const defaultContextBudget = 32_000

/** The share of a known context window a turn may fill before compaction (the rest is for the answer). */
export const contextWindowShare = 0.75

/** When to compact: at a number of tokens (0: never), or from the model's context window. */
export type ContextBudget = { readonly kind: "auto" } | { readonly kind: "tokens"; readonly tokens: number }

/**
 * `--context-budget` / `NOEMA_CONTEXT_BUDGET`: a whole number of tokens (0
 * turns compaction off), or `auto` (the default). Anything else is a `UsageError`.
 */
export const resolveContextBudget = (flags: ModelFlags, env: Environment): ContextBudget => {
  const chosen = pick(flags.contextBudget, env.NOEMA_CONTEXT_BUDGET)
  if (chosen.value === undefined || chosen.value === "auto") return { kind: "auto" }
  const tokens = Number(chosen.value)
  if (!Number.isInteger(tokens) || tokens < 0) {
    const from = chosen.source === "flag" ? "--context-budget" : "NOEMA_CONTEXT_BUDGET"
    throw new UsageError(
      `${from}: "${chosen.value}" is not a number of tokens (e.g. 100000; 0 turns compaction off)`
    )
  }
  return { kind: "tokens", tokens }
}

/** The same configuration with another model name (the `/model` command). */
export const withModel = (config: ModelConfig, model: string): ModelConfig | undefined => {
  const server = config.kind === "openai" ? config : config.server
  if (model === offlineModelName) {
    return server === undefined
      ? { kind: "offline", reason: "requested" }
      : { kind: "offline", reason: "requested", server }
  }
  if (server === undefined) return undefined
  return { ...server, model, sources: { ...server.sources, model: "flag" } }
}

/** One line for stderr when the offline model is used because nothing is configured. */
export const offlineNotice =
  "noema: no model configured, using the built-in offline model (arithmetic, time, files; not an LLM). " +
  "Set OPENAI_API_KEY, or pass --api-key / --base-url (e.g. http://localhost:11434/v1 for Ollama)."

/**
 * The notice for the model `flags` and `env` name, when it is the offline one because
 * nothing is configured; none for a configuration that cannot be used (its command says why).
 */
export const offlineNoticeFor = (flags: ModelFlags, env: Environment): string | undefined => {
  try {
    const config = resolveModel(flags, env)
    return config.kind === "offline" && config.reason === "unconfigured" ? offlineNotice : undefined
  } catch {
    return undefined
  }
}

/**
 * Where the model is, for messages: `gpt-4o-mini at https://api.openai.com/v1`, and the provider
 * when it is not OpenAI's API: `claude-sonnet-5-5 at https://api.anthropic.com (Anthropic)`
 * (credentials redacted).
 */
export const describeModel = (config: ModelConfig): string => {
  if (config.kind === "offline") return "offline model (built in, not an LLM)"
  const { label, defaultBaseUrl } = ModelProvider.settings[config.provider]
  const where = `${config.model} at ${Printable.redactUrl(config.baseUrl ?? defaultBaseUrl)}`
  return config.provider === "openai" ? where : `${where} (${label})`
}

// ---------------------------------------------------------------------------
// Prices
// ---------------------------------------------------------------------------

/**
 * The user's model prices (`Usage.Prices`, USD per million tokens), for the
 * cost lines of `sessions show` and `/usage`: the JSON file `NOEMA_PRICES`
 * names, else `$NOEMA_HOME/prices.json` if it exists, else none (costs are
 * then not shown: noema ships no prices, which change). A file that is not
 * valid JSON or not prices is a `UsageError` naming it.
 */
export const resolvePrices = (env: Environment, files: Paths): Usage.Prices | undefined => {
  const named = present(env.NOEMA_PRICES)
  const file = named ?? path.join(files.home, "prices.json")
  let text: string
  try {
    text = fs.readFileSync(file, "utf8")
  } catch (error) {
    if (named === undefined && (error as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw new UsageError(`NOEMA_PRICES: cannot read ${file}: ${(error as Error).message}`)
  }
  const decoded = Schema.decodeUnknownExit(Schema.fromJsonString(Usage.Prices))(text)
  if (decoded._tag === "Failure") {
    throw new UsageError(
      `${file} is not a prices file ({ "model": { "input": 0.4, "output": 1.6 } }, USD per million tokens)`
    )
  }
  return decoded.value
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

export interface Paths {
  /** `$NOEMA_HOME`, default `~/.noema`. */
  readonly home: string
  /** The SQLite database holding sessions. */
  readonly database: string
  /** Input history of `noema chat`, one line per entry. */
  readonly history: string
}

export const paths = (env: Environment, homeDirectory: string = os.homedir()): Paths => {
  const configured = present(env.NOEMA_HOME)
  const home = path.resolve(configured ?? path.join(homeDirectory, ".noema"))
  return { home, database: path.join(home, "noema.db"), history: path.join(home, "history") }
}

// ---------------------------------------------------------------------------
// Session database
// ---------------------------------------------------------------------------

export type DatabaseConfig =
  | { readonly kind: "sqlite"; readonly path: string }
  | { readonly kind: "postgres"; readonly url: Redacted.Redacted<string> }

/**
 * Which database holds the sessions: `--database`, else `NOEMA_DATABASE_URL`,
 * else `paths.database`. A relative file path is taken from `cwd`. A URL of
 * another scheme is a `UsageError` that does not repeat the URL (it may hold
 * a password).
 */
export const resolveDatabase = (
  flag: string | undefined,
  env: Environment,
  files: Paths,
  cwd: string = process.cwd()
): DatabaseConfig => {
  const chosen = pick(flag, env.NOEMA_DATABASE_URL)
  const value = chosen.value
  if (value === undefined) return { kind: "sqlite", path: files.database }
  if (Postgres.isUrl(value)) return { kind: "postgres", url: Redacted.make(value) }
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(value)?.[1]
  if (scheme !== undefined) {
    const from = chosen.source === "flag" ? "--database" : "NOEMA_DATABASE_URL"
    throw new UsageError(
      `${from}: unsupported database URL scheme "${scheme}:" (use postgres://… or a SQLite file path)`
    )
  }
  return { kind: "sqlite", path: path.resolve(cwd, value) }
}

/** The database as it may be shown: the file path, or the URL without its password. */
export const describeDatabase = (config: DatabaseConfig): string =>
  config.kind === "sqlite" ? config.path : Postgres.redactUrl(Redacted.value(config.url))
