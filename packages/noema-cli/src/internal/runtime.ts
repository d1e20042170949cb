/**
 * What the commands share: the model from the configuration, the session
 * store in `$NOEMA_HOME`, the chat agent, and running Effects from the
 * commands' plain async code (with cancellation through an AbortSignal).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { PlanAgent, ToolAgent } from "@noema/agents"
import { type Agent, type ChatModel, Retry, Tool } from "@noema/core"
import { type Session, SessionStore, SqlStore } from "@noema/session"
import { Database, DatabaseError } from "@noema/sql"
import { Cause, Duration, Effect, Exit, Fiber, Layer, ManagedRuntime, Schema, Stream } from "effect"
import type { SqlClient } from "effect/sql"
import type { Io } from "../Cli.js"
import { UsageError } from "../CliArguments.js"
import {
  type ContextBudget,
  contextWindowShare,
  type DatabaseConfig,
  defaultContextBudget,
  defaultMaxRetryWait,
  type ModelConfig,
  type ModelFlags,
  offlineNotice,
  resolveMaxRetryWait,
  resolveModel
} from "../CliConfig.js"
import type * as CliError from "../CliError.js"
import * as ModelProvider from "../ModelProvider.js"
import * as OfflineModel from "../OfflineModel.js"
import * as BuiltinTools from "../tools/BuiltinTools.js"
import * as IdPrefix from "./IdPrefix.js"
import { RetryNotice } from "./RetryNotice.js"

export const defaultSystemPrompt =
  "You are noema, a helpful assistant in a terminal chat. Answer concisely; plain text reads best in a terminal. " +
  "Use the tools when they help: calculator for any arithmetic, current_time for dates and times, " +
  "read_file to read text files in the user's current directory."

// ---------------------------------------------------------------------------
// Model and agent
// ---------------------------------------------------------------------------

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

/** Says so on stderr when nothing is configured and the offline model is used: every command that runs a model. */
export const noticeOffline = (config: ModelConfig, stderr: { write(text: string): unknown }): void => {
  if (config.kind === "offline" && config.reason === "unconfigured") stderr.write(`${offlineNotice}\n`)
}

/**
 * The model of a command that runs it outside a chat (`ask`, `run`, `runs`, `worker`,
 * `serve`, `plan`, `routine`), as the user configured it: the offline notice said when
 * nothing is, each retry shown on stderr as it comes (`RetryNotice`), and the context its
 * failures are told in (`CliError.describe`: the server, the cap on retry waits).
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
  io: Pick<Io, "stderr" | "env">
): Promise<CommandModel> => {
  const config = resolveModel(flags, io.env)
  const maxRetryWait = resolveMaxRetryWait(flags, io.env)
  noticeOffline(config, io.stderr)
  const notice = new RetryNotice(io.stderr, io.env)
  const model = await makeModel(config, { interactive: false, maxRetryWait, onRetry: notice.onRetry })
  return {
    config,
    model,
    errors: { baseUrl: config.kind === "openai" ? config.baseUrl : undefined, maxRetryWait },
    dispose: () => notice.dispose()
  }
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

// ---------------------------------------------------------------------------
// MCP servers
// ---------------------------------------------------------------------------

export interface McpConnections {
  readonly tools: ReadonlyArray<Tool.Any>
  /** Closes the connections; the stdio servers' processes end. */
  close(): Promise<void>
}

const noMcp: McpConnections = { tools: [], close: async () => undefined }

/**
 * Starts the servers of `--mcp FILE` (relative to `cwd`). A bad file is a
 * `UsageError` (exit 2) naming the file and key; a server that fails to start
 * rejects with the `McpError` line (exit 1). Nothing is loaded without `--mcp`.
 */
export const openMcp = async (
  file: string | undefined,
  cwd: string,
  options: { readonly approveAll?: boolean } = {}
): Promise<McpConnections> => {
  if (file === undefined) return noMcp
  const { McpConfig, McpTools } = await import("@noema/mcp")
  const exit = await Effect.runPromiseExit(McpConfig.load(path.resolve(cwd, file)))
  if (Exit.isFailure(exit)) {
    const error = Cause.squash(exit.cause)
    throw new UsageError(`noema: ${error instanceof Error ? error.message : String(error)}`)
  }
  const connections = await McpTools.open(exit.value, { clientName: "noema" })
  return options.approveAll === true
    ? connections
    : { ...connections, tools: connections.tools.map(withApprovalUnlessReadOnly) }
}

/**
 * A server's tool that may change something (not annotated read-only) asks
 * before each call; `--yes` turns that off. The built-in tools only read.
 */
