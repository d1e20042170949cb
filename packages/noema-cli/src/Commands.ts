/**
 * Commands: the command line, as one `effect/cli` command tree. Every command
 * and subcommand of `noema`, with its flags (the shared ones from
 * `internal/Flags`, defined once), its arguments, its help text and examples,
 * and the module that runs it, imported only when it runs (`Frame.runner`).
 * `--help`, `--version` and the shell completions (`noema completions`) come
 * from this tree, and so does docs/cli.md's list of commands and flags (a test
 * walks the tree and compares).
 *
 * A leaf hands its module the shape `CliArguments` names. Rules that involve
 * several flags are validations here (`Command.validate`), so a command line
 * that cannot run is refused before anything runs, in the usage error style.
 *
 * Examples run as pasted, on the offline model (a test runs every one):
 * `$SESSION`, `$THREAD`, `$RUN`, `$URN`, `$MESSAGE` and `$TRACE` stand for the
 * ids of a saved session, a thread, a run waiting for approval, a resource, a
 * planned request's message and a turn's trace.
 *
 * Imported at start-up: effect's modules by their own paths, not the `effect`
 * index, which would load all of them.
 */
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { defaultActor, defaultPort, plannerActor } from "./CliArguments.js"
import * as Flags from "./internal/Flags.js"
import * as Frame from "./internal/Frame.js"
import * as Output from "./internal/Output.js"
import * as SlashCommands from "./internal/SlashCommands.js"

// ---------------------------------------------------------------------------
// How commands are described and run
// ---------------------------------------------------------------------------

/** A command's title (its help page's first line, its line in its parent's list) and the text under it. */
const about =
  (title: string, text?: string) =>
  <Name extends string, Input, ContextInput, E, R>(self: Command.Command<Name, Input, ContextInput, E, R>) =>
    self.pipe(
      Command.withShortDescription(title),
      Command.withDescription(text === undefined ? title : `${title}\n\n${text}`)
    )

/** The examples on a command's help page: each runs as pasted (see the header). */
const examples = (...list: ReadonlyArray<readonly [command: string, description: string]>) =>
  Command.withExamples(list.map(([command, description]) => ({ command, description })))

/** Refuses a command line that is missing something `what` names (help and version are still answered). */
const missing = (argument: string) => Effect.fail(new CliError.MissingArgument({ argument }))

/** Refuses a command line whose flags do not go together. */
const invalid = (message: string) => Effect.fail(new CliError.ValidationError({ message }))

const chat = Frame.runner(() => import("./ChatCommand.js").then((module) => module.run))
const ask = Frame.runner(() => import("./AskCommand.js").then((module) => module.run))
const sessions = Frame.runner(() => import("./SessionsCommand.js").then((module) => module.run))
const traces = Frame.runner(() => import("./TracesCommand.js").then((module) => module.run))
const runs = Frame.runner(() => import("./RunsCommand.js").then((module) => module.run))
const routine = Frame.runner(() => import("./RoutineCommand.js").then((module) => module.run))
const plan = Frame.runner(() => import("./PlanCommand.js").then((module) => module.run))
const tasks = Frame.runner(() => import("./TasksCommand.js").then((module) => module.run))
const resources = Frame.runner(() => import("./ResourcesCommand.js").then((module) => module.run))
const policy = Frame.runner(() => import("./PolicyCommand.js").then((module) => module.run))

/** A positional argument; a blank one is no value. */
const argument = (name: string, description: string) =>
  Argument.String(name).pipe(
    Argument.withDescription(description),
    Argument.filter(
      (value) => value.trim() !== "",
      () => "a value, not blank"
    )
  )

/** An optional positional argument: undefined when not given. */
const optionalArgument = (name: string, description: string) =>
  argument(name, description).pipe(Argument.optional, Argument.map(Option.getOrUndefined))

/** Several words, joined by spaces: a request or a question needs no quotes. */
const words = (name: string, description: string) =>
  argument(name, description).pipe(
    Argument.variadic(),
    Argument.map((all) => all.join(" ").trim())
  )

// ---------------------------------------------------------------------------
// chat and ask
// ---------------------------------------------------------------------------

/** What a turn takes: the model, its tools, the session. */
const turn = {
  model: { ...Flags.model, ...Flags.turnLimits },
  tools: Flags.tools,
  mcp: Flags.mcp,
  approveAll: Flags.yes,
  system: Flags.system,
  session: Flags.session,
  database: Flags.database
}

const chatCommand = Command.make("chat", turn, (input) => chat("chat", { type: "chat", ...input })).pipe(
  about(
    "interactive chat, saved as a session",
    `Each message and everything the model did for it (tool calls, their results, the
answer) is a turn, saved when it completes. With stdin not a terminal, one message per
line, the answers on stdout.

${SlashCommands.text}`
  ),
  examples(
    ["printf 'my name is Ada\\nwhat is my name?\\n' | noema chat", "a script: one message per line"],
    ['echo "what is 12 * (3 + 4)?" | noema chat --session "$SESSION"', "go on with a saved session"]
  )
)

