import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Layer, Stream, Tracer } from "effect"
import { Reactivity } from "effect/reactivity"
import { Migrator, SqlClient, type SqlConnection } from "effect/sql"
import { getLoadablePath } from "sqlite-vec"
import * as SqliteClient from "../src/SqliteClient.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-sql-sqlite-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

let counter = 0
const freshFile = () => path.join(directory, `test-${counter++}.db`)

const withClient = <A, E>(
  body: (sql: SqliteClient.SqliteClient) => Effect.Effect<A, E, SqlClient.SqlClient | Reactivity.Reactivity>,
  config: Partial<SqliteClient.Config> = {}
) =>
  Effect.gen(function* () {
    const sql = yield* SqliteClient.SqliteClient
    return yield* body(sql)
  }).pipe(Effect.provide(SqliteClient.layer({ filename: freshFile(), ...config })))

const setup = (sql: SqlClient.SqlClient) =>
  sql`CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`.pipe(Effect.asVoid)

const names = (sql: SqlClient.SqlClient) =>
  Effect.map(sql<{ name: string }>`SELECT name FROM items ORDER BY id`, (rows) => rows.map((row) => row.name))

describe("SqliteClient", () => {
  it.effect("runs statements with parameters; RETURNING gives rows; values gives arrays", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const inserted = yield* sql<{ id: number; name: string }>`
          INSERT INTO items ${sql.insert([{ name: "a" }, { name: "b" }])} RETURNING id, name`
        assert.deepStrictEqual(
          inserted.map((row) => row.name),
          ["a", "b"]
        )
        // The same text twice runs the cached statement again with new parameters.
        for (const name of ["c", "d"]) yield* sql`INSERT INTO items (name) VALUES (${name})`
        assert.deepStrictEqual(yield* names(sql), ["a", "b", "c", "d"])
        const values = yield* sql`SELECT id, name FROM items WHERE name = ${"c"}`.values
        assert.deepStrictEqual(values, [[3, "c"]])
        // A cached statement switched to arrays returns objects again afterwards.
        const again = yield* sql`SELECT id, name FROM items WHERE name = ${"c"}`
        assert.deepStrictEqual(again, [{ id: 3, name: "c" }])
      })
    )
  )

  it.effect("a cache of one statement still runs every statement correctly", () =>
    withClient(
      (sql) =>
        Effect.gen(function* () {
          yield* setup(sql)
          for (let i = 0; i < 5; i++) {
            yield* sql`INSERT INTO items (name) VALUES (${`n${i}`})`
            yield* sql`SELECT count(*) AS n FROM items`
          }
          assert.strictEqual((yield* names(sql)).length, 5)
        }),
      { prepareCacheSize: 1 }
    )
  )

  it.effect("withTransaction commits on success and rolls back on failure; nested ones are savepoints", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        yield* sql.withTransaction(sql`INSERT INTO items (name) VALUES ('kept')`)
        const failed = yield* Effect.flip(
          sql.withTransaction(
            Effect.andThen(sql`INSERT INTO items (name) VALUES ('dropped')`, Effect.fail("boom"))
          )
        )
        assert.strictEqual(failed, "boom")
        yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`INSERT INTO items (name) VALUES ('outer')`
            yield* Effect.flip(
              sql.withTransaction(
                Effect.andThen(sql`INSERT INTO items (name) VALUES ('inner')`, Effect.fail("no"))
              )
            )
            yield* sql.withTransaction(sql`INSERT INTO items (name) VALUES ('inner kept')`)
          })
        )
        assert.deepStrictEqual(yield* names(sql), ["kept", "outer", "inner kept"])
      })
    )
  )

  it.effect("a transaction takes the write lock when it begins (BEGIN IMMEDIATE)", () => {
    const filename = freshFile()
    return Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* setup(sql)
      const other = new DatabaseSync(filename, { timeout: 0 })
      const otherWrite = yield* sql.withTransaction(
        Effect.sync(() => {
          try {
            other.exec("BEGIN IMMEDIATE")
            other.exec("ROLLBACK")
            return "acquired"
          } catch (error) {
            return (error as { errcode?: number }).errcode
          }
        })
      )
      other.close()
      assert.strictEqual(otherWrite, 5, "another connection could take the write lock (SQLITE_BUSY expected)")
    }).pipe(Effect.provide(SqliteClient.layer({ filename })))
  })

  it.effect(
    "a lock held by another connection fails a write after the busy timeout, as LockTimeoutError",
    () => {
      const filename = freshFile()
      return Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* setup(sql)
        const holder = new DatabaseSync(filename)
        holder.exec("BEGIN IMMEDIATE")
        const error = yield* Effect.flip(sql`INSERT INTO items (name) VALUES ('blocked')`)
        holder.exec("ROLLBACK")
        holder.close()
        assert.strictEqual(error.reason._tag, "LockTimeoutError")
        yield* sql`INSERT INTO items (name) VALUES ('later')`
        assert.deepStrictEqual(yield* names(sql), ["later"])
      }).pipe(Effect.provide(SqliteClient.layer({ filename, busyTimeout: "20 millis" })))
    }
  )

  it.effect("opens in WAL mode with synchronous=FULL by default, or as configured", () =>
    Effect.gen(function* () {
      const pragmas = (sql: SqlClient.SqlClient) =>
        Effect.all([sql`PRAGMA journal_mode`, sql`PRAGMA synchronous`, sql`PRAGMA foreign_keys`])
      const defaults = yield* withClient(pragmas)
      assert.deepStrictEqual(defaults, [
        [{ journal_mode: "wal" }],
        [{ synchronous: 2 }],
        [{ foreign_keys: 1 }]
      ])
      const configured = yield* withClient(pragmas, { wal: false, synchronous: "NORMAL", foreignKeys: false })
      assert.deepStrictEqual(configured, [
        [{ journal_mode: "delete" }],
        [{ synchronous: 1 }],
        [{ foreign_keys: 0 }]
      ])
    })
  )

  it.effect("fibers cannot slip statements into another fiber's transaction", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const inside = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const transaction = yield* Effect.forkChild(
          Effect.flip(
            sql.withTransaction(
              Effect.gen(function* () {
                yield* sql`INSERT INTO items (name) VALUES ('rolled back')`
                yield* Deferred.succeed(inside, undefined)
                yield* Deferred.await(release)
                return yield* Effect.fail("abandon")
              })
            )
          )
        )
        yield* Deferred.await(inside)
        const outsider = yield* Effect.forkChild(sql`INSERT INTO items (name) VALUES ('outsider')`)
        yield* Effect.yieldNow
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(transaction)
        yield* Fiber.join(outsider)
        assert.deepStrictEqual(yield* names(sql), ["outsider"])
      })
    )
  )

  it.effect("stream reads rows in chunks without loading them all", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* sql`CREATE TABLE numbers (n INTEGER NOT NULL)`
        yield* sql`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000)
          INSERT INTO numbers SELECT n FROM c`
        const rows = yield* Stream.runCollect(sql<{ n: number }>`SELECT n FROM numbers ORDER BY n`.stream)
        assert.strictEqual(rows.length, 1000)
        assert.deepStrictEqual(rows[999], { n: 1000 })
        const error = yield* Effect.flip(Stream.runCollect(sql`SELECT * FROM missing`.stream))
        assert.strictEqual(error._tag, "SqlError")
      })
    )
  )

  it.effect("a stream left after its first rows releases its read lock", () => {
    const filename = freshFile()
    return Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE numbers (n INTEGER NOT NULL)`
      yield* sql`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000)
        INSERT INTO numbers SELECT n FROM c`
      const first = yield* Stream.runCollect(
        Stream.take(sql<{ n: number }>`SELECT n FROM numbers ORDER BY n`.stream, 1)
      )
      assert.deepStrictEqual(first, [{ n: 1 }])
      // Without WAL a reader's lock blocks every writer: another connection must be able to write now.
      const other = new DatabaseSync(filename, { timeout: 0 })
      const written = (() => {
        try {
          other.exec("INSERT INTO numbers VALUES (1001)")
          return "written"
        } catch (error) {
          return (error as Error).message
        } finally {
          other.close()
        }
      })()
      assert.strictEqual(written, "written")
    }).pipe(Effect.provide(SqliteClient.layer({ filename, wal: false })))
  })

  it.effect("Migrator runs migrations once, in order", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        const run = Migrator.make({})({
          loader: Migrator.fromRecord({
            "1_items": setup(sql),
            "2_seed": Effect.asVoid(sql`INSERT INTO items (name) VALUES ('seeded')`)
          })
        })
        assert.deepStrictEqual(yield* run, [
          [1, "items"],
          [2, "seed"]
        ])
        assert.deepStrictEqual(yield* run, [])
        assert.deepStrictEqual(yield* names(sql), ["seeded"])
      })
    )
  )

  it.effect("reactive queries rerun after a committed mutation, not after a rolled-back one", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const seen: Array<number> = []
        const counts = sql.reactive(
          ["items"],
          Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM items`, (rows) => rows[0]?.n ?? -1)
        )
        const reader = yield* Effect.forkChild(
          Stream.runForEach(Stream.take(counts, 2), (n) => Effect.sync(() => seen.push(n)))
        )
        yield* Effect.yieldNow
        yield* Effect.flip(
          sql.withTransaction(
            Effect.andThen(
              Reactivity.mutation(sql`INSERT INTO items (name) VALUES ('no')`, ["items"]),
              Effect.fail("roll back")
            )
          )
        )
        yield* sql.withTransaction(
          Reactivity.mutation(sql`INSERT INTO items (name) VALUES ('yes')`, ["items"])
        )
        yield* Fiber.join(reader)
        assert.deepStrictEqual(seen, [0, 1])
      })
    )
  )

  it.effect("a path that cannot be opened fails with a SqlError", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Layer.build(SqliteClient.layer({ filename: path.join(directory, "missing", "dir", "x.db") })).pipe(
          Effect.scoped
        )
      )
      assert.strictEqual(error._tag, "SqlError")
    })
  )

  it.effect("loads an extension from code; SQL text can never load one, before or after", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        const file = getLoadablePath()
        const bySql = sql`SELECT load_extension(${file})`
        const refused = Effect.map(Effect.flip(bySql), (error) => String(error.reason.cause))
        assert.match(yield* refused, /not authorized/)
        yield* sql.loadExtension(file)
        const [row] = yield* sql<{ version: string }>`SELECT vec_version() AS version`
        assert.match(row?.version ?? "", /^v\d/)
        assert.match(yield* refused, /not authorized/)
        assert.isTrue(SqliteClient.isSqliteClient(sql))
      })
    )
  )

  it.effect("a missing extension file, or one opened with extensions off, fails with a SqlError", () =>
    Effect.gen(function* () {
      const missing = yield* Effect.flip(
        withClient((sql) => sql.loadExtension(path.join(directory, "no-such-extension.so")))
      )
      assert.strictEqual(missing._tag, "SqlError")
      assert.match(missing.message, /no-such-extension/)
      const locked = yield* Effect.flip(
        withClient((sql) => sql.loadExtension(getLoadablePath()), { extensions: false })
      )
      assert.strictEqual(locked._tag, "SqlError")
    })
  )
})