export const withApprovalUnlessReadOnly = (tool: Tool.Any): Tool.Any =>
  Tool.isReadOnly(tool) ? tool : Tool.withApproval(tool)

/**
 * The session is the one home of the system prompt; the CLI's default becomes a
 * session's own prompt when the CLI creates it, and, for a session that has none
 * (one noema 0.1 made, which relied on the default being added to every turn),
 * before the CLI runs a turn on it.
 */
export const adoptDefaultSystemPrompt = (
  session: Session.Session
): Effect.Effect<void, SessionStore.SessionNotFoundError | SessionStore.StoreError> =>
  session.systemPrompt !== undefined || session.context().at(0)?.role === "system"
    ? Effect.void
    : Effect.asVoid(session.setSystemPrompt(defaultSystemPrompt))

// ---------------------------------------------------------------------------
// Store
// ---------------------------------------------------------------------------

export type StoreRuntime = ManagedRuntime.ManagedRuntime<SessionStore.SessionStore, SessionStore.StoreError>

/** A database's store, not yet opened: what `openStore` runs. */
export interface StoreLayer {
  readonly database: DatabaseConfig
  readonly layer: Layer.Layer<SessionStore.SessionStore, SessionStore.StoreError>
}

/**
 * The configured database as the shared `SqlClient` (with `Database`): the one
 * place that turns `--database` / `NOEMA_DATABASE_URL` into a connection, for
 * every command and every store in it (sessions, and the systems above them),
 * so one process holds one client per database. A PostgreSQL pool is small: a
 * command runs one turn or one listing at a time. Building the layer opens nothing yet.
 */
export const databaseLayer = (
  database: DatabaseConfig,
  options: { readonly readonly?: boolean } = {}
): Layer.Layer<SqlClient.SqlClient | Database.Database, DatabaseError.DatabaseError> =>
  Database.layer(
    database.kind === "sqlite"
      ? { kind: "sqlite", filename: database.path, ...(options.readonly === true && { readonly: true }) }
      : { kind: "postgres", url: database.url, maxConnections: 2 }
  )

/**
 * The session store for `database`, in the database's shared client (errors
 * name a PostgreSQL server without its password). Building the layer opens nothing yet.
 */
export const storeLayer = (
  database: DatabaseConfig,
  options: { readonly readonly?: boolean } = {}
): StoreLayer => ({
  database,
  layer: SqlStore.layerFromDatabase.pipe(
    Layer.provide(
      // The session store's contract says `StoreError`: the database's reason, as it is.
      Layer.effectContext(
        Effect.mapError(Layer.build(databaseLayer(database, options)), SessionStore.fromDatabaseError)
      )
    )
  )
})

/** Opens the store (for SQLite, its directory is created, private to the user), with the tracer if there is one. */
export const openStore = <Tracer = never>(
  store: StoreLayer | DatabaseConfig,
  tracer?: Layer.Layer<Tracer>
): StoreRuntime => {
  const { database, layer } = "layer" in store ? store : storeLayer(store)
  if (database.kind === "sqlite") fs.mkdirSync(path.dirname(database.path), { recursive: true, mode: 0o700 })
  // The tracer lives as long as the runtime: disposing it flushes the spans.
  return ManagedRuntime.make(tracer === undefined ? layer : Layer.merge(layer, tracer))
}

/** A reading command found no SQLite file where the database should be: it creates none. */
export class NoDatabase extends Schema.TaggedError<NoDatabase>()("NoDatabase", { location: Schema.String }) {
  override get message(): string {
    return `there is no database at ${this.location} (nothing is stored there yet); nothing was created`
  }
}

/**
 * The database's own reason for `error`, wherever the store that failed keeps it:
 * a `DatabaseError`, a store error's `reason` (sessions, runs), or its `cause` (resources, vectors).
 */
const databaseReason = (error: unknown): DatabaseError.Reason | undefined => {
  let value = error
  for (let depth = 0; depth < 4 && typeof value === "object" && value !== null; depth++) {
    const { reason, cause } = value as { readonly reason?: unknown; readonly cause?: unknown }
    if (isReason(reason)) return reason
    value = cause
  }
  return undefined
}

const isReason = Schema.is(DatabaseError.Reason)

const needsMigration = (error: unknown): boolean => databaseReason(error)?._tag === "NeedsMigration"

/**
 * How every command opens the database, the one place that applies `readsOnly`
 * (`CliArguments`): `open` is given the database read-only for a command that only
 * reads a SQLite file, so a database the user may only read (mode 0444, a read-only
 * directory, another user's file) answers it, and nothing is written. Such a command
 * creates no database that is not there (`NoDatabase`). A file of an earlier noema
 * that needs migrating is migrated by opening it with write access instead; if that
 * fails on the database too, the read-only open's one-line `NeedsMigration` says why.
 * PostgreSQL, and every command that writes, open as usual. `open` must fail before
 * it shows anything when the database does not open: it may run twice.
 */