const askCommand = Command.make(
  "ask",
  {
    ...turn,
    words: Argument.String("QUESTION").pipe(
      Argument.withDescription("the question, in as many words as it takes; - reads it from stdin"),
      Argument.variadic()
    ),
    json: Flags.json
  },
  ({ words, ...input }) =>
    ask("ask", {
      type: "ask",
      ...input,
      // No question, or "-": stdin holds it.
      question: words.length === 0 || (words.length === 1 && words[0] === "-") ? undefined : words.join(" "),
      explicitStdin: words.length === 1 && words[0] === "-"
    })
).pipe(
  about(
    "ask one question and print the answer",
    `The answer streams to stdout; tool activity and notices go to stderr. Each question is
saved as a session (its id is printed on stderr when stderr is a terminal). With no
QUESTION, or -, the question is read from stdin; with a QUESTION and piped stdin both, the
model gets the question followed by the piped text in a fenced block.

Exit status 3 when a tool call waits for approval (decide with noema chat --session ID).`
  ),
  examples(
    ['noema ask "what is 6 * 7?"', "one question"],
    [
      'echo "3 apples and 4 pears" | noema ask "How many fruits are in this text?"',
      "a question about piped text"
    ],
    [
      'noema ask --session "$SESSION" --json "what is my name?"',
      "go on with a saved session; the turn as JSON"
    ]
  )
)

// ---------------------------------------------------------------------------
// sessions
// ---------------------------------------------------------------------------

const sessionId = argument("ID", "a session id, or any unique prefix of one (noema sessions list)")

const listing = { json: Flags.json, database: Flags.database }

const sessionsList = Command.make("list", listing, (input) =>
  sessions("sessions list", { type: "sessions-list", ...input })
).pipe(
  Command.withAlias("ls"),
  about("saved sessions, newest first"),
  examples(["noema sessions list --json", "as JSON"])
)

const sessionsShow = Command.make("show", { id: sessionId, ...listing }, (input) =>
  sessions("sessions show", { type: "sessions-show", ...input })
).pipe(
  about("one session's messages, with its token usage and each turn's"),
  examples(['noema sessions show "$SESSION"', "a session, turn by turn"])
)

const sessionsDelete = Command.make("delete", { id: sessionId, database: Flags.database }, (input) =>
  sessions("sessions delete", { type: "sessions-delete", ...input })
).pipe(
  Command.withAlias("rm"),
  about("delete a session"),
  examples(['noema sessions delete "$SESSION"', "delete it"])
)

const sessionsExport = Command.make(
  "export",
  {
    id: optionalArgument("ID", "the session (not with --all)"),
    format: Flags.choice("format", "FORMAT", ["json", "markdown", "md"], "export format (default json)", "f"),
    all: Flags.on("all", "every session, one JSON line each (for noema sessions import)"),
    database: Flags.database
  },
  ({ id, format, all, database }) =>
    sessions(
      "sessions export",
      all || id === undefined
        ? { type: "sessions-export-all", database }
        : {
            type: "sessions-export",
            id,
            format: format === undefined || format === "json" ? "json" : "markdown",
            database
          }
    )
).pipe(
  Command.validate(({ id, format, all }) => {
    if (all && id !== undefined) return invalid("give a session ID or --all, not both")
    if (all && format !== undefined) return invalid("--all writes JSON lines only (leave out --format)")
    return all || id !== undefined ? Effect.void : missing("ID")
  }),
  about("print a session for keeping or sharing, or every session as JSON lines"),
  examples(
    ['noema sessions export "$SESSION" --format markdown', "a session as Markdown"],
    ["noema sessions export --all > sessions.jsonl", "every session, for noema sessions import"]
  )
)

const sessionsImport = Command.make(
  "import",
  {
    file: optionalArgument("FILE", "JSON lines as export --all writes them (default, or -: stdin)"),
    database: Flags.database
  },
  (input) => sessions("sessions import", { type: "sessions-import", ...input })
).pipe(
  about(
    "add the sessions of JSON lines",
    "A session whose id exists already is skipped (exit status 1), nothing merged into it."
  ),
  examples([
    "noema sessions export --all | noema sessions import --database copy.db",
    "copy every session to another database"
  ])
)

const sessionsCommand = Command.make("sessions", listing, (input) =>
  sessions("sessions", { type: "sessions-list", ...input })
).pipe(
  about(
    "saved conversations",
    `Without a command: the list. ID may be any unique prefix of a session id. Sessions live
in $NOEMA_HOME/noema.db unless --database / NOEMA_DATABASE_URL names another; to move
them, e.g. to PostgreSQL:
  noema sessions export --all > sessions.jsonl
  noema sessions import sessions.jsonl --database postgres://USER:PASSWORD@HOST/DB`
  ),
  examples(["noema sessions", "the saved sessions"]),
  Command.withSubcommands([sessionsList, sessionsShow, sessionsDelete, sessionsExport, sessionsImport])
)

// ---------------------------------------------------------------------------
// traces
// ---------------------------------------------------------------------------

const tracesListing = {
  session: Flags.optional("session", "ID", "one session's (an id or any unique prefix of one)"),
  ...listing
}

const tracesList = Command.make("list", tracesListing, (input) =>
  traces("traces list", { type: "traces-list", ...input })
).pipe(
  about("the turns' traces kept, newest first: when, how long, how many spans, whose turn"),
  examples(['noema traces list --session "$SESSION"', "one session's turns"])
)

