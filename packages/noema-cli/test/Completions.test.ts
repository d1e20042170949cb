/**
 * `noema completions SHELL`: scripts from the same command tree. bash's is
 * sourced in a real bash and asked, as bash asks it (COMP_WORDS, COMP_CWORD),
 * to complete a command, a subcommand and a flag.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli, shellQuote } from "./support/cli.js"

let home: string
beforeAll(() => {
  home = makeHome()
})
afterAll(() => removeHome(home))

const bash = ["/bin/bash", "/usr/bin/bash"].find((file) => fs.existsSync(file))

/** What bash's completion offers for the words typed so far (the last one being completed). */
const complete = (script: string, words: ReadonlyArray<string>): ReadonlyArray<string> => {
  const line = words.join(" ")
  const program = [
    `source ${shellQuote(script)}`,
    `COMP_WORDS=(${words.map(shellQuote).join(" ")})`,
    `COMP_CWORD=${words.length - 1}`,
    `COMP_LINE=${shellQuote(line)}`,
    `COMP_POINT=${line.length}`,
    `_noema noema ${shellQuote(words.at(-1) ?? "")} ${shellQuote(words.at(-2) ?? "")}`,
    `printf '%s\\n' "\${COMPREPLY[@]}"`
  ].join("\n")
  const result = spawnSync(bash as string, ["-c", program], { encoding: "utf8" })
  expect(result.status, result.stderr).toBe(0)
  return result.stdout.split("\n").filter((word) => word !== "")
}

describe("noema completions", () => {
  it.skipIf(bash === undefined)(
    "bash: registered for noema; completes commands, subcommands and flags",
    async () => {
      const generated = await runCli(["completions", "bash"], { env: { NOEMA_HOME: home } })
      expect(generated.code).toBe(0)
      expect(generated.stdout).toContain("noema completions bash")
      const script = path.join(home, "noema.bash")
      fs.writeFileSync(script, generated.stdout)
      const registered = spawnSync(
        bash as string,
        ["-c", `source ${shellQuote(script)}; complete -p noema`],
        {
          encoding: "utf8"
        }
      )
      expect(registered.stdout.trim()).toBe("complete -F _noema noema")
      expect(complete(script, ["noema", "ru"])).toEqual(["run", "runs"])
      expect(complete(script, ["noema", "runs", "ap"])).toEqual(["approve"])
      expect(complete(script, ["noema", "runs", "show", "--wo"])).toEqual(["--workspace"])
      expect(complete(script, ["noema", "sessions", "export", "--form"])).toEqual(["--format"])
    }
  )

  it("zsh and fish: their scripts, for the same commands; another shell is a usage error", async () => {
    const zsh = await runCli(["completions", "zsh"], { env: { NOEMA_HOME: home } })
    expect(zsh.code).toBe(0)
    expect(zsh.stdout.startsWith("#compdef noema\n")).toBe(true)
    expect(zsh.stdout).toContain("set-queue")
    const fish = await runCli(["completions", "fish"], { env: { NOEMA_HOME: home } })
    expect(fish.code).toBe(0)
    expect(fish.stdout).toContain("complete -c noema")
    expect(fish.stdout).toContain("set-queue")
    const other = await runCli(["completions", "tcsh"], { env: { NOEMA_HOME: home } })
    expect(other.code).toBe(2)
    expect(other.stderr).toMatch(/^noema: SHELL: "tcsh" is not valid .*\(see noema completions --help\)\n$/)
  })
})
