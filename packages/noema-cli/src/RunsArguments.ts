/**
 * RunsArguments: `noema threads create|list|show|set-queue|close`, `noema run
 * "request"`, `noema runs list|show|approve|reject|retry|cancel|resume|verify`,
 * parsed (light: `noema --help` loads it). A RUN or THREAD id may be any unique
 * prefix of one: RunsCommand resolves it.
 */
import { parseArgs } from "node:util"
import type { ModelFlags } from "./CliConfig.js"

export class RunsUsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

interface Common {
  readonly database: string | undefined
  /** `--workspace DIR` (env NOEMA_WORKSPACE; default $NOEMA_HOME/workspace). */
  readonly workspace: string | undefined
  readonly json: boolean
}

/** What carries a run on (run, approve, retry, resume): the model and the tools. */
interface Executing {
  readonly model: ModelFlags
  readonly noTools: boolean
}

export type RunsCommand =
  | ({
      readonly type: "threads-create"
      readonly title: string | undefined
      readonly queue: "reject" | "enqueue"
    } & Common)
  | ({ readonly type: "threads-list" } & Common)
  | ({ readonly type: "threads-show"; readonly thread: string } & Common)
  | ({
      readonly type: "threads-set-queue"
      readonly thread: string
      readonly queue: "reject" | "enqueue"
    } & Common)
  | ({ readonly type: "threads-close"; readonly thread: string } & Common)
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
    } & Common &
      Executing)
  | ({ readonly type: "runs-list"; readonly thread: string | undefined } & Common)
  | ({ readonly type: "runs-show"; readonly run: string } & Common)
  | ({ readonly type: "runs-approve"; readonly run: string; readonly by: string | undefined } & Common &
      Executing)
  | ({ readonly type: "runs-reject"; readonly run: string; readonly reason: string } & Common)
  | ({
      readonly type: "runs-retry"
      readonly run: string
      /** `--force`: retry a failure that is not retryable too (saying so). */
      readonly force: boolean
    } & Common &
      Executing)
  | ({ readonly type: "runs-cancel"; readonly run: string; readonly reason: string | undefined } & Common)
  | ({ readonly type: "runs-resume"; readonly run: string | undefined } & Common & Executing)
  | ({ readonly type: "runs-verify"; readonly run: string } & Common)
  | ({
      readonly type: "serve"
      readonly port: number
      /** Whether this process also carries runs on (`--no-worker`: the panel only). */
      readonly worker: boolean
      readonly concurrency: number
      readonly leaseTtl: string | undefined
      /** `--token`: the panel's access token (default NOEMA_SERVE_TOKEN, else a new one per start). */
      readonly token: string | undefined
    } & Common &
      Executing)
  | ({
      readonly type: "worker"
      readonly concurrency: number
      readonly leaseTtl: string | undefined
    } & Common &
      Executing)

const options = {
  help: { type: "boolean", short: "h" },
  database: { type: "string" },
  workspace: { type: "string" },
  json: { type: "boolean" },
  title: { type: "string" },
  queue: { type: "string" },
  thread: { type: "string", short: "t" },
  pipeline: { type: "string", short: "p" },
  by: { type: "string" },
  reason: { type: "string" },
  model: { type: "string", short: "m" },
  "base-url": { type: "string" },
  "api-key": { type: "string" },
  api: { type: "string" },
  "no-tools": { type: "boolean" },
  port: { type: "string" },
  "no-worker": { type: "boolean" },
  concurrency: { type: "string" },
  "lease-ttl": { type: "string" },
  token: { type: "string" },
  detach: { type: "boolean" },
  plan: { type: "boolean" },
  approve: { type: "string" },
  force: { type: "boolean" }
} as const

type Values = ReturnType<typeof parseRaw>["values"]
const parseRaw = (args: ReadonlyArray<string>) =>
  parseArgs({ args: [...args], allowPositionals: true, strict: true, options })

const usage = (command: string, message: string) =>
  new RunsUsageError(`noema ${command}: ${message} (see noema ${command.split(" ")[0]} --help)`)

const parseWith = (command: string, args: ReadonlyArray<string>) => {
  try {
    return parseRaw(args)
  } catch (error) {
    throw usage(
      command,
      error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error)
    )
  }
}

const commonOf = (values: Values): Common => ({
  database: values.database,
  workspace: values.workspace,
  json: values.json === true
})

const executingOf = (values: Values): Executing => ({
  model: { model: values.model, baseUrl: values["base-url"], apiKey: values["api-key"], api: values.api },
  noTools: values["no-tools"] === true
})