const tracesShow = Command.make(
  "show",
  { id: argument("TRACE", "a trace id, or any unique prefix of one (noema traces list)"), ...listing },
  (input) => traces("traces show", { type: "traces-show", ...input })
).pipe(
  about("one trace's spans: model calls with tokens, tool calls with their arguments and results, retries"),
  examples(['noema traces show "$TRACE"', "a turn's spans, as a tree"])
)

const tracesCommand = Command.make("traces", tracesListing, (input) =>
  traces("traces", { type: "traces-list", ...input })
).pipe(
  about(
    "what each turn did, span by span",
    `Without a command: the list. noema chat, noema ask and noema serve's Chat view keep each
turn's trace in the database: NOEMA_TRACES_KEEP turns (default 1000; 0 keeps none), each for
NOEMA_TRACES_MAX_AGE_DAYS days at most if set, also when spans are exported (OTEL_*). The
Traces view of noema serve shows the same (docs/tracing.md).`
  ),
  examples(["noema traces", "the newest turns' traces"]),
  Command.withSubcommands([tracesList, tracesShow])
)

// ---------------------------------------------------------------------------
// threads, run, runs, serve, worker
// ---------------------------------------------------------------------------

/** Where runs are kept, and how they are shown: every runs command takes these. */
const storage = { database: Flags.database, workspace: Flags.workspace, json: Flags.json }

/** What carries a run on: the model and the tools. */
const executing = {
  model: Flags.model,
  noTools: Flags.on("no-tools", "no tools for the stages (write_artifact and read_artifact stay)")
}

const threadId = argument("THREAD", "a thread id, or any unique prefix of one")
const runId = argument("RUN", "a run id, or any unique prefix of one")
const queuePolicies = ["reject", "enqueue"] as const

const threadsCreate = Command.make(
  "create",
  {
    title: Flags.optional("title", "TITLE", "the thread's title"),
    queue: Flags.choice(
      "queue",
      "POLICY",
      queuePolicies,
      "enqueue lets runs wait their turn (default reject: a request while a run is active is refused)"
    ).pipe(Flags.orElse("reject")),
    ...storage
  },
  (input) => runs("threads create", { type: "threads-create", ...input })
).pipe(
  about("a new open thread; prints its id"),
  examples(['THREAD=$(noema threads create --title "reports")', "a thread, its id kept for noema run"])
)

const threadsList = Command.make("list", storage, (input) =>
  runs("threads list", { type: "threads-list", ...input })
).pipe(about("every thread, with the run holding it"), examples(["noema threads list", "the threads"]))

const threadsShow = Command.make("show", { thread: threadId, ...storage }, (input) =>
  runs("threads show", { type: "threads-show", ...input })
).pipe(
  about("one thread: its queue policy and its runs"),
  examples(['noema threads show "$THREAD"', "a thread and its runs"])
)

const threadsSetQueue = Command.make(
  "set-queue",
  {
    thread: threadId,
    queue: Argument.Literals("POLICY", queuePolicies).pipe(
      Argument.withDescription(
        "what a request does while a run of the thread is active, from now on: wait its turn (enqueue) or be refused (reject)"
      )
    ),
    ...storage
  },
  (input) => runs("threads set-queue", { type: "threads-set-queue", ...input })
).pipe(
  about("change what a request does while a run of the thread is active"),
  examples(['noema threads set-queue "$THREAD" enqueue', "queue requests instead of refusing them"])
)

const threadsClose = Command.make("close", { thread: threadId, ...storage }, (input) =>
  runs("threads close", { type: "threads-close", ...input })
).pipe(about("no new runs in the thread"), examples(['noema threads close "$THREAD"', "close it"]))

const threadsCommand = Command.make("threads", storage, (input) =>
  runs("threads", { type: "threads-list", ...input })
).pipe(
  about(
    "threads hold runs",
    `Without a command: the list. THREAD may be any unique prefix of a thread id. A thread
held by an interrupted run (its process stopped) says so, and how to carry the run on.`
  ),
  examples(["noema threads --json", "the threads as JSON"]),
  Command.withSubcommands([threadsCreate, threadsList, threadsShow, threadsSetQueue, threadsClose])
)

/** `noema run --help` lists the tools a pipeline may use, from the tools themselves: loaded for that page only. */
const pipelineToolsText = () =>
  import("./RunsCommand.js").then(
    ({ pipelineTools: tools }) =>
      `  The tools a stage may name: ${[...tools.always, ...tools.builtin].join(", ")}
  (every stage has ${tools.always.join(" and ")}; --no-tools leaves only those). A file
  with a problem (an unknown tool or field, a bad key, ...) is refused before anything
  runs, with every problem on a line of its own as FILE:LINE:COLUMN: ... (exit status 2).`
  )

