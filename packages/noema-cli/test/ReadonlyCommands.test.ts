/**
 * Every command that only reads, on a database the user may only read: a
 * database the CLI itself filled (a session, a thread and its run, a resource,
 * a plan's tasks, a routine's progress), then made 0444 in a 0555 directory.
 * The reading commands answer with the data; the writing ones say so in one
 * line; nothing in `$NOEMA_HOME` changes. Root ignores file modes, so as root
 * the commands run as the user `nobody`, or in a read-only mount (`runAsReader`).
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, readerMode, removeHome, runAsReader, runCli } from "./support/cli.js"

let home: string
let work: string
const env = () => ({ NOEMA_HOME: home, NOEMA_MODEL: "offline" })

/** `noema <args>` for whom the database can only be read (see `runAsReader`). */
const runAsUser = (
  args: ReadonlyArray<string>,
  options: { readonly env?: Readonly<Record<string, string>>; readonly cwd?: string } = {}
) => runAsReader(args, { env: options.env ?? env(), cwd: options.cwd ?? work })

const succeed = async (args: ReadonlyArray<string>): Promise<string> => {
  const result = await runCli(args, { env: env(), cwd: work })
  expect(result.code, `${args.join(" ")}: ${result.stderr}`).toBe(0)
  return result.stdout
}

/** Every file and directory under `directory`, with its bytes and mtime (the modes are set apart). */
const snapshot = (directory: string): Record<string, string> => {
  const out: Record<string, string> = {}
  const visit = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name)
      const stat = fs.statSync(full)
      if (entry.isDirectory()) visit(full)
      out[path.relative(directory, full)] = entry.isDirectory()
        ? `dir ${stat.mtimeMs}`
        : `${stat.mtimeMs} ${fs.readFileSync(full).toString("base64")}`
    }
  }
  visit(directory)
  return out
}

/** Directories 0555 and files 0444, all the way down: nothing in it may be written. */
const makeReadOnly = (target: string): void => {
  if (fs.statSync(target).isDirectory()) {
    for (const entry of fs.readdirSync(target)) makeReadOnly(path.join(target, entry))
    fs.chmodSync(target, 0o555)
  } else fs.chmodSync(target, 0o444)
}

const makeWritable = (target: string): void => {
  if (!fs.existsSync(target)) return
  if (fs.statSync(target).isDirectory()) {
    fs.chmodSync(target, 0o755)
    for (const entry of fs.readdirSync(target)) makeWritable(path.join(target, entry))
  }
}

const routine =
  "skills:\n  - id: s\n    scenarios:\n      - id: c\n        tasks: [{ id: t, title: Brew the tea }]\n"

let thread: string
let runId: string
let urn: string
let conversation: string
let taskTree: string
let before: Record<string, string>
let traceId: string

beforeAll(async () => {
  home = makeHome()
  work = path.join(home, "work")
  fs.mkdirSync(work)
  fs.writeFileSync(path.join(work, "tea.yaml"), routine)
  fs.writeFileSync(
    path.join(work, "resource.json"),
    JSON.stringify({ type: "conversation", name: "tea notes", urn: "cld:conversation.tea" })
  )
  await succeed(["ask", "what is 2 + 3?"])
  traceId = (
    JSON.parse(await succeed(["traces", "list", "--json"])) as { traces: Array<{ traceId: string }> }
  ).traces[0]?.traceId as string
  thread = (await succeed(["threads", "create", "--title", "tea"])).trim()
  const ran = await succeed(["run", "Write a short note about tea", "--thread", thread])
  runId = /^run (run_\S+)$/m.exec(ran)?.[1] as string
  urn = (
    JSON.parse(await succeed(["resources", "put", "resource.json", "--json"])) as Array<string>
  )[0] as string
  const planned = (await succeed(["plan", "what is 12*7", "--json"])).trim().split("\n")
  const tree = (JSON.parse(planned.at(-1) as string) as { tree: { conversation: string; message: string } })
    .tree
  conversation = tree.conversation
  taskTree = tree.message
  await succeed(["routine", "run", "tea.yaml"])
  // First use on a read-only home: the default policy is not there to be read, and may not be written.
  fs.rmSync(path.join(home, "policy.cedar"))
  makeReadOnly(home)
  before = snapshot(home)
}, 300_000)

afterAll(() => {
  makeWritable(home)
  removeHome(home)
})

const skip = readerMode === undefined

