import { makeCompiler as makePgCompiler } from "@effect/sql-pg/PgClient"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Statement } from "effect/sql"
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