const runCommand = Command.make(
  "run",
  {
    request: words("REQUEST", "what the run is to do"),
    thread: Flags.optional("thread", "THREAD", "the thread (noema threads create makes one)", "t"),
    pipeline: Flags.optional("pipeline", "FILE", "the stages, as below (JSON has the same fields)", "p"),
    plan: Flags.on(
      "plan",
      "the model plans the stages (PlanAgent's plan: one stage per step); the plan is kept in run.json like a pipeline"
    ),
    approve: Flags.choice(
      "approve",
      "WHICH",
      ["none", "first", "all"],
      "with --plan: which stages wait for approval (default none)"
    ),
    detach: Flags.on(
      "detach",
      "only create the run and print its id: a worker (noema worker, noema serve) carries it on"
    ),
    engine: Flags.runsEngine,
    ...executing,
    ...storage
  },
  ({ thread, approve, ...input }) =>
    runs("run", { type: "run", ...input, thread: thread ?? "", approve: approve ?? "none" })
).pipe(
  Command.validate(({ request, thread, plan, pipeline, approve }) => {
    if (request === "") return missing("REQUEST")
    if (thread === undefined) return Effect.fail(new CliError.MissingOption({ option: "thread" }))
    if (plan && pipeline !== undefined)
      return invalid("--plan and --pipeline both choose the stages: give one")
    if (approve !== undefined && !plan)
      return invalid("--approve goes with --plan (a pipeline file says which stages need approval)")
    return Effect.void
  }),
  Command.annotate(Output.HelpAppendix, pipelineToolsText),
  about(
    "a request in a thread becomes a run whose stages write files",
    `Each stage of the pipeline (a JSON or YAML file; default: brief, then result) runs an agent
that writes artifacts under runs/<run_id>/stages/<nn>-<stage>/ in the workspace, hashed in
the stage's manifest.json. Progress is shown as it happens. A stage that needs approval
stops the run (exit status 4) until noema runs approve or reject. Exit status 0 when the run
completes, 1 when it fails, 2 when the pipeline is refused, 4 when it waits for approval or
in its thread's queue.

Pipelines
  name: review
  stages:
    - key: draft
      instructions: Write a draft. Save it with write_artifact as draft.md.
      tools: [current_time]
    - key: publish
      instructions: Publish the draft. Save it with write_artifact as final.md.
      approval: true`
  ),
  examples(
    ['noema run "write a haiku about the sea" --thread "$THREAD"', "a run with the default stages"],
    [
      'noema run "a short report on tides" --thread "$THREAD" --plan --approve first',
      "the model plans the stages; the first waits for approval (exit status 4)"
    ]
  )
)

const runsList = Command.make(
  "list",
  { thread: Flags.optional("thread", "THREAD", "only the runs of this thread", "t"), ...storage },
  (input) => runs("runs list", { type: "runs-list", ...input })
).pipe(about("runs, newest first"), examples(['noema runs list --thread "$THREAD"', "a thread's runs"]))

const runsShow = Command.make("show", { run: runId, ...storage }, (input) =>
  runs("runs show", { type: "runs-show", ...input })
).pipe(
  about("a run's stages, attempts, artifacts and timeline"),
  examples(['noema runs show "$RUN"', "a run in full"])
)

const runsApprove = Command.make(
  "approve",
  {
    run: runId,
    by: Flags.optional("by", "WHO", "who approves (kept in the timeline)"),
    engine: Flags.runsEngine,
    ...executing,
    ...storage
  },
  (input) => runs("runs approve", { type: "runs-approve", ...input })
).pipe(
  about("approve the stage waiting, then carry the run on"),
  examples(['noema runs approve "$RUN" --by ada', "approve and carry on"])
)

const runsReject = Command.make(
  "reject",
  {
    run: runId,
    reason: Flags.optional("reason", "TEXT", "why (kept in the timeline)"),
    engine: Flags.runsEngine,
    ...storage
  },
  ({ reason, ...input }) => runs("runs reject", { type: "runs-reject", ...input, reason: reason ?? "" })
).pipe(
  Command.validate(({ reason }) =>
    reason === undefined || reason.trim() === ""
      ? Effect.fail(new CliError.MissingOption({ option: "reason" }))
      : Effect.void
  ),
  about("reject the stage waiting: the run fails (retry --force asks again)"),
  examples(['noema runs reject "$RUN" --reason "not this week"', "reject it, saying why"])
)

const runsRetry = Command.make(
  "retry",
  {
    run: runId,
    force: Flags.on("force", "retry a failure that is not retryable too (saying so)"),
    engine: Flags.runsEngine,
    ...executing,
    ...storage
  },
  (input) => runs("runs retry", { type: "runs-retry", ...input })
).pipe(
  about(
    "a failed run again from its failed stage (a new attempt)",
    `A failure that is not retryable (a rejection, a refused pipeline or file, a model server
refusing the request) is refused with the reason (exit status 1) unless --force.`
  ),
  examples([
    'noema runs reject "$RUN" --reason "redo it" && noema runs retry "$RUN" --force',
    "a rejected run, asked again"
  ])
)

const runsCancel = Command.make(
  "cancel",
  {
    run: runId,
    reason: Flags.optional("reason", "TEXT", "why (kept in the timeline)"),
    engine: Flags.runsEngine,
    ...storage
  },
  (input) => runs("runs cancel", { type: "runs-cancel", ...input })
).pipe(about("cancel a run"), examples(['noema runs cancel "$RUN" --reason "no longer needed"', "cancel it"]))

const runsResume = Command.make(
  "resume",
  {
    run: optionalArgument("RUN", "the run (default: every run whose process stopped)"),
    engine: Flags.runsEngine,
    ...executing,
    ...storage
  },
  (input) => runs("runs resume", { type: "runs-resume", ...input })
).pipe(
  about(
    "carry on runs whose process stopped (killed, crashed)",
    `Completed stages are kept; the interrupted one gets a new attempt. A run is carried on
with the model it was started with; --model NAME carries it on with that model instead.`
  ),
  examples(["noema runs resume", "every run whose process stopped"])
)

