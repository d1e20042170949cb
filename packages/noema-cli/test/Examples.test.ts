/**
 * Every example of every help page works when pasted: each runs in `sh`, as a
 * person's shell would, on the offline model, in a fresh copy of a NOEMA_HOME
 * that holds what the examples name by variable (docs/cli.md, "Examples"):
 * `$SESSION` a saved session, `$THREAD` a thread, `$RUN` a run waiting for
 * approval (on a thread of its own), `$URN` a resource, `$MESSAGE` a planned
 * request's message, `$TRACE` the trace of the session's turn. An example ends with a status that is no failure: 0, or
 * 3 (not done) or 4 (a run waits), as its text says; `serve` and `worker`,
 * which run until stopped, must start, then stop on SIGTERM with status 0.
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type * as Command from "effect/cli/Command"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Commands from "../src/Commands.js"
import * as ExitStatus from "../src/ExitStatus.js"
import { binPath, cleanEnv, makeHome, removeHome, runCli, shellQuote } from "./support/cli.js"

/** Every command's examples, with the command's words. */
const examplesOf = (
  command: Command.Command.Any,
  path: ReadonlyArray<string>
): ReadonlyArray<{ readonly path: string; readonly command: string }> => [
  ...command.examples.map((example) => ({ path: ["noema", ...path].join(" "), command: example.command })),
  ...command.subcommands
    .flatMap((group) => group.commands)
    .flatMap((child) => examplesOf(child, [...path, child.name]))
]

const examples = examplesOf(Commands.root, [])
const longRunning = /^noema (serve|worker)\b/

let root: string
/** A NOEMA_HOME holding what the examples name, copied for each example. */
let template: string
/** A directory with `noema` in it, first on the examples' PATH. */
let bin: string
const ids: Record<string, string> = {}

const noema = async (args: ReadonlyArray<string>, stdin?: string) => {
  const result = await runCli(args, { env: { NOEMA_HOME: template }, ...(stdin !== undefined && { stdin }) })
  expect(result.code === ExitStatus.success || result.code === ExitStatus.waiting, result.stderr).toBe(true)
  return result.stdout
}

beforeAll(async () => {
  root = makeHome()
  template = path.join(root, "template")
  bin = path.join(root, "bin")
  fs.mkdirSync(bin)
  fs.writeFileSync(
    path.join(bin, "noema"),
    `#!/bin/sh\nexec ${shellQuote(process.execPath)} ${shellQuote(binPath)} "$@"\n`,
    { mode: 0o755 }
  )
  await noema(["ask", "my name is Ada"])
  ids.SESSION =
    (JSON.parse(await noema(["sessions", "list", "--json"])) as Array<{ id: string }>)[0]?.id ?? ""
  ids.TRACE =
    (JSON.parse(await noema(["traces", "list", "--json"])) as { traces: Array<{ traceId: string }> })
      .traces[0]?.traceId ?? ""
  ids.THREAD = (await noema(["threads", "create"])).trim()
  // The run waits for approval on a thread of its own: $THREAD stays free for new runs.
  const held = (await noema(["threads", "create"])).trim()
  const planned = await noema([
    "run",
    "a short note",
    "--thread",
    held,
    "--plan",
    "--approve",
    "first",
    "--json"
  ])
  ids.RUN = (JSON.parse(planned.split("\n")[0] ?? "") as { run_id: string }).run_id
  const chunk = {
    type: "chunk",
    name: "moon",
    parent: "cld:conversation.c1",
    text: "The moon pulls the tides."
  }
  // Its parent first (a store refuses a resource whose parent is missing), named "c1" as the chunk says.
  const stored = await noema(
    ["resources", "put", "-"],
    JSON.stringify([{ type: "conversation", name: "c1" }, chunk])
  )
  ids.URN = /^put (\S+\/chunk\.\S+)$/m.exec(stored)?.[1] ?? ""
  const result = (await noema(["plan", "what is 6 * 7?", "--json"])).trim().split("\n").at(-1) ?? ""
  ids.MESSAGE = (JSON.parse(result) as { tree: { message: string } }).tree.message
  for (const [name, id] of Object.entries(ids)) expect(id, name).not.toBe("")
}, 300_000)

afterAll(() => removeHome(root))

/** A fresh copy of the template, and a fresh working directory, for one example. */
const fresh = (index: number) => {
  const home = path.join(root, `home-${index}`)
  fs.cpSync(template, home, { recursive: true })
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), "noema-example-"))
  const env = cleanEnv({ ...ids, NOEMA_HOME: home, PATH: `${bin}${path.delimiter}${process.env.PATH ?? ""}` })
  return { env, cwd }
}

/**
 * Runs a long-running example until its first line on stdout (it has started), then stops
 * it as `kill` would: SIGTERM to noema itself (the shell execs it, as a terminal's Ctrl-C
 * reaches the command, not the shell waiting for it).
 */
const startAndStop = (command: string, env: NodeJS.ProcessEnv, cwd: string) =>
  new Promise<{ readonly code: number | null; readonly output: string }>((resolve, reject) => {
    const child = spawn("sh", ["-c", `exec ${command}`], { env, cwd, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    let stdout = ""
    const timer = setTimeout(() => reject(new Error(`${command} did not start: ${output}`)), 120_000)
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk
      const started = !stdout.includes("\n")
      stdout += chunk
      if (started && stdout.includes("\n")) child.kill("SIGTERM")
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({ code, output: `${output}${signal === null ? "" : `(killed by ${signal})`}` })
    })
  })

describe("every help page's examples, pasted into a shell", () => {
  it("are there: at least one per command", () => {
    expect(examples.length).toBeGreaterThan(40)
  })

  examples.forEach((example, index) => {
    it(`${example.path}: ${example.command}`, { timeout: 180_000 }, async () => {
      const { env, cwd } = fresh(index)
      try {
        if (longRunning.test(example.command)) {
          const { code, output } = await startAndStop(example.command, env, cwd)
          expect(code, output).toBe(ExitStatus.success)
          return
        }
        const result = spawnSync("sh", ["-c", example.command], {
          env,
          cwd,
          encoding: "utf8",
          timeout: 170_000
        })
        expect(
          [ExitStatus.success, ExitStatus.notDone, ExitStatus.waiting],
          `${example.command}\n${result.stdout}${result.stderr}`
        ).toContain(result.status)
        expect(result.stderr).not.toMatch(/\(see noema .* --help\)/)
      } finally {
        fs.rmSync(cwd, { recursive: true, force: true })
      }
    })
  })
})
