/**
 * RunsArguments: `noema threads create|list|close`, `noema run "request"`,
 * `noema runs list|show|approve|reject|retry|cancel|resume|verify`, parsed
 * (light: `noema --help` loads it).
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
  | ({ readonly type: "threads-close"; readonly thread: string } & Common)
  | ({
      readonly type: "run"
      readonly request: string
      readonly thread: string
      readonly pipeline: string | undefined
    } & Common &
      Executing)
  | ({ readonly type: "runs-list"; readonly thread: string | undefined } & Common)
  | ({ readonly type: "runs-show"; readonly run: string } & Common)
  | ({ readonly type: "runs-approve"; readonly run: string; readonly by: string | undefined } & Common &
      Executing)
  | ({ readonly type: "runs-reject"; readonly run: string; readonly reason: string } & Common)
  | ({ readonly type: "runs-retry"; readonly run: string } & Common & Executing)
  | ({ readonly type: "runs-cancel"; readonly run: string; readonly reason: string | undefined } & Common)
  | ({ readonly type: "runs-resume"; readonly run: string | undefined } & Common & Executing)
  | ({ readonly type: "runs-verify"; readonly run: string } & Common)

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
  "no-tools": { type: "boolean" }
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
    case "close":
      only(command, values, [])
      return { type: "threads-close", thread: one(command, rest, "THREAD id"), ...commonOf(values) }
    default:
      throw usage("threads", `unknown action "${action}" (use create, list or close)`)
  }
}

/** `noema run "request" --thread T ...`. */
export const parseRun = (args: ReadonlyArray<string>): RunsCommand | "help" => {
  const { values, positionals } = parseWith("run", args)
  if (values.help === true) return "help"
  only("run", values, ["thread", "pipeline", ...model])
  const request = positionals.join(" ").trim()
  if (request === "") throw usage("run", 'missing the "request"')
  if (values.thread === undefined)
    throw usage("run", "missing --thread THREAD (noema threads create makes one)")
  return {
    type: "run",
    request,
    thread: values.thread,
    pipeline: values.pipeline,
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
      only(command, values, model)
      return {
        type: "runs-retry",
        run: one(command, rest, "RUN id"),
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

const storage = `      --workspace DIR     where runs write their files (env NOEMA_WORKSPACE;
                          default $NOEMA_HOME/workspace)
      --database DB       a SQLite file or postgres:// URL (env NOEMA_DATABASE_URL;
                          default $NOEMA_HOME/noema.db)
      --json              as JSON
  -h, --help              show this help`

const modelOptions = `  -m, --model NAME        model (as for noema chat; "offline" = the built-in model)
      --base-url URL, --api-key KEY, --api chat|responses
      --no-tools          no tools for the stages (write_artifact stays)`

export const threadsHelp = `noema threads: threads hold runs

Usage
  noema threads create [--title T] [--queue reject|enqueue]
                          a new open thread; --queue enqueue lets runs wait their turn
                          (default: a request while a run is active is refused)
  noema threads list      every thread
  noema threads close ID  no new runs in it

Options
${storage}
`

export const runHelp = `noema run: a request in a thread becomes a run whose stages write files

Usage
  noema run "request" --thread THREAD [--pipeline FILE]

Each stage of the pipeline (a JSON or YAML file; default: brief, then result) runs an agent
that writes artifacts under runs/<run_id>/stages/<nn>-<stage>/ in the workspace, hashed in
the stage's manifest.json. Progress is shown as it happens. A stage that needs approval
stops the run (exit status 4) until noema runs approve or reject. Exit status 0 when the run
completes, 1 when it fails, 4 when it waits for approval or in its thread's queue.

Options
  -t, --thread THREAD     the thread (noema threads create)
  -p, --pipeline FILE     the stages: { "name": ..., "stages": [{ "key", "instructions",
                          "tools": [...], "approval": true|false }] }
${modelOptions}
${storage}
`

export const runsHelp = `noema runs: runs, their stages, files and timeline

Usage
  noema runs list [--thread T]      runs, newest first
  noema runs show RUN               stages, attempts, artifacts and the timeline
  noema runs approve RUN [--by WHO] approve the stage waiting, then carry the run on
  noema runs reject RUN --reason R  reject it: the run fails (a retry asks again)
  noema runs retry RUN              a failed run again from its failed stage (a new attempt)
  noema runs cancel RUN [--reason R]
  noema runs resume [RUN]           carry on runs whose process stopped (killed, crashed):
                                    completed stages are kept, the interrupted one gets a
                                    new attempt; without RUN, every such run
  noema runs verify RUN             re-hash every artifact against its manifest

Options
${modelOptions}
${storage}
`
