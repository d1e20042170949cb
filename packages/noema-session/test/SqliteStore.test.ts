import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { Effect, Layer, Result } from "effect"
import * as SessionStore from "../src/SessionStore.js"
import * as SessionStoreConformance from "../src/SessionStoreConformance.js"
import * as SqliteStore from "../src/SqliteStore.js"
import { pragma, readFile } from "./support/sqliteFile.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-sqlite-store-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

let counter = 0
// Through a layer, as a Postgres backend is given: each case builds it again on a fresh file.
const freshStore = SessionStoreConformance.fromLayer(
  Layer.suspend(() => SqliteStore.layer({ filename: path.join(directory, `conformance-${counter++}.db`) }))
)

describe("SqliteStore conformance", () => {
  for (const testCase of SessionStoreConformance.cases) {
    it.effect(testCase.name, () => testCase.run(freshStore))
  }
})

// ---------------------------------------------------------------------------
// What only a file-backed store can show
// ---------------------------------------------------------------------------

const pragmas = (filename: string) =>
  readFile(filename, (database) => ({
    applicationId: pragma(database, "application_id"),
    userVersion: pragma(database, "user_version"),
    journalMode: pragma(database, "journal_mode")
  }))

describe("SqliteStore", () => {
  it.effect("keeps sessions across close and reopen, in a directory it creates", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "nested", "deeper", "reopen.db")
      const id = yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteStore.make({ filename })
          assert.strictEqual(store.location, filename)
          const { id } = yield* store.create({ metadata: { systemPrompt: "Be brief." } })
          yield* store.append(id, 0, [Message.user("persist me"), Message.assistant("persisted")])
          return id
        })
      )
      const stored = yield* Effect.scoped(
        Effect.flatMap(SqliteStore.make({ filename }), (store) => store.load(id))
      )
      assert.deepStrictEqual(
        stored.messages.map((message) => message.content),
        ["persist me", "persisted"]
      )
      assert.deepStrictEqual(stored.info.metadata, { systemPrompt: "Be brief." })
      assert.strictEqual(stored.info.title, "persist me")
    })
  )

  it.effect("marks the file as a noema database in WAL mode at the current schema version", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "marked.db")
      yield* Effect.scoped(SqliteStore.make({ filename }))
      assert.deepStrictEqual(pragmas(filename), {
        applicationId: 0x6e6f656d,
        userVersion: 1,
        journalMode: "wal"
      })
    })
  )

  it.effect("two connections to one file: concurrent commits to a session, exactly one wins", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "two-connections.db")
      const first = yield* SqliteStore.make({ filename })
      const second = yield* SqliteStore.make({ filename })
      const { id } = yield* first.create()
      const attempts = yield* Effect.all(
        [
          Effect.result(first.append(id, 0, [Message.user("from first"), Message.assistant("a")])),
          Effect.result(second.append(id, 0, [Message.user("from second"), Message.assistant("b")]))
        ],
        { concurrency: "unbounded" }
      )
      const winners = attempts.filter(Result.isSuccess)
      assert.strictEqual(winners.length, 1)
      const loser = attempts.find(Result.isFailure)
      assert.instanceOf(loser?.failure, SessionStore.SessionConflictError)
      const fromFirst = yield* first.load(id)
      const fromSecond = yield* second.load(id)
      assert.deepStrictEqual(fromFirst, fromSecond)
      assert.strictEqual(fromFirst.messages.length, 2)
      assert.strictEqual(new Set(fromFirst.messages.map((message) => message.content.slice(5))).size, 2)
    }).pipe(Effect.scoped)
  )

  it.effect("an append sees what another connection changed: metadata, a deleted and recreated session", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "changed-elsewhere.db")
      const mine = yield* SqliteStore.make({ filename })
      const theirs = yield* SqliteStore.make({ filename })
      const { id } = yield* mine.create({ id: "shared", metadata: { version: 1 } })
      yield* mine.append(id, 0, [Message.user("first question")])
      yield* theirs.updateMetadata(id, { metadata: { version: 2 } })
      const afterUpdate = yield* mine.append(id, 1, [Message.assistant("first answer")])
      assert.deepStrictEqual(afterUpdate.metadata, { version: 2 })
      assert.strictEqual(afterUpdate.title, "first question")

      yield* theirs.delete(id)
      const recreated = yield* theirs.create({ id, metadata: { version: 3 } })
      const again = yield* mine.append(id, 0, [Message.user("second life")])
      assert.strictEqual(again.title, "second life", "a recreated, untitled session is named again")
      assert.deepStrictEqual(again.metadata, { version: 3 })
      assert.strictEqual(again.createdAt, recreated.createdAt)
      assert.deepStrictEqual(again, yield* theirs.info(id))
    }).pipe(Effect.scoped)
  )

  it.effect(
    "a row that is not a message fails the load with a one-line StoreError naming file and session",
    () =>
      Effect.gen(function* () {
        const filename = path.join(directory, "bad-row.db")
        const store = yield* SqliteStore.make({ filename })
        const { id } = yield* store.create({ id: "damaged" })
        yield* store.append(id, 0, [
          Message.user("fine"),
          Message.assistant("to be damaged"),
          Message.user("fine")
        ])
        const other = yield* store.create()
        yield* store.append(other.id, 0, [Message.user("untouched")])

        const database = new DatabaseSync(filename)
        database.exec(`UPDATE messages SET message = '{"role":"wizard","content":"x"}' WHERE seq = 1`)
        const error = yield* Effect.flip(store.load(id))
        database.exec(
          `UPDATE messages SET message = '{"role":"user",' WHERE session_id = 'damaged' AND seq = 1`
        )
        const invalidJson = yield* Effect.flip(store.load(id))
        database.exec("DELETE FROM messages WHERE session_id = 'damaged' AND seq = 1")
        const missing = yield* Effect.flip(store.load(id))
        database.close()

        for (const failure of [error, invalidJson, missing]) {
          assert.instanceOf(failure, SessionStore.StoreError)
          assert.strictEqual(failure.reason._tag, "Corrupt")
          assert.include(failure.message, filename)
          assert.include(failure.message, "damaged")
          assert.notInclude(failure.message, "\n")
        }
        assert.include(error.message, "wizard")
        assert.include(invalidJson.message, "invalid JSON")
        // Other sessions stay readable.
        assert.strictEqual((yield* store.load(other.id)).messages.length, 1)
      }).pipe(Effect.scoped)
  )

  it.effect(
    "a session longer than one read batch loads whole and in order; damage past the first batch is found",
    () =>
      Effect.gen(function* () {
        const filename = path.join(directory, "long.db")
        const store = yield* SqliteStore.make({ filename })
        // 2,500 messages: the load reads them in several statements (1,000 rows each on SQLite).
        const count = 2_500
        const { id } = yield* store.create({ id: "long" })
        for (let first = 0; first < count; first += 500) {
          const turn = Array.from({ length: 500 }, (_, index) => Message.user(`message ${first + index}`))
          yield* store.append(id, first, turn)
        }
        const loaded = yield* store.load(id)
        assert.strictEqual(loaded.messages.length, count)
        assert.isTrue(loaded.messages.every((message, index) => message.content === `message ${index}`))

        const database = new DatabaseSync(filename)
        const damage = (statement: string) =>
          Effect.flatMap(
            Effect.sync(() => database.exec(statement)),
            () => Effect.flip(store.load(id))
          )
        const beyond = yield* damage(
          `INSERT INTO messages SELECT session_id, ${count}, message, created_at FROM messages WHERE seq = 0`
        )
        const before = yield* damage(
          `UPDATE messages SET seq = -1 WHERE seq = ${count}; UPDATE sessions SET message_count = ${count}`
        )
        const missing = yield* damage("DELETE FROM messages WHERE seq IN (-1, 1500)")
        database.close()
        assert.include(beyond.message, `should hold ${count} messages but ${count + 1} were found`)
        assert.include(before.message, "missing message 0")
        assert.include(missing.message, "missing message 1500")
        for (const failure of [beyond, before, missing]) {
          assert.instanceOf(failure, SessionStore.StoreError)
          assert.strictEqual(failure.reason._tag, "Corrupt")
        }
      }).pipe(Effect.scoped)
  )

  it.effect("a write blocked by another process's lock fails as Locked (retryable), then succeeds", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "locked.db")
      const store = yield* SqliteStore.make({ filename, busyTimeout: "50 millis" })
      const { id } = yield* store.create()
      const holder = new DatabaseSync(filename)
      holder.exec("BEGIN IMMEDIATE")
      const error = yield* Effect.flip(store.append(id, 0, [Message.user("blocked")]))
      holder.exec("ROLLBACK")
      holder.close()
      assert.instanceOf(error, SessionStore.StoreError)
      assert.strictEqual(error.reason._tag, "Locked")
      assert.isTrue(error.isRetryable)
      assert.include(error.message, filename)
      yield* store.append(id, 0, [Message.user("now")])
      assert.strictEqual((yield* store.info(id)).messageCount, 1)
    }).pipe(Effect.scoped)
  )

  it.effect("a path that cannot be opened is an Io failure", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.scoped(SqliteStore.make({ filename: directory })))
      assert.strictEqual(error.reason._tag, "Io")
      assert.include(error.message, directory)
    })
  )

  it.effect("closes the database when the scope closes", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "closed.db")
      const store = yield* Effect.scoped(SqliteStore.make({ filename }))
      const error = yield* Effect.flip(store.list())
      assert.instanceOf(error, SessionStore.StoreError)
      // Closing the last connection checkpoints the WAL into the file and removes it.
      assert.isFalse(fs.existsSync(`${filename}-wal`))
    })
  )
})

