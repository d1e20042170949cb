import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { Database, DatabaseError } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Redacted, Result } from "effect"
import { Migrator, SqlClient } from "effect/sql"
import * as SqlStore from "../src/SqlStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-database-"))
let pgDatabase: TestDatabase.TestDatabase
beforeAll(async () => {
  pgDatabase = await TestDatabase.make({ prefix: "noema_database" })
})
afterAll(async () => {
  fs.rmSync(directory, { recursive: true, force: true })
  await pgDatabase?.drop()
})

/** Another system's store: its own migrations table, its own tables, in the same database. */
const otherStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* Migrator.make({})({
    loader: Migrator.fromRecord({
      "1_things": sql`CREATE TABLE other_things (id TEXT PRIMARY KEY, body TEXT NOT NULL)`
    }),
    table: "noema_other_migrations"
  })
  return {
    put: (id: string, body: string) => sql`INSERT INTO other_things (id, body) VALUES (${id}, ${body})`,
    all: sql<{ id: string; body: string }>`SELECT id, body FROM other_things ORDER BY id`
  }
})

const marks = (filename: string) => {
  const db = new DatabaseSync(filename, { readOnly: true })
  try {
    const value = (name: string) => (db.prepare(`PRAGMA ${name}`).get() as Record<string, unknown>)[name]
    return { applicationId: value("application_id"), journalMode: value("journal_mode") }
  } finally {
    db.close()
  }
}

describe("Database.fromString", () => {
  it("reads PostgreSQL URLs, SQLite paths relative to cwd, and refuses other schemes", () => {
    const pg = Database.fromString("postgres://user:secret@db:5432/noema", "/work")
    assert.strictEqual(pg?.kind, "postgres")
    assert.strictEqual(
      pg?.kind === "postgres" && Redacted.value(pg.url as Redacted.Redacted<string>),
      "postgres://user:secret@db:5432/noema"
    )
    assert.strictEqual(Database.describe(pg!), "postgres://user:***@db:5432/noema")
    assert.deepStrictEqual(Database.fromString("data/noema.db", "/work"), {
      kind: "sqlite",
      filename: "/work/data/noema.db"
    })
    assert.deepStrictEqual(Database.fromString(":memory:", "/work"), { kind: "sqlite", filename: ":memory:" })
    assert.isUndefined(Database.fromString("mysql://root:secret@db/noema", "/work"))
  })
})

describe("Database on SQLite", () => {
  it.effect("holds sessions and another system's tables in one file, marked as noema's and in WAL", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "shared", "noema.db")
      const layer = Database.layer({ kind: "sqlite", filename })
      // The other system writes first: the session store must still take the file as noema's.
      yield* Effect.scoped(
        Effect.gen(function* () {
          const other = yield* otherStore
          yield* other.put("a", "first")
        }).pipe(Effect.provide(layer))
      )
      assert.deepStrictEqual(marks(filename), { applicationId: 0x6e6f656d, journalMode: "wal" })
      assert.strictEqual(fs.statSync(filename).mode & 0o777, 0o600)
      const stored = yield* Effect.scoped(
        Effect.gen(function* () {
          const database = yield* Database.Database
          assert.deepStrictEqual(database, { location: filename, dialect: "sqlite", readonly: false })
          const store = yield* SqlStore.fromDatabase
          const info = yield* store.create({ title: "shared" })
          yield* store.append(info.id, 0, [Message.user("hello")])
          const other = yield* otherStore
          yield* other.put("b", "second")
          return { things: yield* other.all, session: yield* store.load(info.id) }
        }).pipe(Effect.provide(layer))
      )
      assert.deepStrictEqual(
        stored.things.map((row) => row.id),
        ["a", "b"]
      )
      assert.strictEqual(stored.session.messages.length, 1)
    })
  )

  it.effect("refuses another application's file, leaving it byte for byte as it was", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "foreign.db")
      const db = new DatabaseSync(filename)
      db.exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY); INSERT INTO accounts VALUES (1)")
      db.close()
      const before = fs.readFileSync(filename)
      const result = yield* Effect.result(
        Effect.scoped(Effect.asVoid(Layer.build(Database.layer({ kind: "sqlite", filename }))))
      )
      assert.isTrue(Result.isFailure(result))
      if (Result.isFailure(result)) {
        assert.instanceOf(result.failure, DatabaseError.DatabaseError)
        assert.strictEqual(result.failure.reason._tag, "Foreign")
        assert.include(result.failure.message, "tables accounts")
      }
      assert.isTrue(fs.readFileSync(filename).equals(before))
      assert.isFalse(fs.existsSync(`${filename}-wal`))
    })
  )

  it.effect("refuses a corrupt file with a one-line error", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "corrupt.db")
      fs.writeFileSync(
        filename,
        "this is not a database, but it is long enough to look like a header".repeat(20)
      )
      const result = yield* Effect.result(
        Effect.scoped(Effect.asVoid(Layer.build(Database.layer({ kind: "sqlite", filename }))))
      )
      assert.isTrue(Result.isFailure(result))
      if (Result.isFailure(result)) {
        assert.strictEqual(result.failure.reason._tag, "Corrupt")
        assert.notInclude(result.failure.message, "\n")
      }
    })
  )

  it.effect("opened read-only writes nothing, and a missing file is an error, not a new file", () =>
    Effect.gen(function* () {
      const missing = path.join(directory, "absent", "noema.db")
      const failed = yield* Effect.result(
        Effect.scoped(
          Effect.asVoid(Layer.build(Database.layer({ kind: "sqlite", filename: missing, readonly: true })))
        )
      )
      assert.isTrue(Result.isFailure(failed))
      assert.isFalse(fs.existsSync(path.dirname(missing)))

      const empty = path.join(directory, "empty.db")
      new DatabaseSync(empty).close()
      const before = fs.readFileSync(empty)
      const database = yield* Effect.scoped(
        Effect.flatMap(
          Layer.build(Database.layer({ kind: "sqlite", filename: empty, readonly: true })),
          (context) => Effect.succeed(context.mapUnsafe.get(Database.Database.key))
        )
      )
      assert.deepInclude(database, { readonly: true, dialect: "sqlite" })
      assert.isTrue(fs.readFileSync(empty).equals(before))
      assert.strictEqual(marks(empty).applicationId, 0)
    })
  )
})

describe("Database on PostgreSQL", () => {
  it.effect("holds sessions and another system's tables, and names the server without its password", () =>
    Effect.gen(function* () {
      const url = yield* Effect.promise(() => pgDatabase.schema("shared"))
      const password = new URL(url).password
      const result = yield* Effect.scoped(
        Effect.gen(function* () {
          const database = yield* Database.Database
          const other = yield* otherStore
          yield* other.put("a", "first")
          const store = yield* SqlStore.fromDatabase
          const info = yield* store.create({})
          yield* store.append(info.id, 0, [Message.user("hello")])
          return { database, things: yield* other.all, session: yield* store.load(info.id) }
        }).pipe(Effect.provide(Database.layer({ kind: "postgres", url, maxConnections: 2 })))
      )
      assert.strictEqual(result.database.dialect, "pg")
      assert.notInclude(result.database.location, password)
      assert.include(result.database.location, ":***@")
      assert.deepStrictEqual(
        result.things.map((row) => row.id),
        ["a"]
      )
      assert.strictEqual(result.session.messages.length, 1)
    })
  )
})
