/**
 * Cli: the `noema` program as a function from arguments and streams to an exit
 * status.
 *
 * The command line is the tree in `Commands`; the frame (`internal/Frame`)
 * parses it, answers `--help` and `--version`, and runs the command asked for,
 * whose module is loaded only then (`import()`), so those two cost little more
 * than starting Node and loading the tree. Every failure ends as one line on
 * stderr and the status `ExitStatus` gives its class.
 */
import { readFileSync } from "node:fs"
import * as Commands from "./Commands.js"
import { type Io, processIo } from "./Io.js"
import * as Frame from "./internal/Frame.js"

/** The version in package.json. */
export const version = (): string => {
  const text = readFileSync(new URL("../package.json", import.meta.url), "utf8")
  return (JSON.parse(text) as { readonly version: string }).version
}

/** Runs `noema <args>`; resolves to the exit status and never rejects. */
export const run = (args: ReadonlyArray<string>, io: Io = processIo()): Promise<number> =>
  Frame.run(Commands.root, args, io, version())
