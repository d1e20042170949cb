/**
 * RunsCommand: `noema threads ...`, `noema run "request"`, `noema runs ...`
 * over the runs store in the configured database and the files in the
 * workspace (`--workspace`, `NOEMA_WORKSPACE`, default `$NOEMA_HOME/workspace`).
 *
 * Whatever carries a run on (run, approve, retry, resume) holds the run's lease
 * (`RunLease`), shows each event as it happens (or prints it as a JSON line
 * with `--json`), and stops when the run finishes or must wait. Runs and
 * threads are shown as `Shown` sees them (a run no process carries on is
 * interrupted) and printed as JSON in its style; a RUN or THREAD id may be any
 * unique prefix of one (`IdPrefix`).
 *
 * A run is carried on with the model it was started with, found among the ones
 * this process has (`executorModels`: the configured one, the offline one); a
 * run whose model is not here waits, saying how to go on (`modelWait`).
 */
import * as os from "node:os"
import * as path from "node:path"
import type { ChatModel } from "@noema/core"
import {
  ClusterEngine,
  Executor,
  Pipeline,
  PlanPipeline,
  Run,
  RunFiles,
  RunLease,
  type RunsStore,
  Shown,
  SqlRunsStore,
  Worker
} from "@noema/runs"
import { SqlStore, TraceStore } from "@noema/session"
import { Cause, Duration, Effect, Exit, Option } from "effect"
import { WorkflowEngine } from "effect/workflow"
import { type PipelineTools, type RunsCommand, readsOnly, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as CliError from "./CliError.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as ChatSetup from "./internal/ChatSetup.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as IdPrefix from "./internal/IdPrefix.js"
import * as Models from "./internal/Models.js"
import * as Tracing from "./internal/tracing.js"
import * as ModelProvider from "./ModelProvider.js"
import * as OfflineModel from "./OfflineModel.js"
import * as Terminal from "./Terminal.js"
import * as BuiltinTools from "./tools/BuiltinTools.js"

class RunsCommandError extends Error {
  override readonly name = "RunsCommandError"
}

/**
 * The tools a pipeline's stages may name here: what `noema run --help` and docs/runs.md list,
 * and what a pipeline file is checked against (without `--no-tools`).
 */
export const pipelineTools: PipelineTools = {
  always: Pipeline.stageTools,
  builtin: BuiltinTools.all.map((tool) => tool.name)
}

/**
 * The pipeline in `file`, checked against the tools offered; refused as a usage error (exit 2)
 * before anything is stored or written, every problem on a line of its own (`FILE:LINE:COLUMN: ...`).
 */
const loadPipeline = async (file: string, tools: ReadonlyArray<string>, noTools: boolean) => {
  const result = await Effect.runPromise(Effect.result(Pipeline.load(file, { tools })))
  if (result._tag === "Success") return result.success
  const only = noTools ? ` (--no-tools: the stages have ${Pipeline.stageTools.join(" and ")} only)` : ""
  throw new UsageError(`the pipeline ${Terminal.inline(file)} is refused, nothing was run${only}`, {
    details: result.failure.problems.map(Terminal.inline)
  })
}

const present = (value: string | undefined) =>
  value === undefined || value.trim() === "" ? undefined : value.trim()

export const workspaceOf = (flag: string | undefined, io: Io): string => {
  const chosen = present(flag) ?? present(io.env.NOEMA_WORKSPACE)
  return chosen === undefined
    ? path.join(CliConfig.paths(io.env).home, "workspace")
    : path.resolve(io.cwd, chosen)
}

const size = (bytes: number) =>
  bytes < 1024
    ? `${bytes} B`
    : bytes < 1024 * 1024
      ? `${(bytes / 1024).toFixed(1)} KiB`
      : `${(bytes / 1048576).toFixed(1)} MiB`

const since = (from: string | undefined, to: string | undefined) => {
  if (from === undefined) return ""
  const ms = (to === undefined ? Date.now() : Date.parse(to)) - Date.parse(from)
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`
}

// Everything shown that a model, a user or the files chose (names, paths, reasons, errors) goes
// through the terminal's sanitiser: `Terminal.inline` for a name, `Terminal.oneLine` for prose.
const { inline, oneLine } = Terminal

const stageName = (run: { readonly stages: ReadonlyArray<{ readonly key: string }> }, position: number) =>
  inline(`${String(position).padStart(2, "0")}-${run.stages[position - 1]?.key ?? "?"}`)

/** One line per event, as a run goes (undefined: nothing to show). */
const progressLine = (style: Terminal.Style, run: Run.RunView, event: Run.EventData): string | undefined => {
  switch (event.type) {
    case "RunQueued":
      return undefined
    case "RunStarted":
      return style.dim(`run ${run.runId} running (thread ${run.threadId}, pipeline ${inline(run.pipeline)})`)
    case "StageStarted":
      return `▸ ${stageName(run, event.position)}${event.attempt > 1 ? ` (attempt ${event.attempt})` : ""}`
    case "ArtifactPublished":
      return style.dim(
        `    + ${inline(event.path)}  ${size(event.size)}  sha256 ${inline(event.sha256.slice(0, 12))}…`
      )
    case "StageCompleted": {
      const attempt = run.stages[event.position - 1]?.attempts[event.attempt - 1]
      return `${style.green("✓")} ${stageName(run, event.position)}  ${style.dim(since(attempt?.startedAt, attempt?.finishedAt))}`
    }
    case "StageFailed":
      return `${style.red("✗")} ${stageName(run, event.position)}: ${inline(event.error_code)}: ${oneLine(event.error_message, 160)}`
    case "ApprovalRequested":
      return `⏸ ${stageName(run, event.position)} waits for approval: noema runs approve ${run.runId} (or reject --reason …)`
    case "ApprovalGranted":
      return `☑ ${stageName(run, event.position)} approved${event.by === undefined ? "" : ` by ${oneLine(event.by, 60)}`}`
    case "ApprovalRejected":
      return `☒ ${stageName(run, event.position)} rejected: ${oneLine(event.reason, 160)}`
    case "RunCompleted":
      return `${style.green("✔")} run ${run.runId} completed  ${style.dim(since(run.startedAt, run.finishedAt))}`
    case "RunFailed":
      return `${style.red("✘")} run ${run.runId} failed: ${inline(event.error_code)}${event.retryable ? ` (noema runs retry ${run.runId})` : ""}`
    case "RunCanceled":
      return `run ${run.runId} canceled: ${oneLine(event.reason, 160)}`
    case "ModelUnavailable":
      // Said once by whoever could not carry the run on (`modelWait`), not per event.
      return undefined
  }
}

/** What holds the thread, when what holds it is an interrupted run: waiting for it frees nothing. */
const heldLine = (thread: Shown.ShownThread): string | undefined =>
  thread.activeRun?.status === "interrupted"
    ? `held by run ${thread.activeRun.runId}, which was interrupted (no process carries it on): ${RunLease.resumeHint(thread.activeRun.runId)}, or cancel it`
    : undefined

/** `runs resume|retry|approve --model NAME`: the run is carried on with that model, whatever it was started with. */
const overriding: ReadonlyArray<RunsCommand["type"]> = ["runs-resume", "runs-retry", "runs-approve"]

/**
 * The models a command that carries runs on has: the configured one (flags, then the
 * environment; retries shown, failures told as `ask` does) and the built-in offline one,
 * which a run started on it keeps. A run is carried on with the model it was started with,
 * unless `--model` on `runs resume|retry|approve` names another.
 */
const executorModels = async (
  command: Extract<RunsCommand, { readonly model: unknown }>,
  frame: Frame.Shape
) => {
  const override = overriding.includes(command.type) && present(command.model.model) !== undefined
  const configured = await Models.commandModel(command.model, frame)
  let failure: ChatModel.ChatModelError | undefined
  // A stage's failure keeps only its message: the model's own error is told beside it.
  const model = Models.observeFailures(configured.model, (error) => {
    failure = error
  })
  const offline = OfflineModel.make()
  const options = {
    modelIdentity: Run.modelIdentity(
      configured.config.kind === "openai"
        ? {
            provider: model.provider,
            name: configured.config.model,
            baseUrl:
              configured.config.baseUrl ?? ModelProvider.settings[configured.config.provider].defaultBaseUrl,
            // The API flavour is OpenAI's choice; Anthropic speaks one (Messages).
            api: configured.config.provider === "openai" ? configured.config.api : "messages"
          }
        : { provider: model.provider, name: model.model }
    ),
    otherModels:
      configured.config.kind === "offline"
        ? []
        : [
            {
              identity: Run.modelIdentity({ provider: offline.provider, name: offline.model }),
              model: offline
            }
          ],
    carryOnWith: override ? ("this" as const) : ("recorded" as const)
  }
  return {
    ...configured,
    model,
    /** The model as configured, for `serve`'s Chat view: a chat's failures are the chat's to tell. */
    chatModel: configured.model,
    options,
    /** The failure of the model's last call that failed in the end, if not told yet. */
    takeFailure: () => {
      const taken = failure
      failure = undefined
      return taken
    }
  }
}

/** The settings that configure `model` for `noema` (its server with `***` where credentials go). */
const settingsOf = (model: Run.ModelIdentity): string =>
  [
    ...(model.provider === "anthropic" ? ["NOEMA_PROVIDER=anthropic"] : []),
    `NOEMA_MODEL=${model.name}`,
    ...(model.base_url === undefined ? [] : [`NOEMA_BASE_URL=${model.base_url}`]),
    ...(model.api === "responses" ? ["NOEMA_OPENAI_API=responses"] : [])
  ].join(" ")

/**
 * A run that waits for its model, and how to go on: what `runs resume`, the worker's log and
 * `runs show` say. `who` is the process that could not carry it on.
 */
const modelWait = (
  runId: string,
  wait: { readonly model: Run.ModelIdentity; readonly available: Run.ModelIdentity },
  who: "this process" | "the process that tried"
): string =>
  `run ${runId} waits for the model it was started with, ${inline(Run.describeModel(wait.model))}; ${who} has ${inline(Run.describeModel(wait.available))}. ` +
  `Configure that model where the run is carried on (${inline(settingsOf(wait.model))}), then noema runs resume ${runId} (or a worker carries it on); ` +
  `or carry it on with another model: noema runs resume ${runId} --model NAME`

const threadLine = (thread: Shown.ShownThread) => {
  const held = heldLine(thread)
  return `${thread.id}  ${thread.status.padEnd(6)}  ${thread.queuePolicy.padEnd(7)}  ${thread.createdAt}  ${oneLine(thread.title, 60)}${held === undefined ? "" : `\n  ${held}`}`
}

const queueText = (thread: Run.Thread) =>
  thread.queuePolicy === "enqueue"
    ? `enqueue (a request while a run is active waits its turn; noema threads set-queue ${thread.id} reject refuses it)`
    : `reject (a request while a run is active is refused; noema threads set-queue ${thread.id} enqueue queues it)`

const showThread = (thread: Shown.ShownThread, runs: ReadonlyArray<Shown.ShownRun>): string => {
  const held = heldLine(thread)
  const active = thread.activeRun
  return [
    `thread ${thread.id}  ${thread.status}${thread.title === "" ? "" : `  ${oneLine(thread.title, 80)}`}`,
    `created ${thread.createdAt}`,
    `queue policy: ${queueText(thread)}`,
    held ?? (active === null ? "active run: none" : `active run: ${active.runId} ${active.status}`),
    ...(thread.queuedRuns > 0
      ? [`queued: ${thread.queuedRuns} run${thread.queuedRuns === 1 ? "" : "s"}`]
      : []),
    "",
    runs.length === 0 ? "no runs" : "runs, newest first",
    ...[...runs].reverse().map((one) => `  ${runLine(one)}`)
  ]
    .join("\n")
    .concat("\n")
}

const runLine = (run: Shown.ShownRun) =>
  `${run.runId}  ${run.status.padEnd(16)}  ${run.threadId}  ${run.createdAt}  ${inline(run.pipeline)}  ${oneLine(run.request, 50)}`

/** What `runs verify` found; a run.json whose sha256 was never recorded is said to be so, not "ok". */
const verifyText = (report: RunFiles.VerifyReport): string => {
  const runFile =
    report.runFile === "not recorded"
      ? "run.json's sha256: not recorded (the run was made before noema recorded it; run.json was read, not checked against it)\n"
      : ""
  if (report.ok)
    return `ok: ${report.runFile === "matches" ? "run.json matches the sha256 recorded when the run was created; " : ""}${report.artifacts} artifacts in ${report.checked.length} stage directories match their manifests and the timeline\n${runFile}`
  const where = (problem: RunFiles.VerifyProblem) =>
    inline(problem.stage === "" ? problem.path : `${problem.stage}/artifacts/${problem.path}`)
  return `${report.problems.map((p) => `${where(p)}: ${oneLine(p.problem, 300)}\n`).join("")}${runFile}${report.problems.length} problem${report.problems.length === 1 ? "" : "s"}\n`
}

const showRun = (
  run: Shown.ShownRun,
  events: ReadonlyArray<Run.Event>,
  workflow: Executor.WorkflowView | undefined,
  workspace: string
): string => {
  const lines = [
    `run ${run.runId}  ${run.status}`,
    ...(run.status === "interrupted"
      ? [
          `interrupted: no process carries it on (its process stopped); ${RunLease.resumeHint(run.runId)} carries it on`
        ]
      : []),
    `thread ${run.threadId}, pipeline ${inline(run.pipeline)}, created ${run.createdAt}${run.finishedAt === undefined ? "" : `, finished ${run.finishedAt}`}`,
    `request: ${oneLine(run.request, 200)}`,
    ...(run.error === undefined
      ? []
      : [
          `error: ${inline(run.error.error_code)}: ${oneLine(run.error.error_message, 200)} (${run.error.retryable ? "retryable" : "not retryable"})`
        ]),
    ...(run.waitingForModel === undefined
      ? []
      : [
          `waiting since ${run.waitingForModel.since}: ${modelWait(run.runId, run.waitingForModel, "the process that tried")}`
        ]),
    `files: ${RunFiles.runDirectory(workspace, run.runId)}`,
    "",
    "stages"
  ]
  for (const stage of run.stages) {
    lines.push(
      `  ${stageName(run, stage.position)}  ${stage.status}${stage.needsApproval ? (stage.approved ? "  (approved)" : "  (needs approval)") : ""}`
    )
    for (const attempt of stage.attempts) {
      lines.push(
        `    attempt ${attempt.attempt}  ${attempt.status}  ${attempt.status === "interrupted" ? `started ${attempt.startedAt}` : since(attempt.startedAt, attempt.finishedAt)}${attempt.error === undefined ? "" : `  ${inline(attempt.error.error_code)}: ${oneLine(attempt.error.error_message, 120)}`}`
      )
      for (const artifact of attempt.artifacts)
        lines.push(
          `      ${inline(artifact.path)}  ${inline(artifact.kind)}  ${size(artifact.size)}  sha256 ${inline(artifact.sha256)}`
        )
    }
  }
  if (workflow !== undefined)
    lines.push(
      "",
      `workflow ${workflow.executionId}  ${workflow.completed ? "completed" : "open (under way, or suspended until approved or resumed)"}${workflow.interrupted ? ", interrupted" : ""}`,
      `  activities recorded: ${workflow.activities.length === 0 ? "none" : workflow.activities.join(", ")}`,
      ...(workflow.deferreds.length === 0 ? [] : [`  deferreds completed: ${workflow.deferreds.join(", ")}`])
    )
  lines.push("", "timeline")
  for (const event of events) {
    const { type, ...rest } = event.data
    const detail = Object.entries(rest)
      .map(
        ([key, value]) =>
          `${key}=${typeof value === "string" ? oneLine(value, 60) : inline(Shown.stringify(value))}`
      )
      .join(" ")
    lines.push(
      `  ${String(event.seq).padStart(3)}  ${event.at}  ${type}${detail === "" ? "" : `  ${detail}`}`
    )
  }
  return `${lines.join("\n")}\n`
}

/**
 * The id `idOrPrefix` names (`IdPrefix`): the id itself when `exact` finds it, else the one id
 * of `ids` it begins (refused when it begins none or several).
 */
const wholeId = <NotFound extends Run.RunNotFound | Run.ThreadNotFound, E>(
  kind: "run" | "thread",
  idOrPrefix: string,
  exact: Effect.Effect<unknown, NotFound | E>,
  ids: Effect.Effect<ReadonlyArray<string>, E>,
  notFound: (id: string) => NotFound
) =>
  exact.pipe(
    Effect.as(idOrPrefix),
    Effect.catchIf(
      (error): error is NotFound => error instanceof Run.RunNotFound || error instanceof Run.ThreadNotFound,
      () => Effect.flatMap(ids, (all) => IdPrefix.resolve(kind, idOrPrefix, all, notFound))
    )
  )

const runIdOf = (store: RunsStore.Service, idOrPrefix: string) =>
  wholeId(
    "run",
    idOrPrefix,
    store.getRun(idOrPrefix),
    Effect.map(store.listRuns(), (runs) => runs.map((one) => one.runId)),
    (runId) => new Run.RunNotFound({ runId })
  )

const threadIdOf = (store: RunsStore.Service, idOrPrefix: string) =>
  wholeId(
    "thread",
    idOrPrefix,
    store.getThread(idOrPrefix),
    Effect.map(store.listThreads(), (threads) => threads.map((thread) => thread.id)),
    (threadId) => new Run.ThreadNotFound({ threadId })
  )

/** `command` with its RUN and THREAD ids whole: each may have been given as a unique prefix. */
const withIds = (store: RunsStore.Service, command: RunsCommand) =>
  Effect.gen(function* () {
    const run = "run" in command && command.run !== undefined ? yield* runIdOf(store, command.run) : undefined
    const thread =
      "thread" in command && command.thread !== undefined
        ? yield* threadIdOf(store, command.thread)
        : undefined
    const resolved: RunsCommand = {
      ...command,
      ...(run !== undefined && { run }),
      ...(thread !== undefined && { thread })
    }
    return resolved
  })

/** The runs database's pool on a cluster runner: its shard-lock session, storage polls, the runs. */
const runnerConnections = 8

/**
 * With `--engine cluster` (or NOEMA_RUNS_ENGINE=cluster): the cluster's settings (`ClusterEngine.settingsFrom`)
 * and, for a worker or a serve that carries runs on, where this runner is reached; refused at
 * once on SQLite. Undefined on the claims engine.
 */
const clusterOf = (
  command: RunsCommand,
  env: Readonly<Record<string, string | undefined>>,
  database: CliConfig.DatabaseConfig
) => {
  if (!("engine" in command)) return undefined
  const fromEnv = present(env.NOEMA_RUNS_ENGINE)
  if (fromEnv !== undefined && fromEnv !== "claims" && fromEnv !== "cluster")
    throw new UsageError(`NOEMA_RUNS_ENGINE must be claims or cluster, got "${Terminal.inline(fromEnv)}"`)
  if ((command.engine ?? fromEnv ?? "claims") === "claims") return undefined
  if (database.kind === "sqlite")
    throw new UsageError(
      `--engine cluster needs a PostgreSQL database (--database postgres://...); ${database.path} is SQLite: use the claims engine there`
    )
  // The runner owning the run carries it on with its own models: a client cannot choose another.
  if (overriding.includes(command.type) && "model" in command && present(command.model.model) !== undefined)
    throw new UsageError(
      `${command.type.replace("-", " ")} --model is refused with --engine cluster: the runner owning the run carries it on with the model it was started with; carry it on with another model on the claims engine (--engine claims)`
    )
  const read = ClusterEngine.settingsFrom(env)
  if ("problem" in read) throw new UsageError(read.problem)
  const carrying = command.type === "worker" || (command.type === "serve" && command.worker)
  if (!carrying) return { settings: read.settings, runner: undefined }
  const port = command.runnerPort ?? present(env.NOEMA_RUNNER_PORT) ?? "34431"
  if (!/^\d+$/.test(String(port)) || Number(port) < 1 || Number(port) > 65535)
    throw new UsageError(
      `NOEMA_RUNNER_PORT must be a port (1 to 65535), got "${Terminal.inline(String(port))}"`
    )
  const listen = present(command.runnerListen) ?? present(env.NOEMA_RUNNER_LISTEN)
  const runner: ClusterEngine.RunnerOptions = {
    host: present(command.runnerHost) ?? present(env.NOEMA_RUNNER_HOST) ?? os.hostname(),
    port: Number(port),
    ...(listen !== undefined && { listenHost: listen })
  }
  return { settings: read.settings, runner }
}

/** `noema chat`'s agent for `serve`'s Chat view: the configured model, the built-in tools unless `--no-tools`. */
const chatAgent = (
  command: Extract<RunsCommand, { readonly type: "serve" }>,
  models: { readonly config: CliConfig.ModelConfig; readonly chatModel: ChatModel.Service },
  io: Io
) => {
  const tools = command.noTools ? 0 : BuiltinTools.all.length
  const contextBudget = CliConfig.resolveContextBudget(command.model, io.env)
  let compaction: Promise<Models.CompactionSettings> | undefined
  return ChatSetup.forServer(
    {
      model: models.chatModel,
      tools: !command.noTools,
      cwd: io.cwd,
      compaction: () => {
        compaction ??= Models.makeCompaction(models.config, contextBudget)
        return compaction
      }
    },
    `${CliConfig.describeModel(models.config)} · ${tools === 0 ? "no tools" : `${tools} tools`}`
  )
}

/** What a runs command needs before the database opens: the input checked, the pipeline, the model. */
const prepare = async (command: RunsCommand, frame: Frame.Shape) => {
  const { io } = frame
  const workspace = workspaceOf(command.workspace, io)
  const database = CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd)
  const executing = "model" in command
  const tools = executing && !command.noTools ? BuiltinTools.make({ root: io.cwd }) : []
  // The pipeline is checked, its tools against those offered, before anything is stored.
  const pipeline =
    command.type === "run" && command.pipeline !== undefined
      ? await loadPipeline(path.resolve(io.cwd, command.pipeline), Pipeline.toolNames(tools), command.noTools)
      : Pipeline.defaultPipeline
  const models = "model" in command ? await executorModels(command, frame) : undefined
  const style = Terminal.styleFor(io.stdout, io.env)
  const print = (text: string) => Effect.sync(() => io.stdout.write(text))
  const json = command.json
  const longRunning = command.type === "serve" || command.type === "worker"
  let ttlMs: number | undefined
  if (longRunning && command.leaseTtl !== undefined) {
    const parsed = Duration.fromInput(command.leaseTtl as Duration.Input)
    if (Option.isNone(parsed) || Duration.toMillis(parsed.value) < 1000)
      throw new UsageError(
        `--lease-ttl needs a duration of at least a second, such as "15 seconds", got "${command.leaseTtl}"`
      )
    ttlMs = Duration.toMillis(parsed.value)
  }
  const cluster = clusterOf(command, io.env, database)
  // The panel's access token: --token, else NOEMA_SERVE_TOKEN, else the server makes one per start.
  const token =
    command.type === "serve" ? (command.token ?? (io.env.NOEMA_SERVE_TOKEN || undefined)) : undefined
  // The server (effect/http and Node's HTTP server) is loaded by `serve` only: other commands start faster.
  const serverPackage = command.type === "serve" ? await import("@noema/server") : undefined
  const tokenProblem = token === undefined ? undefined : serverPackage?.Server.tokenProblem(token)
  if (tokenProblem !== undefined) throw new UsageError(`${tokenProblem} (--token, NOEMA_SERVE_TOKEN)`)
  // The Plans, Routines and Resources views' stores: loaded by `serve` only, like the server.
  const serveViews = command.type === "serve" ? await import("./internal/ServeViews.js") : undefined
  const viewsEmbedder = serveViews === undefined ? undefined : await serveViews.embedder(io)
  return {
    workspace,
    database,
    tools,
    pipeline,
    models,
    style,
    print,
    json,
    longRunning,
    ttlMs,
    token,
    serverPackage,
    serveViews,
    viewsEmbedder,
    cluster
  }
}

