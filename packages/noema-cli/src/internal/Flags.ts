/**
 * Flags: every flag more than one command takes, defined once (its name, alias,
 * placeholder, help text and parsing), and the few helpers that shape the rest.
 * `Commands` puts them on the commands; a flag's text is the same wherever it
 * is offered, and so is what it accepts.
 *
 * Values that come with a default from the environment (`--database`,
 * `--model`...) stay undefined here when not given: `CliConfig` resolves them,
 * flag over environment, and names the source in its messages.
 *
 * Imported at start-up: effect's modules by their own paths, not the `effect`
 * index, which would load all of them.
 */
import * as Flag from "effect/cli/Flag"
import * as Option from "effect/Option"
import type { defaultActor, Engine, plannerActor } from "../CliArguments.js"

/**
 * A flag that takes a value, named for help (`placeholder`, `description`) and also as
 * `-<alias>` when there is one; undefined when not given.
 */
const valued = <A>(
  flag: Flag.Flag<A>,
  placeholder: string,
  description: string,
  alias: string | undefined
): Flag.Flag<A | undefined> =>
  (alias === undefined ? flag : Flag.withAlias(flag, alias)).pipe(
    Flag.withMetavar(placeholder),
    Flag.withDescription(description),
    Flag.optional,
    Flag.map(Option.getOrUndefined)
  )

/** A flag with a value, undefined when not given. */
export const optional = (
  name: string,
  placeholder: string,
  description: string,
  alias?: string
): Flag.Flag<string | undefined> => valued(Flag.String(name), placeholder, description, alias)

/** A flag without a value: true when given (there is no `--no-` form). */
export const on = (name: string, description: string, alias?: string): Flag.Flag<boolean> =>
  (alias === undefined ? Flag.Boolean(name) : Flag.withAlias(Flag.Boolean(name), alias)).pipe(
    Flag.withoutNegation,
    Flag.withDescription(description),
    Flag.withDefault(false)
  )

/** One of `choices`, undefined when not given. */
export const choice = <const Choices extends ReadonlyArray<string>>(
  name: string,
  placeholder: string,
  choices: Choices,
  description: string,
  alias?: string
): Flag.Flag<Choices[number] | undefined> =>
  valued(Flag.Literals(name, choices), placeholder, description, alias)

/** A whole number from `min` to `max`; undefined when not given. */
export const wholeNumber = (
  name: string,
  placeholder: string,
  range: { readonly min: number; readonly max?: number },
  description: string,
  alias?: string
): Flag.Flag<number | undefined> => {
  const max = range.max ?? Number.MAX_SAFE_INTEGER
  const whole = Flag.String(name).pipe(
    Flag.filterMap(
      (text) => {
        const value = Number(text)
        return /^\s*\d+\s*$/.test(text) && value >= range.min && value <= max
          ? Option.some(value)
          : Option.none()
      },
      () =>
        range.max === undefined
          ? `a whole number of at least ${range.min}`
          : `a whole number from ${range.min} to ${range.max}`
    )
  )
  return valued(whole, placeholder, description, alias)
}

/** Undefined (not given) becomes `fallback`. */
export const orElse =
  <const B>(fallback: B) =>
  <A>(flag: Flag.Flag<A | undefined>): Flag.Flag<A | B> =>
    Flag.map(flag, (value) => (value === undefined ? fallback : value))

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

export const json = on("json", "print JSON instead of text (see docs/cli.md)")

// ---------------------------------------------------------------------------
// Where things are kept
// ---------------------------------------------------------------------------

export const database = optional(
  "database",
  "DB",
  "a SQLite file or postgres://USER:PASSWORD@HOST/DB (env NOEMA_DATABASE_URL; default $NOEMA_HOME/noema.db)"
)

export const workspace = optional(
  "workspace",
  "DIR",
  "where runs write their files (env NOEMA_WORKSPACE; default $NOEMA_HOME/workspace)"
)

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/** The model and its server: every command that builds a model takes them (`CliConfig.resolveModel`). */
export const model = {
  model: optional(
    "model",
    "NAME",
    'model name (env NOEMA_MODEL; default gpt-4o-mini; "offline" = the built-in model)',
    "m"
  ),
  baseUrl: optional(
    "base-url",
    "URL",
    "OpenAI-compatible server (env NOEMA_BASE_URL), e.g. http://localhost:11434/v1"
  ),
  apiKey: optional(
    "api-key",
    "KEY",
    "API key (env OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic); not needed for local servers"
  ),
  provider: choice(
    "provider",
    "PROVIDER",
    ["openai", "anthropic"],
    "the API the server speaks (env NOEMA_PROVIDER; default openai, which covers every OpenAI-compatible server); anthropic: Claude (default claude-sonnet-5-5)"
  ),
  api: choice(
    "api",
    "API",
    ["chat", "responses"],
    "Chat Completions (default; what compatible servers speak) or OpenAI's Responses API (env NOEMA_OPENAI_API)"
  )
}

