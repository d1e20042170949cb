#!/usr/bin/env node
/**
 * The `noema` executable. Deliberately tiny: everything, including the exit
 * status, comes from `Cli.run`; modules a command needs load only when it runs.
 */
import { run } from "./Cli.js"

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  () => process.exit(1)
)
