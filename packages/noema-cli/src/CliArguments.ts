/**
 * CliArguments: the command line, parsed into the command to run.
 *
 * Parsing is `node:util`'s `parseArgs` (strict: an unknown flag is an error,
 * never silently ignored) and loads nothing else, so `--help` and `--version`
 * answer before any heavy module is imported. A mistake is a `UsageError`: one
 * line naming the problem and where to find help, exit status 2.
 */
import { type ParseArgsConfig, parseArgs } from "node:util"
import type { ModelFlags } from "./CliConfig.js"
import { type PlanCommand, PlanUsageError, parsePlan, parseTasks } from "./PlanArguments.js"
import { type PolicyCommand, PolicyUsageError, parse as parsePolicy } from "./PolicyArguments.js"
import { parse as parseResources, type ResourcesCommand, ResourcesUsageError } from "./ResourcesArguments.js"
import { parseRoutine, type RoutineCommand, RoutineUsageError } from "./RoutineArguments.js"
import {
  parseRun,
  parseRuns,
  parseServe,
  parseThreads,
  parseWorker,
  type RunsCommand,
  RunsUsageError
} from "./RunsArguments.js"

export class UsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

export type HelpTopic =
  | "main"
  | "chat"
  | "ask"
  | "sessions"
  | "routine"
  | "policy"
  | "resources"
  | "plan"
  | "tasks"
  | "threads"
  | "run"
  | "runs"
  | "serve"
  | "worker"

/** Options every command that touches sessions takes. */
export interface StoreOptions {
  /** `--database`: a SQLite file path or a `postgres://` URL; undefined: `NOEMA_DATABASE_URL`, else the default. */
  readonly database: string | undefined
}

export interface TurnOptions extends StoreOptions {
  readonly model: ModelFlags
  readonly tools: boolean
  /** `--mcp`: a file of MCP servers (`{ "mcpServers": ... }`) whose tools the model also gets. */
  readonly mcp: string | undefined
  /** `--yes`: run every tool call without asking (no call waits for approval). */
  readonly approveAll: boolean
  readonly system: string | undefined
  readonly session: string | undefined
}

export type Command =
  | { readonly type: "help"; readonly topic: HelpTopic }
  | { readonly type: "version" }
  | ({ readonly type: "chat" } & TurnOptions)
  | ({
      readonly type: "ask"
      readonly json: boolean
      /** Undefined: read the question from stdin. */
      readonly question: string | undefined
      /** `-` was given: read stdin even when it is a terminal. */
      readonly explicitStdin: boolean
    } & TurnOptions)
  | ({ readonly type: "sessions-list"; readonly json: boolean } & StoreOptions)
  | ({ readonly type: "sessions-show"; readonly id: string; readonly json: boolean } & StoreOptions)
  | ({ readonly type: "sessions-delete"; readonly id: string } & StoreOptions)
  | ({
      readonly type: "sessions-export"
      readonly id: string
      readonly format: "json" | "markdown"
    } & StoreOptions)
  /** Every session as JSON lines (see SessionArchive). */
  | ({ readonly type: "sessions-export-all" } & StoreOptions)
  /** JSON lines from `file`, or stdin when undefined or "-". */
  | ({ readonly type: "sessions-import"; readonly file: string | undefined } & StoreOptions)
  /** `noema routine run|status` (see RoutineArguments). */
  | RoutineCommand
  /** `noema policy check|show` (see PolicyArguments). */
  | PolicyCommand
  /** `noema resources ...` (see ResourcesArguments). */
  | ResourcesCommand
  /** `noema plan "request"`, `noema tasks show URN` (see PlanArguments). */
  | PlanCommand
  /** `noema threads ...`, `noema run "request"`, `noema runs ...` (see RunsArguments). */
  | RunsCommand

const common = {
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "v" }
} as const

const storeOptions = {
  ...common,
  database: { type: "string" }
} as const

const turnOptions = {
  ...storeOptions,
  model: { type: "string", short: "m" },
  "base-url": { type: "string" },
  "api-key": { type: "string" },
  "max-retry-wait": { type: "string" },
  "context-budget": { type: "string" },
  api: { type: "string" },
  provider: { type: "string" },
  session: { type: "string", short: "s" },
  system: { type: "string" },
  "no-tools": { type: "boolean" },
  mcp: { type: "string" },
  yes: { type: "boolean", short: "y" }
} as const

const commands = [
  "chat",
  "ask",
  "sessions",
  "threads",
  "run",
  "runs",
  "serve",
  "worker",
  "routine",
  "plan",
  "tasks",
  "policy",
  "resources"
] as const

type Options = NonNullable<ParseArgsConfig["options"]>

/** parseArgs, with its multi-sentence errors turned into one line that names the command. */
const parse = <const O extends Options>(command: string, args: ReadonlyArray<string>, options: O) => {
  try {
    return parseArgs({ args: [...args], options, allowPositionals: true, strict: true })
  } catch (error) {
    throw new UsageError(`${command}: ${describeParseError(error)} (see ${command} --help)`)
  }
}