const runsVerify = Command.make("verify", { run: runId, ...storage }, (input) =>
  runs("runs verify", { type: "runs-verify", ...input })
).pipe(
  about("re-hash every artifact against its manifest, and check the manifests against the timeline"),
  examples(['noema runs verify "$RUN"', "check a run's files"])
)

const runsCommand = Command.make(
  "runs",
  { thread: Flags.optional("thread", "THREAD", "only the runs of this thread", "t"), ...storage },
  (input) => runs("runs", { type: "runs-list", ...input })
).pipe(
  about(
    "runs, their stages, files and timeline",
    `Without a command: the list. RUN may be any unique prefix of a run id. A run whose
process stopped (killed, crashed) is shown interrupted, with what carries it on (noema
runs resume RUN, or a worker). A run is carried on with the model it was started with
(run.json names it), as this process configures it (flags, environment); where it is not
configured, the run waits and says so. --model NAME on approve, retry and resume carries it
on with that model instead (on the configured server); the new attempts' manifests name it.`
  ),
  examples(["noema runs --json", "the runs as JSON"]),
  Command.withSubcommands([
    runsList,
    runsShow,
    runsApprove,
    runsReject,
    runsRetry,
    runsCancel,
    runsResume,
    runsVerify
  ])
)

const serveCommand = Command.make(
  "serve",
  {
    port: Flags.wholeNumber(
      "port",
      "N",
      { min: 0, max: 65535 },
      `the port (default ${defaultPort}; 0 picks a free one)`
    ).pipe(Flags.orElse(defaultPort)),
    worker: Flags.on("no-worker", "the panel only: other processes (noema worker) carry runs on").pipe(
      Flag.map((off) => !off)
    ),
    token: Flags.optional(
      "token",
      "TOKEN",
      "the access token (env NOEMA_SERVE_TOKEN, better: a flag is seen by every user in ps; default a new random one per start); 16 to 512 letters, digits or . _ ~ + / = -"
    ),
    concurrency: Flags.concurrency,
    leaseTtl: Flags.leaseTtl,
    engine: Flags.runsEngine,
    ...Flags.runner,
    ...executing,
    ...storage
  },
  (input) => runs("serve", { type: "serve", ...input })
).pipe(
  about(
    "the panel (runs, sessions, chat, traces, plans, routines, resources), a JSON HTTP API and a worker",
    `Prints the address to open, http://127.0.0.1:${defaultPort}/?token=… Every request needs that
token (the page trades it for a cookie; programs send "Authorization: Bearer TOKEN"), so
other users of the machine get nothing. The panel's Runs view shows threads, their runs,
stages, artifacts (content and sha256) and the timeline, updated live, with approve, reject,
retry and cancel buttons; its Sessions view the saved conversations; its Chat view a chat
with the agent noema chat uses; Traces the turns' spans; Plans, Routines and
Resources what noema tasks show, noema routine status and noema resources show, read as
cld:user.cli under the default policy (docs/dev-ui.md); a JSON API under /api (see docs/runs.md) with live events at
/api/events. Unless --no-worker, this process also carries runs on, as noema worker does.
Ctrl-C stops it (exit status 0); runs under way are taken by the next worker.`
  ),
  examples(["noema serve --port 0", "the panel on a free port"])
)

const workerCommand = Command.make(
  "worker",
  {
    concurrency: Flags.concurrency,
    leaseTtl: Flags.leaseTtl,
    engine: Flags.runsEngine,
    ...Flags.runner,
    ...executing,
    ...storage
  },
  (input) => runs("worker", { type: "worker", ...input })
).pipe(
  about(
    "carry runs on, alongside other workers",
    `Takes every run that is running or queued and that no live process holds: runs created by
noema run or the panel, approved or retried runs, and runs whose process died. With a
PostgreSQL database (--database postgres://...) workers on several machines share the runs
(they must share the workspace too); a thread's runs stay one at a time across all of them.
With --engine cluster (PostgreSQL only), workers are effect/cluster runners: each owns a
share of the runs' shards, reached by the others at --runner-host:--runner-port, and a dead
runner's shards move to the others (docs/runs.md, "Which engine"); for example, on the
machine at 10.0.0.5: noema worker --engine cluster --database postgres://HOST/DB
--runner-host 10.0.0.5 --runner-port 34431.
A run started on a model this worker is not configured with waits for a process that is
(the log says which model it needs). Ctrl-C stops it (exit status 0); runs under way are
taken by the next worker.`
  ),
  // The cluster runner is in the text above: an example must run as pasted, and it needs a PostgreSQL server.
  examples(["noema worker --concurrency 2", "carry two runs on at a time"])
)

// ---------------------------------------------------------------------------
// routine
// ---------------------------------------------------------------------------

const breakdown = argument(
  "FILE",
  "the work breakdown: YAML, JSON, or Markdown (# skill, ## scenario, - [ ] task)"
)

