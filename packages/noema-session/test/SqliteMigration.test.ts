import { execFile as execFileCallback } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { Message } from "@noema/core"
import { Effect } from "effect"
import { afterAll, assert, describe, it } from "vitest"
import * as SqliteStore from "../src/SqliteStore.js"
import { pragma, readFile } from "./support/sqliteFile.js"

const execFile = promisify(execFileCallback)

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-sqlite-migration-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url))

const inspect = (filename: string) =>
  readFile(filename, (database) => ({
    applicationId: pragma(database, "application_id"),
    userVersion: pragma(database, "user_version"),
    migrations: database.prepare("SELECT migration_id, name FROM noema_session_migrations").all(),
    rows: database.prepare("SELECT count(*) AS n FROM messages").get()
  }))

describe("SqliteStore on a file of release 0.1.0", () => {
  it("opens it in place: migration 1 is recorded as applied, every message decodes unchanged", async () => {
    const filename = path.join(directory, "release-0.1.db")
    fs.copyFileSync(fixture("release-0.1.db"), filename)
    const before = new DatabaseSync(filename, { readOnly: true })
    const rowsBefore = before.prepare("SELECT session_id, seq, message FROM messages ORDER BY 1, 2").all()
    before.close()

    const read = () =>
      Effect.runPromise(
        Effect.scoped(
          Effect.gen(function* () {
            const store = yield* SqliteStore.make({ filename })
            const list = yield* store.list()
            return yield* Effect.forEach(list, (info) => store.load(info.id))
          })
        )
      )
    const sessions = await read()
    assert.deepEqual(sessions.map(({ info }) => [info.id, info.messageCount, info.title ?? null]).sort(), [
      ["release-0.1-chat", 10, "Arithmetic"],
      ["release-0.1-empty", 0, null],
      ["release-0.1-recorded", 3, "Hello! Two lines, unicode: héllo 🌍"]
    ])
    const chat = sessions.find(({ info }) => info.id === "release-0.1-chat")
    assert.deepEqual(chat?.messages[1] as unknown, {
      role: "assistant",
      content: "",
      toolCalls: [{ id: "call_1", name: "calculator", arguments: '{"expression":"17 * 23"}' }],
      createdAt: 1_760_000_000_100,
      id: chat?.messages[1]?.id
    })
    assert.equal(
      chat?.messages[5]?.role === "assistant" && chat.messages[5].refusal,
      "I can't help with that."
    )
    const empty = sessions.find(({ info }) => info.id === "release-0.1-empty")
    assert.deepEqual(empty?.info.metadata, { tag: "empty", nested: { n: 1, list: [1, "two", null] } })
    for (const { messages } of sessions) for (const message of messages) Message.decodeSync(message)

    const after = inspect(filename)
    assert.deepEqual(after.migrations, [{ migration_id: 1, name: "sessions" }])
    assert.equal(after.applicationId, 0x6e6f656d)
    assert.equal(after.userVersion, 1)
    const reopened = new DatabaseSync(filename, { readOnly: true })
    assert.deepEqual(
      reopened.prepare("SELECT session_id, seq, message FROM messages ORDER BY 1, 2").all(),
      rowsBefore,
      "the rows were not rewritten"
    )
    reopened.close()
    // Opening again finds nothing to do, and new turns go on from the old ones.
    assert.deepEqual(
      (await read()).map(({ info }) => info.messageCount).sort(),
      sessions.map(({ info }) => info.messageCount).sort()
    )
  })

  it("a new file records its migrations in the Migrator's table and marks itself", async () => {
    const filename = path.join(directory, "new.db")
    await Effect.runPromise(Effect.scoped(SqliteStore.make({ filename })))
    const marks = inspect(filename)
    assert.deepEqual(marks.migrations, [{ migration_id: 1, name: "sessions" }])
    assert.equal(marks.userVersion, 1)
    assert.equal(marks.applicationId, 0x6e6f656d)
  })
})

// A process that fails rejects with its exit code and what it wrote on stderr.
const runProcess = async (filename: string, processNumber: number, turns: number) =>
  (
    await execFile(process.execPath, [
      fixture("concurrent-commits.mjs"),
      filename,
      String(processNumber),
      String(turns)
    ])
  ).stdout

describe("SqliteStore with several processes on one file", () => {
  it("processes committing at once lose no turn and never interleave one", async () => {
    const filename = path.join(directory, "concurrent.db")
    const processes = 4
    const turns = 15
    // The file is created first, so the processes race on commits rather than on creating it.
    await Effect.runPromise(Effect.scoped(SqliteStore.make({ filename })))
    await Promise.all(Array.from({ length: processes }, (_, index) => runProcess(filename, index, turns)))

    const sessions = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteStore.make({ filename })
          const list = yield* store.list()
          return yield* Effect.forEach(list, (info) => store.load(info.id))
        })
      )
    )
    assert.equal(sessions.length, processes + 1)
    const turnsSeen = new Map<string, number>()
    for (const { info, messages } of sessions) {
      assert.equal(messages.length % 4, 0, `${info.id} holds part of a turn`)
      for (let first = 0; first < messages.length; first += 4) {
        const head = messages[first]
        const [writer, , turn] = (head === undefined ? "" : Message.text(head)).split(" ")
        for (let index = 0; index < 4; index++) {
          assert.equal(
            Message.text(messages[first + index] as Message.Message),
            `${writer} turn ${turn} message ${index}`,
            `${info.id}: a turn of ${writer} was interleaved with another`
          )
        }
        if (info.id === "shared") {
          assert.equal(Number(turn), turnsSeen.get(writer as string) ?? 0, `${writer}'s turns are in order`)
          turnsSeen.set(writer as string, Number(turn) + 1)
        } else {
          assert.equal(writer, info.id)
          assert.equal(Number(turn), first / 4)
        }
      }
      assert.equal(
        messages.length,
        info.id === "shared" ? processes * turns * 4 : turns * 4,
        `${info.id} lost turns`
      )
    }
  }, 120_000)
})
