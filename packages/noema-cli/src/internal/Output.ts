/**
 * Output: how the command line answers in its own voice: help pages (from the
 * command tree's help documents, the same layout for every command), the
 * version, and the one line an error is reported in:
 *
 *     noema: WHAT WENT WRONG (see noema COMMAND --help)
 *
 * for a command line that does not parse or a usage error, `noema: WHAT` for
 * any other failure (`CliError.describe`; the full cause below it with
 * NOEMA_DEBUG=1). Every line is escaped and redacted by CliError, loaded only
 * when there is an error to report.
 *
 * Imported at start-up: effect's modules by their own paths, not the `effect`
 * index, which would load all of them.
 */

import * as Context from "effect/Context"
import * as CliError from "effect/cli/CliError"
import type * as CliOutput from "effect/cli/CliOutput"
import type * as HelpDoc from "effect/cli/HelpDoc"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { UsageError } from "../CliArguments.js"
import type * as Failures from "../CliError.js"
import type { Environment, Io } from "../Io.js"

/** Whether NOEMA_DEBUG asks for full causes (and debug log lines). */
export const debugEnabled = (env: Environment): boolean => {
  const value = env.NOEMA_DEBUG
  return value !== undefined && value !== "" && value !== "0" && value !== "false"
}

// ---------------------------------------------------------------------------
// Help pages
// ---------------------------------------------------------------------------

/** Where descriptions start, unless the names are shorter. */
const widest = 26

/** How wide a help page is. */
const width = 100

/** `text` as lines of at most `room` characters, broken between words. */
const wrap = (text: string, room: number): ReadonlyArray<string> => {
  const lines: Array<string> = []
  let line = ""
  for (const word of text.split(/\s+/).filter((part) => part !== "")) {
    if (line !== "" && line.length + 1 + word.length > room) {
      lines.push(line)
      line = word
    } else line = line === "" ? word : `${line} ${word}`
  }
  return [...lines, line]
}

/** Rows of a name and its description, the descriptions in one column, wrapped to the page. */
const table = (rows: ReadonlyArray<readonly [string, string]>): string => {
  const column = Math.min(widest, Math.max(...rows.map(([name]) => name.length)) + 2)
  const indent = " ".repeat(column)
  return rows
    .map(([name, description]) => {
      const [first = "", ...more] = wrap(description, width - 2 - column)
      const head =
        name.length + 2 > column
          ? `  ${name}\n  ${indent}${first}`
          : `  ${name.padEnd(column)}${first}`.trimEnd()
      return [head, ...more.map((line) => `  ${indent}${line}`)].join("\n")
    })
    .join("\n")
}

const argumentName = (argument: HelpDoc.ArgDoc): string => {
  const name = argument.variadic ? `${argument.name}...` : argument.name
  return argument.required ? name : `[${name}]`
}

const flagName = (flag: HelpDoc.FlagDoc): string => {
  // One-letter aliases first (`-m, --model NAME`); a flag without one is indented to match.
  const short = flag.aliases.filter((alias) => /^-[^-]$/.test(alias))
  const names = [...short, `--${flag.name}`].join(", ")
  const value = flag.type === "boolean" ? "" : ` ${flag.type}`
  return `${short.length === 0 ? "    " : ""}${names}${value}`
}

/**
 * A paragraph a command's help page shows below its text, made when the page is shown
 * (`noema run --help` lists the tools a pipeline may use, from the tools themselves).
 */
export class HelpAppendix extends Context.Service<HelpAppendix, () => Promise<string>>()(
  "@noema/cli/HelpAppendix"
) {}

/** A command's help page: what it is, how to call it, its commands, arguments, flags and examples. */
export const helpPage = (doc: HelpDoc.HelpDoc, appendix = ""): string => {
  const path = (doc.commandPath ?? []).join(" ") || "noema"
  const [title = "", ...body] = doc.description.split("\n")
  const commands = (doc.subcommands ?? []).flatMap((group) => group.commands)
  const usage = `${path}${commands.length > 0 ? " COMMAND" : ""} [flags]${(doc.args ?? [])
    .map((argument) => ` ${argumentName(argument)}`)
    .join("")}`
  const flags = [...doc.flags, ...(doc.inheritedFlags ?? []), ...(doc.globalFlags ?? [])]
  const sections = [`${path}: ${title}`, `Usage\n  ${usage}`, body.join("\n").trim(), appendix]
  if (commands.length > 0)
    sections.push(
      `Commands\n${table(
        commands.map((command) => [
          command.alias === undefined ? command.name : `${command.name}, ${command.alias}`,
          command.shortDescription ?? command.description.split("\n")[0] ?? ""
        ])
      )}`
    )
  if ((doc.args ?? []).length > 0)
    sections.push(
      `Arguments\n${table(
        (doc.args ?? []).map((argument) => [argument.name, Option.getOrElse(argument.description, () => "")])
      )}`
    )
  sections.push(
    `Flags\n${table(flags.map((flag) => [flagName(flag), Option.getOrElse(flag.description, () => "")]))}`
  )
  if ((doc.examples ?? []).length > 0)
    sections.push(
      `Examples\n${(doc.examples ?? [])
        .map(
          (example) =>
            `${example.description === undefined ? "" : `  # ${example.description}\n`}  ${example.command}`
        )
        .join("\n")}`
    )
  return `${sections.filter((section) => section !== "").join("\n\n")}\n`
}