const routineRun = Command.make(
  "run",
  {
    file: breakdown,
    goal: Flags.optional("goal", "ID", "only this goal (default: every goal in the document)", "g"),
    vars: Flag.KeyValuePair("var").pipe(
      Flag.withMetavar("NAME=VALUE"),
      Flag.withDescription("the value of a declared variable, e.g. --var thread.topic=growth (repeatable)"),
      Flag.withDefault({})
    ),
    documents: Flags.optional(
      "documents",
      "DIR",
      "where {{documents.NAME}} files are (default: FILE's directory)"
    ),
    stakeholders: Flags.optional("stakeholders", "FILE", "a JSON file for {{stakeholder.NAME}}"),
    session: Flags.optional(
      "session",
      "ID",
      "a saved session for {{message.NAME}} (last, first, count, metadata) and {{thread.NAME}} (its metadata, title, id)",
      "s"
    ),
    parallel: Flags.wholeNumber(
      "parallel",
      "N",
      { min: 1 },
      "goals worked on at the same time (default 1)"
    ).pipe(Flags.orElse(1)),
    noTools: Flags.noTools,
    model: Flags.model,
    database: Flags.database
  },
  (input) => routine("routine run", { type: "routine-run", ...input })
).pipe(
  about(
    "run the goals' remaining tasks, showing progress",
    `Progress is saved after every step: run again after a crash or Ctrl-C and the routine
continues where it stopped, told which tasks are already done.`
  ),
  examples([
    "printf '# Writing\\n## Haiku\\n- [ ] Write a haiku about the sea\\n' > goals.md && noema routine run goals.md",
    "a one-task document, worked through"
  ])
)

const routineStatus = Command.make(
  "status",
  {
    file: breakdown,
    json: Flags.json,
    write: Flags.on(
      "write",
      "write the progress back into FILE (checkboxes in Markdown, done: true in YAML)"
    ),
    database: Flags.database
  },
  (input) => routine("routine status", { type: "routine-status", ...input })
).pipe(
  about("each goal's tasks and whether they are done"),
  examples([
    "printf '# Writing\\n## Haiku\\n- [ ] Write a haiku about the sea\\n' > goals.md && noema routine status goals.md --write",
    "progress, written back as checkboxes"
  ])
)

const routineCommand = Command.make("routine").pipe(
  about(
    "work through the goals of a work breakdown document",
    `FILE is YAML, JSON, or Markdown (# skill, ## scenario, - [ ] task; front matter for
variables). A goal is skill/scenario, a skill id (all its scenarios) or a scenario id.
See docs/routines.md.`
  ),
  examples(["noema routine --help", "the two commands"]),
  Command.withSubcommands([routineRun, routineStatus])
)

// ---------------------------------------------------------------------------
// plan and tasks
// ---------------------------------------------------------------------------

/** What reads and writes resources: the database, the policy and the embedder. */
const resourceAccess = {
  database: Flags.database,
  policy: Flags.policy,
  engine: Flags.engine,
  embeddingModel: Flags.embeddingModel
}

const planCommand = Command.make(
  "plan",
  {
    request: words("REQUEST", "what to plan and do"),
    model: Flags.model,
    assistants: Flags.optional(
      "assistants",
      "FILE",
      "register these assistants first (JSON, as noema resources put takes)"
    ),
    conversation: Flags.optional(
      "conversation",
      "URN",
      "plan in an existing conversation (its history is context)"
    ),
    resume: Flags.optional(
      "resume",
      "URN",
      "continue the plan stored under this request's message (after a kill or Ctrl-C): what is done is not run again"
    ),
    threshold: Flags.optional(
      "threshold",
      "X",
      "the similarity that elects an assistant by itself, from -1 to 1 (default 0.2)"
    ).pipe(
      Flag.filterMap(
        (text) => {
          if (text === undefined) return Option.some(undefined)
          const value = Number(text)
          return text.trim() !== "" && value >= -1 && value <= 1 ? Option.some(value) : Option.none()
        },
        () => "a similarity from -1 to 1"
      )
    ),
    fallback: Flags.optional(
      "fallback",
      "WHO",
      'below it: "model" (the model picks among the top 3; default), an assistant\'s URN, or "none" (fail and say so)'
    ).pipe(Flags.orElse("model")),
    parallel: Flags.wholeNumber("parallel", "N", { min: 1 }, "tasks worked on at the same time (default 4)"),
    maxCalls: Flags.wholeNumber("max-calls", "N", { min: 1 }, "model calls in all (default 100)"),
    maxTokens: Flags.wholeNumber("max-tokens", "N", { min: 1 }, "tokens in all (default 400000)"),
    maxDepth: Flags.wholeNumber("max-depth", "N", { min: 1 }, "levels of tasks (default 4)"),
    stallTimeout: Flags.optional(
      "stall-timeout",
      "D",
      'how long a supervisor waits without news, e.g. "90 seconds"'
    ),
    noTools: Flags.on("no-tools", "no tools for the assistants"),
    json: Flags.json,
    ...resourceAccess
  },
  (input) => plan("plan", { type: "plan", ...input })
).pipe(
  Command.validate(({ request, resume }) =>
    request === "" && resume === undefined
      ? missing("REQUEST")
      : request !== "" && resume !== undefined
        ? invalid("--resume continues a stored plan: give it or a REQUEST, not both")
        : Effect.void
  ),
  about(
    "a request planned as a tree of tasks, each done by the assistant that fits it",
    `The model plans the whole tree in one tool call; every task gets the assistant whose
description is most similar to it (scores shown); tasks without subtasks are worked on
directly, tasks with subtasks supervise them and evaluate the results, adding corrective
subtasks when they fall short. The tree is shown as it is worked on and the answer printed
at the end, with what is missing when a limit stopped work (exit status 3). Everything is
stored as resources (noema tasks show URN), every access through the policy.

With no assistant registered, a small built-in team is (researcher, writer, analyst,
generalist); --assistants FILE registers yours (JSON: one assistant or an array, e.g.
{ "type": "assistant", "name": "translator", "purpose": "...", "examples": ["..."] }).`
  ),
  examples(['noema plan "what is 6 * 7, and what time is it?"', "planned, worked on, answered"])
)