const describeParseError = (error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error)
  const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : ""
  // parseArgs names options as '-m, --model <value>' or '--json'; the long form is the clearer one.
  const option = /'(?:-\w, )?(--?[^', ]+)/.exec(message)?.[1]
  switch (code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return `unknown option ${option ?? message}`
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      if (option !== undefined && /argument missing/.test(message)) return `${option} needs a value`
      if (option !== undefined && /does not take an argument/.test(message))
        return `${option} does not take a value`
      return message.split(". ")[0] ?? message
    default:
      return message.split(". ")[0] ?? message
  }
}

const modelFlags = (values: {
  readonly model?: string | boolean | undefined
  readonly "base-url"?: string | boolean | undefined
  readonly "api-key"?: string | boolean | undefined
  readonly "max-retry-wait"?: string | boolean | undefined
  readonly "context-budget"?: string | boolean | undefined
  readonly api?: string | boolean | undefined
  readonly provider?: string | boolean | undefined
}): ModelFlags => ({
  model: typeof values.model === "string" ? values.model : undefined,
  baseUrl: typeof values["base-url"] === "string" ? values["base-url"] : undefined,
  apiKey: typeof values["api-key"] === "string" ? values["api-key"] : undefined,
  maxRetryWait: typeof values["max-retry-wait"] === "string" ? values["max-retry-wait"] : undefined,
  contextBudget: typeof values["context-budget"] === "string" ? values["context-budget"] : undefined,
  api: typeof values.api === "string" ? values.api : undefined,
  provider: typeof values.provider === "string" ? values.provider : undefined
})

const noPositionals = (command: string, positionals: ReadonlyArray<string>): void => {
  if (positionals.length > 0) {
    throw new UsageError(`${command}: unexpected argument "${positionals[0]}" (see ${command} --help)`)
  }
}

const parseChat = (args: ReadonlyArray<string>): Command => {
  const { values, positionals } = parse("noema chat", args, turnOptions)
  if (values.help) return { type: "help", topic: "chat" }
  if (values.version) return { type: "version" }
  noPositionals("noema chat", positionals)
  return {
    type: "chat",
    model: modelFlags(values),
    tools: values["no-tools"] !== true,
    mcp: values.mcp,
    approveAll: values.yes === true,
    system: values.system,
    session: values.session,
    database: values.database
  }
}

const parseAsk = (args: ReadonlyArray<string>): Command => {
  const { values, positionals } = parse("noema ask", args, { ...turnOptions, json: { type: "boolean" } })
  if (values.help) return { type: "help", topic: "ask" }
  if (values.version) return { type: "version" }
  const fromStdin = positionals.length === 0 || (positionals.length === 1 && positionals[0] === "-")
  return {
    type: "ask",
    model: modelFlags(values),
    tools: values["no-tools"] !== true,
    mcp: values.mcp,
    approveAll: values.yes === true,
    system: values.system,
    session: values.session,
    database: values.database,
    json: values.json === true,
    question: fromStdin ? undefined : positionals.join(" "),
    explicitStdin: positionals.length === 1 && positionals[0] === "-"
  }
}

const parseSessions = (args: ReadonlyArray<string>): Command => {
  const { values, positionals } = parse("noema sessions", args, {
    ...storeOptions,
    json: { type: "boolean" },
    all: { type: "boolean" },
    format: { type: "string", short: "f" }
  })
  if (values.help) return { type: "help", topic: "sessions" }
  if (values.version) return { type: "version" }
  const [action = "list", id, ...rest] = positionals
  const json = values.json === true
  const database = values.database
  const needId = (): string => {
    if (id === undefined || id.trim() === "") {
      throw new UsageError(`noema sessions ${action}: missing session ID (see noema sessions list)`)
    }
    noPositionals(`noema sessions ${action}`, rest)
    return id
  }
  if (values.format !== undefined && action !== "export") {
    throw new UsageError(`noema sessions ${action}: --format only applies to export`)
  }
  if (values.all === true && action !== "export") {
    throw new UsageError(`noema sessions ${action}: --all only applies to export`)
  }
  switch (action) {
    case "list":
    case "ls":
      noPositionals("noema sessions list", positionals.slice(1))
      return { type: "sessions-list", json, database }
    case "show":
      return { type: "sessions-show", id: needId(), json, database }
    case "delete":
    case "rm":
      return { type: "sessions-delete", id: needId(), database }
    case "export": {
      if (values.all === true) {
        noPositionals("noema sessions export --all", positionals.slice(1))
        if (values.format !== undefined && values.format !== "jsonl") {
          throw new UsageError("noema sessions export --all: writes JSON lines only (leave out --format)")
        }
        return { type: "sessions-export-all", database }
      }
      const format = values.format ?? "json"
      if (format !== "json" && format !== "markdown" && format !== "md") {
        throw new UsageError(`noema sessions export: unknown format "${format}" (use json or markdown)`)
      }
      return {
        type: "sessions-export",
        id: needId(),
        format: format === "json" ? "json" : "markdown",
        database
      }
    }
    case "import":
      noPositionals("noema sessions import", rest)
      return { type: "sessions-import", file: id, database }
    default:
      throw new UsageError(
        `noema sessions: unknown action "${action}" (use list, show, delete, export or import; see noema sessions --help)`
      )
  }
}

