/**
 * The binary's own surface: --help and --version everywhere, usage errors as
 * one line in one style (`noema: WHAT (see noema COMMAND --help)`) with exit
 * status 2, and the version answered without loading the rest of the CLI.
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
      ["sessions", "--version"],
      ["runs", "show", "-v"],
      ["tasks", "--version"]
    ]) {
      const result = await run(args)
      expect(result.code, args.join(" ")).toBe(0)
      expect(result.stdout).toBe(`noema ${packageVersion}\n`)
      expect(result.stderr).toBe("")
    }
  })

  it("prints help for every command", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
      [[], /^noema: conversational agents[\s\S]*\nCommands\n {2}chat +interactive chat/],
      [["--help"], /\n {2}ask +ask one question and print the answer\n/],
      [["-h"], /NOEMA_HOME/],
      [["help", "ask"], /^noema ask: ask one question/],
      [["help", "runs", "show"], /^noema runs show: /],
      [["chat", "--help"], /\/resume ID/],
      [["ask", "-h"], /--json/],
      [["sessions", "--help"], /\n {2}export +print a session/],
      [["sessions", "export", "--help"], /^noema sessions export:[\s\S]*-f, --format FORMAT/],
      [["tasks"], /^noema tasks: the tasks noema plan stored/]
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
    [["chat", "--frobnicate"], /^noema: unknown flag --frobnicate \(see noema chat --help\)$/],
    [["ask", "--jsn", "hi"], /^noema: unknown flag --jsn; did you mean --json\? \(see noema ask --help\)$/],
    [["chat", "--model"], /^noema: --model needs a value \(see noema chat --help\)$/],
    [["ask", "--json=maybe", "hi"], /^noema: --json: "maybe" is not valid/],
    [["chat", "extra"], /^noema: unexpected argument "extra" \(see noema chat --help\)$/],
    [["chta"], /^noema: unknown command "chta"; did you mean chat\? \(see noema --help\)$/],
    [["help", "chta"], /^noema: unknown command "chta"; did you mean chat\? \(see noema --help\)$/],
    [["--model", "x", "chat"], /^noema: unknown flag --model.* \(see noema --help\)$/],
    [["sessions", "show"], /^noema: missing ID \(see noema sessions show --help\)$/],
    [["sessions", "frob"], /^noema: unknown command "frob" \(see noema sessions --help\)$/],
    [["sessions", "export", "abc", "--format", "pdf"], /^noema: --format: "pdf" is not valid/],
    [
      ["sessions", "list", "--format", "json"],
      /^noema: unknown flag --format \(see noema sessions list --help\)$/
    ],
    // --help and --version answer a valid line: a stray flag with them is an error.
    [["--version", "--frob"], /^noema: unknown flag --frob \(see noema --help\)$/],
    [["runs", "show", "--help", "--frob"], /^noema: unknown flag --frob \(see noema runs show --help\)$/]
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
    const result = await run(["ask", "--model", "offline"])
    expect(result.code).toBe(2)
    expect(result.stderr).toBe("noema: stdin held no question (see noema ask --help)\n")
  })
})
