/**
 * @noema/sql/testing: what the stores' tests share about the SQL layer.
 */
import { type Exit, Tracer } from "effect"

/**
 * Counts the transactions begun (effect's `sql.transaction` spans) by what runs under
 * `tracer`, and those of them that succeeded (committed, or released as a savepoint): how a
 * test sees that writes were grouped into one commit, or were not.
 */
export const transactionCounter = () => {
  let count = 0
  let committed = 0
  class TransactionSpan extends Tracer.NativeSpan {
    override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
      if (exit._tag === "Success") committed++
      super.end(endTime, exit)
    }
  }
  const tracer = Tracer.make({
    span(options) {
      if (options.name !== "sql.transaction") return new Tracer.NativeSpan(options)
      count++
      return new TransactionSpan(options)
    }
  })
  return { tracer, count: () => count, committed: () => committed }
}