describe.skipIf(skip)("the reading commands on a 0444 database in a 0555 directory", () => {
  const reads: ReadonlyArray<readonly [string, () => ReadonlyArray<string>, (stdout: string) => void]> = [
    ["runs list", () => ["runs", "list"], (stdout) => expect(stdout).toContain(runId)],
    ["runs show", () => ["runs", "show", runId], (stdout) => expect(stdout).toContain("completed")],
    ["runs verify", () => ["runs", "verify", runId], (stdout) => expect(stdout).toMatch(/^ok: /)],
    ["threads list", () => ["threads", "list"], (stdout) => expect(stdout).toContain(thread)],
    ["resources ls", () => ["resources", "ls", conversation], (stdout) => expect(stdout).toContain(taskTree)],
    ["resources show", () => ["resources", "show", urn], (stdout) => expect(stdout).toContain("tea notes")],
    [
      "resources search",
      () => ["resources", "search", "tea notes"],
      (stdout) => expect(stdout).toContain(urn)
    ],
    ["tasks show", () => ["tasks", "show", taskTree], (stdout) => expect(stdout).toContain("what is 12*7")],
    ["tasks list", () => ["tasks", "list"], (stdout) => expect(stdout).toContain(`${taskTree}  1/1 done`)],
    [
      "routine status",
      () => ["routine", "status", "tea.yaml"],
      (stdout) => expect(stdout).toContain("[x] t")
    ],
    ["sessions list", () => ["sessions", "list"], (stdout) => expect(stdout).toContain("what is 2 + 3?")],
    ["traces list", () => ["traces", "list"], (stdout) => expect(stdout).toContain(traceId)],
    [
      "traces show",
      () => ["traces", "show", traceId],
      (stdout) => expect(stdout).toContain('arguments: {"expression":"2 + 3"}')
    ]
  ]

  for (const [name, args, check] of reads) {
    it(`${name} answers with the data and changes nothing`, () => {
      const result = runAsUser(args())
      expect(result.stderr).toBe("")
      expect(result.status).toBe(0)
      check(result.stdout)
      expect(snapshot(home)).toEqual(before)
    })
  }

  const writes: ReadonlyArray<readonly [string, () => ReadonlyArray<string>]> = [
    ["run", () => ["run", "Another note", "--thread", thread]],
    ["runs approve", () => ["runs", "approve", runId]],
    ["threads create", () => ["threads", "create", "--title", "coffee"]],
    ["resources put", () => ["resources", "put", "resource.json"]],
    ["routine run", () => ["routine", "run", "tea.yaml"]],
    ["ask", () => ["ask", "what is 1 + 1?"]]
  ]

  for (const [name, args] of writes) {
    it(`${name} says in one line that the database can only be read, and changes nothing`, () => {
      const result = runAsUser(args())
      expect(result.status).toBe(1)
      expect(result.stdout).toBe("")
      expect(result.stderr).toMatch(/^noema: [^\n]*noema\.db[^\n]* can only be read[^\n]*\n$/)
      expect(snapshot(home)).toEqual(before)
    })
  }
})

describe.skipIf(skip)("a reading command on a database without its tables", () => {
  it("sets them up where it may write, and where it may not says so in one line", async () => {
    const other = makeHome()
    try {
      const local = { NOEMA_HOME: other, NOEMA_MODEL: "offline" }
      expect((await runCli(["ask", "hello"], { env: local })).code).toBe(0)
      // Writable: the runs' tables are made, as any command would; there is no run yet.
      const listed = await runCli(["runs", "list", "--json"], { env: local })
      expect(listed.stderr).toBe("")
      expect(listed.code).toBe(0)
      fs.chmodSync(path.join(other, "noema.db"), 0o444)
      fs.chmodSync(other, 0o555)
      const unchanged = snapshot(other)
      const result = runAsUser(["resources", "ls", "cld:conversation.tea"], { env: local, cwd: "/" })
      expect(result.status).toBe(1)
      expect(result.stderr).toMatch(
        /^noema: [^\n]*noema\.db needs migrating to this noema's resource[^\n]*\n$/
      )
      expect(snapshot(other)).toEqual(unchanged)
    } finally {
      fs.chmodSync(other, 0o700)
      removeHome(other)
    }
  })
})

describe.skipIf(skip)("a reading command where there is no database", () => {
  it("says so in one line and creates nothing", () => {
    const empty = path.join(home, "none")
    const result = spawnSync(process.execPath, [binPath, "runs", "list", "--database", empty], {
      env: cleanEnv(env()),
      cwd: work,
      encoding: "utf8"
    })
    expect(result.status).toBe(1)
    expect(result.stderr).toMatch(/^noema: [^\n]*none[^\n]*\n$/)
    expect(fs.existsSync(empty)).toBe(false)
  })
})