const tasksShow = Command.make(
  "show",
  {
    urn: argument("URN", "a request's message or a task"),
    as: Flags.actor(plannerActor),
    json: Flags.json,
    ...resourceAccess
  },
  (input) => plan("tasks show", { type: "tasks-show", ...input })
).pipe(
  about("the task tree under URN: status, assistant and similarity, output or why it failed"),
  examples(['noema tasks show "$MESSAGE"', "the tasks a plan stored"])
)

const tasksList = Command.make(
  "list",
  {
    as: Flags.actor(plannerActor),
    json: Flags.json,
    database: Flags.database,
    policy: Flags.policy,
    engine: Flags.engine
  },
  (input) => tasks("tasks list", { type: "tasks-list", ...input })
).pipe(
  about("the plans noema plan stored, newest first: when, how many tasks are done, the request"),
  examples(["noema tasks list", "every stored plan"])
)

const tasksCommand = Command.make("tasks").pipe(
  about("the tasks noema plan stored"),
  examples(['noema tasks show "$MESSAGE" --json', "as JSON"]),
  Command.withSubcommands([tasksList, tasksShow])
)

// ---------------------------------------------------------------------------
// resources
// ---------------------------------------------------------------------------

/** Every resources command: who acts, through which policy, on which database and embedder. */
const resourcesCommon = {
  actor: Flags.actor(defaultActor),
  baseUrl: Flags.model.baseUrl,
  apiKey: Flags.model.apiKey,
  ...resourceAccess
}

const resourcesLs = Command.make(
  "ls",
  {
    prefix: argument(
      "PREFIX",
      "a URN: everything under it, e.g. cld:conversation.c1 (ids may be names); or a type's root: cld:assistant"
    ),
    json: Flags.json,
    ...resourcesCommon
  },
  (input) => resources("resources ls", { type: "resources-ls", ...input })
).pipe(
  about("everything under a URN, as a tree reads; or every resource of a type"),
  examples(
    ['noema resources ls "$URN"', "a resource and what is under it"],
    ["noema resources ls cld:assistant", "every assistant"]
  )
)

const resourcesShow = Command.make(
  "show",
  { urn: argument("URN", "the resource"), json: Flags.json, ...resourcesCommon },
  (input) => resources("resources show", { type: "resources-show", ...input })
).pipe(about("one resource"), examples(['noema resources show "$URN"', "one resource"]))

const resourcesPut = Command.make(
  "put",
  {
    file: argument("FILE", "JSON: one resource or an array (- for stdin)"),
    json: Flags.json,
    ...resourcesCommon
  },
  (input) => resources("resources put", { type: "resources-put", ...input })
).pipe(
  about(
    "store resources from a JSON file",
    `A resource is either complete ({ "meta": {...}, ... }, as show --json prints it) or made
from { "type": "chunk", "name": "...", "parent": "URN", ...its fields } (its URN is derived
from parent, type and name).`
  ),
  examples([
    `echo '{ "type": "chunk", "name": "tides", "parent": "cld:conversation.c1", "text": "Tides follow the moon." }' | noema resources put -`,
    "a chunk, from stdin"
  ])
)

const resourcesSearch = Command.make(
  "search",
  {
    text: words("TEXT", "what to look for"),
    resourceType: Flags.optional(
      "type",
      "TYPE",
      "only this type (conversation, message, task, assistant, chunk, document, tool)",
      "t"
    ),
    prefix: Flags.optional("prefix", "URN", "only under this URN", "p"),
    limit: Flags.wholeNumber("limit", "N", { min: 1 }, "at most N results (default 10)", "n").pipe(
      Flags.orElse(10)
    ),
    json: Flags.json,
    ...resourcesCommon
  },
  (input) => resources("resources search", { type: "resources-search", ...input })
).pipe(
  Command.validate(({ text }) => (text === "" ? missing("TEXT") : Effect.void)),
  about("the most similar resources, best first"),
  examples(['noema resources search "the moon and the sea" --limit 3', "the three closest"])
)

const resourcesReindex = Command.make("reindex", resourcesCommon, (input) =>
  resources("resources reindex", { type: "resources-reindex", ...input, json: false })
).pipe(
  about("embed every resource again (after changing --embedding-model)"),
  examples(["noema resources reindex", "with the local embedder"])
)

const resourcesCommand = Command.make("resources").pipe(
  about(
    "the resources agents work with (conversations, tasks, chunks...)",
    `Every access goes through the policy, as the actor --as (default ${defaultActor}).
See docs/resources.md.`
  ),
  examples(['noema resources search "tides"', "search everything"]),
  Command.withSubcommands([resourcesLs, resourcesShow, resourcesPut, resourcesSearch, resourcesReindex])
)

// ---------------------------------------------------------------------------
// policy
// ---------------------------------------------------------------------------