/** How long a turn may wait and how much it may send: the conversational commands (chat, ask). */
export const turnLimits = {
  maxRetryWait: optional(
    "max-retry-wait",
    "SECONDS",
    "longest wait for retries of one model call (env NOEMA_MAX_RETRY_WAIT; default 60); a server asking for longer fails at once"
  ),
  contextBudget: optional(
    "context-budget",
    "TOKENS",
    "compact the session when a turn would send more (env NOEMA_CONTEXT_BUDGET; default 3/4 of the model's context window when known, else 32000; 0 = never): older turns are summarised by the model, the originals stay saved"
  )
}

export const noTools = on("no-tools", "no built-in tools for the model (calculator, current_time, read_file)")

/** `--no-tools`, as whether the model gets the tools. */
export const tools = Flag.map(noTools, (off) => !off)

export const mcp = optional(
  "mcp",
  "FILE",
  'also give the model the tools of the MCP servers in FILE ({ "mcpServers": ... }); a server\'s tool not marked read-only asks for approval before each call'
)

export const yes = on("yes", "run every tool call without asking", "y")

export const system = optional(
  "system",
  "TEXT",
  "the session's system prompt (with --session: replaces that session's)"
)

export const session = optional("session", "ID", "continue a saved session (an ID prefix is enough)", "s")

// ---------------------------------------------------------------------------
// Resources and policies
// ---------------------------------------------------------------------------

export const policy = optional(
  "policy",
  "FILE",
  "a Cedar (.cedar) or OPA (.wasm) policy (default $NOEMA_HOME/policy.cedar, written on first use; noema policy show)"
)

export const engine: Flag.Flag<Engine | undefined> = choice(
  "engine",
  "NAME",
  ["cedar", "opa", "allow-all"],
  "the policy engine (default: from the policy file's extension); allow-all allows every access: only when asked"
)

export const embeddingModel = optional(
  "embedding-model",
  "M",
  '"local" (default: offline, lexical, not semantic) or a model of an OpenAI-compatible server, e.g. text-embedding-3-small (env NOEMA_EMBEDDING_MODEL)'
)

/** Who acts on resources (`--as`), for the policy. */
export const actor = (fallback: typeof defaultActor | typeof plannerActor) =>
  optional("as", "URN", `who acts, for the policy (default ${fallback})`).pipe(orElse(fallback))

// ---------------------------------------------------------------------------
// Workers: noema serve and noema worker
// ---------------------------------------------------------------------------

export const concurrency = wholeNumber(
  "concurrency",
  "N",
  { min: 1, max: 64 },
  "runs carried on at once (default 4)"
).pipe(orElse(4))

export const leaseTtl = optional(
  "lease-ttl",
  "D",
  'how long a run stays claimed by a process that stops answering, e.g. "15 seconds" (the default): on other machines, a dead worker\'s runs wait this long; on this one, none'
)

/** `--engine` of the runs commands: what executes runs (docs/runs.md, "Which engine"). */
export const runsEngine = choice(
  "engine",
  "NAME",
  ["claims", "cluster"],
  "what executes runs (env NOEMA_RUNS_ENGINE; default claims): claims, processes taking runs through claims in the database; cluster, effect/cluster runners over PostgreSQL (the command is one, or a client of them)"
)

/** Where this cluster runner is reached by the others: `--engine cluster` on worker and serve. */
export const runner = {
  runnerHost: optional(
    "runner-host",
    "HOST",
    "with --engine cluster: the host other runners and clients reach this runner at (env NOEMA_RUNNER_HOST; default this machine's hostname)"
  ),
  runnerPort: wholeNumber(
    "runner-port",
    "N",
    { min: 1, max: 65535 },
    "with --engine cluster: this runner's port (env NOEMA_RUNNER_PORT; default 34431)"
  ),
  runnerListen: optional(
    "runner-listen",
    "HOST",
    "with --engine cluster: the address to listen on when it is not --runner-host, e.g. 0.0.0.0 (env NOEMA_RUNNER_LISTEN)"
  )
}
