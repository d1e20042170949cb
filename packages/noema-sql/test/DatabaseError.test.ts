import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as Database from "../src/Database.js"
import * as DatabaseError from "../src/DatabaseError.js"
import * as Migrations from "../src/Migrations.js"
import * as Postgres from "../src/Postgres.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-sql-errors-"))
let pg: TestDatabase.TestDatabase
beforeAll(async () => {
  pg = await TestDatabase.make({ prefix: "noema_sql_errors" })
})
afterAll(async () => {
  fs.rmSync(directory, { recursive: true, force: true })
  await pg?.drop()
})

const sqliteFile = (name: string) => path.join(directory, name)

const onSqlite = <A, E>(
  filename: string,
  effect: Effect.Effect<A, E, SqlClient.SqlClient | Database.Database>,
  options: { readonly readonly?: boolean; readonly busyTimeout?: number } = {}
) => Effect.provide(effect, Database.layer({ kind: "sqlite", filename, ...options }))

const onPg = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient | Database.Database>) =>
  Effect.provide(effect, Database.layer({ kind: "postgres", url: Redacted.make(pg.url), maxConnections: 2 }))

/** The `DatabaseError` `effect` fails with, after its SQL failures went through the one mapping. */
const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flip(DatabaseError.mapSqlErrors("test")(effect)).pipe(
    Effect.map((error) => {
      assert.instanceOf(error, DatabaseError.DatabaseError)
      return error as DatabaseError.DatabaseError
    })
  )

