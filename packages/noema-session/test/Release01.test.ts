/**
 * Sessions written by release 0.1.0 (test/fixtures/release-0.1.db, made by the
 * script in release-0.1.md) still load, and every message reads back the same
 * text, tool calls and refusal through today's content helpers. The fixture
 * is copied first: opening a database may write to it.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { Effect } from "effect"
import * as SqliteStore from "../src/SqliteStore.js"

const fixtures = path.join(import.meta.dirname, "fixtures")
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-release-0.1-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const copyFixture = (): string => {
  const filename = path.join(directory, `release-0.1-${fs.readdirSync(directory).length}.db`)
  for (const suffix of ["", "-wal", "-shm"]) {
    const source = path.join(fixtures, `release-0.1.db${suffix}`)
    if (fs.existsSync(source)) fs.copyFileSync(source, `${filename}${suffix}`)
  }
  return filename
}

/** What each message said, read through the helpers every reader now uses. */
const reading = (message: Message.Message) => ({
  role: message.role,
  text: Message.text(message),
  reasoning: Message.reasoning(message),
  files: Message.files(message).length,
  toolCalls: message.role === "assistant" ? (message.toolCalls ?? []) : [],
  refusal: message.role === "assistant" ? message.refusal : undefined
})

const calculatorCall = { id: "call_1", name: "calculator", arguments: '{"expression":"17 * 23"}' }
const readFileCall = { id: "call_2", name: "read_file", arguments: '{"path":"/nope"}' }

const said = (
  role: Message.Role,
  text: string,
  extra: { toolCalls?: ReadonlyArray<Message.ToolCall>; refusal?: string } = {}
) => ({ role, text, reasoning: "", files: 0, toolCalls: extra.toolCalls ?? [], refusal: extra.refusal })

describe("a database written by release 0.1.0", () => {
  it.effect("loads every session, and every message decodes and reads back the same", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const store = yield* SqliteStore.make({ filename: copyFixture() })
        const sessions = yield* store.list()
        assert.deepStrictEqual(sessions.map((info) => info.id).sort(), [
          "release-0.1-chat",
          "release-0.1-empty",
          "release-0.1-recorded"
        ])

        const chat = yield* store.load("release-0.1-chat")
        assert.deepStrictEqual(chat.messages.map(reading), [
          said("user", "What is 17 * 23?"),
          said("assistant", "", { toolCalls: [calculatorCall] }),
          said("tool", "391"),
          said("assistant", "17 × 23 = 391."),
          said("user", "Say something rude."),
          said("assistant", "", { refusal: "I can't help with that." }),
          said("user", "read /nope"),
          said("assistant", "Let me look.", { toolCalls: [readFileCall] }),
          said("tool", "ENOENT: no such file"),
          said("assistant", "That file does not exist.")
        ])
        assert.deepStrictEqual(chat.messages[0]?.metadata, { source: "cli" })
        assert.strictEqual(chat.messages[0]?.createdAt, 1_760_000_000_000)
        const failed = chat.messages[8]
        assert.isTrue(failed?.role === "tool" && failed.isError)

        const recorded = yield* store.load("release-0.1-recorded")
        assert.deepStrictEqual(
          recorded.messages.map(reading).filter((message) => message.role !== "system"),
          [said("user", "Hello!\nTwo lines, unicode: héllo 🌍"), said("assistant", "Hi there.")]
        )

        const empty = yield* store.load("release-0.1-empty")
        assert.deepStrictEqual(empty.messages, [])

        // Each stored message is valid under today's Schema, and stays in the plain-string form.
        for (const session of [chat, recorded]) {
          for (const message of session.messages) {
            assert.deepStrictEqual(Message.decodeSync(JSON.parse(Message.toJson(message))), message)
            assert.strictEqual(typeof message.content, "string")
          }
        }
      })
    )
  )
})
