/**
 * Store: sessions on the SQLite store (a file in a temporary directory, WAL,
 * `synchronous=FULL`, so every acknowledged commit reached the disk).
 *
 * - commit latency: one turn (user, assistant with two tool calls, two tool
 *   results) committed through `Session.commit`, each commit timed alone;
 * - sustained commits: thousands of such commits back to back, per second,
 *   interleaved with the same commits made by plain `node:sqlite` (same schema,
 *   same pragmas, same statements, nothing else): the disk's ceiling, so noema's
 *   figure can be read against what this disk allows;
 * - loading: a session of 100,000 messages opened and read in a fresh process
 *   (see `LoadProcess.ts`), its time and heap growth;
 * - concurrency: 8 processes committing turns at once to 8 sessions in one file
 *   (see `CommitProcess.ts`): turns per second over all of them, and then every
 *   session checked for lost or interleaved turns (any is a failed run).
 */
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"
import type { Message } from "@noema/core"
import { Effect, Exit, Scope } from "effect"
import { history, turn } from "./Conversation.ts"
import { check, median, now } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

export interface StoreOptions {
  readonly warmupCommits: number
  /** Commits timed one by one for the latency figure. */
  readonly latencyCommits: number
  /** Commits per sample of the sustained figure. */
  readonly sustainedCommits: number
  readonly sustainedRounds: number
  /** Fresh processes loading the 100k session. */
  readonly loadRuns: number
  /** Turns each of the 8 concurrent processes commits. */
  readonly concurrentTurns: number
  readonly budgetMs: number
}

type SessionPackage = NonNullable<Availability["session"]>

const loadSize = 100_000
const appendBatch = 1_000

const withStore = async <A>(
  session: SessionPackage,
  filename: string,
  use: (store: SessionPackage["SessionStore"]["SessionStore"]["Service"]) => Promise<A>
): Promise<A> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const store = await Effect.runPromise(Scope.provide(session.SqliteStore.make({ filename }), scope))
    return await use(store)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

// @noema/session's schema (its migration 1), copied so the reference depends on nothing of noema's.
const rawSchema = `
  CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL,
    title TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    activity INTEGER NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}'
  ) STRICT;
  CREATE INDEX sessions_by_activity ON sessions (activity);
  CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
  ) STRICT, WITHOUT ROWID;
`

interface RawStore {
  /** Stores one turn: stamped, serialised, committed in one `BEGIN IMMEDIATE` transaction. */
  readonly commit: (messages: ReadonlyArray<Message.Message>) => void
  readonly storedMessages: () => number
  readonly close: () => void
}

/**
 * The reference: what a hand-written `node:sqlite` store does per turn, with the
 * same settings as `SqliteStore` (WAL, `synchronous=FULL`, foreign keys) and the
 * same statements (count check inside the transaction, one multi-row insert, the
 * session row updated), without validation, Effect or a session handle.
 */
const openRaw = (filename: string): RawStore => {
  const db = new DatabaseSync(filename, { timeout: 5_000, enableForeignKeyConstraints: true })
  db.exec("PRAGMA journal_mode = WAL")
  db.exec("PRAGMA synchronous = FULL")
  db.exec(rawSchema)
  const sessionId = crypto.randomUUID()
  const created = Date.now()
  db.prepare(
    "INSERT INTO sessions (id, title, created_at, updated_at, activity, metadata) VALUES (?, 'bench', ?, ?, 1, '{}')"
  ).run(sessionId, created, created)
  const begin = db.prepare("BEGIN IMMEDIATE")
  const commit = db.prepare("COMMIT")
  const rollback = db.prepare("ROLLBACK")
  const selectCount = db.prepare("SELECT message_count FROM sessions WHERE id = ?")
  selectCount.setReturnArrays(true)
  const inserts = new Map<number, ReturnType<DatabaseSync["prepare"]>>()
  const insert = (rows: number) => {
    let statement = inserts.get(rows)
    if (statement === undefined) {
      const values = Array.from({ length: rows }, () => "(?, ?, ?, ?)").join(", ")
      statement = db.prepare(`INSERT INTO messages (session_id, seq, message, created_at) VALUES ${values}`)
      inserts.set(rows, statement)
    }
    return statement
  }
  const update = db.prepare(
    "UPDATE sessions SET message_count = ?, updated_at = ?, activity = (SELECT max(activity) + 1 FROM sessions) WHERE id = ?"
  )
  let stored = 0
  return {
    commit: (messages) => {
      const now = Date.now()
      const parameters: Array<string | number> = []
      for (let index = 0; index < messages.length; index++) {
        const message = messages[index] as Message.Message
        const stamped = {
          ...message,
          id: message.id ?? crypto.randomUUID(),
          createdAt: message.createdAt ?? now
        }
        parameters.push(sessionId, stored + index, JSON.stringify(stamped), stamped.createdAt)
      }
      begin.run()
      try {
        const [count] = selectCount.get(sessionId) as unknown as [number]
        check(count === stored, `the raw store holds ${count} messages, expected ${stored}`)
        insert(messages.length).run(...parameters)
        update.run(stored + messages.length, now, sessionId)
        commit.run()
      } catch (error) {
        if (db.isTransaction) rollback.run()
        throw error
      }
      stored += messages.length
    },
    storedMessages: () => stored,
    close: () => db.close()
  }
}

