/**
 * CliArguments: what each command receives once its command line is parsed.
 *
 * The parsing itself is `Commands` (one `effect/cli` command tree, every flag
 * defined once in `internal/Flags`); this module holds only the shapes the
 * tree hands to the commands, so a command's module and the tree agree on
 * them without importing each other, and the usage error a command raises for
 * input the parser cannot judge (a file that does not fit, a URL that is not
 * one). It loads nothing: `noema --help` stays cheap.
 */
import type { ModelFlags } from "./CliConfig.js"

/**
 * The command line asks for something that cannot be done as asked: exit status 2
 * (`ExitStatus`), one line `noema: MESSAGE (see noema COMMAND --help)`, then
 * `details`, one per line (e.g. every problem of a refused pipeline file).
 */
export class UsageError extends Error {
  override readonly name = "UsageError"
  readonly details: ReadonlyArray<string>
  constructor(message: string, options: { readonly details?: ReadonlyArray<string> } = {}) {
    super(message)
    this.details = options.details ?? []
  }
}

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
  /** The turns' traces kept in the database, newest first; `session`: one session's (an id or a unique prefix). */
  | ({
      readonly type: "traces-list"
      readonly session: string | undefined
      readonly json: boolean
    } & StoreOptions)
  /** One trace's spans; `id` may be a unique prefix. */
  | ({ readonly type: "traces-show"; readonly id: string; readonly json: boolean } & StoreOptions)
  | RoutineCommand
  | PolicyCommand
  | ResourcesCommand
  | PlanCommand
  | TasksCommand
  | RunsCommand

// ---------------------------------------------------------------------------
// Routines: noema routine run|status FILE
// ---------------------------------------------------------------------------

export type RoutineCommand =
  | {
      readonly type: "routine-run"
      readonly file: string
      readonly goal: string | undefined
      readonly database: string | undefined
      readonly model: ModelFlags
      /** `--var name=value`: fixed values of declared variables. */
      readonly vars: Readonly<Record<string, string>>
      /** `--documents DIR`: where `documents.x` files are (default: the document's directory). */
      readonly documents: string | undefined
      /** `--stakeholders FILE`: a JSON file for `stakeholder.x`. */
      readonly stakeholders: string | undefined
      /** `--session ID`: a saved session for `message.x` and `thread.x` (an id or a unique prefix). */
      readonly session: string | undefined
      /** `--parallel N`: chains worked on at the same time (default 1). */
      readonly parallel: number
      readonly noTools: boolean
    }
  | {
      readonly type: "routine-status"
      readonly file: string
      readonly database: string | undefined
      readonly json: boolean
      /** `--write`: the progress written back into the document (checkboxes, `done: true`). */
      readonly write: boolean
    }

// ---------------------------------------------------------------------------
// Policies: noema policy check|show
// ---------------------------------------------------------------------------

/** The engine a command asks, when it names one: `--engine`. */
export type Engine = "cedar" | "opa" | "allow-all"

export interface PolicyCheck {
  readonly type: "policy-check"
  readonly actor: string
  readonly action: "get" | "put" | "delete"
  readonly resources: ReadonlyArray<string>
  readonly policy: string | undefined
  readonly engine: Engine | undefined
  readonly entrypoint: string | undefined
  readonly data: string | undefined
  readonly shadow: boolean
  readonly json: boolean
}

/** `noema policy show`: the policy in use, as text. */
export interface PolicyShow {
  readonly type: "policy-show"
  readonly policy: string | undefined
}

export type PolicyCommand = PolicyCheck | PolicyShow

// ---------------------------------------------------------------------------
// Resources: noema resources ls|show|put|search|reindex
// ---------------------------------------------------------------------------

/** Who acts on resources unless `--as` says otherwise: the person at the terminal. */
export const defaultActor = "cld:user.cli"

interface ResourcesCommon {
  readonly database: string | undefined
  /** Who acts: the policy's principal. */
  readonly actor: string
  readonly policy: string | undefined
  readonly engine: Engine | undefined
  /** `--embedding-model`: "local" or a model of an OpenAI-compatible server. */
  readonly embeddingModel: string | undefined
  readonly baseUrl: string | undefined
  readonly apiKey: string | undefined
  readonly json: boolean
}

export type ResourcesCommand =
  | ({ readonly type: "resources-ls"; readonly prefix: string } & ResourcesCommon)
  | ({ readonly type: "resources-show"; readonly urn: string } & ResourcesCommon)
  | ({ readonly type: "resources-put"; readonly file: string } & ResourcesCommon)
  | ({
      readonly type: "resources-search"
      readonly text: string
      readonly resourceType: string | undefined
      readonly prefix: string | undefined
      readonly limit: number
    } & ResourcesCommon)
  | ({ readonly type: "resources-reindex" } & ResourcesCommon)

// ---------------------------------------------------------------------------
// The planner: noema plan "request", noema tasks show URN
// ---------------------------------------------------------------------------

/** Who plans, and who reads the tasks unless `--as` says otherwise. */
export const plannerActor = "cld:assistant.planner"

interface PlanCommon {
  readonly database: string | undefined
  readonly policy: string | undefined
  readonly engine: Engine | undefined
  readonly embeddingModel: string | undefined
  readonly json: boolean
}

