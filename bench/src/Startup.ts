/**
 * Startup: how long `noema --version` takes as a whole process, next to
 * `node -e 0` on the same Node binary (what any Node program pays before its
 * first line runs). The two alternate, one run each per round.
 */
import { spawnSync } from "node:child_process"
import { check, median, now } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

export interface StartupOptions {
  readonly runs: number
  readonly warmup: number
}

const time = (args: ReadonlyArray<string>): number => {
  const start = now()
  const result = spawnSync(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], timeout: 30_000 })
  const elapsed = now() - start
  check(
    result.status === 0,
    `node ${args.join(" ")} exited with ${result.status}: ${result.stderr?.toString().trim()}`
  )
  return elapsed
}

export const run = (noema: Availability, options: StartupOptions): Record<string, number> => {
  const baselineArgs = ["-e", "0"]
  const cliArgs = noema.cliBin === undefined ? undefined : [noema.cliBin, "--version"]
  if (cliArgs !== undefined) {
    const version = spawnSync(process.execPath, cliArgs, { encoding: "utf8", timeout: 30_000 })
    check(/\d+\.\d+\.\d+/.test(version.stdout ?? ""), `noema --version printed a version: ${version.stdout}`)
  }
  // Warm the OS file cache so the first timed run doesn't pay for reading Node from disk.
  for (let i = 0; i < options.warmup; i++) {
    time(baselineArgs)
    if (cliArgs !== undefined) time(cliArgs)
  }
  const baseline: Array<number> = []
  const cli: Array<number> = []
  for (let i = 0; i < options.runs; i++) {
    // Alternating who goes first keeps a "second in the pair" effect from favouring either.
    if (i % 2 === 1 && cliArgs !== undefined) cli.push(time(cliArgs))
    baseline.push(time(baselineArgs))
    if (i % 2 === 0 && cliArgs !== undefined) cli.push(time(cliArgs))
  }
  return {
    "node.baseline_ms": median(baseline),
    ...(cliArgs === undefined ? {} : { "cli.version_ms": median(cli) })
  }
}
