/**
 * SqliteStore's file modes and its read-only open. Tests may run as root, whom
 * file permissions do not stop, so the read-only open is proven by what it does
 * not do: the file's bytes and mtime stay the same, nothing is created, a
 * database that needs migrating is refused instead of migrated, and a write
 * through the store fails (the connection itself is read-only).
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Message } from "@noema/core"
import { Cause, Effect, Exit } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { Session, SessionStore, SqliteStore } from "../src/index.js"

const dirs: Array<string> = []
const tempDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "noema-readonly-"))
  dirs.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

const run = <A, E>(options: SqliteStore.Options, effect: Effect.Effect<A, E, SessionStore.SessionStore>) =>
  Effect.runPromiseExit(Effect.provide(effect, SqliteStore.layer(options)))

const mode = (file: string) => fs.statSync(file).mode & 0o777

/** A current database with one stored turn. */
const seeded = async (filename: string) => {
  const exit = await run(
    { filename },
    Effect.gen(function* () {
      const session = yield* Session.create({ title: "kept" })
      const transaction = session.begin()
      transaction.extend([Message.user("hi"), Message.assistant("hello")])
      yield* session.commit(transaction)
    })
  )
  expect(Exit.isSuccess(exit)).toBe(true)
}

const snapshot = (file: string) => ({ bytes: fs.readFileSync(file), mtimeMs: fs.statSync(file).mtimeMs })

describe("SqliteStore file modes", () => {
  it("creates the database private to its user (0600, also -wal and -shm; a new directory 0700)", async () => {
    const home = tempDir()
    fs.chmodSync(home, 0o755)
    const filename = path.join(home, "sub", "noema.db")
    await seeded(filename)
    expect(mode(path.dirname(filename))).toBe(0o700)
    expect(mode(filename)).toBe(0o600)
    // SQLite removes -wal and -shm on a clean close; while open they exist with the database's mode.
    const exit = await run(
      { filename },
      Effect.gen(function* () {
        const store = yield* SessionStore.SessionStore
        yield* store.create({ title: "second" })
        return [`${filename}-wal`, `${filename}-shm`].filter((file) => fs.existsSync(file)).map(mode)
      })
    )
    expect(exit).toStrictEqual(Exit.succeed([0o600, 0o600]))
  })
})

describe("SqliteStore readonly", () => {
  it("lists and loads without writing a byte, and refuses writes", async () => {
    const filename = path.join(tempDir(), "noema.db")
    await seeded(filename)
    fs.chmodSync(filename, 0o444)
    const before = snapshot(filename)
    const exit = await run(
      { filename, readonly: true },
      Effect.gen(function* () {
        const store = yield* SessionStore.SessionStore
        const sessions = yield* store.list()
        const loaded = yield* store.load(sessions[0]?.id ?? "")
        const write = yield* Effect.exit(store.create({ title: "not stored" }))
        return { titles: sessions.map((info) => info.title), messages: loaded.messages.length, write }
      })
    )
    assert(Exit.isSuccess(exit))
    expect(exit.value.titles).toEqual(["kept"])
    expect(exit.value.messages).toBe(2)
    expect(Exit.isFailure(exit.value.write)).toBe(true)
    expect(String(Exit.isFailure(exit.value.write) && exit.value.write.cause)).toMatch(/readonly/)
    const after = snapshot(filename)
    expect(after.bytes.equals(before.bytes)).toBe(true)
    expect(after.mtimeMs).toBe(before.mtimeMs)
  })

  it("refuses a database that needs migrating, in one line, and leaves it untouched", async () => {
    const filename = path.join(tempDir(), "old.db")
    fs.copyFileSync(fileURLToPath(new URL("./fixtures/release-0.1.db", import.meta.url)), filename)
    const before = snapshot(filename)
    const exit = await run({ filename, readonly: true }, Effect.service(SessionStore.SessionStore))
    assert(Exit.isFailure(exit))
    const error = Cause.squash(exit.cause)
    assert(error instanceof SessionStore.StoreError)
    expect(error.reason._tag).toBe("NeedsMigration")
    expect(error.message).toBe(
      `${filename} needs migrating to this noema's session schema (version 1), which a read-only open does not do; ` +
        "open it once with write access to migrate it"
    )
    expect(snapshot(filename).bytes.equals(before.bytes)).toBe(true)
  })

  it("creates nothing when the file is missing", async () => {
    const dir = tempDir()
    const filename = path.join(dir, "missing", "noema.db")
    const exit = await run({ filename, readonly: true }, Effect.service(SessionStore.SessionStore))
    expect(Exit.isFailure(exit)).toBe(true)
    expect(fs.readdirSync(dir)).toEqual([])
  })
})

function assert(condition: boolean): asserts condition {
  expect(condition).toBe(true)
}
