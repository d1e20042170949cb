import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { Effect, Exit, Layer, Stream } from "effect"
import { TestClock } from "effect/testing"
import * as MemoryStore from "../src/MemoryStore.js"
import * as SessionArchive from "../src/SessionArchive.js"
import { type CreateOptions, SessionStore } from "../src/SessionStore.js"
import * as SqliteStore from "../src/SqliteStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-archive-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))
let files = 0
const sqlite = () => SqliteStore.layer({ filename: path.join(directory, `store-${files++}.db`) })

const turn = (n: number): Array<Message.Message> => [
  Message.user(`question ${n} with "quotes", a newline\nand unicode ✓`),
  Message.assistant("", { toolCalls: [{ id: `call-${n}`, name: "calculator", arguments: '{"x":1}' }] }),
  Message.toolResult({ toolCallId: `call-${n}`, name: "calculator", content: "1" }),
  Message.assistant(`answer ${n}`)
]

/** Three sessions: one with a title and metadata, one long, one empty. */
const fill = Effect.gen(function* () {
  const store = yield* SessionStore
  const titled = yield* store.create({
    id: "titled",
    title: "Kept title",
    metadata: { systemPrompt: "be brief" }
  })
  // Every step at its own time, so a copy that stamped its own would show.
  yield* TestClock.adjust("1 minute")
  yield* store.append(titled.id, 0, turn(0))
  yield* TestClock.adjust("1 minute")
  const long = yield* store.create({ id: "long" })
  for (let n = 0; n < 50; n++) {
    yield* TestClock.adjust("1 second")
    yield* store.append(long.id, n * 4, turn(n))
  }
  yield* TestClock.adjust("1 minute")
  yield* store.create({ id: "empty", metadata: { tag: ["a", 1, null] } })
})

const exportLines = Stream.runCollect(SessionArchive.exportAll)

const importLines = (lines: ReadonlyArray<string>) =>
  Effect.forEach(lines, (text, index) =>
    Effect.flatMap(SessionArchive.decodeLine(text, index + 1), SessionArchive.importSession)
  )

/** What a copy keeps, as the store shows it. */
const snapshot = Effect.gen(function* () {
  const store = yield* SessionStore
  const sessions = yield* store.list()
  return yield* Effect.forEach(sessions, (info) =>
    Effect.map(store.load(info.id), (stored) => ({
      id: info.id,
      title: info.title,
      metadata: info.metadata,
      messageCount: info.messageCount,
      messages: stored.messages
    }))
  )
})

const roundTrip = (source: Layer.Layer<SessionStore, unknown>, target: Layer.Layer<SessionStore, unknown>) =>
  Effect.gen(function* () {
    const { lines, before } = yield* Effect.provide(
      Effect.gen(function* () {
        yield* fill
        return { lines: Array.from(yield* exportLines), before: yield* snapshot }
      }),
      source
    )
    assert.lengthOf(lines, 3)
    for (const line of lines) assert.notInclude(line, "\n")
    yield* TestClock.adjust("1 day")
    const { after, again } = yield* Effect.provide(
      Effect.andThen(importLines(lines), Effect.all({ after: snapshot, again: exportLines })),
      target
    )
    assert.deepStrictEqual(after, before)
    assert.strictEqual(after.find((session) => session.id === "long")?.messages.length, 200)
    // Nothing lost in a round trip: the target's export is the source's, byte for byte (times included).
    assert.deepStrictEqual(Array.from(again), lines)
  })

