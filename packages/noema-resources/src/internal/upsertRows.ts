/**
 * Upsert rows: the SQL stores write a batch of rows keyed by URN as multi-row
 * `INSERT ... ON CONFLICT` statements, one statement per `rowsPerUpsert` rows, instead of one
 * statement a row (a planner's state change writes some twenty resources and their vectors).
 */
import { Array as Arr } from "effect"

/** Rows per statement: a few hundred bound parameters, far below either database's limit. */
export const rowsPerUpsert = 200

/**
 * One item per key, the last given, in the order of those last ones: what writing them one after
 * another would leave. PostgreSQL refuses a statement that updates one row twice, and SQLite
 * would let an earlier row of the key be overwritten within the statement anyway.
 */
export const lastPerKey = <A>(items: ReadonlyArray<A>, key: (item: A) => string): Array<A> => {
  const last = new Map<string, A>()
  for (const item of items) {
    const k = key(item)
    last.delete(k)
    last.set(k, item)
  }
  return [...last.values()]
}

/** The statements' rows: each key once (see `lastPerKey`), `rowsPerUpsert` to a statement. */
export const upsertBatches = <A>(
  items: ReadonlyArray<A>,
  key: (item: A) => string
): Array<Arr.NonEmptyArray<A>> => Arr.chunksOf(lastPerKey(items, key), rowsPerUpsert)