export type PlanCommand =
  | ({
      readonly type: "plan"
      readonly request: string
      readonly model: ModelFlags
      /** `--assistants FILE`: assistants to register (JSON, as `noema resources put` takes). */
      readonly assistants: string | undefined
      /** `--conversation URN`: plan in an existing conversation. */
      readonly conversation: string | undefined
      /** `--resume URN`: continue the plan stored under a request's message (no REQUEST then). */
      readonly resume: string | undefined
      /** `--threshold X`: the similarity that elects an assistant by itself. */
      readonly threshold: number | undefined
      /** `--fallback model|none|URN`: who decides below the threshold. */
      readonly fallback: string
      readonly parallel: number | undefined
      readonly maxCalls: number | undefined
      readonly maxTokens: number | undefined
      readonly maxDepth: number | undefined
      readonly stallTimeout: string | undefined
      readonly noTools: boolean
    } & PlanCommon)
  | ({ readonly type: "tasks-show"; readonly urn: string; readonly as: string } & PlanCommon)

/** `noema tasks list`: the stored plans, newest first. */
export type TasksCommand = { readonly type: "tasks-list"; readonly as: string } & Omit<
  PlanCommon,
  "embeddingModel"
>

// ---------------------------------------------------------------------------
// Runs: noema threads ..., noema run "request", noema runs ..., noema serve, noema worker
// ---------------------------------------------------------------------------

/** The port `noema serve` listens on unless told. */
export const defaultPort = 7077

/** The tools a pipeline's stages may name: those every stage has, and the built-in ones. */
export interface PipelineTools {
  readonly always: ReadonlyArray<string>
  readonly builtin: ReadonlyArray<string>
}

interface RunsCommon {
  readonly database: string | undefined
  /** `--workspace DIR` (env NOEMA_WORKSPACE; default $NOEMA_HOME/workspace). */
  readonly workspace: string | undefined
  readonly json: boolean
}

/** What carries a run on (run, approve, retry, resume, serve, worker): the model and the tools. */
interface Executing {
  readonly model: ModelFlags
  readonly noTools: boolean
}

/** `--engine`: what executes runs (undefined: NOEMA_RUNS_ENGINE, else claims). */
interface RunsEngine {
  readonly engine: "claims" | "cluster" | undefined
}

/** With `--engine cluster`: where this runner is reached, and listens. */
interface RunnerFlags {
  readonly runnerHost: string | undefined
  readonly runnerPort: number | undefined
  readonly runnerListen: string | undefined
}

export type RunsCommand =
  | ({
      readonly type: "threads-create"
      readonly title: string | undefined
      readonly queue: "reject" | "enqueue"
    } & RunsCommon)
  | ({ readonly type: "threads-list" } & RunsCommon)
  | ({ readonly type: "threads-show"; readonly thread: string } & RunsCommon)
  | ({
      readonly type: "threads-set-queue"
      readonly thread: string
      readonly queue: "reject" | "enqueue"
    } & RunsCommon)
  | ({ readonly type: "threads-close"; readonly thread: string } & RunsCommon)
  | ({
      readonly type: "run"
      readonly request: string
      readonly thread: string
      readonly pipeline: string | undefined
      /** Only create the run: a worker (noema worker, noema serve) carries it on. */
      readonly detach: boolean
      /** `--plan`: the stages come from the model's plan (PlanAgent), with `approve` on them. */
      readonly plan: boolean
      readonly approve: "none" | "first" | "all"
    } & RunsCommon &
      Executing &
      RunsEngine)
  | ({ readonly type: "runs-list"; readonly thread: string | undefined } & RunsCommon)
  | ({ readonly type: "runs-show"; readonly run: string } & RunsCommon)
  | ({ readonly type: "runs-approve"; readonly run: string; readonly by: string | undefined } & RunsCommon &
      Executing &
      RunsEngine)
  | ({ readonly type: "runs-reject"; readonly run: string; readonly reason: string } & RunsCommon &
      RunsEngine)
  | ({
      readonly type: "runs-retry"
      readonly run: string
      /** `--force`: retry a failure that is not retryable too (saying so). */
      readonly force: boolean
    } & RunsCommon &
      Executing &
      RunsEngine)
  | ({
      readonly type: "runs-cancel"
      readonly run: string
      readonly reason: string | undefined
    } & RunsCommon &
      RunsEngine)
  | ({ readonly type: "runs-resume"; readonly run: string | undefined } & RunsCommon & Executing & RunsEngine)
  | ({ readonly type: "runs-verify"; readonly run: string } & RunsCommon)
  | ({
      readonly type: "serve"
      readonly port: number
      /** Whether this process also carries runs on (`--no-worker`: the panel only). */
      readonly worker: boolean
      readonly concurrency: number
      readonly leaseTtl: string | undefined
      /** `--token`: the panel's access token (default NOEMA_SERVE_TOKEN, else a new one per start). */
      readonly token: string | undefined
    } & RunsCommon &
      Executing &
      RunsEngine &
      RunnerFlags)
  | ({
      readonly type: "worker"
      readonly concurrency: number
      readonly leaseTtl: string | undefined
    } & RunsCommon &
      Executing &
      RunsEngine &
      RunnerFlags)

// ---------------------------------------------------------------------------
// Which commands only read
// ---------------------------------------------------------------------------

/**
 * The commands that only read the database: the one list of them. They open a
 * SQLite file read-only (`Databases.openReadOnlyFirst`), so a database the user may
 * only read still answers them, and they write nothing in `$NOEMA_HOME` (not the
 * database, not the default policy). `routine status --write` writes the
 * routine's document, never the database.
 */
const readingCommands: ReadonlySet<Command["type"]> = new Set<Command["type"]>([
  "sessions-list",
  "sessions-show",
  "sessions-export",
  "sessions-export-all",
  "traces-list",
  "traces-show",
  "runs-list",
  "runs-show",
  "runs-verify",
  "threads-list",
  "threads-show",
  "resources-ls",
  "resources-show",
  "resources-search",
  "tasks-show",
  "tasks-list",
  "routine-status"
])

/** Whether `command` only reads the database (see `readingCommands`). */
export const readsOnly = (command: { readonly type: Command["type"] }): boolean =>
  readingCommands.has(command.type)