/** Help pages and the version on stdout; errors are the frame's to report (`report`). */
export const presenter = (io: Io): CliOutput.Presenter => ({
  present: (event) => {
    if (event._tag === "Version")
      return Effect.sync(() => void io.stdout.write(`${event.name} ${event.version}\n`))
    if (event._tag !== "Help") return Effect.void
    const appendix = Context.getOption(event.helpDoc.annotations, HelpAppendix)
    return Effect.promise(async () => {
      io.stdout.write(helpPage(event.helpDoc, Option.isSome(appendix) ? await appendix.value() : ""))
    })
  }
})

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** effect/cli's reasons a command line does not parse. */
type ParseError = CliError.ShowHelp["errors"][number]

/** effect/cli's parse errors, which may also reach the frame alone (from a validation). */
const parseErrorClasses = [
  CliError.UnrecognizedOption,
  CliError.UnknownSubcommand,
  CliError.MissingOption,
  CliError.MissingArgument,
  CliError.UnexpectedArgument,
  CliError.InvalidValue,
  CliError.ValidationError
]

/** The parse errors `error` carries (none: help was shown by itself), or undefined for any other error. */
export const parseErrors = (error: unknown): ReadonlyArray<ParseError> | undefined => {
  if (error instanceof CliError.ShowHelp) return error.errors
  return parseErrorClasses.some((Class) => error instanceof Class) ? [error as ParseError] : undefined
}

const didYouMean = (suggestions: ReadonlyArray<string>): string =>
  suggestions.length === 0 ? "" : `; did you mean ${suggestions.join(" or ")}?`

/** One parse problem in noema's words. */
const describeProblem = (problem: ParseError): string => {
  if (problem instanceof CliError.UnrecognizedOption)
    return `unknown flag ${problem.option}${didYouMean(problem.suggestions)}`
  if (problem instanceof CliError.UnknownSubcommand)
    return `unknown command "${problem.subcommand}"${didYouMean(problem.suggestions)}`
  if (problem instanceof CliError.MissingOption) return `missing --${problem.option}`
  if (problem instanceof CliError.MissingArgument) return `missing ${problem.argument}`
  if (problem instanceof CliError.UnexpectedArgument)
    return `unexpected argument ${problem.arguments.map((argument) => JSON.stringify(argument)).join(" ")}`
  if (problem instanceof CliError.InvalidValue) {
    const name = problem.kind === "flag" ? `--${problem.option}` : problem.option
    if (problem.value === "") return `${name} needs a value`
    const expected = problem.expected.replace(/^Expected:? ?/, "")
    return `${name}: "${problem.value}" is not ${expected.startsWith("a") ? expected : `valid (${expected})`}`
  }
  return problem.message
}

/**
 * Reports `error`, which ended the command `path` (e.g. "noema sessions show"), in
 * one line on stderr: a command line that did not parse and a usage error say where
 * help is; any other error is described by its class (`CliError.describe`).
 */
export const report = async (
  error: unknown,
  io: Io,
  path: string,
  context: Failures.Context = {}
): Promise<void> => {
  const Errors = await import("../CliError.js")
  const { oneLine } = Errors
  const problems = parseErrors(error)
  if (problems !== undefined) {
    // No problem: help was asked for, or a command was left out, and the help is shown.
    if (problems.length === 0) return
    const where = error instanceof CliError.ShowHelp ? error.commandPath.join(" ") : path
    io.stderr.write(`noema: ${oneLine(problems.map(describeProblem).join("; "))} (see ${where} --help)\n`)
    return
  }
  if (error instanceof UsageError) {
    io.stderr.write(
      error.details.length === 0
        ? `noema: ${oneLine(error.message)} (see ${path} --help)\n`
        : `noema: ${oneLine(error.message)}:\n${error.details.map((line) => `${line}\n`).join("")}`
    )
    return
  }
  Errors.report(error, io, context)
}
