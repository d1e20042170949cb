/**
 * PlanArguments: `noema plan "request"` and `noema tasks show URN`, parsed
 * (light: `noema --help` loads it).
 */
import { parseArgs } from "node:util"
import type { ModelFlags } from "./CliConfig.js"

export class PlanUsageError extends Error {
  override readonly name = "UsageError"
  readonly exitCode = 2
}

interface Common {
  readonly database: string | undefined
  readonly policy: string | undefined
  readonly engine: "cedar" | "opa" | "allow-all" | undefined
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
    } & Common)
  | ({ readonly type: "tasks-show"; readonly urn: string; readonly as: string } & Common)

export const plannerActor = "cld:assistant.planner"

const options = {
  help: { type: "boolean", short: "h" },
  database: { type: "string" },
  policy: { type: "string" },
  engine: { type: "string" },
  "embedding-model": { type: "string" },
  model: { type: "string", short: "m" },
  "base-url": { type: "string" },
  "api-key": { type: "string" },
  api: { type: "string" },
  assistants: { type: "string" },
  conversation: { type: "string" },
  threshold: { type: "string" },
  fallback: { type: "string" },
  parallel: { type: "string" },
  "max-calls": { type: "string" },
  "max-tokens": { type: "string" },
  "max-depth": { type: "string" },
  "stall-timeout": { type: "string" },
  "no-tools": { type: "boolean" },
  as: { type: "string" },
  json: { type: "boolean" }
} as const

const parseRaw = (args: ReadonlyArray<string>) =>
  parseArgs({ args: [...args], allowPositionals: true, strict: true, options })

const parseWith = (command: string, args: ReadonlyArray<string>) => {
  try {
    return parseRaw(args)
  } catch (error) {
    throw new PlanUsageError(
      `noema ${command}: ${error instanceof Error ? (error.message.split(". ")[0] ?? error.message) : String(error)} (see noema ${command} --help)`
    )
  }
}

const commonOf = (command: string, values: ReturnType<typeof parseRaw>["values"]): Common => {
  const engine = values.engine
  if (engine !== undefined && engine !== "cedar" && engine !== "opa" && engine !== "allow-all")
    throw new PlanUsageError(
      `noema ${command}: unknown engine "${engine}" (use cedar, opa or allow-all; see noema ${command} --help)`
    )
  return {
    database: values.database,
    policy: values.policy,
    engine,
    embeddingModel: values["embedding-model"],
    json: values.json === true
  }
}

const whole = (command: string, flag: string, value: string | undefined, least: number) => {
  if (value === undefined) return undefined
  const number = Number(value)
  if (!Number.isInteger(number) || number < least)
    throw new PlanUsageError(
      `noema ${command}: ${flag} needs a whole number of at least ${least}, got "${value}" (see noema ${command} --help)`
    )
  return number
}

/** `noema plan ...` (the arguments after `plan`). */
export const parsePlan = (args: ReadonlyArray<string>): PlanCommand | "help" => {
  const { values, positionals } = parseWith("plan", args)
  if (values.help === true) return "help"
  const request = positionals.join(" ").trim()
  if (request === "")
    throw new PlanUsageError('noema plan: missing the "request" to plan (see noema plan --help)')
  const tasksOnly = (flag: string, set: boolean) => {
    if (set)
      throw new PlanUsageError(`noema plan: ${flag} belongs to noema tasks show (see noema plan --help)`)
  }
  tasksOnly("--as", values.as !== undefined)
  let threshold: number | undefined
  if (values.threshold !== undefined) {
    threshold = Number(values.threshold)
    if (!Number.isFinite(threshold) || threshold < -1 || threshold > 1)
      throw new PlanUsageError(
        `noema plan: --threshold needs a similarity from -1 to 1, got "${values.threshold}" (see noema plan --help)`
      )
  }
  return {
    type: "plan",
    request,
    model: {
      model: values.model,
      baseUrl: values["base-url"],
      apiKey: values["api-key"],
      api: values.api
    },
    assistants: values.assistants,
    conversation: values.conversation,
    threshold,
    fallback: values.fallback ?? "model",
    parallel: whole("plan", "--parallel", values.parallel, 1),
    maxCalls: whole("plan", "--max-calls", values["max-calls"], 1),
    maxTokens: whole("plan", "--max-tokens", values["max-tokens"], 1),
    maxDepth: whole("plan", "--max-depth", values["max-depth"], 1),
    stallTimeout: values["stall-timeout"],
    noTools: values["no-tools"] === true,
    ...commonOf("plan", values)
  }
}