const policyCheck = Command.make(
  "check",
  {
    resources: argument("URN", "the resources acted on").pipe(Argument.variadic({ min: 1 })),
    actor: Flag.String("actor").pipe(
      Flag.withMetavar("URN"),
      Flag.withDescription("who acts, e.g. cld:assistant.planner")
    ),
    action: Flag.Literals("action", ["get", "put", "delete"]).pipe(
      Flag.withMetavar("ACTION"),
      Flag.withDescription("what the actor does")
    ),
    policy: Flags.policy,
    engine: Flags.engine,
    entrypoint: Flags.optional(
      "entrypoint",
      "E",
      "OPA: the entrypoint to evaluate (default noema/authz/decision)"
    ),
    data: Flags.optional("data", "FILE", "OPA: a JSON file the policy reads as data"),
    shadow: Flags.on("shadow", "ask the engine, allow anyway, say what it would decide"),
    json: Flags.json
  },
  (input) => policy("policy check", { type: "policy-check", ...input })
).pipe(
  about(
    "what a policy decides, and why",
    "Prints allow or deny and the reasons: exit status 0 when allowed, 3 when denied."
  ),
  examples([
    "noema policy check --actor cld:assistant.reader --action get cld:conversation.c1",
    "may a reader get a conversation? (the default policy: no, exit status 3)"
  ])
)

const policyShow = Command.make("show", { policy: Flags.policy }, (input) =>
  policy("policy show", { type: "policy-show", ...input })
).pipe(about("the policy in use"), examples(["noema policy show", "the default policy"]))

const policyCommand = Command.make("policy").pipe(
  about(
    "the policy every access to resources is asked of",
    `Without --policy it is $NOEMA_HOME/policy.cedar, which noema writes on first use: the
local user (cld:user.cli) may do anything, the planner (cld:assistant.planner) may read and
write, the assistants a plan elects may read and write tasks and messages, anyone else
nothing. Edit it to change that; only --engine allow-all allows everything.`
  ),
  examples(["noema policy show", "the policy in use"]),
  Command.withSubcommands([policyCheck, policyShow])
)

// ---------------------------------------------------------------------------
// help and completions
// ---------------------------------------------------------------------------

const helpCommand = Command.make(
  "help",
  { command: argument("COMMAND", "a command, e.g. runs show").pipe(Argument.variadic()) },
  ({ command }) =>
    Effect.gen(function* () {
      const parsed = yield* Frame.Parsed
      if (parsed !== undefined) return parsed("help", { command })
      yield* (yield* Frame.Frame).help(command)
    })
).pipe(
  about("help for a command (as COMMAND --help)"),
  examples(["noema help runs show", "one command's help"])
)

const completionsCommand = Command.make(
  "completions",
  { shell: Argument.Literals("SHELL", ["bash", "zsh", "fish"]).pipe(Argument.withDescription("the shell")) },
  ({ shell }) =>
    Effect.gen(function* () {
      const parsed = yield* Frame.Parsed
      if (parsed !== undefined) return parsed("completions", { shell })
      const frame = yield* Frame.Frame
      frame.io.stdout.write(`${frame.completions(shell)}\n`)
    })
).pipe(
  about(
    "shell completion: a script that completes noema's commands and flags",
    `bash: source <(noema completions bash), e.g. in ~/.bashrc
zsh:  noema completions zsh > "\${fpath[1]}/_noema"
fish: noema completions fish > ~/.config/fish/completions/noema.fish`
  ),
  examples(["noema completions bash > noema.bash", "bash's, to source"])
)

// ---------------------------------------------------------------------------
// noema
// ---------------------------------------------------------------------------

/** The whole command line. */
export const root = Command.make("noema").pipe(
  about(
    "conversational agents in your terminal",
    `Every command answers --help and --version. Exit status: 0 success, 1 failure, 2 usage
error, 3 not done (denied, incomplete, waiting for approval), 4 a run waits, 128+N a signal
(docs/cli.md has the list).

Model: --model, --base-url, --api-key (env NOEMA_MODEL, NOEMA_BASE_URL, OPENAI_API_KEY).
With no API key and no base URL, noema runs on its built-in offline model (deterministic,
not an LLM) so you can try it without an account.

Environment
  NOEMA_HOME          where sessions (noema.db), runs and input history live (default ~/.noema)
  NOEMA_DATABASE_URL  the database, as --database (a password in it is never printed)
  NOEMA_TRACES_KEEP   how many turns' traces are kept in it (default 1000; 0: none)
  NO_COLOR            plain output without colours
  NOEMA_DEBUG=1       print the full cause of an error

In the examples, $SESSION, $THREAD, $RUN, $URN, $MESSAGE and $TRACE stand for the ids of a
saved session, a thread, a run waiting for approval, a resource, a planned request's message
and a turn's trace.`
  ),
  examples(
    ['noema ask "Why is the sky blue?"', "one question (on the offline model until a model is configured)"],
    ["noema chat --help", "a command's help"]
  ),
  Command.withSubcommands([
    chatCommand,
    askCommand,
    sessionsCommand,
    tracesCommand,
    threadsCommand,
    runCommand,
    runsCommand,
    serveCommand,
    workerCommand,
    routineCommand,
    planCommand,
    tasksCommand,
    resourcesCommand,
    policyCommand,
    helpCommand,
    completionsCommand
  ])
)
