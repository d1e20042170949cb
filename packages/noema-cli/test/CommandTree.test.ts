/**
 * The command tree answers for itself: every command answers --help and
 * --version (exit status 0) and refuses an unknown flag (exit status 2, one
 * line in the one style); every help page has an example; and docs/cli.md
 * names every command and flag the tree has, and no other, and lists the exit
 * statuses `ExitStatus` gives, word for word. Run in process (`Cli.run`): none
 * of these runs a command.
 */
import * as fs from "node:fs"
import type * as Command from "effect/cli/Command"
import * as Completions from "effect/cli/Completions"
import { describe, expect, it } from "vitest"
import * as Cli from "../src/Cli.js"
import * as Commands from "../src/Commands.js"
import * as ExitStatus from "../src/ExitStatus.js"
import { runInProcess } from "./support/cli.js"

const docs = fs.readFileSync(new URL("../../../docs/cli.md", import.meta.url), "utf8")

interface Node {
  /** The words after `noema`. */
  readonly path: ReadonlyArray<string>
  readonly command: Command.Command.Any
  readonly alias: string | undefined
  readonly flags: ReadonlyArray<string>
}

/** Every command of the tree, depth first, with the long names of its flags. */
const walk = (
  command: Command.Command.Any,
  descriptor: Completions.CommandDescriptor,
  path: ReadonlyArray<string>
): ReadonlyArray<Node> => [
  { path, command, alias: command.alias, flags: descriptor.flags.map((flag) => `--${flag.name}`) },
  ...command.subcommands
    .flatMap((group) => group.commands)
    .flatMap((child) => {
      const below = descriptor.subcommands.find((candidate) => candidate.name === child.name)
      if (below === undefined)
        throw new Error(`no completion descriptor for ${[...path, child.name].join(" ")}`)
      return walk(child, below, [...path, child.name])
    })
]

const tree = walk(Commands.root, Completions.fromCommand(Commands.root), [])
const named = (node: Node) => ["noema", ...node.path].join(" ")

describe("every command of the tree", () => {
  it("is more than a handful (the walk reaches the leaves)", () => {
    expect(tree.length).toBeGreaterThan(40)
    expect(tree.map(named)).toContain("noema runs show")
  })

  for (const node of tree) {
    it(`${named(node)}: --help, --version, an unknown flag, and an example`, async () => {
      const help = await runInProcess([...node.path, "--help"])
      expect(help.code, help.stderr).toBe(ExitStatus.success)
      expect(help.stdout.startsWith(`${named(node)}: `), help.stdout).toBe(true)
      expect(help.stdout).toMatch(/\nUsage\n {2}noema/)
      expect(help.stdout).toMatch(/\nExamples\n {2}# .+\n {2}\S/)
      expect(node.command.examples.length).toBeGreaterThan(0)

      const version = await runInProcess([...node.path, "--version"])
      expect(version.code, version.stderr).toBe(ExitStatus.success)
      expect(version.stdout).toBe(`noema ${Cli.version()}\n`)

      const unknown = await runInProcess([...node.path, "--frobnicate"])
      expect(unknown.code).toBe(ExitStatus.usage)
      expect(unknown.stdout).toBe("")
      expect(unknown.stderr).toBe(`noema: unknown flag --frobnicate (see ${named(node)} --help)\n`)
    })
  }
})

describe("docs/cli.md", () => {
  /** The rows of the commands-and-flags table: the command (and its alias), and the flags named. */
  const table = docs.slice(
    docs.indexOf("### Commands and flags"),
    docs.indexOf("\n## ", docs.indexOf("### Commands and flags"))
  )
  const rows = [...table.matchAll(/^\| `(noema[^`]*)`(?: \(`([a-z-]+)`\))? \| (.*) \|$/gm)].map((match) => ({
    command: (match[1] ?? "").replace(/ \[?[A-Z][A-Z.]*\]?.*$/, ""),
    alias: match[2],
    flags: [...(match[3] ?? "").matchAll(/--[a-z-]+/g)].map((flag) => flag[0])
  }))

  it("names every command and flag the tree has, and no other", () => {
    expect(rows.map((row) => row.command)).toEqual(tree.map(named))
    for (const node of tree) {
      const row = rows.find((candidate) => candidate.command === named(node))
      expect(row?.alias, named(node)).toBe(node.alias)
      expect(row?.flags, named(node)).toEqual(node.flags)
    }
  })

  it("lists the exit statuses ExitStatus gives, and no other", () => {
    const listed = [...docs.matchAll(/^\| (\d+|128 \+ N) \| (.*) \|$/gm)].map((match) => ({
      status: match[1],
      meaning: match[2]
    }))
    expect(listed).toEqual(ExitStatus.statuses)
  })
})