/** Refuses the flags `command` does not take. */
const only = (command: string, values: Values, allowed: ReadonlyArray<keyof Values>) => {
  const always = new Set<keyof Values>(["help", "database", "workspace", "json"])
  for (const [flag, value] of Object.entries(values) as Array<[keyof Values, unknown]>)
    if (value !== undefined && !always.has(flag) && !allowed.includes(flag))
      throw usage(command, `--${String(flag)} does not apply here`)
}

const model: ReadonlyArray<keyof Values> = ["model", "base-url", "api-key", "api", "no-tools"]

const one = (command: string, rest: ReadonlyArray<string>, what: string): string => {
  if (rest.length === 0) throw usage(command, `missing the ${what}`)
  if (rest.length > 1) throw usage(command, `unexpected argument "${rest[1]}"`)
  return rest[0] as string
}

/** `noema threads ...`. */
export const parseThreads = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("threads", args)
  if (values.help === true) return "help"
  const [action, ...rest] = positionals
  const command = `threads ${action ?? ""}`.trim()
  switch (action) {
    case "create": {
      only(command, values, ["title", "queue"])
      if (rest.length > 0) throw usage(command, `unexpected argument "${rest[0]}" (a title goes in --title)`)
      const queue = values.queue ?? "reject"
      if (queue !== "reject" && queue !== "enqueue")
        throw usage(command, `--queue must be reject or enqueue, got "${queue}"`)
      return { type: "threads-create", title: values.title, queue, ...commonOf(values) }
    }
    case "list":
    case undefined:
      only("threads list", values, [])
      if (rest.length > 0) throw usage("threads list", `unexpected argument "${rest[0]}"`)
      return { type: "threads-list", ...commonOf(values) }
    case "show":
      only(command, values, [])
      return { type: "threads-show", thread: one(command, rest, "THREAD id"), ...commonOf(values) }
    case "set-queue": {
      only(command, values, [])
      if (rest.length < 2) throw usage(command, "give the THREAD id and the policy: enqueue or reject")
      if (rest.length > 2) throw usage(command, `unexpected argument "${rest[2]}"`)
      const [thread, queue] = rest as [string, string]
      if (queue !== "reject" && queue !== "enqueue")
        throw usage(command, `the policy must be enqueue or reject, got "${queue}"`)
      return { type: "threads-set-queue", thread, queue, ...commonOf(values) }
    }
    case "close":
      only(command, values, [])
      return { type: "threads-close", thread: one(command, rest, "THREAD id"), ...commonOf(values) }
    default:
      throw usage("threads", `unknown action "${action}" (use create, list, show, set-queue or close)`)
  }
}

/** `noema run "request" --thread T ...`. */
export const parseRun = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("run", args)
  if (values.help === true) return "help"
  only("run", values, ["thread", "pipeline", "detach", "plan", "approve", ...model])
  const request = positionals.join(" ").trim()
  if (request === "") throw usage("run", 'missing the "request"')
  if (values.thread === undefined)
    throw usage("run", "missing --thread THREAD (noema threads create makes one)")
  if (values.plan === true && values.pipeline !== undefined)
    throw usage("run", "--plan and --pipeline both choose the stages: give one")
  if (values.approve !== undefined && values.plan !== true)
    throw usage("run", "--approve goes with --plan (a pipeline file says which stages need approval)")
  const approve = values.approve ?? "none"
  if (approve !== "none" && approve !== "first" && approve !== "all")
    throw usage("run", `--approve must be none, first or all, got "${approve}"`)
  return {
    type: "run",
    request,
    thread: values.thread,
    pipeline: values.pipeline,
    detach: values.detach === true,
    plan: values.plan === true,
    approve,
    ...commonOf(values),
    ...executingOf(values)
  }
}

