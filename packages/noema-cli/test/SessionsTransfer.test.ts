/**
 * `noema sessions export --all` / `import`, and `--database` /
 * `NOEMA_DATABASE_URL`, end to end through the installed `noema` command.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { TestDatabase } from "@noema/testing-postgres"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
beforeEach(() => {
  home = makeHome()
})
afterEach(() => removeHome(home))

const run = (args: ReadonlyArray<string>, options: { env?: Record<string, string>; stdin?: string } = {}) =>
  runCli(args, {
    env: { NOEMA_HOME: home, ...options.env },
    ...(options.stdin !== undefined && { stdin: options.stdin })
  })

const ask = async (database: string, question: string, session?: string): Promise<string> => {
  const result = await run([
    "ask",
    "--json",
    "--model",
    "offline",
    "--database",
    database,
    ...(session === undefined ? [] : ["--session", session]),
    question
  ])
  expect(result.code).toBe(0)
  return (JSON.parse(result.stdout) as { sessionId: string }).sessionId
}

/** Every session of `database` with its messages, as `show --json` prints them, in list order. */
const dump = async (database: string) => {
  const listed = await run(["sessions", "list", "--json", "--database", database])
  expect(listed.code).toBe(0)
  const sessions = JSON.parse(listed.stdout) as ReadonlyArray<{ id: string }>
  return Promise.all(
    sessions.map(async (info) => {
      const shown = await run(["sessions", "show", info.id, "--json", "--database", database])
      expect(shown.code).toBe(0)
      const { session, messages } = JSON.parse(shown.stdout) as {
        session: { id: string; title?: string; metadata: unknown; messageCount: number }
        messages: ReadonlyArray<unknown>
      }
      return {
        id: session.id,
        title: session.title,
        metadata: session.metadata,
        messageCount: session.messageCount,
        messages
      }
    })
  )
}

/** Two sessions in `source` (one with two turns, one with its own system prompt); their dump. */
const twoSessions = async (source: string) => {
  const first = await ask(source, "what is 2+2?")
  await ask(source, "and 3*7?", first)
  await run([
    "ask",
    "--model",
    "offline",
    "--database",
    source,
    "--system",
    "answer in French",
    "my name is Ada"
  ])
  const sessions = await dump(source)
  expect(sessions.map((session) => session.messageCount)).toEqual([2, 8])
  return sessions
}

