/**
 * Cli: the `noema` program as a function from arguments and streams to an exit
 * status.
 *
 * It parses the command line, answers `--help` and `--version` itself, and
 * loads the module of the command asked for only then (`import()`), so those
 * two cost little more than starting Node. Every failure ends here as one line
 * on stderr and a non-zero status: 2 for a usage error, 1 for anything else.
 */
import { readFileSync } from "node:fs"
import { type Command, parseCommand, UsageError } from "./CliArguments.js"
import type * as CliError from "./CliError.js"
import { type Io, processIo } from "./Io.js"
import * as Help from "./internal/help.js"
import { planHelp, tasksHelp } from "./PlanArguments.js"
import { help as PolicyHelp } from "./PolicyArguments.js"
import { help as ResourcesHelp } from "./ResourcesArguments.js"
import { help as RoutineHelp } from "./RoutineArguments.js"
import { runHelp, runsHelp, serveHelp, threadsHelp, workerHelp } from "./RunsArguments.js"

/** The version in package.json. */
export const version = (): string => {
  const text = readFileSync(new URL("../package.json", import.meta.url), "utf8")
  return (JSON.parse(text) as { readonly version: string }).version
}

const helpText = async (topic: Extract<Command, { type: "help" }>["topic"]): Promise<string> => {
  switch (topic) {
    case "main":
      return Help.main
    case "chat":
      return Help.chat
    case "ask":
      return Help.ask
    case "sessions":
      return Help.sessions
    case "routine":
      return RoutineHelp
    case "policy":
      return PolicyHelp
    case "resources":
      return ResourcesHelp
    case "plan":
      return planHelp
    case "tasks":
      return tasksHelp
    case "threads":
      return threadsHelp
    case "run":
      // It lists the tools a pipeline may use, from the tools themselves: loaded for this help only.
      return runHelp((await import("./RunsCommand.js")).pipelineTools)
    case "runs":
      return runsHelp
    case "serve":
      return serveHelp
    case "worker":
      return workerHelp
  }
}

const dispatch = async (command: Command, io: Io): Promise<number> => {
  switch (command.type) {
    case "help":
      io.stdout.write(await helpText(command.topic))
      return 0
    case "version":
      io.stdout.write(`noema ${version()}\n`)
      return 0
    case "chat":
      return (await import("./ChatCommand.js")).run(command, io)
    case "ask":
      return (await import("./AskCommand.js")).run(command, io)
    case "sessions-list":
    case "sessions-show":
    case "sessions-delete":
    case "sessions-export":
    case "sessions-export-all":
    case "sessions-import":
      return (await import("./SessionsCommand.js")).run(command, io)
    // Routines (noema routine run|status).
    case "routine-run":
    case "routine-status":
      return (await import("./RoutineCommand.js")).runCommand(command, io)
    // Policies (noema policy check|show).
    case "policy-check":
    case "policy-show":
      return (await import("./PolicyCommand.js")).run(command, io)
    // Resources (noema resources ls|show|put|search|reindex).
    case "resources-ls":
    case "resources-show":
    case "resources-put":
    case "resources-search":
    case "resources-reindex":
      return (await import("./ResourcesCommand.js")).run(command, io)
    // The planner (noema plan, noema tasks show).
    case "plan":
    case "tasks-show":
      return (await import("./PlanCommand.js")).run(command, io)
    // Runs (noema threads, noema run, noema runs).
    case "threads-create":
    case "threads-list":
    case "threads-show":
    case "threads-set-queue":
    case "threads-close":
    case "run":
    case "runs-list":
    case "runs-show":
    case "runs-approve":
    case "runs-reject":
    case "runs-retry":
    case "runs-cancel":
    case "runs-resume":
    case "runs-verify":
    case "serve":
    case "worker":
      return (await import("./RunsCommand.js")).run(command, io)
  }
}

/**
 * Reports an error that reached the top: one line, the cause only with NOEMA_DEBUG. CliError
 * (and the core it prints with) is loaded only then, so `--help` and `--version` stay cheap.
 */
export const report = async (error: unknown, io: Io, context: CliError.Context = {}): Promise<void> => {
  const { debugEnabled, describe, detail } = await import("./CliError.js")
  io.stderr.write(`noema: ${describe(error, context)}\n`)
  if (debugEnabled(io.env)) io.stderr.write(`${detail(error)}\n`)
}

/** Runs `noema <args>`; resolves to the exit status and never rejects. */
export const run = async (args: ReadonlyArray<string>, io: Io = processIo()): Promise<number> => {
  try {
    return await dispatch(parseCommand(args), io)
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`${error.message}\n`)
      return error.exitCode
    }
    await report(error, io)
    return 1
  }
}
