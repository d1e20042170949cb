/**
 * Reading commands on a database the user may only read, and the modes of the
 * files noema creates. Root ignores file permissions, so when the tests run as
 * root the read-only case runs `noema` as the user `nobody`, or in a read-only
 * mount where `nobody` cannot reach the checkout (`runAsReader`).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach, describe, expect, it } from "vitest"
import { makeHome, readerMode, removeHome, runAsReader, runCli, startTerminal } from "./support/cli.js"

let home: string
afterEach(() => {
  if (fs.existsSync(home)) fs.chmodSync(home, 0o700)
  removeHome(home)
})

const mode = (file: string) => fs.statSync(file).mode & 0o777

/** `noema <args>` for whom the database can only be read (see `runAsReader`). */
const runAsUser = (args: ReadonlyArray<string>) => runAsReader(args, { env: { NOEMA_HOME: home } })

const askOffline = async (question: string) => {
  const result = await runCli(["ask", "--model", "offline", question], { env: { NOEMA_HOME: home } })
  expect(result.code).toBe(0)
}

describe("noema sessions on a read-only database", () => {
  it.skipIf(readerMode === undefined)(
    "lists, shows and exports a 0444 database in a 0555 directory, and changes nothing",
    async () => {
      home = makeHome()
      await askOffline("what is 2 + 3?")
      const database = path.join(home, "noema.db")
      fs.chmodSync(database, 0o444)
      fs.chmodSync(home, 0o555)
      const before = fs.readFileSync(database)
      const list = runAsUser(["sessions", "list", "--json"])
      expect(list.stderr).toBe("")
      expect(list.status).toBe(0)
      const sessions = JSON.parse(list.stdout) as ReadonlyArray<{ id: string; title: string }>
      expect(sessions.map((info) => info.title)).toEqual(["what is 2 + 3?"])
      const id = sessions[0]?.id as string
      const show = runAsUser(["sessions", "show", id.slice(0, 8)])
      expect(show.status).toBe(0)
      expect(show.stdout).toContain("what is 2 + 3?")
      const exported = runAsUser(["sessions", "export", id, "--format", "json"])
      expect(exported.status).toBe(0)
      expect(JSON.parse(exported.stdout).session.id).toBe(id)
      expect(fs.readFileSync(database).equals(before)).toBe(true)
      expect(fs.readdirSync(home)).toEqual(["noema.db"])
    }
  )

  it("a list changes nothing, and a writable database of noema 0.1 is still migrated", async () => {
    home = makeHome()
    await askOffline("hello")
    const database = path.join(home, "noema.db")
    const before = { bytes: fs.readFileSync(database), mtimeMs: fs.statSync(database).mtimeMs }
    const list = await runCli(["sessions", "list"], { env: { NOEMA_HOME: home } })
    expect(list.code).toBe(0)
    expect(fs.readFileSync(database).equals(before.bytes)).toBe(true)
    expect(fs.statSync(database).mtimeMs).toBe(before.mtimeMs)
    // A database of noema 0.1 needs migrating: a reading command still opens it, with write access.
    fs.copyFileSync(
      fileURLToPath(new URL("../../noema-session/test/fixtures/release-0.1.db", import.meta.url)),
      database
    )
    const old = await runCli(["sessions", "list", "--json"], { env: { NOEMA_HOME: home } })
    expect(old.stderr).toBe("")
    expect(old.code).toBe(0)
    expect((JSON.parse(old.stdout) as ReadonlyArray<unknown>).length).toBeGreaterThan(0)
  })
})

describe("modes of the files noema creates", () => {
  it("creates the database 0600 inside an existing world-readable NOEMA_HOME, and the chat history 0600", async () => {
    home = makeHome()
    fs.chmodSync(home, 0o755)
    await askOffline("what is 6 * 7?")
    expect(mode(path.join(home, "noema.db"))).toBe(0o600)
    const chat = startTerminal(["chat", "--model", "offline"], { env: { NOEMA_HOME: home } })
    try {
      await chat.waitFor(/› /)
      chat.mark()
      chat.type("what is 1 + 1?\r")
      await chat.waitFor(/2/)
      chat.mark()
      await chat.waitFor(/› /)
      chat.type("\x04")
      expect(await chat.exited).toBe(0)
    } finally {
      chat.kill()
    }
    expect(mode(path.join(home, "history"))).toBe(0o600)
    expect(mode(path.join(home, "noema.db"))).toBe(0o600)
  })
})
