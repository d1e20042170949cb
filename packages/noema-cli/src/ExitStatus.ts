/**
 * ExitStatus: what `noema` exits with. A command that ends returns its status; a
 * command that fails exits with the status its error's class is given here (the
 * one table: nothing else looks at an error to choose a status); a command a
 * signal interrupted exits with 128 + the signal's number.
 *
 * `statuses` is the list docs/cli.md shows, word for word (a test checks that
 * they agree).
 */
import * as os from "node:os"
import * as CliError from "effect/cli/CliError"
import { UsageError } from "./CliArguments.js"

/** The command did what was asked. */
export const success = 0
/** The command failed (the model, the database, a run that failed...): one line on stderr says why. */
export const failure = 1
/** The command line asks for something that cannot be done as asked. */
export const usage = 2
/** The command ran, but what was asked is not done: denied by the policy, tasks missing, a call waiting for approval. */
export const notDone = 3
/** A run waits: for approval, or its turn in the thread's queue. */
export const waiting = 4

/** The status of a command a signal interrupted: 128 + the signal's number, as if it had killed the process. */
export const ofSignal = (signal: NodeJS.Signals): number => 128 + (os.constants.signals[signal] ?? 2)

type Class = abstract new (...args: ReadonlyArray<never>) => unknown

/** Error classes and the status each ends a command with; any other error is a `failure`. */
export const byClass: ReadonlyArray<{
  readonly class: Class
  readonly status: number | ((error: never) => number)
}> = [
  { class: UsageError, status: usage },
  // effect/cli's own: the command line did not parse (help shown alone is no error).
  {
    class: CliError.ShowHelp,
    status: (error: CliError.ShowHelp) => (error.errors.length === 0 ? success : usage)
  },
  { class: CliError.UnrecognizedOption, status: usage },
  { class: CliError.UnknownSubcommand, status: usage },
  { class: CliError.MissingOption, status: usage },
  { class: CliError.MissingArgument, status: usage },
  { class: CliError.UnexpectedArgument, status: usage },
  { class: CliError.InvalidValue, status: usage },
  { class: CliError.ValidationError, status: usage }
]

/** The status a command that failed with `error` exits with, by its class (`byClass`). */
export const ofError = (error: unknown): number => {
  const entry = byClass.find((candidate) => error instanceof candidate.class)
  if (entry === undefined) return failure
  return typeof entry.status === "number" ? entry.status : entry.status(error as never)
}

/** Every status `noema` exits with, and when: docs/cli.md's table. */
export const statuses: ReadonlyArray<{ readonly status: string; readonly meaning: string }> = [
  { status: String(success), meaning: "success" },
  {
    status: String(failure),
    meaning:
      "a failure: the model, the database, a file, a run that failed, a refused retry; one line on stderr says why"
  },
  {
    status: String(usage),
    meaning:
      "a usage error: an unknown command or flag, a missing or wrong value, a file or setting that cannot be used as given (`UsageError`, and effect/cli's parse errors)"
  },
  {
    status: String(notDone),
    meaning:
      "not done: `policy check` denied, `plan` with tasks not done, `ask` with a tool call waiting for approval"
  },
  {
    status: String(waiting),
    meaning:
      "a run waits: for approval, or its turn in the thread's queue (`run`, `runs approve|retry|resume`)"
  },
  {
    status: "128 + N",
    meaning:
      "interrupted by signal N: 130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP; `serve` and `worker` exit 0, a signal being how they stop"
  }
]
