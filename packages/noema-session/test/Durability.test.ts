import { type ChildProcess, spawn } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"
import { Message } from "@noema/core"
import { TestDatabase } from "@noema/testing-postgres"
import { Cause, Effect, Exit, type Scope } from "effect"
import { afterAll, assert, describe, it } from "vitest"
import type { SessionStore } from "../src/index.js"
import * as PostgresStore from "../src/PostgresStore.js"
import { StoreError } from "../src/SessionStore.js"
import * as SqliteStore from "../src/SqliteStore.js"

const fixture = fileURLToPath(new URL("./fixtures/commit-loop.mjs", import.meta.url))
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-durability-"))
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }))

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/** A small seeded generator, so a failing run can be repeated with NOEMA_DURABILITY_SEED. */
const generator = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const delay = (millis: number) => new Promise<void>((resolve) => setTimeout(resolve, millis))

interface Run {
  readonly child: ChildProcess
  /** Complete lines printed so far. */
  readonly lines: Array<string>
  readonly stderr: Array<string>
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** `target`: a SQLite file or a PostgreSQL URL, as the commit loop takes it; `writers` commit at once. */
const start = (target: string, run: number, writers: number): Run => {
  const child = spawn(process.execPath, [fixture, target, String(run), String(writers)], {
    stdio: ["ignore", "pipe", "pipe"]
  })
  const lines: Array<string> = []
  const stderr: Array<string> = []
  let partial = ""
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n")
    partial = parts.pop() ?? ""
    lines.push(...parts)
  })
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => void stderr.push(chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    // "close", not "exit": it fires once stdout is drained, so no acknowledgement is missed.
    child.on("close", (code, signal) => resolve({ code, signal }))
  )
  return { child, lines, stderr, exited }
}

/**
 * Resolves once `run` acknowledged a commit in `sessions` of its own sessions (each writer's
 * first: every writer of the run has committed), or rejects if it exits or stays silent for 3,000 rounds: bounded by rounds,
 * not by the clock, so a busy machine only makes it slower.
 */
const firstAcknowledgement = async (run: Run, sessions = 1): Promise<void> => {
  for (let round = 0; round < 3000; round++) {
    // Each writer's first commit is to its own `run-...` session.
    const own = run.lines.map((line) => line.split(" ")[1]).filter((id) => id?.startsWith("run-"))
    if (new Set(own).size >= sessions) return
    if (run.child.exitCode !== null) break
    await delay(5)
  }
  throw new Error(
    `the commit loop never acknowledged commits in ${sessions} sessions: ${run.stderr.join("")}`
  )
}

type MakeStore = (target: string) => Effect.Effect<SessionStore.Service, StoreError, Scope.Scope>

const sqlite: MakeStore = (filename) => SqliteStore.make({ filename })
const postgres: MakeStore = (url) => PostgresStore.make({ url })

const withStore = <A>(
  filename: string,
  body: (store: SessionStore.Service) => Effect.Effect<A, unknown>,
  make: MakeStore = sqlite
): Promise<A> => Effect.runPromise(Effect.scoped(Effect.flatMap(make(filename), body)))

const expectedContent = (id: string, index: number) =>
  `${id} turn ${Math.floor(index / 4)} message ${index % 4}`

// ---------------------------------------------------------------------------
// Killing a committing process
// ---------------------------------------------------------------------------

/**
 * Kills a process committing to `target` at random moments, again and again, and checks after
 * each kill that every acknowledged turn is stored, whole, and that no session holds part of one.
 * With several `writers`, the process commits from that many fibers at once (SQLite groups them).
 */
