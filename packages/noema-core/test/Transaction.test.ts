import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { ConversationContext, Message, Transaction } from "../src/index.js"

describe("Transaction", () => {
  it("buffers, exposes a live pending view and commits once", () => {
    const tx = Transaction.make()
    const pending = tx.pending
    tx.add(Message.user("a")).extend([Message.assistant("b"), Message.assistant("c")])
    assert.strictEqual(pending.length, 3)
    const committed = tx.commit()
    assert.deepStrictEqual(
      committed.map((message) => message.content),
      ["a", "b", "c"]
    )
    assert.strictEqual(tx.state, "committed")
    assert.throws(() => tx.add(Message.user("late")), /already committed/)
    assert.throws(() => tx.commit(), /Cannot commit/)
    assert.throws(() => tx.rollback(), /already committed/)
    assert.throws(() => tx.pending, /already committed/)
  })

  it("rolls back, after which it cannot be used", () => {
    const reports: Array<Transaction.UnfinishedReport> = []
    const tx = Transaction.make({ onUnfinished: (report) => reports.push(report) })
    tx.add(Message.user("a"))
    tx.rollback()
    assert.strictEqual(tx.state, "rolled-back")
    try {
      tx.extend([Message.user("b")])
      assert.fail("should throw")
    } catch (error) {
      assert.instanceOf(error, Transaction.TransactionClosedError)
      assert.strictEqual((error as Transaction.TransactionClosedError).state, "rolled-back")
    }
    tx[Symbol.dispose]()
    assert.deepStrictEqual(reports, [], "a finished transaction is not reported")
  })

  it("reports an unfinished transaction when disposed", () => {
    const reports: Array<Transaction.UnfinishedReport> = []
    {
      using tx = Transaction.make({ id: "t1", onUnfinished: (report) => reports.push(report) })
      tx.add(Message.user("lost?"))
    }
    assert.deepStrictEqual(reports, [{ transactionId: "t1", pendingCount: 1, detectedBy: "dispose" }])
  })

  it.effect("scoped: an interrupted body rolls back and is reported", () =>
    Effect.gen(function* () {
      const reports: Array<Transaction.UnfinishedReport> = []
      let seen: Transaction.Transaction | undefined
      const exit = yield* Effect.exit(
        Effect.scoped(
          Effect.gen(function* () {
            const tx = yield* Transaction.scoped({ onUnfinished: (report) => reports.push(report) })
            seen = tx
            tx.add(Message.user("x"))
            return yield* Effect.interrupt
          })
        )
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.strictEqual(seen?.state, "rolled-back")
      assert.strictEqual(reports.length, 1)
    })
  )

  it("reports a transaction that is garbage-collected unfinished", async () => {
    setFlagsFromString("--expose-gc")
    const gc = runInNewContext("gc") as () => void
    const reports: Array<Transaction.UnfinishedReport> = []
    const previous = Transaction.setUnfinishedReporter((report) => reports.push(report))
    try {
      ;(() => {
        Transaction.make({ id: "forgotten" }).add(Message.user("a")).add(Message.user("b"))
        Transaction.make({ id: "finished" }).commit()
      })()
      // Finalisation callbacks run when V8 gets to them; keep collecting (bounded) until it has.
      for (let attempt = 0; attempt < 500 && reports.length === 0; attempt++) {
        gc()
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
      assert.deepStrictEqual(reports, [
        { transactionId: "forgotten", pendingCount: 2, detectedBy: "garbage-collection" }
      ])
    } finally {
      Transaction.setUnfinishedReporter(previous)
    }
  })
})

describe("Transaction views", () => {
  it("a pending view taken before commit does not show the committed messages again", () => {
    const history: Array<Message.Message> = [Message.user("old")]
    const tx = Transaction.make()
    const context = ConversationContext.compose({ history, pending: tx.pending })
    tx.add(Message.user("new"))
    assert.strictEqual(context.length, 2)
    history.push(...tx.commit())
    assert.deepStrictEqual(
      Array.from(context, (message) => message.content),
      ["old", "new"]
    )
  })
})