/** `noema runs ...`. */
export const parseRuns = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("runs", args)
  if (values.help === true) return "help"
  const [action, ...rest] = positionals
  const command = `runs ${action ?? ""}`.trim()
  switch (action) {
    case "list":
    case undefined:
      only("runs list", values, ["thread"])
      if (rest.length > 0) throw usage("runs list", `unexpected argument "${rest[0]}"`)
      return { type: "runs-list", thread: values.thread, ...commonOf(values) }
    case "show":
      only(command, values, [])
      return { type: "runs-show", run: one(command, rest, "RUN id"), ...commonOf(values) }
    case "verify":
      only(command, values, [])
      return { type: "runs-verify", run: one(command, rest, "RUN id"), ...commonOf(values) }
    case "approve":
      only(command, values, ["by", ...model])
      return {
        type: "runs-approve",
        run: one(command, rest, "RUN id"),
        by: values.by,
        ...commonOf(values),
        ...executingOf(values)
      }
    case "reject": {
      only(command, values, ["reason"])
      const run = one(command, rest, "RUN id")
      if (values.reason === undefined || values.reason.trim() === "")
        throw usage(command, "missing --reason TEXT (it is kept in the timeline)")
      return { type: "runs-reject", run, reason: values.reason, ...commonOf(values) }
    }
    case "retry":
      only(command, values, ["force", ...model])
      return {
        type: "runs-retry",
        run: one(command, rest, "RUN id"),
        force: values.force === true,
        ...commonOf(values),
        ...executingOf(values)
      }
    case "cancel":
      only(command, values, ["reason"])
      return {
        type: "runs-cancel",
        run: one(command, rest, "RUN id"),
        reason: values.reason,
        ...commonOf(values)
      }
    case "resume":
      only(command, values, model)
      if (rest.length > 1) throw usage(command, `unexpected argument "${rest[1]}"`)
      return { type: "runs-resume", run: rest[0], ...commonOf(values), ...executingOf(values) }
    default:
      throw usage(
        "runs",
        `unknown action "${action}" (use list, show, approve, reject, retry, cancel, resume or verify)`
      )
  }
}

const integer = (
  command: string,
  flag: string,
  text: string | undefined,
  fallback: number,
  min: number,
  max: number
) => {
  if (text === undefined) return fallback
  const value = Number(text)
  if (!/^\d+$/.test(text.trim()) || value < min || value > max)
    throw usage(command, `--${flag} must be a whole number from ${min} to ${max}, got "${text}"`)
  return value
}

/** The port `noema serve` listens on unless told. */
export const defaultPort = 7077

/** `noema serve ...`. */
export const parseServe = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("serve", args)
  if (values.help === true) return "help"
  only("serve", values, ["port", "no-worker", "concurrency", "lease-ttl", "token", ...model])
  if (positionals.length > 0) throw usage("serve", `unexpected argument "${positionals[0]}"`)
  return {
    type: "serve",
    port: integer("serve", "port", values.port, defaultPort, 0, 65535),
    worker: values["no-worker"] !== true,
    concurrency: integer("serve", "concurrency", values.concurrency, 4, 1, 64),
    leaseTtl: values["lease-ttl"],
    token: values.token,
    ...commonOf(values),
    ...executingOf(values)
  }
}

/** `noema worker ...`. */
export const parseWorker = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("worker", args)
  if (values.help === true) return "help"
  only("worker", values, ["concurrency", "lease-ttl", ...model])
  if (positionals.length > 0) throw usage("worker", `unexpected argument "${positionals[0]}"`)
  return {
    type: "worker",
    concurrency: integer("worker", "concurrency", values.concurrency, 4, 1, 64),
    leaseTtl: values["lease-ttl"],
    ...commonOf(values),
    ...executingOf(values)
  }
}

const storage = `      --workspace DIR     where runs write their files (env NOEMA_WORKSPACE;
                          default $NOEMA_HOME/workspace)
      --database DB       a SQLite file or postgres:// URL (env NOEMA_DATABASE_URL;
                          default $NOEMA_HOME/noema.db)
      --json              as JSON
  -h, --help              show this help`

const modelOptions = `  -m, --model NAME        model (as for noema chat; "offline" = the built-in model)
      --base-url URL, --api-key KEY, --api chat|responses
      --no-tools          no tools for the stages (write_artifact, read_artifact stay)`

export const threadsHelp = `noema threads: threads hold runs

Usage
  noema threads create [--title T] [--queue reject|enqueue]
                          a new open thread; --queue enqueue lets runs wait their turn
                          (default: a request while a run is active is refused)
  noema threads list      every thread, with the run holding it
  noema threads show ID   one thread: its queue policy and its runs
  noema threads set-queue ID enqueue|reject
                          what a request does while a run of the thread is active, from
                          now on: wait its turn (enqueue) or be refused (reject)
  noema threads close ID  no new runs in it

ID may be any unique prefix of a thread id. A thread held by an interrupted run (its
process stopped) says so, and how to carry the run on.

Options
${storage}
`

/** The tools a pipeline's stages may name: those every stage has, and the built-in ones. */
export interface PipelineTools {
  readonly always: ReadonlyArray<string>
  readonly builtin: ReadonlyArray<string>
}

