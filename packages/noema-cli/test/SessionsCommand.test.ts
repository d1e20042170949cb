/**
 * `noema sessions` end to end, over sessions made by `noema ask` with the
 * offline model (no server needed).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { SqliteStore } from "@noema/session"
import { Effect } from "effect"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
beforeEach(() => {
  home = makeHome()
})
afterEach(() => removeHome(home))

const run = (args: ReadonlyArray<string>) => runCli(args, { env: { NOEMA_HOME: home } })

interface Info {
  readonly id: string
  readonly title?: string
  readonly messageCount: number
}

const ask = async (question: string): Promise<string> => {
  const result = await run(["ask", "--json", question])
  expect(result.code).toBe(0)
  return (JSON.parse(result.stdout) as { sessionId: string }).sessionId
}

const list = async (): Promise<ReadonlyArray<Info>> => {
  const result = await run(["sessions", "list", "--json"])
  expect(result.code).toBe(0)
  return JSON.parse(result.stdout) as ReadonlyArray<Info>
}

describe("noema sessions", () => {
  it("lists nothing, and creates no database, before the first session", async () => {
    expect(await list()).toEqual([])
    const table = await run(["sessions"])
    expect(table.stdout).toBe("No sessions yet. Start one with: noema chat\n")
    expect(fs.existsSync(path.join(home, "noema.db"))).toBe(false)
    const show = await run(["sessions", "show", "abc"])
    expect(show.code).toBe(1)
    expect(show.stderr.trim().split("\n")).toHaveLength(1)
  })

  it("lists, shows, exports and deletes sessions", async () => {
    const first = await ask("what is 2+2?")
    const second = await ask("my name is Ada")
    const sessions = await list()
    expect(sessions.map((info) => [info.id, info.title, info.messageCount])).toEqual([
      [second, "my name is Ada", 2],
      [first, "what is 2+2?", 4]
    ])

    const table = await run(["sessions", "list"])
    expect(table.stdout).toMatch(/ID +UPDATED +MSGS +TITLE/)
    expect(table.stdout).toContain(first)
    expect(table.stdout).not.toContain("\u001b")

    const shown = await run(["sessions", "show", first.slice(0, 8)])
    expect(shown.code).toBe(0)
    expect(shown.stdout).toContain("› what is 2+2?")
    expect(shown.stdout).toContain("  ⚙ calculator(2+2) → 4")
    expect(shown.stdout).toContain("2 + 2 = 4")

    const json = await run(["sessions", "export", first])
    const exported = JSON.parse(json.stdout) as { session: Info; messages: ReadonlyArray<{ role: string }> }
    expect(exported.session.id).toBe(first)
    expect(exported.messages.map((message) => message.role)).toEqual([
      "user",
      "assistant",
      "tool",
      "assistant"
    ])

    const markdown = await run(["sessions", "export", first, "--format", "markdown"])
    expect(markdown.stdout).toMatch(/^# what is 2\+2\?\n/)
    expect(markdown.stdout).toContain("## Tool result: calculator")

    const deleted = await run(["sessions", "delete", second])
    expect(deleted.code).toBe(0)
    expect(deleted.stdout).toBe(`Deleted session ${second}\n`)
    expect((await list()).map((info) => info.id)).toEqual([first])
    const again = await run(["sessions", "delete", second])
    expect(again.code).toBe(1)
    expect(again.stderr).toMatch(/^noema: No session with id ".*" \(see noema sessions list\)\n$/)
  })

  it("accepts a unique id prefix and refuses an ambiguous one", async () => {
    await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteStore.make({ filename: path.join(home, "noema.db") })
          yield* store.create({ id: "abc-1", title: "first" })
          yield* store.create({ id: "abc-2", title: "second" })
          yield* store.create({ id: "xyz-1", title: "third" })
        })
      )
    )
    const unique = await run(["sessions", "show", "xy"])
    expect(unique.code).toBe(0)
    expect(unique.stdout).toMatch(/^third\n/)
    const ambiguous = await run(["sessions", "show", "abc"])
    expect(ambiguous.code).toBe(1)
    expect(ambiguous.stderr).toBe('noema: "abc" matches 2 sessions (abc-1, abc-2); give more of the id\n')
    const empty = await run(["sessions", "show", " "])
    expect(empty.code).toBe(2)
  })

  it("reports a corrupt database in one line and leaves it untouched", async () => {
    const database = path.join(home, "noema.db")
    const garbage = "this is not a database\n".repeat(100)
    fs.writeFileSync(database, garbage)
    for (const args of [
      ["sessions", "list"],
      ["ask", "hi"]
    ]) {
      const result = await run(args)
      expect(result.code, args.join(" ")).toBe(1)
      const lines = result.stderr
        .split("\n")
        .filter((line) => line.startsWith("noema: ") && !line.includes("offline"))
      expect(lines).toEqual([
        `noema: ${database} is corrupt or not a database (file is not a database); it was left untouched`
      ])
      expect(result.stderr).not.toMatch(/\n\s+at /)
    }
    expect(fs.readFileSync(database, "utf8")).toBe(garbage)
  })
})