const killedWhileCommitting = async (target: string, make: MakeStore, writers = 1): Promise<void> => {
  const seed = Number(process.env.NOEMA_DURABILITY_SEED ?? Math.floor(Math.random() * 2 ** 31))
  const random = generator(seed)
  const context = `(seed ${seed}; rerun with NOEMA_DURABILITY_SEED=${seed})`
  const filename = target
  const acknowledged = new Map<string, number>()
  const kills = 20
  let waitedFor = 0

  for (let run = 0; run < kills; run++) {
    const current = start(filename, run, writers)
    // Half the kills land at any moment from start-up (opening, migrating), half mid-loop: those
    // once every writer of the run has had a commit acknowledged (the shared session aside).
    if (run % 2 === 0 && run > 0) await delay(random() * 250)
    else {
      await firstAcknowledgement(current, writers)
      waitedFor += writers
      await delay(random() * 60)
    }
    current.child.kill("SIGKILL")
    const exit = await current.exited
    assert.equal(exit.signal, "SIGKILL", `run ${run} ended by itself: ${current.stderr.join("")} ${context}`)

    for (const line of current.lines) {
      const [word, id, turn] = line.split(" ")
      assert.equal(word, "ack", `unexpected output ${JSON.stringify(line)} ${context}`)
      acknowledged.set(id as string, Math.max(acknowledged.get(id as string) ?? -1, Number(turn)))
    }

    const sessions = await withStore(
      filename,
      (store) => Effect.flatMap(store.list(), (list) => Effect.forEach(list, (info) => store.load(info.id))),
      make
    )
    for (const { info, messages } of sessions) {
      assert.equal(
        messages.length % 4,
        0,
        `session ${info.id} holds part of a turn after run ${run} ${context}`
      )
      assert.equal(info.messageCount, messages.length)
      messages.forEach((message, index) => {
        assert.equal(message.content, expectedContent(info.id, index), `${info.id} #${index} ${context}`)
      })
    }
    const stored = new Map(sessions.map(({ info }) => [info.id, info.messageCount / 4]))
    for (const [id, lastTurn] of acknowledged) {
      assert.ok(
        (stored.get(id) ?? 0) > lastTurn,
        `session ${id}: turn ${lastTurn} was acknowledged but only ${stored.get(id) ?? 0} turns are stored ${context}`
      )
    }
  }
  const total = Array.from(acknowledged.values()).reduce((sum, turn) => sum + turn + 1, 0)
  assert.ok(total >= waitedFor, `only ${total} commits were acknowledged in ${kills} runs ${context}`)
  assert.ok((acknowledged.get("shared") ?? -1) >= 0, "runs continued the shared session")
  if (writers > 1) {
    const runSessions = (run: number) =>
      Array.from(acknowledged.keys()).filter((id) => id.startsWith(`run-${run}-`)).length
    assert.ok(
      Array.from({ length: kills }, (_, run) => runSessions(run)).some((count) => count === writers),
      `no run had its ${writers} writers all acknowledged ${context}`
    )
  }
}

describe("SqliteStore durability", () => {
  it(
    "acknowledged commits survive SIGKILL, and no session ever holds part of a turn",
    () => killedWhileCommitting(path.join(directory, "killed.db"), sqlite),
    120_000
  )

  it(
    "with 8 writers committing at once in the process (grouped commits), acknowledged commits survive SIGKILL, and no turn is split or interleaved",
    () => killedWhileCommitting(path.join(directory, "killed-group.db"), sqlite, 8),
    180_000
  )
})

describe("PostgresStore durability", () => {
  // The shared test server runs with fsync=off and synchronous_commit=off: it would lose commits
  // if the server itself crashed, but here only the client process is killed and the server lives
  // on. What is checked is the server's side of the contract: a commit it acknowledged is kept,
  // and a transaction cut off by the killed connection is rolled back whole. The writer asks for
  // synchronous_commit=on for its own commits, as a durable server does by default.
  it("acknowledged commits survive SIGKILL of the writer, and no session ever holds part of a turn", async () => {
    const database = await TestDatabase.make({ prefix: "noema_durability" })
    try {
      const url = new URL(await database.schema("killed"))
      url.searchParams.set("options", `${url.searchParams.get("options")} -c synchronous_commit=on`)
      await killedWhileCommitting(url.toString(), postgres)
    } finally {
      await database.drop()
    }
  }, 120_000)
})