describe("SqliteClient.transactionOnConnection", () => {
  const insert = (connection: SqlConnection.Connection, name: string) =>
    connection.execute("INSERT INTO items (name) VALUES (?)", [name], undefined)

  /** Whether another connection to `filename` can take the write lock now (false: SQLITE_BUSY). */
  const otherCanWrite = (filename: string) => {
    const other = new DatabaseSync(filename, { timeout: 0 })
    try {
      other.exec("BEGIN IMMEDIATE")
      other.exec("ROLLBACK")
      return true
    } catch (error) {
      if ((error as { errcode?: number }).errcode === 5) return false
      throw error
    } finally {
      other.close()
    }
  }

  it.effect(
    "commits on success, rolls back on failure, begins with the client's statement or the one provided",
    () => {
      const filename = freshFile()
      return Effect.gen(function* () {
        const sql = yield* SqliteClient.SqliteClient
        yield* setup(sql)
        const spans: Array<string> = []
        const tracer = Tracer.make({
          span(options) {
            return new (class extends Tracer.NativeSpan {
              override end(endTime: bigint, exit: Exit.Exit<unknown, unknown>): void {
                spans.push(`${options.name} ${exit._tag}`)
                super.end(endTime, exit)
              }
            })(options)
          }
        })
        const locked = yield* sql
          .transactionOnConnection((connection) =>
            Effect.flatMap(insert(connection, "a"), () => Effect.sync(() => otherCanWrite(filename)))
          )
          .pipe(Effect.withTracer(tracer))
        assert.isFalse(locked, "BEGIN IMMEDIATE takes the write lock at once")
        const failure = yield* Effect.flip(
          sql.transactionOnConnection((connection) =>
            Effect.andThen(insert(connection, "b"), Effect.fail("no"))
          )
        ).pipe(Effect.withTracer(tracer))
        assert.strictEqual(failure, "no")
        assert.deepStrictEqual(yield* names(sql), ["a"])
        assert.deepStrictEqual(spans, ["sql.transaction Success", "sql.transaction Failure"])
        // A deferred BEGIN, provided for this one transaction, takes no lock before its first write.
        const deferred = yield* sql
          .transactionOnConnection(() => Effect.sync(() => otherCanWrite(filename)))
          .pipe(Effect.provideService(SqlClient.BeginTransaction, "BEGIN"))
        assert.isTrue(deferred)
      }).pipe(Effect.provide(SqliteClient.layer({ filename })))
    }
  )

  it.effect("an interrupted body is rolled back and the connection is free after", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const inside = Deferred.makeUnsafe<void>()
        const fiber = yield* Effect.forkChild(
          sql.transactionOnConnection((connection) =>
            Effect.andThen(
              insert(connection, "interrupted"),
              Effect.andThen(Deferred.succeed(inside, undefined), Effect.never)
            )
          )
        )
        yield* Deferred.await(inside)
        yield* Fiber.interrupt(fiber)
        assert.deepStrictEqual(yield* names(sql), [])
        yield* sql.transactionOnConnection((connection) => insert(connection, "after"))
        yield* sql.withTransaction(sql`INSERT INTO items (name) VALUES ('then')`)
        assert.deepStrictEqual(yield* names(sql), ["after", "then"])
      })
    )
  )

  it.effect("waits for another fiber's transaction, and can be interrupted while it waits", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const held = Deferred.makeUnsafe<void>()
        const release = Deferred.makeUnsafe<void>()
        const holder = yield* Effect.forkChild(
          sql.withTransaction(
            Effect.andThen(
              sql`INSERT INTO items (name) VALUES ('holder')`,
              Effect.andThen(Deferred.succeed(held, undefined), Deferred.await(release))
            )
          )
        )
        yield* Deferred.await(held)
        const waiters = yield* Effect.forEach(["left", "stayed"], (name) =>
          Effect.forkChild(sql.transactionOnConnection((connection) => insert(connection, name)))
        )
        yield* Effect.yieldNow
        yield* Fiber.interrupt(waiters[0] as Fiber.Fiber<unknown, unknown>)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        yield* Fiber.join(waiters[1] as Fiber.Fiber<unknown, unknown>)
        assert.deepStrictEqual(yield* names(sql), ["holder", "stayed"])
      })
    )
  )

  it.effect("a failed COMMIT fails the caller with the SqlError and leaves no transaction open", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        yield* sql`CREATE TABLE parents (id INTEGER PRIMARY KEY)`
        yield* sql`CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`
        // The missing parent is noticed only by COMMIT, which SQLite fails and leaves open.
        const error = yield* Effect.flip(
          sql.transactionOnConnection((connection) =>
            Effect.andThen(
              insert(connection, "with the orphan"),
              connection.execute("INSERT INTO children (parent) VALUES (42)", [], undefined)
            )
          )
        )
        assert.strictEqual(error._tag, "SqlError")
        assert.deepStrictEqual(yield* sql`SELECT count(*) AS n FROM children`, [{ n: 0 }])
        yield* sql.transactionOnConnection((connection) => insert(connection, "next"))
        yield* sql.withTransaction(sql`INSERT INTO items (name) VALUES ('then')`)
        assert.deepStrictEqual(yield* names(sql), ["next", "then"])
      })
    )
  )

  it.effect("inside a transaction of the same client it dies at once instead of waiting for itself", () =>
    withClient((sql) =>
      Effect.gen(function* () {
        yield* setup(sql)
        const exit = yield* Effect.exit(
          sql.withTransaction(sql.transactionOnConnection((connection) => insert(connection, "nested")))
        )
        assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
        assert.include(String(Exit.isFailure(exit) && Cause.squash(exit.cause)), "already open")
        assert.deepStrictEqual(yield* names(sql), [])
      })
    )
  )
})
