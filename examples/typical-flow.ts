/**
 * The typical flow of a turn, step by step: add the user's message to a
 * transaction, run the agent on committed + pending, validate what it
 * produced, then commit (all of it) or roll back (none of it).
 *
 * Runs offline on the scripted model: `node examples/typical-flow.ts`.
 * Swap in a real model with `OpenAiChatModel.make({ model: "gpt-4o-mini" })`.
 */

import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { ToolAgent } from "@noema/agents"
import { Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Session, SqliteStore } from "@noema/session"
import { Effect, Schema } from "effect"

const add = Tool.make({
  name: "add",
  description: "Adds two numbers",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(a + b)
})

// The model asks for the tool, then answers with its result; a second turn returns an empty answer.
const model = ScriptedChatModel.make({
  replies: [
    { toolCalls: [{ name: "add", arguments: { a: 2, b: 3 } }] },
    (request) => {
      const last = request.messages.at(-1)
      return `The sum is ${last === undefined ? "?" : Message.text(last)}.`
    },
    ""
  ]
})

// No `system` here: the session holds the system prompt (one home), and each turn sends it once.
const agent = ToolAgent.make({ tools: [add] })

/** Our own rule for this app: a turn must end with a non-empty answer. */
const isValid = (pending: Iterable<Message.Message>) => {
  const last = Array.from(pending).at(-1)
  return last?.role === "assistant" && Message.text(last).trim().length > 0
}

const turn = (session: Session.Session, text: string) =>
  Effect.gen(function* () {
    // 1. The session adds the user's input to a transaction.
    const transaction = session.begin()
    transaction.add(Message.user(text))
    // 2. The agent runs on committed history + pending (it sees the new message).
    const produced = yield* agent.execute(session.transactionContext(transaction), model)
    // 3. The agent's output joins the transaction.
    transaction.extend(produced)
    // 4. Validate, then commit or roll back.
    if (isValid(transaction.pending)) {
      const committed = yield* session.commit(transaction)
      console.log(`committed ${committed.length} messages`)
    } else {
      yield* session.rollback(transaction)
      console.log("rolled back: the answer was empty")
    }
  })

const directory = mkdtempSync(join(tmpdir(), "noema-example-"))
const program = Effect.gen(function* () {
  const session = yield* Session.create({
    title: "typical flow",
    systemPrompt: "You add numbers with the add tool."
  })
  yield* turn(session, "What is 2 + 3?")
  yield* turn(session, "And now?")
  const reopened = yield* Session.open(session.id)
  console.log(`stored: ${reopened.context().length} messages`)
  for (const message of reopened.context()) console.log(`  ${Message.toText(message)}`)
}).pipe(Effect.provide(SqliteStore.layer({ filename: join(directory, "noema.db") })))

Effect.runPromise(program)
  .catch((error: unknown) => {
    console.error(String(error))
    process.exitCode = 1
  })
  .finally(() => rmSync(directory, { recursive: true, force: true }))