export const run = (command: RunsCommand, io: Io) =>
  Effect.gen(function* () {
    const frame = yield* Frame.Frame
    const {
      workspace,
      database,
      tools,
      pipeline,
      models,
      style,
      print,
      json,
      longRunning,
      ttlMs,
      token,
      serverPackage,
      serveViews,
      viewsEmbedder,
      cluster
    } = yield* Effect.tryPromise({ try: () => prepare(command, frame), catch: (error) => error })
    const model = models?.model
    const executing = "model" in command
    if (longRunning) frame.endsOnSignal()
    const given = command
    const program = Effect.gen(function* () {
      const store: RunsStore.Service = yield* SqlRunsStore.fromDatabase
      // The RUN and THREAD ids given may be prefixes: from here on, they are whole.
      const command = yield* withIds(store, given)
      /** Runs this process canceled (its progress said so already). */
      const canceledHere = new Set<string>()
      /** What a planned stage may use besides write_artifact and read_artifact. */
      const toolNames = tools.map((tool) => tool.name)
      /** Runs whose wait for their model this process told already (a worker tries them again now and then). */
      const toldWaiting = new Set<string>()
      // On the cluster: its engine, from the layer provided below (a runner's, or a client's).
      const clusterEngine = yield* Effect.serviceOption(WorkflowEngine.WorkflowEngine)
      const engine = Option.isSome(clusterEngine)
        ? yield* ClusterEngine.make(store, {
            ...(cluster !== undefined && { settings: cluster.settings }),
            ...(ttlMs !== undefined && { leaseTtlMs: ttlMs }),
            // A runner carries at most --concurrency runs at once, as a claims worker does.
            ...("concurrency" in command && { concurrency: command.concurrency })
          }).pipe(Effect.provideService(WorkflowEngine.WorkflowEngine, clusterEngine.value))
        : undefined
      const executor = Executor.make({
        store,
        workspace,
        ...(engine !== undefined && { engine }),
        // A command that carries no run on (show, cancel, reject...) never calls a model.
        model: model ?? OfflineModel.make(),
        ...models?.options,
        tools,
        // A cluster client shows what its runner does from the store (`follow`), its own events too.
        ...((engine === undefined || longRunning) && { onEvent: (view, event) => showEvent(view, event) })
      })
      /** An event as it happens: a progress line (a JSON line with --json). */
      const showEvent = (view: Run.RunView, event: Run.EventData) =>
        Effect.sync(() => {
          if (event.type === "RunCanceled") canceledHere.add(view.runId)
          // One run at a time: the model's last failure is this stage's (a worker's runs share the model).
          const failure = event.type === "StageFailed" && !longRunning ? models?.takeFailure() : undefined
          if (failure !== undefined) io.stderr.write(`noema: ${CliError.describe(failure, models?.errors)}\n`)
          if (json) io.stdout.write(`${Shown.stringify({ run_id: view.runId, ...event })}\n`)
          else {
            const line = progressLine(style, view, event)
            // A worker carries several runs on at once: each line says whose it is.
            if (line !== undefined)
              io.stdout.write(`${longRunning ? `${style.dim(view.runId)}  ` : ""}${line}\n`)
          }
        })
      /** Why the run waits in its thread's queue, and what frees the thread when an interrupted run holds it. */
      const queuedText = (runId: string, reason: string) =>
        Effect.gen(function* () {
          const thread = yield* Shown.threadOf(
            store,
            yield* store.getThread((yield* store.getRun(runId)).threadId)
          )
          const held = heldLine(thread)
          return held === undefined
            ? `run ${runId} is queued: ${oneLine(reason, 200)} (a worker, noema worker or noema serve, starts it when the thread is free; or noema runs resume)`
            : `run ${runId} is queued: the thread is ${held}`
        })
      /**
       * Carries the run on holding its lease (taken before `before`, so no worker starts it
       * in between); the exit status its outcome gives.
       */
      const carryOn = (
        runId: string,
        step: Effect.Effect<
          Executor.Outcome,
          Executor.ExecuteError | Pipeline.PipelineError | Run.NotRetryable
        >,
        before: Effect.Effect<unknown, Executor.ExecuteError | Run.NotRetryable> = Effect.void
      ) =>
        Effect.gen(function* () {
          const outcome = yield* Worker.carryOn(store, runId, Effect.andThen(before, step), {
            interrupt: executor.interrupt
          })
          if (outcome._tag === "Queued") {
            if (!json) yield* print(`${yield* queuedText(runId, outcome.reason)}\n`)
            return ExitStatus.waiting
          }
          if (outcome._tag === "WaitingApproval") return ExitStatus.waiting
          if (outcome.run.status === "canceled" && !canceledHere.has(runId) && !json)
            yield* print(`run ${runId} was canceled meanwhile (noema runs show ${runId})\n`)
          return outcome.run.status === "completed" ? 0 : 1
        }).pipe(
          Effect.catchTag("ModelUnavailable", (waiting) =>
            Effect.as(
              Effect.sync(() => io.stderr.write(`noema: ${modelWait(runId, waiting, "this process")}\n`)),
              ExitStatus.waiting
            )
          )
        )

      /**
       * On the cluster, a runner carries the run on: this client follows its timeline from the
       * store, showing each event, until it finishes or must wait; the exit status as `carryOn`'s.
       */
      const follow = (runId: string, from: number) =>
        Effect.gen(function* () {
          let seen = from
          while (true) {
            const view = yield* store.getRun(runId)
            for (const event of yield* store.events(runId))
              if (event.seq > seen) {
                seen = event.seq
                yield* showEvent(view, event.data)
              }
            if (view.seq > seen) continue
            if (view.status === "waiting_approval") return ExitStatus.waiting
            if (view.status === "completed") return 0
            if (view.status === "failed" || view.status === "canceled") return 1
            if (view.status === "queued") {
              if (!json) yield* print(`${yield* queuedText(runId, "its thread is busy")}\n`)
              return ExitStatus.waiting
            }
            yield* Effect.sleep(Duration.millis(100))
          }
        })
      /** Hands the run to the cluster (`Executor.submit`), then follows it unless `detach`. */
      const handOver = (runId: string, from: number, detach = false) =>
        Effect.gen(function* () {
          const submitted = yield* executor.submit(runId)
          if (submitted._tag === "Queued") {
            if (!json && !detach) yield* print(`${yield* queuedText(runId, submitted.reason)}\n`)
            return detach ? 0 : ExitStatus.waiting
          }
          return detach ? 0 : yield* follow(runId, from)
        })

      switch (command.type) {
        case "threads-create": {
          const thread = yield* store.createThread({
            ...(command.title !== undefined && { title: command.title }),
            queuePolicy: command.queue
          })
          yield* print(json ? `${Shown.stringify(yield* Shown.threadOf(store, thread))}\n` : `${thread.id}\n`)
          return 0
        }
        case "threads-list": {
          const threads = yield* Shown.threads(store)
          if (json) yield* print(`${Shown.stringify(threads)}\n`)
          else if (threads.length === 0)
            yield* Effect.sync(() => io.stderr.write("noema: no threads yet (noema threads create)\n"))
          else yield* print(threads.map((thread) => `${threadLine(thread)}\n`).join(""))
          return 0
        }
        case "threads-show": {
          const thread = yield* Shown.threadOf(store, yield* store.getThread(command.thread))
          const runs = yield* Shown.runs(store, { threadId: thread.id })
          yield* print(
            json ? `${Shown.stringify({ ...thread, runs: [...runs].reverse() })}\n` : showThread(thread, runs)
          )
          return 0
        }
        case "threads-set-queue": {
          const thread = yield* Shown.threadOf(
            store,
            yield* store.setQueuePolicy(command.thread, command.queue)
          )
          yield* print(
            json ? `${Shown.stringify(thread)}\n` : `thread ${thread.id}: queue policy ${queueText(thread)}\n`
          )
          return 0
        }
        case "threads-close": {
          const thread = yield* store.closeThread(command.thread)
          yield* print(
            json ? `${Shown.stringify(yield* Shown.threadOf(store, thread))}\n` : `closed ${thread.id}\n`
          )
          return 0
        }
        case "run": {
          let stages = pipeline
          if (command.plan) {
            // Refused before the model is asked: a closed or unknown thread.
            const thread = yield* store.getThread(command.thread)
            if (thread.status === "closed")
              return yield* Effect.fail(new Run.ThreadClosed({ threadId: thread.id }))
            stages = yield* PlanPipeline.plan(command.request, model!, {
              tools: toolNames,
              approval: command.approve
            }).pipe(
              Effect.mapError(
                (error) =>
                  new RunsCommandError(
                    `the model could not plan the stages: ${CliError.describe(error, models?.errors)}`
                  )
              )
            )
            if (!json)
              yield* print(
                `planned ${stages.stages.length} stage${stages.stages.length === 1 ? "" : "s"}: ${stages.stages
                  .map(
                    (stage, index) =>
                      `${inline(`${String(index + 1).padStart(2, "0")}-${stage.key}`)}${stage.approval ? " (approval)" : ""}`
                  )
                  .join(", ")}\n`
              )
          }
          const created = yield* executor
            .create({
              threadId: command.thread,
              request: command.request,
              pipeline: stages,
              ...(!command.detach &&
                engine === undefined && {
                  claim: { owner: RunLease.processOwner, ttlMs: RunLease.defaultTtlMs }
                })
            })
            .pipe(
              Effect.catchTag("ThreadBusy", (busy) =>
                Effect.flatMap(RunLease.explainBusy(store, busy), Effect.fail)
              )
            )
          if (engine !== undefined) {
            if (command.detach || json)
              yield* print(
                json
                  ? `${Shown.stringify({ run_id: created.runId, type: "RunQueued" })}\n`
                  : `${created.runId}\n`
              )
            else yield* print(`run ${created.runId}\n`)
            return yield* handOver(created.runId, created.seq, command.detach)
          }
          if (command.detach) {
            yield* print(
              json
                ? `${Shown.stringify({ run_id: created.runId, type: "RunQueued" })}\n`
                : `${created.runId}\n`
            )
            return 0
          }
          if (json) yield* print(`${Shown.stringify({ run_id: created.runId, type: "RunQueued" })}\n`)
          else yield* print(`run ${created.runId}\n`)
          return yield* carryOn(created.runId, executor.execute(created.runId, stages))
        }
        case "runs-list": {
          const runs = [
            ...(yield* Shown.runs(store, command.thread === undefined ? {} : { threadId: command.thread }))
          ].reverse()
          if (json) yield* print(`${Shown.stringify(runs)}\n`)
          else if (runs.length === 0) yield* Effect.sync(() => io.stderr.write("noema: no runs\n"))
          else yield* print(runs.map((r) => `${runLine(r)}\n`).join(""))
          return 0
        }
        case "runs-show": {
          const view = yield* Shown.runOf(store, command.run)
          const events = yield* store.events(command.run)
          // The claims engine's journal, else the cluster's message storage (a read needs no runner).
          const workflow =
            (yield* executor.workflowOf(command.run)) ??
            (yield* ClusterEngine.storedWorkflow(store, command.run))
          yield* print(
            json
              ? `${Shown.stringify({ ...view, events, workflow: workflow ?? null })}\n`
              : showRun(view, events, workflow, workspace)
          )
          return 0
        }
        case "runs-verify": {
          const report = yield* RunFiles.verifyRun(workspace, yield* store.getRun(command.run))
          yield* print(json ? `${Shown.stringify(report)}\n` : verifyText(report))
          return report.ok ? 0 : 1
        }
        case "runs-approve":
          if (engine !== undefined) {
            // The approval is the first event shown; its runner carries the run on from there.
            const approved = yield* executor.approve(command.run, command.by)
            return yield* follow(command.run, approved.seq - 1)
          }
          return yield* carryOn(
            command.run,
            executor.resume(command.run),
            executor.approve(command.run, command.by)
          )
        case "runs-reject": {
          const view = yield* executor.reject(command.run, command.reason)
          if (!json)
            yield* print(
              `run ${view.runId} ${view.status} (noema runs retry ${view.runId} --force asks for approval again)\n`
            )
          return 0
        }
        case "runs-retry": {
          // Refused unless forced (`NotRetryable`); forced, it says what it overrides.
          const overridden = command.force ? Run.retryRefusal(yield* store.getRun(command.run)) : undefined
          if (overridden !== undefined) {
            const notice = `noema: ${Terminal.sanitize(overridden.message)}; retrying it anyway (--force)\n`
            yield* Effect.sync(() => (json ? io.stderr : io.stdout).write(notice))
          }
          if (engine !== undefined) {
            const started = yield* executor.retry(command.run, { force: command.force })
            return yield* handOver(command.run, started.seq - 1)
          }
          return yield* carryOn(
            command.run,
            executor.resume(command.run),
            executor.retry(command.run, { force: command.force })
          )
        }
        case "runs-cancel": {
          yield* executor.cancel(command.run, command.reason)
          return 0
        }
        case "serve":
        case "worker":
          return yield* Effect.scoped(
            Effect.gen(function* () {
              const worker = yield* Worker.make({
                store,
                executor,
                concurrency: command.concurrency,
                lease: ttlMs === undefined ? {} : { ttlMs },
                onStopped: (runId, exit) =>
                  Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)
                    ? Effect.sync(() => {
                        const error = Cause.squash(exit.cause) as { message?: string }
                        // Another worker was quicker: nothing to say.
                        if (error instanceof RunLease.RunBusy) return
                        if (error instanceof Executor.ModelUnavailable) {
                          // Said once: the worker tries it again now and then, and nothing changes here.
                          if (!toldWaiting.has(runId))
                            io.stderr.write(`noema: ${modelWait(runId, error, "this process")}\n`)
                          toldWaiting.add(runId)
                          return
                        }
                        io.stderr.write(
                          `noema: run ${runId} stopped: ${Terminal.sanitize(error?.message ?? String(error))}\n`
                        )
                      })
                    : Effect.void
              })
              const carrying = command.type === "worker" || command.worker
              if (command.type === "serve") {
                const { Server, StoreChanges } = serverPackage as typeof import("@noema/server")
                // The Sessions view shows the conversations of the same database, priced as `sessions show` does.
                const prices = CliConfig.resolvePrices(io.env, CliConfig.paths(io.env))
                // The Plans, Routines and Resources views read the same database as noema resources does.
                const views = yield* serveViews!.make(io, viewsEmbedder!)
                const server = yield* Server.make({
                  store,
                  executor,
                  workspace,
                  port: command.port,
                  sessions: yield* SqlStore.fromDatabase,
                  // The Traces view shows the turns' traces kept in the same database.
                  traces: yield* TraceStore.fromDatabase,
                  ...(prices !== undefined && { prices }),
                  // The Chat view talks to the agent `noema chat` talks to, on the same kind of runtime.
                  ...(models !== undefined && { chat: chatAgent(command, models, io) }),
                  ...views,
                  plan: (request, approval) =>
                    PlanPipeline.plan(request, model!, { tools: toolNames, approval }),
                  ...(carrying && { wake: worker.wake }),
                  ...(token !== undefined && { token }),
                  changes: yield* StoreChanges.fromDatabase({
                    onListenFailure: (detail) => void io.stderr.write(`noema serve: ${detail}\n`)
                  }),
                  log: (line) => void io.stderr.write(line)
                }).pipe(
                  Effect.mapError(
                    (error) =>
                      new RunsCommandError(
                        `cannot listen on 127.0.0.1:${command.port}: ${error.detail}${/EADDRINUSE/.test(error.detail) ? " (another program uses the port: --port N)" : ""}`
                      )
                  )
                )
                yield* print(
                  json
                    ? `${Shown.stringify({ url: server.url, panel: server.panelUrl, token: server.token, worker: carrying, workspace, database: store.location })}\n`
                    : `noema serve: ${server.panelUrl}  (${carrying ? "carrying runs on" : "panel only: noema worker carries runs on"}; Ctrl-C stops)\n`
                )
              } else if (!json)
                yield* print(
                  cluster?.runner === undefined
                    ? `noema worker: carrying runs on from ${store.location}, ${command.concurrency} at a time (Ctrl-C stops)\n`
                    : `noema worker: a cluster runner at ${cluster.runner.host}:${cluster.runner.port} over ${store.location}, ${command.concurrency} runs at a time (Ctrl-C stops)\n`
                )
              if (carrying) yield* Effect.forkScoped(worker.run)
              return yield* Effect.never
            })
          ).pipe(
            // serve's turns (its Chat view's) keep their traces in the database, as noema chat's do.
            (serving) =>
              command.type === "serve" && frame.localTraces !== undefined
                ? Effect.provide(serving, Tracing.recording(frame.localTraces))
                : serving
          )
        case "runs-resume": {
          /** One run: carried on (canceled when it stopped before its files were set up). */
          const resumeOne = (view: Run.RunView) =>
            Effect.gen(function* () {
              if (!json) yield* print(`resuming run ${view.runId}\n`)
              return yield* carryOn(view.runId, executor.resume(view.runId))
            })
          /**
           * On the cluster: each run handed to the runner owning it (`Executor.submit`), all of
           * them first, then each followed until it ends or waits.
           */
          const resumeOnCluster = (views: ReadonlyArray<Run.RunView>) =>
            Effect.gen(function* () {
              const submitted: Array<readonly [Run.RunView, Executor.Submitted]> = []
              for (const view of views) {
                if (!json) yield* print(`resuming run ${view.runId}\n`)
                submitted.push([view, yield* executor.submit(view.runId)])
              }
              let status = 0
              for (const [view, result] of submitted) {
                if (result._tag === "Queued" && !json)
                  yield* print(`${yield* queuedText(view.runId, result.reason)}\n`)
                status = Math.max(
                  status,
                  result._tag === "Queued" ? ExitStatus.waiting : yield* follow(view.runId, view.seq)
                )
              }
              return status
            })
          // One run, or every run left running or queued by a process that is gone.
          const chosen =
            command.run !== undefined
              ? [yield* store.getRun(command.run)]
              : Worker.runnable(yield* store.listRuns({ active: true }), yield* store.claims())
          if (chosen.length === 0) {
            if (!json) yield* Effect.sync(() => io.stderr.write("noema: no run to resume\n"))
            return 0
          }
          if (engine !== undefined) return yield* resumeOnCluster(chosen)
          let status = 0
          for (const view of chosen) status = Math.max(status, yield* resumeOne(view))
          return status
        }
      }
    })

    // On the cluster, the program runs as one of its runners, or as a client of them.
    const placed =
      cluster === undefined
        ? program
        : Effect.provide(
            program,
            ClusterEngine.layer(cluster.runner === undefined ? { settings: cluster.settings } : cluster)
          )
    return yield* Databases.provideDatabase(
      placed,
      database,
      readsOnly(command),
      cluster === undefined ? undefined : runnerConnections
    ).pipe(
      // A refusal to retry says how to force it.
      Effect.catchIf(
        (error) => error instanceof Run.NotRetryable,
        (error) =>
          Effect.fail(
            new RunsCommandError(
              `${error.message}; noema runs retry ${error.runId} --force retries it anyway`
            )
          )
      ),
      // A signal stops a run where it is: the attempt under way stays open in the timeline, and
      // `noema runs resume` gives its stage a new attempt; a worker stops, its runs taken by the next one.
      Effect.onInterrupt(() =>
        Effect.sync(() =>
          io.stderr.write(
            longRunning
              ? `noema ${command.type}: stopped; runs under way are taken by the next worker (or noema runs resume)\n`
              : executing
                ? "noema: interrupted; noema runs resume carries the run on\n"
                : ""
          )
        )
      ),
      Effect.ensuring(Effect.sync(() => models?.dispose()))
    )
  })
