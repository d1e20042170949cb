/**
 * Prepared: a statement written as an effect/sql tagged template, compiled once.
 *
 * effect's compiler turns a template into SQL text and parameters each time a
 * statement is built: a few microseconds and a handful of objects per
 * statement, which a store's hot path (a commit, paying one fsync for several
 * statements) feels. A `Prepared` builds its template once, with a marker in
 * place of each argument, and remembers where each argument landed among the
 * compiled parameters; a call then gives the same text (the driver's cache
 * key for its prepared statement) and the call's arguments in their places.
 * The text is the compiler's, dialect and all: nothing here writes SQL.
 *
 * The template must depend on its arguments only as parameters (`${value}`),
 * never for its shape: fragments, identifiers and `sql.insert`'s columns are
 * taken from the first build. A multi-row insert is one `Prepared` per row
 * count.
 *
 * `valuesOn` and `values` run one on a connection directly, its rows as arrays of column
 * values: no statement object, compilation or span per call (the one thing given up is the
 * statement's span, which a hot path of small statements pays for most).
 */
import { Context, Effect } from "effect"
import type { SqlClient, SqlConnection, SqlError, Statement } from "effect/sql"

/** The SQL text and the parameters for one call. */
export type Compiled = readonly [text: string, parameters: ReadonlyArray<unknown>]

/** The compiled statement for `args`, given in the order the builder takes them. */
export type Prepared = (args: ReadonlyArray<unknown>) => Compiled

/**
 * `build` compiled once, with `arity` arguments: `build(args)` must return the same
 * template whatever the arguments are, with each argument a parameter.
 */
export const make = (
  arity: number,
  build: (args: ReadonlyArray<unknown>) => Statement.Statement<object>
): Prepared => {
  // Objects of its own, so an argument is found among the parameters by identity.
  const markers = Array.from({ length: arity }, () => ({}))
  const [text, compiled] = build(markers).compile()
  const places = compiled.map((value) => markers.indexOf(value as object))
  // The usual case, a template whose parameters are its arguments in order: the call's own array.
  if (places.length === arity && places.every((place, index) => place === index)) {
    return (args) => [text, args]
  }
  return (args) => [text, places.map((place, index) => (place < 0 ? compiled[index] : args[place]))]
}

/**
 * A statement whose shape depends on a count (an `IN` list, a multi-row insert): `build(count)`
 * once per count asked for, then the same `Prepared` for that count.
 */
export const perCount = (build: (count: number) => Prepared): ((count: number) => Prepared) => {
  const built: Array<Prepared | undefined> = []
  return (count) => {
    let statement = built[count]
    if (statement === undefined) {
      statement = build(count)
      built[count] = statement
    }
    return statement
  }
}

/**
 * The `sql` transaction open in `context` (a fiber's), as effect/sql keeps it: its connection
 * and depth; undefined outside one. The one place noema looks it up.
 */
export const openTransaction = (
  sql: SqlClient.SqlClient,
  context: Context.Context<never>
): readonly [connection: SqlConnection.Connection, depth: number] | undefined =>
  Context.getOrUndefined(context, sql.transactionService)

/** Runs `statement` with `args` on `connection` (the transaction's it is part of): rows as arrays. */
export const valuesOn = (
  connection: SqlConnection.Connection,
  statement: Prepared,
  args: ReadonlyArray<unknown>
): Effect.Effect<ReadonlyArray<ReadonlyArray<unknown>>, SqlError.SqlError> => {
  const [text, parameters] = statement(args)
  return connection.executeValues(text, parameters)
}

/**
 * Runs `statement` where one of `sql`'s own statements would run: on the connection of the
 * transaction open in this fiber, else on a connection reserved for it alone (on SQLite, the
 * client's one connection, taken as its statements take it: never inside another fiber's
 * transaction).
 */
export const values = (
  sql: SqlClient.SqlClient,
  statement: Prepared,
  args: ReadonlyArray<unknown>
): Effect.Effect<ReadonlyArray<ReadonlyArray<unknown>>, SqlError.SqlError> =>
  Effect.withFiber((fiber) => {
    const level = openTransaction(sql, fiber.context)
    return level === undefined
      ? Effect.scoped(Effect.flatMap(sql.reserve, (connection) => valuesOn(connection, statement, args)))
      : valuesOn(level[0], statement, args)
  })