// ---------------------------------------------------------------------------
// Files that are not (or no longer) noema databases
// ---------------------------------------------------------------------------

const digest = (file: string) => createHash("sha256").update(fs.readFileSync(file)).digest("hex")

/** Opens `file` as a store, expecting a StoreError; returns it after checking the file is unchanged. */
const refuse = async (file: string): Promise<StoreError> => {
  const before = digest(file)
  const exit = await Effect.runPromiseExit(
    Effect.scoped(Effect.flatMap(SqliteStore.make({ filename: file }), (store) => store.list()))
  )
  assert.ok(Exit.isFailure(exit), `${file} was accepted`)
  const error = Cause.squash(exit.cause)
  assert.ok(error instanceof StoreError, `expected a StoreError, got ${String(error)}`)
  assert.ok(error.message.includes(file), `the message names the file: ${error.message}`)
  assert.ok(!error.message.includes("\n"), `the message is one line: ${error.message}`)
  assert.ok(!/\bat .+:\d+:\d+/.test(error.message), `no stack trace: ${error.message}`)
  assert.equal(digest(file), before, `${file} was modified`)
  return error
}

/** A noema database with a few sessions, closed cleanly. */
const noemaDatabase = async (name: string): Promise<string> => {
  const file = path.join(directory, name)
  await withStore(file, (store) =>
    Effect.gen(function* () {
      for (let session = 0; session < 3; session++) {
        const { id } = yield* store.create()
        for (let turn = 0; turn < 40; turn++) {
          yield* store.append(id, turn * 2, [
            Message.user(`question ${turn} `.repeat(40)),
            Message.assistant(`answer ${turn} `.repeat(40))
          ])
        }
      }
    })
  )
  return file
}

describe("SqliteStore refuses files it must not touch", () => {
  it("random bytes", async () => {
    const file = path.join(directory, "random.db")
    fs.writeFileSync(file, crypto.getRandomValues(new Uint8Array(16_384)))
    assert.equal((await refuse(file)).reason._tag, "Corrupt")
  })

  it("a text file", async () => {
    const file = path.join(directory, "notes.txt")
    fs.writeFileSync(file, "Shopping list:\n- bread\n- coffee\n".repeat(50))
    assert.equal((await refuse(file)).reason._tag, "Corrupt")
  })

  it("a truncated noema database", async () => {
    const source = await noemaDatabase("whole.db")
    const bytes = fs.readFileSync(source)
    assert.ok(bytes.length > 8 * 4096, "the database spans many pages")
    for (const [name, length] of [
      ["truncated-mid-page.db", Math.floor(bytes.length / 2) + 123],
      ["truncated-at-page.db", 4 * 4096]
    ] as const) {
      const file = path.join(directory, name)
      fs.writeFileSync(file, bytes.subarray(0, length))
      assert.equal((await refuse(file)).reason._tag, "Corrupt")
    }
  })

  it("another application's SQLite database", async () => {
    const file = path.join(directory, "other-app.db")
    const other = new DatabaseSync(file)
    other.exec(
      "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ada')"
    )
    other.close()
    const error = await refuse(file)
    assert.equal(error.reason._tag, "Foreign")
    assert.ok(error.message.includes("users"), error.message)

    const tagged = path.join(directory, "other-app-id.db")
    const withId = new DatabaseSync(tagged)
    withId.exec("PRAGMA application_id = 1234")
    withId.close()
    assert.equal((await refuse(tagged)).reason._tag, "Foreign")
  })

  it("a noema database written by a newer schema", async () => {
    const file = await noemaDatabase("future.db")
    const database = new DatabaseSync(file)
    database.exec("PRAGMA user_version = 99")
    database.close()
    const error = await refuse(file)
    assert.equal(error.reason._tag, "SchemaTooNew")
    assert.ok(error.message.includes("99"), error.message)
  })
})