describe("DatabaseError.fromSqlError on SQLite", () => {
  it.effect("a duplicate key is a Constraint, not retryable", () =>
    onSqlite(
      sqliteFile("constraint.db"),
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE things (id TEXT PRIMARY KEY)`
        yield* sql`INSERT INTO things (id) VALUES (${"a"})`
        const error = yield* failure(sql`INSERT INTO things (id) VALUES (${"a"})`)
        assert.strictEqual(error.reason._tag, "Constraint")
        assert.isFalse(error.isRetryable)
        assert.notInclude(error.message, "\n")
      })
    )
  )

  it.effect(
    "a write waiting on another connection's BEGIN IMMEDIATE past the timeout is Locked, retryable",
    () => {
      const filename = sqliteFile("locked.db")
      return Effect.gen(function* () {
        // Created and marked as noema's first, then held by a second connection.
        yield* onSqlite(
          filename,
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE things (id TEXT PRIMARY KEY)`)
        )
        const holder = new DatabaseSync(filename)
        holder.exec("BEGIN IMMEDIATE")
        try {
          const error = yield* onSqlite(
            filename,
            Effect.flatMap(SqlClient.SqlClient, (sql) =>
              failure(sql`INSERT INTO things (id) VALUES (${"b"})`)
            ),
            { busyTimeout: 50 }
          )
          assert.strictEqual(error.reason._tag, "Locked")
          assert.isTrue(error.isRetryable)
        } finally {
          holder.exec("ROLLBACK")
          holder.close()
        }
      })
    }
  )

  it.effect("a file that is not a database is Corrupt, and left as it was", () => {
    const filename = sqliteFile("notes.db")
    const text = "not a database, only notes long enough to fill a header. ".repeat(40)
    fs.writeFileSync(filename, text)
    return Effect.gen(function* () {
      const error = yield* Effect.flip(onSqlite(filename, Effect.void))
      assert.strictEqual(error.reason._tag, "Corrupt")
      assert.isFalse(error.isRetryable)
      assert.strictEqual(fs.readFileSync(filename, "utf8"), text)
    })
  })

  it.effect("a write through a read-only open is ReadOnly, and the file is unchanged", () => {
    const filename = sqliteFile("readonly.db")
    return Effect.gen(function* () {
      yield* onSqlite(
        filename,
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE things (id TEXT PRIMARY KEY)`)
      )
      const before = fs.readFileSync(filename)
      const error = yield* onSqlite(
        filename,
        Effect.flatMap(SqlClient.SqlClient, (sql) => failure(sql`INSERT INTO things (id) VALUES (${"c"})`)),
        { readonly: true }
      )
      assert.strictEqual(error.reason._tag, "ReadOnly")
      assert.isFalse(error.isRetryable)
      assert.isTrue(fs.readFileSync(filename).equals(before))
    })
  })

  it.effect("another application's file is Foreign", () => {
    const filename = sqliteFile("other.db")
    const other = new DatabaseSync(filename)
    other.exec("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    other.close()
    return Effect.gen(function* () {
      const error = yield* Effect.flip(onSqlite(filename, Effect.void))
      assert.strictEqual(error.reason._tag, "Foreign")
      assert.include(error.message, "users")
    })
  })
})

describe("DatabaseError.fromSqlError on PostgreSQL", () => {
  it.effect("a duplicate key is a Constraint (SQLSTATE 23505)", () =>
    onPg(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE unique_things (id TEXT PRIMARY KEY)`
        yield* sql`INSERT INTO unique_things (id) VALUES (${"a"})`
        const error = yield* failure(sql`INSERT INTO unique_things (id) VALUES (${"a"})`)
        assert.strictEqual(error.reason._tag, "Constraint")
        assert.isFalse(error.isRetryable)
      })
    )
  )

  it.effect("a write in a read-only transaction is ReadOnly (SQLSTATE 25006)", () =>
    onPg(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE readonly_things (id TEXT PRIMARY KEY)`
        const error = yield* failure(
          sql
            .withTransaction(sql`INSERT INTO readonly_things (id) VALUES (${"a"})`)
            .pipe(Effect.provideService(SqlClient.BeginTransaction, "BEGIN READ ONLY"))
        )
        assert.strictEqual(error.reason._tag, "ReadOnly")
      })
    )
  )

  it.effect("a wrong password is Connection, retryable, and the message does not show it", () =>
    Effect.gen(function* () {
      const url = new URL(pg.url)
      url.password = "Wr0ng-Pa55w0rd"
      const error = yield* Effect.flip(
        Layer.build(Postgres.layer({ url: url.toString() })).pipe(Effect.scoped)
      )
      assert.instanceOf(error, DatabaseError.DatabaseError)
      assert.strictEqual(error.reason._tag, "Connection")
      assert.isTrue(error.isRetryable)
      assert.notInclude(`${error.message} ${JSON.stringify(error)}`, "Wr0ng-Pa55w0rd")
    })
  )
})

describe("Migrations.run", () => {
  const migrations: Migrations.Record = {
    "1_widgets": Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE widgets (id TEXT PRIMARY KEY)`)
  }
  const options = { location: "test", schema: "widgets", table: "noema_widgets_migrations", migrations }

  it.effect("read-only, a store not migrated yet is NeedsMigration and nothing is written", () => {
    const filename = sqliteFile("needs.db")
    return Effect.gen(function* () {
      yield* onSqlite(filename, Effect.void)
      const before = fs.readFileSync(filename)
      const error = yield* Effect.flip(
        onSqlite(filename, Migrations.run({ ...options, readonly: true }), { readonly: true })
      )
      assert.strictEqual(error.reason._tag, "NeedsMigration")
      assert.isTrue(fs.readFileSync(filename).equals(before))
      // Migrated once with write access, the read-only open is accepted.
      yield* onSqlite(filename, Migrations.run(options))
      yield* onSqlite(filename, Migrations.run({ ...options, readonly: true }), { readonly: true })
    })
  })

  it.effect("a store migrated by a newer noema is SchemaTooNew, on SQLite and PostgreSQL", () =>
    Effect.gen(function* () {
      const newer: Migrations.Record = {
        ...migrations,
        "2_gadgets": Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql`CREATE TABLE gadgets (id TEXT PRIMARY KEY)`
        )
      }
      const filename = sqliteFile("newer.db")
      yield* onSqlite(filename, Migrations.run({ ...options, migrations: newer }))
      const onFile = yield* Effect.flip(onSqlite(filename, Migrations.run(options)))
      assert.strictEqual(onFile.reason._tag, "SchemaTooNew")
      yield* onPg(Migrations.run({ ...options, migrations: newer }))
      const onServer = yield* Effect.flip(onPg(Migrations.run(options)))
      assert.strictEqual(onServer.reason._tag, "SchemaTooNew")
      assert.include(onServer.message, "upgrade noema")
    })
  )
})