/** `noema run --help`, listing the tools a pipeline may use (`RunsCommand.pipelineTools`). */
export const runHelp = (
  tools: PipelineTools
): string => `noema run: a request in a thread becomes a run whose stages write files

Usage
  noema run "request" --thread THREAD [--pipeline FILE | --plan] [--detach]

Each stage of the pipeline (a JSON or YAML file; default: brief, then result) runs an agent
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
      approval: true

  The tools a stage may name: ${[...tools.always, ...tools.builtin].join(", ")}
  (every stage has ${tools.always.join(" and ")}; --no-tools leaves only those). A file
  with a problem (an unknown tool or field, a bad key, ...) is refused before anything
  runs, with every problem on a line of its own as FILE:LINE:COLUMN: ... (exit status 2).

Options
  -t, --thread THREAD     the thread (noema threads create)
  -p, --pipeline FILE     the stages, as above (JSON has the same fields)
      --plan              the model plans the stages (PlanAgent's plan: one stage per step);
                          the plan is kept in run.json like a pipeline
      --approve WHICH     with --plan: none (default), first or all stages wait for approval
      --detach            only create the run and print its id: a worker (noema worker,
                          noema serve) carries it on
${modelOptions}
${storage}
`

export const runsHelp = `noema runs: runs, their stages, files and timeline

Usage
  noema runs list [--thread T]      runs, newest first
  noema runs show RUN               stages, attempts, artifacts and the timeline
  noema runs approve RUN [--by WHO] approve the stage waiting, then carry the run on
  noema runs reject RUN --reason R  reject it: the run fails (retry --force asks again)
  noema runs retry RUN [--force]    a failed run again from its failed stage (a new attempt);
                                    a failure that is not retryable (a rejection, a refused
                                    pipeline or file, a model server refusing the request)
                                    is refused with the reason (exit status 1) unless --force
  noema runs cancel RUN [--reason R]
  noema runs resume [RUN]           carry on runs whose process stopped (killed, crashed):
                                    completed stages are kept, the interrupted one gets a
                                    new attempt; without RUN, every such run
  noema runs verify RUN             re-hash every artifact against its manifest, and check
                                    the manifests against the timeline

RUN may be any unique prefix of a run id. A run whose process stopped (killed, crashed)
is shown interrupted, with what carries it on (noema runs resume RUN, or a worker).
A run is carried on with the model it was started with (run.json names it), as this process
configures it (flags, environment); where it is not configured, the run waits and says so.
--model NAME on approve, retry and resume carries it on with that model instead (on the
configured server); the new attempts' manifests name it.

Options
${modelOptions}
${storage}
`

const workerOptions = `      --concurrency N     runs carried on at once (default 4)
      --lease-ttl D       how long a run stays claimed by a process that stops answering,
                          e.g. "15 seconds" (the default): on other machines, a dead
                          worker's runs wait this long; on this one, none`

export const serveHelp = `noema serve: the runs panel, a JSON HTTP API and a worker

Usage
  noema serve [--port N] [--no-worker] [--token TOKEN]

Prints the address to open, http://127.0.0.1:${defaultPort}/?token=… (--port; 0 picks a free
port). Every request needs that token (the page trades it for a cookie; programs send
"Authorization: Bearer TOKEN"), so other users of the machine get nothing. The panel shows
threads, their runs (status, times), stages (status, attempts, durations), artifacts
(content and sha256) and the timeline, updated live; approve, reject, retry and cancel
buttons; a JSON API under /api (see docs/runs.md) with live events at /api/events
(Server-Sent Events). Unless
--no-worker, this process also carries runs on, as noema worker does: on start it resumes
runs whose process stopped. Ctrl-C stops it; runs under way are taken by the next worker.

Options
      --port N            the port (default ${defaultPort})
      --no-worker         the panel only: other processes (noema worker) carry runs on
      --token TOKEN       the access token (env NOEMA_SERVE_TOKEN, better: a flag is seen
                          by every user in ps; default a new random one per start);
                          16 to 512 letters, digits or . _ ~ + / = -
${workerOptions}
${modelOptions}
${storage}
`

export const workerHelp = `noema worker: carry runs on, alongside other workers

Usage
  noema worker [--concurrency N]

Takes every run that is running or queued and that no live process holds: runs created by
noema run or the panel, approved or retried runs, and runs whose process died (they resume:
completed stages are kept, the interrupted one gets a new attempt). With a PostgreSQL
database (--database postgres://...) workers on several machines share the runs (they must
share the workspace too, e.g. a network file system); a thread's runs stay one at a time
across all of them. A run started on a model this worker is not configured with waits for a
process that is (the log says which model it needs). Ctrl-C stops it; runs under way are
taken by the next worker.

Options
${workerOptions}
${modelOptions}
${storage}
`
