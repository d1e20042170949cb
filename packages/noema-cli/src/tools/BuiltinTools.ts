/**
 * BuiltinTools: the tools `noema chat` and `noema ask` give the model unless
 * `--no-tools` is passed: a calculator, the clock, and read-only access to
 * text files under the working directory. None of them changes anything, so
 * they are safe to enable by default.
 */
import type { Tool } from "@noema/core"
import * as Calculator from "./Calculator.js"
import * as CurrentTime from "./CurrentTime.js"
import * as ReadFile from "./ReadFile.js"

export interface Options {
  /** The directory `read_file` is confined to. Default: the working directory. */
  readonly root?: string
}

export const make = (options: Options = {}): ReadonlyArray<Tool.Any> => [
  Calculator.tool as Tool.Any,
  CurrentTime.tool as Tool.Any,
  (options.root === undefined ? ReadFile.tool : ReadFile.make({ root: options.root })) as Tool.Any
]

export const all: ReadonlyArray<Tool.Any> = make()
