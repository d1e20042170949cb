import { afterAll, assert, describe, it } from "@effect/vitest"
import pg from "pg"
import * as TestDatabase from "../src/TestDatabase.js"

const query = async (url: string, text: string): Promise<Array<Record<string, unknown>>> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query(text)).rows
  } finally {
    await client.end()
  }
}

describe("TestDatabase", () => {
  const made: Array<TestDatabase.TestDatabase> = []
  afterAll(() => Promise.all(made.map((database) => database.drop())))

  it("gives each suite its own empty database on the run's server", async () => {
    const first = await TestDatabase.make({ prefix: "isolation" })
    const second = await TestDatabase.make({ prefix: "isolation" })
    made.push(first, second)
    assert.notStrictEqual(first.name, second.name)
    assert.match(first.name, /^isolation_[0-9a-f]{16}$/)
    await query(first.url, "CREATE TABLE only_here (x integer)")
    const [row] = await query(second.url, "SELECT to_regclass('only_here') IS NULL AS absent")
    assert.strictEqual(row?.absent, true)
    const [current] = await query(first.url, "SELECT current_database() AS name")
    assert.strictEqual(current?.name, first.name)
  })

  it("schema() gives fresh, empty schemas whose URLs create and find tables in them", async () => {
    const database = await TestDatabase.make({ prefix: "schemas" })
    made.push(database)
    const first = await database.schema("case")
    const second = await database.schema("case")
    assert.notStrictEqual(first, second)
    await query(first, "CREATE TABLE sessions (x integer)")
    const [inFirst] = await query(first, "SELECT current_schema() AS name, to_regclass('sessions') AS found")
    assert.match(String(inFirst?.name), /^case_[0-9a-f]{16}$/)
    assert.strictEqual(inFirst?.found, "sessions")
    const [inSecond] = await query(second, "SELECT to_regclass('sessions') IS NULL AS absent")
    assert.strictEqual(inSecond?.absent, true)
  })

  it("drops the database, once, however often drop is called", async () => {
    const database = await TestDatabase.make()
    await Promise.all([database.drop(), database.drop()])
    const rows = await query(
      await TestDatabase.serverUrl(),
      `SELECT 1 FROM pg_database WHERE datname = '${database.name}'`
    )
    assert.lengthOf(rows, 0)
  })

  it("puts another database name into a URL and keeps the rest", () => {
    assert.strictEqual(
      TestDatabase.withDatabase("postgres://u:p@127.0.0.1:5433/postgres?sslmode=disable", "other"),
      "postgres://u:p@127.0.0.1:5433/other?sslmode=disable"
    )
  })
})