/**
 * The commands that only read the database: the one list of them. They open a
 * SQLite file read-only (`Runtime.openReadOnlyFirst`), so a database the user may
 * only read still answers them, and they write nothing in `$NOEMA_HOME` (not the
 * database, not the default policy). `routine status --write` writes the
 * routine's document, never the database.
 */
const readingCommands: ReadonlySet<Command["type"]> = new Set<Command["type"]>([
  "sessions-list",
  "sessions-show",
  "sessions-export",
  "sessions-export-all",
  "runs-list",
  "runs-show",
  "runs-verify",
  "threads-list",
  "threads-show",
  "resources-ls",
  "resources-show",
  "resources-search",
  "tasks-show",
  "routine-status"
])

/** Whether `command` only reads the database (see `readingCommands`). */
export const readsOnly = (command: { readonly type: Command["type"] }): boolean =>
  readingCommands.has(command.type)

/** The command `args` (the arguments after `noema`) ask for. Throws `UsageError`. */
export const parseCommand = (args: ReadonlyArray<string>): Command => {
  const [first, ...rest] = args
  if (first === undefined) return { type: "help", topic: "main" }
  if (first === "--help" || first === "-h" || first === "help") {
    const topic = rest[0]
    return {
      type: "help",
      topic:
        topic === "chat" ||
        topic === "ask" ||
        topic === "sessions" ||
        topic === "routine" ||
        topic === "policy" ||
        topic === "resources" ||
        topic === "plan" ||
        topic === "tasks" ||
        topic === "threads" ||
        topic === "run" ||
        topic === "runs" ||
        topic === "serve" ||
        topic === "worker"
          ? topic
          : "main"
    }
  }
  if (first === "--version" || first === "-v") return { type: "version" }
  switch (first) {
    case "chat":
      return parseChat(rest)
    case "ask":
      return parseAsk(rest)
    case "sessions":
      return parseSessions(rest)
    // Routines: parsed in RoutineArguments.
    case "routine":
      try {
        const parsed = parseRoutine(rest)
        return parsed === "help" ? { type: "help", topic: "routine" } : parsed
      } catch (error) {
        throw error instanceof RoutineUsageError ? new UsageError(error.message) : error
      }
    // Policies: parsed in PolicyArguments.
    case "policy":
      try {
        const parsed = parsePolicy(rest)
        return parsed === "help" ? { type: "help", topic: "policy" } : parsed
      } catch (error) {
        throw error instanceof PolicyUsageError ? new UsageError(error.message) : error
      }
    // Resources: parsed in ResourcesArguments.
    case "resources":
      try {
        const parsed = parseResources(rest)
        return parsed === "help" ? { type: "help", topic: "resources" } : parsed
      } catch (error) {
        throw error instanceof ResourcesUsageError ? new UsageError(error.message) : error
      }
    // The planner: parsed in PlanArguments.
    case "plan":
    case "tasks":
      try {
        const parsed = first === "plan" ? parsePlan(rest) : parseTasks(rest)
        return parsed === "help" ? { type: "help", topic: first } : parsed
      } catch (error) {
        throw error instanceof PlanUsageError ? new UsageError(error.message) : error
      }
    // Runs: parsed in RunsArguments.
    case "threads":
    case "run":
    case "runs":
    case "serve":
    case "worker":
      try {
        const parsed =
          first === "threads"
            ? parseThreads(rest)
            : first === "run"
              ? parseRun(rest)
              : first === "serve"
                ? parseServe(rest)
                : first === "worker"
                  ? parseWorker(rest)
                  : parseRuns(rest)
        return parsed === "help" ? { type: "help", topic: first } : parsed
      } catch (error) {
        throw error instanceof RunsUsageError ? new UsageError(error.message) : error
      }
  }
  if (first.startsWith("-")) {
    // Global flags are only --help and --version; anything else belongs after a command.
    throw new UsageError(
      `noema: unknown option ${first}; options go after the command, e.g. noema chat ${first} (see noema --help)`
    )
  }
  const suggestion = commands.find((command) => command.startsWith(first.slice(0, 2)))
  throw new UsageError(
    `noema: unknown command "${first}"${suggestion === undefined ? "" : ` (did you mean ${suggestion}?)`}; ` +
      `commands: ${commands.join(", ")} (see noema --help)`
  )
}