describe("SessionArchive", () => {
  it.effect("copies every session, message, title and metadata from SQLite to memory", () =>
    roundTrip(sqlite(), MemoryStore.layer)
  )

  it.effect("and from memory to SQLite, keeping the order of list", () =>
    roundTrip(MemoryStore.layer, sqlite())
  )

  it.effect("skips a session whose id the target already has, and changes nothing of it", () =>
    Effect.gen(function* () {
      const store = yield* SessionStore
      yield* store.create({ id: "titled", title: "Theirs" })
      yield* store.append("titled", 0, [Message.user("their own message")])
      const line = SessionArchive.encodeLine({
        info: { id: "titled", title: "Mine", createdAt: 1, updatedAt: 2, messageCount: 1, metadata: {} },
        messages: [Message.user("my message")]
      })
      const outcome = yield* Effect.flatMap(SessionArchive.decodeLine(line, 1), SessionArchive.importSession)
      assert.deepStrictEqual(outcome, { _tag: "AlreadyExists", id: "titled" })
      const kept = yield* store.load("titled")
      assert.strictEqual(kept.info.title, "Theirs")
      assert.deepStrictEqual(
        kept.messages.map((message) => message.content),
        ["their own message"]
      )
    }).pipe(Effect.provide(MemoryStore.layer))
  )

  describe("a malformed line", () => {
    const good = JSON.parse(
      SessionArchive.encodeLine({
        info: { id: "s", createdAt: 1, updatedAt: 2, messageCount: 2, metadata: {} },
        messages: [Message.user("hi"), Message.assistant("hello")]
      })
    ) as Record<string, unknown>
    const cases: ReadonlyArray<readonly [string, string, RegExp]> = [
      ["not JSON", "{not json", /^line 7: not valid JSON/],
      ["another format", JSON.stringify({ ...good, format: "other" }), /^line 7: not a noema session/],
      ["a newer version", JSON.stringify({ ...good, version: 2 }), /^line 7: session format version 2/],
      ["no id", JSON.stringify({ ...good, session: { createdAt: 1 } }), /^line 7: "session": .*id/],
      [
        "a bad message",
        JSON.stringify({ ...good, messages: [Message.user("hi"), { role: "tool", content: "x" }] }),
        /^line 7: message 1: .*toolCallId/
      ],
      [
        "a wrong count",
        JSON.stringify({ ...good, messages: [Message.user("hi")] }),
        /^line 7: session "s" says it has 2 messages but the line holds 1/
      ]
    ]
    for (const [name, text, expected] of cases) {
      it.effect(`${name}: names the line and imports nothing`, () =>
        Effect.gen(function* () {
          const exit = yield* Effect.exit(
            Effect.flatMap(SessionArchive.decodeLine(text, 7), SessionArchive.importSession)
          )
          assert.isTrue(Exit.isFailure(exit))
          const error = Exit.isFailure(exit) ? exit.cause.reasons[0] : undefined
          const failure = error !== undefined && "error" in error ? error.error : undefined
          assert.instanceOf(failure, SessionArchive.ArchiveLineError)
          assert.match(String((failure as Error).message), expected)
          assert.notInclude((failure as Error).message, "\n")
          const store = yield* SessionStore
          assert.lengthOf(yield* store.list(), 0)
        }).pipe(Effect.provide(MemoryStore.layer))
      )
    }
  })

  it.effect("a session the store refuses leaves nothing behind", () =>
    Effect.gen(function* () {
      // The session and its messages are one `create`, stored whole or not at all (the store's
      // contract): a store that refuses its messages (a full disk, a lost connection) keeps nothing.
      const failing = Layer.effect(
        SessionStore,
        Effect.map(MemoryStore.make(), (store) => ({
          ...store,
          append: () => Effect.die(new Error("import must not append after create")),
          create: (options?: CreateOptions) =>
            options?.messages === undefined ? store.create(options) : Effect.die(new Error("disk full"))
        }))
      )
      const line = SessionArchive.encodeLine({
        info: { id: "doomed", createdAt: 1, updatedAt: 2, messageCount: 1, metadata: {} },
        messages: [Message.user("hi")]
      })
      const left = yield* Effect.gen(function* () {
        const exit = yield* Effect.exit(
          Effect.flatMap(SessionArchive.decodeLine(line, 1), SessionArchive.importSession)
        )
        assert.isTrue(Exit.isFailure(exit))
        const store = yield* SessionStore
        return yield* store.list()
      }).pipe(Effect.provide(failing))
      assert.lengthOf(left, 0)
    })
  )
})