export const openReadOnlyFirst = <A, E, R>(
  database: DatabaseConfig,
  readsOnly: boolean,
  open: (options: { readonly readonly: boolean }) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | NoDatabase, R> => {
  if (!readsOnly || database.kind !== "sqlite") return open({ readonly: false })
  if (!fs.existsSync(database.path)) return Effect.fail(new NoDatabase({ location: database.path }))
  return open({ readonly: true }).pipe(
    Effect.catchIf(needsMigration, (error) =>
      open({ readonly: false }).pipe(
        Effect.catchIf(
          (again) => databaseReason(again) !== undefined,
          () => Effect.fail(error)
        )
      )
    )
  )
}

/** `program` on the configured database, opened as `openReadOnlyFirst` decides. */
export const provideDatabase = <A, E, R>(
  program: Effect.Effect<A, E, R>,
  database: DatabaseConfig,
  readsOnly: boolean
): Effect.Effect<
  A,
  E | DatabaseError.DatabaseError | NoDatabase,
  Exclude<R, SqlClient.SqlClient | Database.Database>
> =>
  openReadOnlyFirst(database, readsOnly, (options) =>
    Effect.provide(program, databaseLayer(database, options))
  )

/**
 * Opens the session store as `openReadOnlyFirst` decides (`sessions list`, `show` and
 * `export` only read): the runtime, once the store opened.
 */
export const openFor = (database: DatabaseConfig, readsOnly: boolean): Promise<StoreRuntime> =>
  Effect.runPromise(
    openReadOnlyFirst(database, readsOnly, (options) =>
      Effect.tryPromise({
        try: async () => {
          const runtime = options.readonly
            ? ManagedRuntime.make(storeLayer(database, options).layer)
            : openStore(database)
          const exit = await runtime.runPromiseExit(Effect.void)
          if (Exit.isSuccess(exit)) return runtime
          await runtime.dispose()
          throw Cause.squash(exit.cause)
        },
        catch: (error) => error
      })
    )
  )

/** Runs `effect` on the runtime and returns its value, or throws its failure. */
export const runOn = async <A, E>(
  runtime: StoreRuntime,
  effect: Effect.Effect<A, E, SessionStore.SessionStore>
): Promise<A> => {
  const exit = await runtime.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

// ---------------------------------------------------------------------------
// Sessions by id or prefix
// ---------------------------------------------------------------------------

/** The full id of the session `idOrPrefix` names: an exact id, or a unique prefix of one (`IdPrefix`). */
export const resolveSessionId = (idOrPrefix: string) =>
  Effect.gen(function* () {
    const store = yield* SessionStore.SessionStore
    const sessions = yield* store.list()
    return yield* IdPrefix.resolve(
      "session",
      idOrPrefix,
      sessions.map((info) => info.id),
      (sessionId) => new SessionStore.SessionNotFoundError({ sessionId })
    )
  })

export const deleteSession = (id: string) =>
  Effect.flatMap(Effect.service(SessionStore.SessionStore), (store) => store.delete(id))

export const listSessions = Effect.flatMap(Effect.service(SessionStore.SessionStore), (store) => store.list())

/** The first characters of a session id: enough to name it in `/resume` and `--session`. */
export const shortId = (id: string): string => id.slice(0, 8)

/**
 * Runs `effect` until it ends or one of `signals` arrives (Ctrl-C, `kill`, a closed terminal),
 * which interrupts it: its finalizers run. The exit, and the first signal received, if any (an
 * interrupted command exits with 128 + its number).
 */
export const runInterruptible = async <A, E>(
  effect: Effect.Effect<A, E>,
  signals: ReadonlyArray<NodeJS.Signals> = ["SIGINT", "SIGTERM", "SIGHUP"]
): Promise<{ readonly exit: Exit.Exit<A, E>; readonly signalled: NodeJS.Signals | undefined }> => {
  const fiber = Effect.runFork(effect)
  let signalled: NodeJS.Signals | undefined
  const onSignal = (signal: NodeJS.Signals) => {
    signalled ??= signal
    Effect.runFork(Fiber.interrupt(fiber))
  }
  for (const signal of signals) process.on(signal, onSignal)
  try {
    return { exit: await Effect.runPromise(Fiber.await(fiber)), signalled }
  } finally {
    for (const signal of signals) process.off(signal, onSignal)
  }
}
