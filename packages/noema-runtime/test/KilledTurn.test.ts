/**
 * A tool call is on record before it runs: a process killed (SIGKILL) while
 * the tool runs leaves the call in the store, and the next turn, in another
 * process, answers it "interrupted; may have partially run" before the new
 * message. Repeated, and the history stays valid each time.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { OpenAiTestServer } from "@noema/openai/testing"
import { Session, SessionStore, SqliteStore } from "@noema/session"
import { Effect } from "effect"
import { assertValidHistory } from "./support.js"

const fixture = path.join(import.meta.dirname, "fixtures", "KilledTurn.ts")
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-killed-turn-"))
let server: OpenAiTestServer.TestServer

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(async () => {
  await server.close()
  fs.rmSync(directory, { recursive: true, force: true })
})

/** Runs the fixture until its tool started, then kills it with SIGKILL. */
const runAndKill = (filename: string, id: string) =>
  new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [fixture, filename, id, server.url], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (chunk) => {
      stderr += String(chunk)
    })
    child.stdout.on("data", (chunk) => {
      if (String(chunk).includes("tool started")) child.kill("SIGKILL")
    })
    child.on("close", (code, signal) =>
      signal === "SIGKILL" ? resolve() : reject(new Error(`fixture exited ${code}: ${stderr}`))
    )
  })

const load = (filename: string, id: string) =>
  Effect.scoped(Effect.flatMap(SqliteStore.make({ filename }), (store) => store.load(id)))

describe("a turn killed while its tool runs", () => {
  it.live("leaves the call on record; the next turn answers it as interrupted, three times over", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "killed.db")
      const id = "killed-session"
      for (let round = 0; round < 3; round++) {
        server.reset()
        server.enqueue({
          type: "tool-calls",
          calls: [{ id: `call_${round}`, name: "long_job", arguments: "{}" }]
        })
        yield* Effect.promise(() => runAndKill(filename, id))
        const afterKill = yield* load(filename, id)
        const last = afterKill.messages.at(-1) as Message.AssistantMessage
        assert.strictEqual(last.role, "assistant")
        assert.strictEqual(last.toolCalls?.[0]?.id, `call_${round}`)

        // Another process goes on: the open call is answered first, honestly.
        const model = ScriptedChatModel.make({
          replies: [`Sorry, the job was interrupted (round ${round}).`]
        })
        const committed = yield* Effect.scoped(
          Effect.gen(function* () {
            const store = yield* SqliteStore.make({ filename })
            const session = yield* Effect.provideService(Session.open(id), SessionStore.SessionStore, store)
            assert.deepStrictEqual(session.pendingApprovals(), [])
            return yield* session.turn(ToolAgent.make({ tools: [] }), model, "what happened?")
          })
        )
        const answer = committed[0] as Message.ToolMessage
        assert.strictEqual(answer.toolCallId, `call_${round}`)
        assert.include(answer.content, "interrupted; it may have partially run")
        assert.strictEqual(Message.text(committed[1] as Message.Message), "what happened?")
        const history = (yield* load(filename, id)).messages
        assertValidHistory(history)
        assert.strictEqual(history.length, (round + 1) * 5)
      }
    })
  )
})
