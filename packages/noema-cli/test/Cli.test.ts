/**
 * The binary's own surface: --help and --version everywhere, usage errors as
 * one line with exit status 2, and the version answered without loading the
 * rest of the CLI.
 */
import * as fs from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

const packageVersion = (
  JSON.parse(fs.readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version

let home: string
beforeAll(() => {
  home = makeHome()
})
afterAll(() => removeHome(home))

const run = (args: ReadonlyArray<string>) => runCli(args, { env: { NOEMA_HOME: home } })

describe("noema --help and --version", () => {
  it("prints the version for every command", async () => {
    for (const args of [
      ["--version"],
      ["-v"],
      ["chat", "--version"],
      ["ask", "--version"],
      ["sessions", "--version"]
    ]) {
      const result = await run(args)
      expect(result.code, args.join(" ")).toBe(0)
      expect(result.stdout).toBe(`noema ${packageVersion}\n`)
      expect(result.stderr).toBe("")
    }
  })

  it("prints help for every command", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
      [[], /Usage\n {2}noema chat/],
      [["--help"], /noema ask \[options\] QUESTION/],
      [["-h"], /NOEMA_HOME/],
      [["help", "ask"], /noema ask: ask one question/],
      [["chat", "--help"], /\/resume ID/],
      [["ask", "-h"], /--json/],
      [["sessions", "--help"], /--format FORMAT/],
      [["sessions", "export", "--help"], /noema sessions: saved conversations/]
    ]
    for (const [args, pattern] of cases) {
      const result = await run(args)
      expect(result.code, args.join(" ")).toBe(0)
      expect(result.stdout).toMatch(pattern)
      expect(result.stdout).not.toContain("\u001b")
    }
  })

  it("creates nothing in NOEMA_HOME for help and version", async () => {
    await run(["--help"])
    await run(["chat", "--version"])
    expect(fs.readdirSync(home)).toEqual([])
  })
})

describe("usage errors", () => {
  const cases: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
    [["chat", "--frobnicate"], /^noema chat: unknown option --frobnicate \(see noema chat --help\)$/],
    [["ask", "--jsn", "hi"], /^noema ask: unknown option --jsn/],
    [["chat", "--model"], /^noema chat: --model needs a value/],
    [["ask", "--json=yes", "hi"], /^noema ask: --json does not take a value/],
    [["chat", "extra"], /^noema chat: unexpected argument "extra"/],
    [["chta"], /^noema: unknown command "chta" \(did you mean chat\?\)/],
    [["--model", "x", "chat"], /^noema: unknown option --model; options go after the command/],
    [["sessions", "show"], /^noema sessions show: missing session ID/],
    [["sessions", "frob"], /^noema sessions: unknown action "frob"/],
    [["sessions", "export", "abc", "--format", "pdf"], /^noema sessions export: unknown format "pdf"/],
    [["sessions", "list", "--format", "json"], /^noema sessions list: --format only applies to export/]
  ]
  for (const [args, pattern] of cases) {
    it(`noema ${args.join(" ")}`, async () => {
      const result = await run(args)
      expect(result.code).toBe(2)
      expect(result.stdout).toBe("")
      const lines = result.stderr.split("\n").filter((line) => line !== "")
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatch(pattern)
    })
  }

  it("asks for a question when ask gets none and stdin is empty", async () => {
    const result = await run(["ask"])
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/^noema ask: stdin held no question\n$/)
  })
})