describe("noema sessions export --all / import", () => {
  it("moves every session from one SQLite database to another without losing a message", async () => {
    const source = path.join(home, "source.db")
    const target = path.join(home, "nested", "target.db")
    const before = await twoSessions(source)

    const exported = await run(["sessions", "export", "--all", "--database", source])
    expect(exported.code).toBe(0)
    expect(exported.stderr).toBe("noema: exported 2 sessions\n")
    const lines = exported.stdout.trimEnd().split("\n")
    expect(lines).toHaveLength(2)
    expect(JSON.parse(lines[0] as string)).toMatchObject({ format: "noema-session", version: 1 })

    const file = path.join(home, "all.jsonl")
    fs.writeFileSync(file, exported.stdout)
    const imported = await run(["sessions", "import", file, "--database", target])
    expect(imported.stderr).toBe(`noema: imported 2 sessions (10 messages) into ${target}\n`)
    expect(imported.code).toBe(0)
    expect(await dump(target)).toEqual(before)

    // Again, from stdin: every session exists now, so each is skipped, said so, and the status is 1.
    const again = await run(["sessions", "import", "--database", target], { stdin: exported.stdout })
    expect(again.code).toBe(1)
    expect(again.stderr).toContain(
      `noema: line 1: session ${before[1]?.id} already exists in ${target}; skipped it`
    )
    expect(again.stderr).toContain("imported 0 sessions (0 messages)")
    expect(again.stderr).toContain("skipped 2 that already existed")
    expect(await dump(target)).toEqual(before)
  })

  it("imports the good lines, names each bad one, and stores nothing of a bad session", async () => {
    const source = path.join(home, "source.db")
    await ask(source, "what is 2+2?")
    const good = (await run(["sessions", "export", "--all", "--database", source])).stdout.trim()
    const broken = good
      .replace('"role":"assistant"', '"role":"wizard"')
      .replace(/"id":"[^"]+"/, '"id":"broken-one"')
    const input = [broken, "", "{not json", good].join("\n")
    const target = path.join(home, "target.db")
    const result = await run(["sessions", "import", "-", "--database", target], { stdin: input })
    expect(result.code).toBe(1)
    const errors = result.stderr.trimEnd().split("\n")
    expect(errors[0]).toMatch(/^noema: line 1: message 1: .*; nothing of that session was imported$/)
    expect(errors[1]).toMatch(/^noema: line 3: not valid JSON .*; nothing of that session was imported$/)
    expect(errors[2]).toBe(`noema: imported 1 session (4 messages) into ${target}, 2 failed`)
    const after = await dump(target)
    expect(after.map((session) => session.id)).not.toContain("broken-one")
    expect(after).toEqual(await dump(source))
  })

  it("exports nothing, and creates nothing, from a database that does not exist", async () => {
    const missing = path.join(home, "missing.db")
    const result = await run(["sessions", "export", "--all", "--database", missing])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("")
    expect(fs.existsSync(missing)).toBe(false)
  })

  it("refuses a missing import file in one line", async () => {
    const result = await run(["sessions", "import", path.join(home, "nope.jsonl")])
    expect(result.code).toBe(1)
    expect(result.stderr).toBe(`noema: sessions import: no file "${path.join(home, "nope.jsonl")}"\n`)
  })
})

describe("--database and NOEMA_DATABASE_URL", () => {
  it("NOEMA_DATABASE_URL chooses the SQLite file and --database wins over it", async () => {
    const fromEnvironment = path.join(home, "env.db")
    const fromFlag = path.join(home, "flag.db")
    const id = await ask(fromEnvironment, "what is 2+2?")
    const listed = await run(["sessions", "list", "--json"], { env: { NOEMA_DATABASE_URL: fromEnvironment } })
    expect((JSON.parse(listed.stdout) as Array<{ id: string }>).map((info) => info.id)).toEqual([id])
    const overridden = await run(["sessions", "list", "--json", "--database", fromFlag], {
      env: { NOEMA_DATABASE_URL: fromEnvironment }
    })
    expect(overridden.stdout.trim()).toBe("[]")
    expect(fs.existsSync(path.join(home, "noema.db"))).toBe(false)
  })

  const password = "Pg-Pa55word-Never-Shown"
  const url = `postgres://noema:${password}@127.0.0.1:1/noema`

  it("a PostgreSQL server that cannot be reached fails in one line, naming it without its password", async () => {
    const outputs = await Promise.all([
      run(["sessions", "list", "--database", url]),
      run(["ask", "--model", "offline", "--database", url, "hello"]),
      run(["sessions", "export", "--all"], { env: { NOEMA_DATABASE_URL: url } }),
      run(["chat", "--model", "offline"], { env: { NOEMA_DATABASE_URL: url }, stdin: "" })
    ])
    for (const result of outputs) {
      expect(result.code).toBe(1)
      expect(result.stdout + result.stderr).not.toContain(password)
      expect(result.stderr).toContain("postgres://noema:***@127.0.0.1:1/noema: cannot connect (")
      expect(result.stderr.trimEnd().split("\n")).toHaveLength(1)
    }
  })

  it("never prints a password: help, usage errors, debug output", async () => {
    const outputs = await Promise.all([
      run(["--help"], { env: { NOEMA_DATABASE_URL: url } }),
      run(["sessions", "--help", "--database", url]),
      run(["sessions", "frob", "--database", url]),
      run(["sessions", "list", "--database", url], { env: { NOEMA_DEBUG: "1" } }),
      run(["sessions", "list", "--database", `mysql://root:${password}@db/x`])
    ])
    expect(outputs[4]?.code).toBe(2)
    expect(outputs[4]?.stderr).toContain('unsupported database URL scheme "mysql:"')
    for (const result of outputs) {
      expect(result.stdout + result.stderr).not.toContain(password)
    }
  })
})