const commits = async (
  session: SessionPackage,
  filename: string,
  rawFilename: string,
  options: StoreOptions
): Promise<Record<string, number>> =>
  withStore(session, filename, async (store) => {
    const handle = await Effect.runPromise(
      session.Session.create({ title: "bench" }).pipe(
        Effect.provideService(session.SessionStore.SessionStore, store)
      )
    )
    let index = 0
    const commitOne = async () => {
      const transaction = handle.begin()
      transaction.extend(turn(index++))
      await Effect.runPromise(handle.commit(transaction))
    }
    const raw = openRaw(rawFilename)
    let rawIndex = 0
    // Async like noema's, so both loops pay the same await per commit.
    const commitRaw = async () => raw.commit(turn(rawIndex++))
    try {
      for (let i = 0; i < options.warmupCommits; i++) {
        await commitOne()
        await commitRaw()
      }

      const latencies: Array<number> = []
      const started = now()
      for (let i = 0; i < options.latencyCommits; i++) {
        if (i >= 100 && now() - started > options.budgetMs) break
        const start = now()
        await commitOne()
        latencies.push((now() - start) * 1000)
      }

      // Interleaved, alternating who goes first, so the disk's and the machine's moods hit both.
      const sustained = async (operation: () => Promise<void>): Promise<number> => {
        const start = now()
        for (let i = 0; i < options.sustainedCommits; i++) await operation()
        return options.sustainedCommits / ((now() - start) / 1000)
      }
      const rates: Array<number> = []
      const rawRates: Array<number> = []
      for (let round = 0; round < options.sustainedRounds; round++) {
        if (round >= 1 && now() - started > options.budgetMs * 2) break
        if (round % 2 === 0) {
          rates.push(await sustained(commitOne))
          rawRates.push(await sustained(commitRaw))
        } else {
          rawRates.push(await sustained(commitRaw))
          rates.push(await sustained(commitOne))
        }
      }

      const stored = await Effect.runPromise(store.info(handle.id))
      check(stored.messageCount === index * 4, `every commit stored (${stored.messageCount} of ${index * 4})`)
      check(raw.storedMessages() === rawIndex * 4, "every raw commit stored")
      process.stderr.write(
        `  store.commit sustained: noema ${median(rates).toFixed(0)}/s, ` +
          `raw node:sqlite ${median(rawRates).toFixed(0)}/s (this disk's ceiling)\n`
      )
      return {
        "store.commit.sqlite_us": median(latencies),
        "store.commit.sqlite_per_s": median(rates),
        "store.commit.rawsqlite_per_s": median(rawRates)
      }
    } finally {
      raw.close()
    }
  })

/** Writes a session of `loadSize` messages; its id. */
const prepareLarge = (session: SessionPackage, filename: string): Promise<string> =>
  withStore(session, filename, async (store) => {
    const info = await Effect.runPromise(store.create({ title: "100k" }))
    const messages = history(loadSize, true)
    for (let offset = 0; offset < messages.length; offset += appendBatch) {
      await Effect.runPromise(store.append(info.id, offset, messages.slice(offset, offset + appendBatch)))
    }
    return info.id
  })

