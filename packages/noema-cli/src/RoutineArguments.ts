/**
 * RoutineArguments: `noema routine run|status FILE ...`, parsed (kept apart from
 * CliArguments so the routine commands stay one block there).
 */
import { parseArgs } from "node:util"
import type { ModelFlags } from "./CliConfig.js"

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

export class RoutineUsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

const usage = (message: string) => new RoutineUsageError(`${message} (see noema routine --help)`)

const options = {
  help: { type: "boolean", short: "h" },
  database: { type: "string" },
  goal: { type: "string", short: "g" },
  model: { type: "string", short: "m" },
  "base-url": { type: "string" },
  "api-key": { type: "string" },
  api: { type: "string" },
  var: { type: "string", multiple: true },
  documents: { type: "string" },
  stakeholders: { type: "string" },
  session: { type: "string", short: "s" },
  parallel: { type: "string" },
  "no-tools": { type: "boolean" },
  json: { type: "boolean" },
  write: { type: "boolean" }
} as const

const parseRaw = (args: ReadonlyArray<string>) =>
  parseArgs({ args: [...args], allowPositionals: true, strict: true, options })

export const parseRoutine = (args: ReadonlyArray<string>): RoutineCommand | "help" => {
  let parsed: ReturnType<typeof parseRaw>
  try {
    parsed = parseRaw(args)
  } catch (error) {
    const message = error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error)
    throw usage(`noema routine: ${message}`)
  }
  const { values, positionals } = parsed
  if (values.help === true) return "help"
  const [action, file, ...rest] = positionals
  if (action !== "run" && action !== "status") {
    throw usage(
      action === undefined
        ? "noema routine: missing action run or status"
        : `noema routine: unknown action "${action}" (use run or status)`
    )
  }
  if (file === undefined) throw usage(`noema routine ${action}: missing the work breakdown FILE`)
  if (rest.length > 0) throw usage(`noema routine ${action}: unexpected argument "${rest[0]}"`)
  const only = (flag: string, set: boolean, where: string) => {
    if (set) throw usage(`noema routine ${action}: ${flag} only applies to ${where}`)
  }
  if (action === "status") {
    only("--goal", values.goal !== undefined, "run")
    only("--var", values.var !== undefined, "run")
    only("--parallel", values.parallel !== undefined, "run")
    only("--model", values.model !== undefined, "run")
    only("--session", values.session !== undefined, "run")
    return {
      type: "routine-status",
      file,
      database: values.database,
      json: values.json === true,
      write: values.write === true
    }
  }
  only("--json", values.json === true, "status")
  only("--write", values.write === true, "status")
  const vars: Record<string, string> = {}
  for (const entry of values.var ?? []) {
    const equals = entry.indexOf("=")
    if (equals <= 0) throw usage(`noema routine run: --var needs name=value, got "${entry}"`)
    vars[entry.slice(0, equals)] = entry.slice(equals + 1)
  }
  const parallel = values.parallel === undefined ? 1 : Number(values.parallel)
  if (!Number.isInteger(parallel) || parallel < 1) {
    throw usage(`noema routine run: --parallel needs a whole number of at least 1, got "${values.parallel}"`)
  }
  return {
    type: "routine-run",
    file,
    goal: values.goal,
    database: values.database,
    model: {
      model: values.model,
      baseUrl: values["base-url"],
      apiKey: values["api-key"],
      maxRetryWait: undefined,
      contextBudget: undefined,
      api: values.api
    },
    vars,
    documents: values.documents,
    stakeholders: values.stakeholders,
    session: values.session,
    parallel,
    noTools: values["no-tools"] === true
  }
}

export const help = `noema routine: work through the goals of a work breakdown document

Usage
  noema routine run FILE [--goal ID]     run the goals' remaining tasks, showing progress
  noema routine status FILE [--write]    each goal's tasks and whether they are done

FILE is YAML, JSON, or Markdown (# skill, ## scenario, - [ ] task; front matter for
variables). A goal is skill/scenario, a skill id (all its scenarios) or a scenario id.
Progress is saved after every step: run again after a crash or Ctrl-C and the routine
continues where it stopped, told which tasks are already done.

Options
  -g, --goal ID         only this goal (default: every goal in the document)
      --var NAME=VALUE  the value of a declared variable, e.g. --var thread.topic=growth
      --documents DIR   where {{documents.NAME}} files are (default: FILE's directory)
      --stakeholders F  a JSON file for {{stakeholder.NAME}}
  -s, --session ID      a saved session for {{message.NAME}} (last, first, count, metadata)
                        and {{thread.NAME}} (its metadata, title, id)
      --parallel N      goals worked on at the same time (default 1)
      --no-tools        no tools for the model
      --json            status: as JSON
      --write           status: write the progress back into FILE (checkboxes in Markdown,
                        done: true in YAML)
  -m, --model NAME      model (as for noema chat; "offline" = the built-in model)
      --base-url URL, --api-key KEY, --api chat|responses
      --database DB     a SQLite file or postgres:// URL (env NOEMA_DATABASE_URL;
                        default $NOEMA_HOME/noema.db)
  -h, --help            show this help
`
