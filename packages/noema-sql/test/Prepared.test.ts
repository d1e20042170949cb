import { makeCompiler as makePgCompiler } from "@effect/sql-pg/PgClient"
import { assert, describe, it } from "@effect/vitest"
import { SqliteClient } from "@noema/sql-sqlite"
import { Effect, Exit, Layer } from "effect"
import { SqlClient, Statement } from "effect/sql"
import * as Prepared from "../src/Prepared.js"

// The statement constructors of both dialects, without a database: only their compilers run here.
const dialects = [
  ["sqlite", Statement.makeCompilerSqlite()],
  ["pg", makePgCompiler()]
] as const

const statements = (compiler: Statement.Compiler) =>
  Statement.make(Effect.die("no database in these tests"), compiler, [], undefined)

describe("Prepared", () => {
  for (const [dialect, compiler] of dialects) {
    const sql = statements(compiler)

    it(`${dialect}: gives what compiling the template gives, and builds it once`, () => {
      let builds = 0
      const template = ([count, now, id, expected]: ReadonlyArray<unknown>) => {
        builds++
        return sql`UPDATE sessions SET message_count = message_count + ${count}, updated_at = ${now},
          activity = ${sql.literal("(SELECT max(activity) + 1 FROM sessions)")}
          WHERE id = ${id} AND message_count = ${expected}`
      }
      const update = Prepared.make(4, template)
      for (const args of [
        [4, 1_700_000_000_000, "first", 0],
        [1, 2, "it's 'quoted'", 100_000],
        [0, 0, "", -1]
      ]) {
        builds = 0
        const expected = template(args).compile()
        builds = 0
        assert.deepStrictEqual(update(args), expected)
        assert.strictEqual(builds, 0, "a call builds nothing")
      }
    })

    it(`${dialect}: an argument used twice and a value of the template's own keep their places`, () => {
      const template = ([id, title]: ReadonlyArray<unknown>) =>
        sql`UPDATE sessions SET title = ${title}, metadata = ${"{}"} WHERE id = ${id} OR parent = ${id}`
      const update = Prepared.make(2, template)
      assert.deepStrictEqual(update(["a", "b"]), template(["a", "b"]).compile())
      assert.deepStrictEqual(update(["a", "b"])[1], ["b", "{}", "a", "a"])
    })

    it(`${dialect}: a multi-row insert, one per row count`, () => {
      const columns = ["session_id", "seq", "message", "created_at"] as const
      const template = (rows: number) => (parameters: ReadonlyArray<unknown>) =>
        sql`INSERT INTO messages ${sql.insert(
          Array.from({ length: rows }, (_, row) =>
            Object.fromEntries(columns.map((column, place) => [column, parameters[row * 4 + place]]))
          ) as [Record<string, unknown>]
        )}`
      for (const rows of [1, 3]) {
        const insert = Prepared.make(rows * 4, template(rows))
        const parameters = Array.from({ length: rows * 4 }, (_, index) => `value ${index}`)
        assert.deepStrictEqual(insert(parameters), template(rows)(parameters).compile())
      }
    })
  }
})

describe("Prepared.values", () => {
  const onSqlite = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
    Effect.scoped(
      Effect.flatMap(Layer.build(SqliteClient.layer({ filename: ":memory:" })), (context) =>
        Effect.provideContext(effect, context)
      )
    )

  it.effect("runs on the open transaction's connection: rolled back with it, seen inside it", () =>
    onSqlite(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`
        const insert = Prepared.make(
          2,
          ([id, body]) => sql`INSERT INTO notes (id, body) VALUES (${id}, ${body})`
        )
        const select = Prepared.make(
          1,
          ([id]) => sql`SELECT id, body FROM notes WHERE id >= ${id} ORDER BY id`
        )
        yield* Prepared.values(sql, insert, [1, "kept"])
        // On SQLite a statement outside the transaction would wait for its connection until the
        // transaction ended: this one must run inside it, and go with it.
        const failed = yield* Effect.exit(
          sql.withTransaction(
            Effect.gen(function* () {
              yield* Prepared.values(sql, insert, [2, "rolled back"])
              const inside = yield* Prepared.values(sql, select, [0])
              assert.deepStrictEqual(inside, [
                [1, "kept"],
                [2, "rolled back"]
              ])
              return yield* Effect.fail("undo")
            })
          )
        )
        assert.isTrue(Exit.isFailure(failed))
        assert.deepStrictEqual(yield* Prepared.values(sql, select, [0]), [[1, "kept"]])
      })
    )
  )
})
