/**
 * The example of docs/runtime.md and docs/approvals.md, answering approvals
 * through an embedded runtime: it is the code between `docs:begin` and
 * `docs:end` below, verbatim (the first test checks both documents carry it),
 * so it compiles with the tests and runs offline (the second test).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
// docs:begin
import { Approval, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { RuntimeBuilder, TriggerEvent } from "@noema/runtime"
import { MemoryStore, Session, SessionStore } from "@noema/session"
import { Effect, Schema, Stream } from "effect"

const transfer = Tool.make({
  name: "transfer",
  description: "Moves money",
  parameters: Schema.Struct({ amount: Schema.Number }),
  needsApproval: ({ amount }) => amount > 100,
  handler: ({ amount }) => Effect.succeed(`moved ${amount}`)
})

// Offline: the model asks for transfer(500), then answers. `.useOpenAi(...)` works the same.
const model = ScriptedChatModel.make({
  replies: [{ toolCalls: [{ name: "transfer", arguments: { amount: 500 } }] }, "Done: 500 moved."]
})

const program = Effect.gen(function* () {
  const store = yield* MemoryStore.make()
  const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
  const runtime = yield* RuntimeBuilder.make()
    .registerTools(transfer)
    .useModel(model)
    .useSession(session)
    .build()
  // Subscribed when this returns: nothing published from now on is missed.
  const events = yield* runtime.subscribe
  const cycleEnds = Stream.runHead(Stream.filter(events, (event) => event.type === "cycle-completed"))

  yield* runtime.start
  yield* runtime.receiveTrigger(TriggerEvent.fromUser("pay the invoice"))
  yield* cycleEnds // the turn stopped at transfer(500): the call waits in the session

  const decisions = Object.fromEntries(session.pendingApprovals().map((call) => [call.id, Approval.approve]))
  yield* runtime.receiveTrigger(TriggerEvent.decide(decisions, { source: "alice" })) // or Approval.reject("why")
  yield* cycleEnds // the same turn went on: transfer ran, the model answered

  // Deciding again is refused (DecisionRefused, reason "not-waiting"): a call is decided once.
  const again = yield* Effect.flip(runtime.receiveTrigger(TriggerEvent.decide(decisions)))
  yield* runtime.stop()
  return { history: session.context().toArray(), again }
}).pipe(Effect.scoped)
// docs:end

const exampleOf = (source: string): string => {
  const begin = source.indexOf("// docs:begin\n") + "// docs:begin\n".length
  return source.slice(begin, source.indexOf("// docs:end\n"))
}

const docs = path.join(import.meta.dirname, "..", "..", "..", "docs")

describe("the docs' example: approvals answered through an embedded runtime", () => {
  it("is in docs/runtime.md and docs/approvals.md verbatim", () => {
    const example = exampleOf(fs.readFileSync(import.meta.filename, "utf8"))
    for (const file of ["runtime.md", "approvals.md"]) {
      assert.include(fs.readFileSync(path.join(docs, file), "utf8"), `\`\`\`ts\n${example}\`\`\``, file)
    }
  })

  it.effect(
    "runs: the call waits, the decision goes on with the turn and is recorded, a second one is refused",
    () =>
      Effect.gen(function* () {
        const { history, again } = yield* program
        assert.deepStrictEqual(
          history.map(
            (message) => `${message.role}:${typeof message.content === "string" ? message.content : ""}`
          ),
          ["user:pay the invoice", "assistant:", "tool:moved 500", "assistant:Done: 500 moved."]
        )
        const record = history[2]?.metadata?.approval as Record<string, unknown> | undefined
        assert.deepStrictEqual(record, { approved: true, by: "alice", trigger: record?.trigger })
        assert.isString(record?.trigger)
        assert.strictEqual(again._tag, "DecisionRefused")
        assert.strictEqual(again._tag === "DecisionRefused" && again.reason, "not-waiting")
      })
  )
})
