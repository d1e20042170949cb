/**
 * @noema/sql/testing: what the stores' tests share about the SQL layer.
 */
import { Tracer } from "effect"

/**
 * Counts the transactions begun (effect's `sql.transaction` spans) by what runs under
 * `tracer`: how a test sees that writes were grouped into one commit, or were not.
 */
export const transactionCounter = () => {
  let count = 0
  const tracer = Tracer.make({
    span(options) {
      if (options.name === "sql.transaction") count++
      return new Tracer.NativeSpan(options)
    }
  })
  return { tracer, count: () => count }
}
