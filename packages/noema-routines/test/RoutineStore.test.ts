import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import { SqlStore } from "@noema/session"
import { Database, Migrations } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Layer, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as RoutineConformance from "../src/RoutineConformance.js"
import * as RoutineStore from "../src/RoutineStore.js"
import * as SqlRoutineStore from "../src/SqlRoutineStore.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-routines-store-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

const onDatabase = (options: Database.Options) =>
  Effect.flatMap(Layer.build(Database.layer(options)), (context) =>
    Effect.provideContext(SqlRoutineStore.fromDatabase, context)
  )

describe("memory RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () => testCase.run(Effect.sync(RoutineStore.memory)))
  }
})

let counter = 0
describe("SQLite RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(
        Effect.suspend(() =>
          onDatabase({ kind: "sqlite", filename: path.join(directory, `conformance-${counter++}.db`) })
        )
      )
    )
  }
})

let database: TestDatabase.TestDatabase
beforeAll(async () => {
  database = await TestDatabase.make({ prefix: "noema_routines" })
})
afterAll(() => database?.drop())

describe("PostgreSQL RoutineStore conformance", () => {
  for (const testCase of RoutineConformance.cases) {
    it.effect(testCase.name, () =>
      testCase.run(
        Effect.flatMap(
          Effect.promise(() => database.schema("routines")),
          (url) => onDatabase({ kind: "postgres", url })
        )
      )
    )
  }
})

/**
 * A database whose routines schema stopped at migration 1 (before task verdicts), holding a
 * chain stored then; opening the store now migrates it to the current shape.
 */
const storedBeforeVerdicts = (options: Database.Options) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(Database.layer(options))
      const old = {
        routine: "r",
        chain: "report/quarterly",
        status: "active",
        variables: {},
        sent: { skillPreamble: true, scenarioPreamble: true },
        completed: [{ task: "gather", evidence: Message.assistant("figures: 3\nmore"), completedAt: 2 }],
        messages: [],
        failures: [],
        updatedAt: 2,
        revision: 1
      }
      yield* Effect.provideContext(
        Effect.gen(function* () {
          yield* Migrations.run({
            location: "test",
            schema: "routines",
            table: SqlRoutineStore.migrationsTable,
            migrations: { "1_routine_chains": SqlRoutineStore.migrations["1_routine_chains"]! }
          })
          const sql = yield* SqlClient.SqlClient
          yield* sql`INSERT INTO ${sql(SqlRoutineStore.chainsTable)} ${sql.insert({
            routine: "r",
            chain: old.chain,
            status: "active",
            state: JSON.stringify(old),
            updated_at: 2,
            revision: 1
          })}`
        }),
        context
      )
      const store = yield* Effect.provideContext(SqlRoutineStore.fromDatabase, context)
      const state = yield* store.load("r", old.chain)
      assert.deepStrictEqual(state?.open, [])
      assert.deepStrictEqual(
        state?.completed.map((entry) => [entry.task, entry.source, entry.summary]),
        [["gather", "answer", "figures: 3\nmore"]]
      )
      // And it goes on from there: the next save follows the migrated row's revision.
      yield* store.save({ ...state!, revision: 2 })
    })
  )

describe("SqlRoutineStore migrates states stored before task verdicts", () => {
  it.effect("on SQLite", () =>
    storedBeforeVerdicts({ kind: "sqlite", filename: path.join(directory, "before-verdicts.db") })
  )
  it.effect("on PostgreSQL", () =>
    Effect.flatMap(
      Effect.promise(() => database.schema("before_verdicts")),
      (url) => storedBeforeVerdicts({ kind: "postgres", url })
    )
  )
})

describe("SqlRoutineStore in a shared SQLite file", () => {
  const both = (filename: string, order: "routines-first" | "sessions-first") =>
    Effect.scoped(
      Effect.gen(function* () {
        const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename }))
        const open = {
          routines: Effect.provideContext(SqlRoutineStore.fromDatabase, context),
          sessions: Effect.provideContext(SqlStore.fromDatabase, context)
        }
        const routines = order === "routines-first" ? yield* open.routines : undefined
        const sessions = yield* open.sessions
        const store = routines ?? (yield* open.routines)
        const { id } = yield* sessions.create({})
        const existing = yield* store.load("r", "a/b")
        yield* store.save({
          routine: "r",
          chain: "a/b",
          status: "active",
          variables: {},
          sent: { skillPreamble: false, scenarioPreamble: false },
          completed: [],
          open: [],
          messages: [],
          failures: [],
          updatedAt: 1,
          revision: (existing?.revision ?? 0) + 1
        })
        return [id, (yield* store.list("r")).length] as const
      })
    )

  for (const order of ["routines-first", "sessions-first"] as const) {
    it.effect(`lives beside the sessions of one noema.db (${order}), and both reopen`, () =>
      Effect.gen(function* () {
        const filename = path.join(directory, `shared-${order}.db`)
        const [id, count] = yield* both(filename, order)
        assert.strictEqual(count, 1)
        const [, again] = yield* both(filename, order)
        assert.strictEqual(again, 1)
        const sessions = yield* Effect.scoped(
          Effect.flatMap(Layer.build(Database.layer({ kind: "sqlite", filename })), (context) =>
            Effect.flatMap(Effect.provideContext(SqlStore.fromDatabase, context), (store) => store.list())
          )
        )
        assert.include(
          sessions.map((session) => session.id),
          id
        )
      })
    )
  }

  it.effect("refuses a SQLite file of another application, untouched", () =>
    Effect.gen(function* () {
      const filename = path.join(directory, "foreign.db")
      const raw = new DatabaseSync(filename)
      raw.exec("CREATE TABLE invoices (id INTEGER)")
      raw.close()
      const result = yield* Effect.result(
        Effect.scoped(
          Effect.flatMap(Layer.build(Database.layer({ kind: "sqlite", filename })), (context) =>
            Effect.provideContext(SqlRoutineStore.fromDatabase, context)
          )
        )
      )
      assert.isTrue(Result.isFailure(result))
      assert.include(Result.isFailure(result) ? String(result.failure.message) : "", "invoices")
      const check = new DatabaseSync(filename, { readOnly: true })
      const tables = check.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").all()
      check.close()
      assert.deepStrictEqual(
        tables.map((row) => (row as { name: string }).name),
        ["invoices"]
      )
    })
  )
})
