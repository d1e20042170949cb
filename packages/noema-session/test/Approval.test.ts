/**
 * Approval through a session: a turn that stops for approval is committed with
 * its call waiting; any later handle (another process) sees it, and resuming
 * with a decision commits the rest. A new message instead rejects what waited.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { ToolAgent } from "@noema/agents"
import { Approval, ConversationContext, type Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Schema, Stream } from "effect"
import * as Session from "../src/Session.js"
import { SessionStore } from "../src/SessionStore.js"
import * as SqliteStore from "../src/SqliteStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-approval-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const deleted: Array<string> = []
const deleteFile = Tool.make({
  name: "delete_file",
  description: "Delete a file",
  parameters: Schema.Struct({ path: Schema.String }),
  needsApproval: true,
  handler: ({ path }) =>
    Effect.sync(() => {
      deleted.push(path)
      return `deleted ${path}`
    })
})
const agent = ToolAgent.make({ tools: [deleteFile] })
const deleteCall = { toolCalls: [{ id: "call_1", name: "delete_file", arguments: { path: "notes.txt" } }] }

/** Each use opens the file anew, as another process would. */
const inProcess = <A, E>(filename: string, body: Effect.Effect<A, E, SessionStore>) =>
  Effect.scoped(
    Effect.flatMap(SqliteStore.make({ filename }), (store) =>
      Effect.provideService(body, SessionStore, store)
    )
  )

/** Every tool result follows its call; every call answered. */
const assertValid = (messages: Iterable<Message.Message>) =>
  assert.deepStrictEqual(ConversationContext.problems(messages), [])

describe("Session approvals", () => {
  it.effect("a waiting call is stored, seen by another process, and resumed there", () =>
    Effect.gen(function* () {
      deleted.length = 0
      const filename = path.join(directory, "resume.db")
      const model = ScriptedChatModel.make({ replies: [deleteCall, "Deleted notes.txt."] })
      const id = yield* inProcess(
        filename,
        Effect.gen(function* () {
          const session = yield* Session.create()
          const events = Array.from(
            yield* Stream.runCollect(session.turnStream(agent, model, "delete notes.txt"))
          )
          assert.isTrue(events.some((event) => event.type === "approval-request"))
          assert.strictEqual(events.at(-1)?.type, "committed")
          assert.deepStrictEqual(
            session.pendingApprovals().map((call) => call.name),
            ["delete_file"]
          )
          return session.id
        })
      )
      assert.deepStrictEqual(deleted, [])
      yield* inProcess(
        filename,
        Effect.gen(function* () {
          const session = yield* Session.open(id)
          assert.deepStrictEqual(
            session.pendingApprovals().map((call) => call.id),
            ["call_1"]
          )
          const committed = yield* session.resume(agent, model, { call_1: Approval.approve })
          assert.deepStrictEqual(
            committed.map((message) => message.role),
            ["tool", "assistant"]
          )
          assert.deepStrictEqual(session.pendingApprovals(), [])
          // Nothing waits any more: resuming again runs nothing.
          assert.deepStrictEqual(yield* session.resume(agent, model, {}), [])
        })
      )
      assert.deepStrictEqual(deleted, ["notes.txt"])
      yield* inProcess(
        filename,
        Effect.gen(function* () {
          const session = yield* Session.open(id)
          assert.deepStrictEqual(
            session
              .context()
              .toArray()
              .map((message) => message.role),
            ["user", "assistant", "tool", "assistant"]
          )
          assertValid(session.context())
        })
      )
    })
  )

  it.effect("a new message instead of a decision rejects the waiting call, before the message", () =>
    Effect.gen(function* () {
      deleted.length = 0
      const filename = path.join(directory, "superseded.db")
      const model = ScriptedChatModel.make({ replies: [deleteCall, "Fine, I left it."] })
      yield* inProcess(
        filename,
        Effect.gen(function* () {
          const session = yield* Session.create()
          yield* session.turn(agent, model, "delete notes.txt")
          assert.strictEqual(session.pendingApprovals().length, 1)
          // Compaction never cuts a history that ends waiting.
          const compacted = yield* session.compact(model, { budget: 0, force: true })
          assert.deepStrictEqual(compacted, { compacted: false, skipped: { _tag: "WaitingForApproval" } })
          const committed = yield* session.turn(agent, model, "never mind")
          assert.deepStrictEqual(
            committed.map((message) => message.role),
            ["tool", "user", "assistant"]
          )
          assert.include((committed[0] as Message.ToolMessage).content, "sent a new message instead")
          assert.deepStrictEqual(session.pendingApprovals(), [])
          assertValid(session.context())
          // The model saw the rejection before the new message.
          assert.deepStrictEqual(
            model.requests[1]?.messages.map((message) => message.role),
            ["user", "assistant", "tool", "user"]
          )
        })
      )
      assert.deepStrictEqual(deleted, [])
    })
  )
})