const loads = async (
  session: SessionPackage,
  filename: string,
  options: StoreOptions
): Promise<Record<string, number>> => {
  const id = await prepareLarge(session, filename)
  const script = fileURLToPath(new URL("./LoadProcess.ts", import.meta.url))
  const times: Array<number> = []
  const heaps: Array<number> = []
  for (let run = 0; run < options.loadRuns; run++) {
    const child = spawnSync(process.execPath, ["--expose-gc", script, filename, id], {
      encoding: "utf8",
      timeout: 120_000
    })
    check(child.status === 0, `the load process exited with ${child.status}: ${child.stderr}`)
    const result = JSON.parse(child.stdout.trim().split("\n").at(-1) ?? "{}") as {
      ms: number
      heapMb: number
      messages: number
    }
    check(result.messages === loadSize, `the load read ${result.messages} of ${loadSize} messages`)
    times.push(result.ms)
    heaps.push(result.heapMb)
  }
  return { "store.load100k.sqlite_ms": median(times), "store.load100k.heap_mb": median(heaps) }
}

const concurrentProcesses = 8

const concurrent = async (
  session: SessionPackage,
  filename: string,
  options: StoreOptions
): Promise<Record<string, number>> => {
  // The file is created first, so the processes race on commits, not on creating it.
  await withStore(session, filename, async () => undefined)
  const script = fileURLToPath(new URL("./CommitProcess.ts", import.meta.url))
  const ids = Array.from({ length: concurrentProcesses }, (_, index) => `writer-${index}`)
  const results = ids.map(
    (id) =>
      new Promise<{ turns: number; ms: number }>((resolve, reject) => {
        const child = spawn(process.execPath, [script, filename, id, String(options.concurrentTurns)], {
          stdio: ["ignore", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
          stdout += chunk
        })
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
          stderr += chunk
        })
        child.on("close", (code) =>
          code === 0
            ? resolve(JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}"))
            : reject(new Error(`commit process ${id} exited with ${code}: ${stderr}`))
        )
      })
  )
  // Every process waits for this file once its session exists, so they all start together.
  const ready = async () => {
    for (;;) {
      const created = await withStore(session, filename, (store) => Effect.runPromise(store.list()))
      if (created.length === concurrentProcesses) return
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  await ready()
  writeFileSync(`${filename}.go`, "")
  const finished = await Promise.all(results)
  const wallMs = Math.max(...finished.map((result) => result.ms))
  const turns = finished.reduce((sum, result) => sum + result.turns, 0)

  // Every turn of every session is whole and in its place: none lost, none interleaved.
  let damaged = 0
  await withStore(session, filename, async (store) => {
    for (const id of ids) {
      const { messages } = await Effect.runPromise(store.load(id))
      if (messages.length !== options.concurrentTurns * 4) damaged++
      messages.forEach((message, index) => {
        const expected = turn(Math.floor(index / 4))[index % 4] as Message.Message
        const same =
          message.role === expected.role &&
          message.content === expected.content &&
          JSON.stringify(message.role === "assistant" ? message.toolCalls : undefined) ===
            JSON.stringify(expected.role === "assistant" ? expected.toolCalls : undefined) &&
          (message.role !== "tool" ||
            (expected.role === "tool" && message.toolCallId === expected.toolCallId))
        if (!same) damaged++
      })
    }
  })
  check(
    damaged === 0,
    `${damaged} lost or interleaved messages with ${concurrentProcesses} concurrent writers`
  )
  process.stderr.write(
    `  store.concurrent8: ${turns} turns from ${concurrentProcesses} processes in ${wallMs.toFixed(0)} ms, none lost or interleaved\n`
  )
  return {
    "store.concurrent8.sqlite_turns_per_s": turns / (wallMs / 1000),
    "store.concurrent8.lost_or_interleaved": damaged
  }
}

export const run = async (noema: Availability, options: StoreOptions): Promise<Record<string, number>> => {
  const session = noema.session
  if (session === undefined) return {}
  const directory = mkdtempSync(join(tmpdir(), "noema-bench-"))
  try {
    return {
      ...(await commits(session, join(directory, "commits.sqlite"), join(directory, "raw.sqlite"), options)),
      ...(await loads(session, join(directory, "load100k.sqlite"), options)),
      ...(await concurrent(session, join(directory, "concurrent.sqlite"), options))
    }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