describe("SqliteStore and content parts", () => {
  it.effect("keeps reasoning, files, finish reasons and usage, and fails a load on malformed parts", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "parts.db")
      const messages = [
        Message.user([
          Message.textPart("Describe this"),
          Message.filePart({ uri: "https://example.com/a.png", mediaType: "image/png", size: 10 })
        ]),
        Message.assistant([Message.reasoningPart("Looks like a cat."), Message.textPart("A cat.")], {
          finishReason: "stop",
          rawFinishReason: "stop",
          usage: { inputTokens: 10, outputTokens: 4, totalTokens: 14, reasoningTokens: 2 }
        })
      ]
      const id = yield* Effect.scoped(
        Effect.gen(function* () {
          const store = yield* SqliteStore.make({ filename })
          const { id } = yield* store.create()
          const info = yield* store.append(id, 0, messages)
          assert.strictEqual(info.title, "Describe this")
          return id
        })
      )
      const stored = yield* Effect.scoped(
        Effect.flatMap(SqliteStore.make({ filename }), (store) => store.load(id))
      )
      assert.deepStrictEqual(stored.messages, messages)

      // A stored part that breaks the schema is caught on load, in one line.
      const database = new DatabaseSync(filename)
      for (const bad of [
        '{"role":"user","content":[{"type":"reasoning","text":"users do not reason here"}]}',
        '{"role":"assistant","content":[{"type":"file","uri":"x"}]}',
        '{"role":"assistant","content":"x","finishReason":"exploded"}'
      ]) {
        database.prepare("UPDATE messages SET message = ? WHERE seq = 1").run(bad)
        const error = yield* Effect.flip(
          Effect.scoped(Effect.flatMap(SqliteStore.make({ filename }), (store) => store.load(id)))
        )
        assert.strictEqual(error._tag === "StoreError" && error.reason._tag, "Corrupt", bad)
        assert.notInclude(error.message, "\n")
      }
      database.close()
    })
  )
})