/** `noema tasks ...` (the arguments after `tasks`). */
export const parseTasks = (args: ReadonlyArray<string>): PlanCommand | "help" => {
  const { values, positionals } = parseWith("tasks", args)
  if (values.help === true) return "help"
  const [action, ...rest] = positionals
  if (action === undefined)
    throw new PlanUsageError("noema tasks: missing the action show (see noema tasks --help)")
  if (action !== "show")
    throw new PlanUsageError(`noema tasks: unknown action "${action}" (use show; see noema tasks --help)`)
  if (rest.length === 0)
    throw new PlanUsageError("noema tasks show: missing the URN (see noema tasks --help)")
  if (rest.length > 1)
    throw new PlanUsageError(`noema tasks show: unexpected argument "${rest[1]}" (see noema tasks --help)`)
  for (const flag of [
    "model",
    "base-url",
    "api-key",
    "api",
    "assistants",
    "conversation",
    "threshold",
    "fallback",
    "parallel",
    "max-calls",
    "max-tokens",
    "max-depth",
    "stall-timeout",
    "no-tools"
  ] as const)
    if (values[flag] !== undefined)
      throw new PlanUsageError(`noema tasks show: --${flag} belongs to noema plan (see noema tasks --help)`)
  return {
    type: "tasks-show",
    urn: rest[0] as string,
    as: values.as ?? plannerActor,
    ...commonOf("tasks", values)
  }
}

const storage = `      --database DB         a SQLite file or postgres:// URL (env NOEMA_DATABASE_URL;
                            default $NOEMA_HOME/noema.db)
      --policy FILE         a Cedar (.cedar) or OPA (.wasm) policy (default
                            $NOEMA_HOME/policy.cedar, written on first use; noema policy show)
      --engine NAME         cedar, opa, or allow-all (every access allowed: only when asked)
      --embedding-model M   "local" (default: offline, lexical, not semantic) or a model of an
                            OpenAI-compatible server (env NOEMA_EMBEDDING_MODEL)`

export const planHelp = `noema plan: a request planned as a tree of tasks, each done by the assistant that fits it

Usage
  noema plan "request" [options]

The model plans the whole tree in one tool call; every task gets the assistant whose
description is most similar to it (scores shown); tasks without subtasks are worked on
directly (their context: the resources along the task's path, the most similar ones, the
conversation's history), tasks with subtasks supervise them and evaluate the results,
adding corrective subtasks when they fall short. The tree is shown as it is worked on and
the answer printed at the end, with what is missing when a limit stopped work.
Everything is stored as resources (noema tasks show URN, noema resources ls URN), every
access through the policy with the assistant as the actor.

With no assistant registered, a small built-in team is (researcher, writer, analyst,
generalist); --assistants FILE registers yours (JSON: one assistant or an array, e.g.
{ "type": "assistant", "name": "translator", "purpose": "...", "examples": ["..."] }).

Options
  -m, --model NAME          model (as for noema chat; "offline" = the built-in model)
      --base-url URL, --api-key KEY, --api chat|responses
      --assistants FILE     register these assistants first
      --conversation URN    plan in an existing conversation (its history is context)
      --threshold X         the similarity that elects an assistant by itself (default 0.2)
      --fallback WHO        below it: "model" (the model picks among the top 3; default),
                            an assistant's URN, or "none" (fail and say so)
      --parallel N          tasks worked on at the same time (default 4)
      --max-calls N         model calls in all (default 100)
      --max-tokens N        tokens in all (default 400000)
      --max-depth N         levels of tasks (default 4)
      --stall-timeout D     how long a supervisor waits without news, e.g. "90 seconds"
      --no-tools            no tools for the assistants
      --json                events and the result as JSON lines
${storage}
  -h, --help                show this help
`

export const tasksHelp = `noema tasks: the tasks noema plan stored

Usage
  noema tasks show URN      the task tree under URN (a request's message or a task): status,
                            assistant and similarity, output or why it failed

Options
      --as URN              who reads (default ${plannerActor})
      --json                as JSON
${storage}
  -h, --help                show this help
`