describe("noema on PostgreSQL (--database postgres://…)", () => {
  let database: TestDatabase.TestDatabase
  beforeEach(async () => {
    database = await TestDatabase.make({ prefix: "noema_cli" })
  })
  afterEach(() => database?.drop())

  it("ask keeps the session there; sessions list, show and delete work on it", async () => {
    const id = await ask(database.url, "what is 2+2?")
    await ask(database.url, "and 3*7?", id)
    const listed = await run(["sessions", "list", "--json", "--database", database.url])
    expect(listed.code).toBe(0)
    const sessions = JSON.parse(listed.stdout) as ReadonlyArray<{
      id: string
      title: string
      messageCount: number
    }>
    expect(sessions.map((info) => [info.id, info.title, info.messageCount])).toEqual([
      [id, "what is 2+2?", 8]
    ])
    // The same question on SQLite's default database: nothing there, the two are apart.
    expect((await run(["sessions", "list", "--json"])).stdout.trim()).toBe("[]")

    const table = await run(["sessions", "list"], { env: { NOEMA_DATABASE_URL: database.url } })
    expect(table.stdout).toContain(id.slice(0, 8))
    const shown = await run(["sessions", "show", id.slice(0, 8), "--database", database.url])
    expect(shown.code).toBe(0)
    expect(shown.stdout).toContain("and 3*7?")

    const deleted = await run(["sessions", "delete", id, "--database", database.url])
    expect(deleted.code).toBe(0)
    const after = await run(["sessions", "list", "--json", "--database", database.url])
    expect(after.stdout.trim()).toBe("[]")
    for (const result of [listed, table, shown, deleted, after]) {
      expect(result.stdout + result.stderr).not.toContain(new URL(database.url).password)
    }
  })

  it("export --all from SQLite, import into PostgreSQL and back: no message lost", async () => {
    const source = path.join(home, "source.db")
    const before = await twoSessions(source)

    const exported = await run(["sessions", "export", "--all", "--database", source])
    expect(exported.code).toBe(0)
    const imported = await run(["sessions", "import", "--database", database.url], { stdin: exported.stdout })
    expect(imported.code).toBe(0)
    const shownUrl = database.url.replace(`:${new URL(database.url).password}@`, ":***@")
    expect(imported.stderr).toBe(`noema: imported 2 sessions (10 messages) into ${shownUrl}\n`)
    expect(await dump(database.url)).toEqual(before)

    // And back again, into a new SQLite file, from what PostgreSQL exports.
    const back = await run(["sessions", "export", "--all", "--database", database.url])
    expect(back.code).toBe(0)
    // Nothing lost in the round trip: every session, its id, title, times, metadata and
    // messages, byte for byte in its export.
    expect(back.stdout).toBe(exported.stdout)
    const again = path.join(home, "again.db")
    expect((await run(["sessions", "import", "--database", again], { stdin: back.stdout })).code).toBe(0)
    expect(await dump(again)).toEqual(before)
    expect((await run(["sessions", "export", "--all", "--database", again])).stdout).toBe(exported.stdout)
  })

  it("a wrong password fails in one line and the password tried is not shown", async () => {
    const wrong = new URL(database.url)
    wrong.password = "Wr0ng-Pa55-Not-Shown"
    const result = await run(["sessions", "list", "--database", wrong.toString()])
    expect(result.code).toBe(1)
    expect(result.stderr).not.toContain("Wr0ng-Pa55-Not-Shown")
    expect(result.stderr).toContain(":***@127.0.0.1:")
    expect(result.stderr.trimEnd().split("\n")).toHaveLength(1)
  })
})
