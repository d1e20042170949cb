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
 * - group commit: 8 writers in this one process committing such turns at once,
 *   each to its own session, turns per second over all of them, interleaved with
 *   plain `node:sqlite` doing the same with one transaction per turn: noema
 *   groups the turns that wait for the write lock into one transaction and one
 *   fsync; afterwards every session is checked whole;
 * - loading: a session of 100,000 messages opened and read in a fresh process
 *   (see `LoadProcess.ts`), its time and heap growth, in runs alternating with
 *   plain `node:sqlite` reading and parsing the same rows (`RawLoadProcess.ts`);
 * - concurrency: 8 processes committing turns at once to 8 sessions in one file
 *   (see `CommitProcess.ts`): turns per second over all of them, and then every
 *   session checked for lost or interleaved turns (any is a failed run).
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import type { Message } from "@noema/core"
import { Effect } from "effect"
import { turn } from "./Conversation.ts"
import { check, median, now } from "./Harness.ts"
import type { Availability } from "./Noema.ts"
import * as Workloads from "./StoreWorkloads.ts"

/** The store suites' repetitions (the same for every backend). */
export type StoreOptions = Workloads.Options

type SessionPackage = NonNullable<Availability["session"]>

type StoreService = SessionPackage["SessionStore"]["SessionStore"]["Service"]

const withStore = <A>(session: SessionPackage, filename: string, use: (store: StoreService) => Promise<A>) =>
  Workloads.withScoped(session.SqliteStore.make({ filename }), use)

interface RawStore {
  /** Stores one turn in session `session`: stamped, serialised, committed in one `BEGIN IMMEDIATE` transaction. */
  readonly commit: (session: number, messages: ReadonlyArray<Message.Message>) => void
  readonly storedMessages: (session: number) => number
  readonly close: () => void
}

/**
 * The reference: what a hand-written `node:sqlite` store does per turn, with the
 * same settings as `SqliteStore` (WAL, `synchronous=FULL`, foreign keys) and the
 * same statements (count check inside the transaction, one multi-row insert, the
 * session row updated), without validation, Effect or a session handle. Its file
 * holds noema's schema (`filename` was opened by `SqliteStore` first, which created
 * it), so both write the same tables; nothing of noema's runs while it commits.
 */
const openRaw = (filename: string, sessions: number): RawStore => {
  const db = new DatabaseSync(filename, { timeout: 5_000, enableForeignKeyConstraints: true })
  db.exec("PRAGMA journal_mode = WAL")
  db.exec("PRAGMA synchronous = FULL")
  const sessionIds = Array.from({ length: sessions }, () => crypto.randomUUID())
  const created = Date.now()
  const insertSession = db.prepare(
    "INSERT INTO sessions (id, title, created_at, updated_at, activity, metadata) VALUES (?, 'bench', ?, ?, 1, '{}')"
  )
  for (const id of sessionIds) insertSession.run(id, created, created)
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
  const storedCounts = sessionIds.map(() => 0)
  return {
    commit: (session, messages) => {
      const sessionId = sessionIds[session] as string
      const stored = storedCounts[session] as number
      const now = Date.now()
      const parameters = Workloads.rawParameters(sessionId, stored, messages, now)
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
      storedCounts[session] = stored + messages.length
    },
    storedMessages: (session) => storedCounts[session] as number,
    close: () => db.close()
  }
}

/** noema's store, and the raw reference committing to its sessions in a file of its own. */
interface Stores {
  readonly session: SessionPackage
  readonly store: StoreService
  readonly raw: RawStore
}

/**
 * Runs `use` with noema's store on `filename` and the raw reference on `rawFilename` (with
 * `sessions` sessions; the file is given noema's schema by opening it with `SqliteStore` first),
 * closing both.
 */
const withStores = async <A>(
  session: SessionPackage,
  [filename, rawFilename]: readonly [string, string],
  sessions: number,
  use: (stores: Stores) => Promise<A>
): Promise<A> => {
  await withStore(session, rawFilename, async () => undefined)
  return withStore(session, filename, async (store) => {
    const raw = openRaw(rawFilename, sessions)
    try {
      return await use({ session, store, raw })
    } finally {
      raw.close()
    }
  })
}

const commits = async (
  { session, store, raw }: Stores,
  options: StoreOptions
): Promise<Record<string, number>> => {
  const handle = await Workloads.createSession(session, store)
  let index = 0
  const commitOne = async () => {
    const transaction = handle.begin()
    transaction.extend(turn(index++))
    await Effect.runPromise(handle.commit(transaction))
  }
  let rawIndex = 0
  // Async like noema's, so both loops pay the same await per commit.
  const commitRaw = async () => raw.commit(0, turn(rawIndex++))
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

  const { rates, referenceRates } = await Workloads.alternating(
    options.sustainedRounds,
    options.budgetMs,
    () => Workloads.perSecond(commitOne, options.sustainedCommits),
    () => Workloads.perSecond(commitRaw, options.sustainedCommits)
  )
  const stored = await Effect.runPromise(store.info(handle.id))
  check(stored.messageCount === index * 4, `every commit stored (${stored.messageCount} of ${index * 4})`)
  check(raw.storedMessages(0) === rawIndex * 4, "every raw commit stored")
  process.stderr.write(
    `  store.commit sustained: noema ${median(rates).toFixed(0)}/s, ` +
      `raw node:sqlite ${median(referenceRates).toFixed(0)}/s (this disk's ceiling)\n`
  )
  return {
    "store.commit.sqlite_us": median(latencies),
    "store.commit.sqlite_per_s": median(rates),
    "store.commit.rawsqlite_per_s": median(referenceRates)
  }
}

/** Writers committing at once in this process, each to its own session. */
export const groupWriters = 8

/**
 * 8 writers committing turns at once, each through its own `Session` handle, as a server's
 * requests do, against 8 loops over one `node:sqlite` connection committing the same turns one
 * transaction each; interleaved rounds, turns per second over all writers.
 */
const groupCommits = async (
  { session, store, raw }: Stores,
  options: StoreOptions
): Promise<Record<string, number>> => {
  const handles = await Promise.all(
    Array.from({ length: groupWriters }, () => Workloads.createSession(session, store))
  )
  const turns = handles.map(() => 0)
  const commitOne = async (writer: number) => {
    const handle = handles[writer] as (typeof handles)[number]
    const transaction = handle.begin()
    transaction.extend(turn(turns[writer] as number))
    turns[writer] = (turns[writer] as number) + 1
    await Effect.runPromise(handle.commit(transaction))
  }
  const rawTurns = handles.map(() => 0)
  const commitRaw = async (writer: number) => {
    const index = rawTurns[writer] as number
    rawTurns[writer] = index + 1
    raw.commit(writer, turn(index))
  }
  const perWriter = Math.max(1, Math.floor(options.sustainedCommits / groupWriters))
  const atOnce = async (operation: (writer: number) => Promise<void>, count: number): Promise<number> => {
    const start = now()
    await Promise.all(
      Array.from({ length: groupWriters }, async (_, writer) => {
        for (let i = 0; i < count; i++) await operation(writer)
      })
    )
    return (groupWriters * count) / ((now() - start) / 1000)
  }
  const warmup = Math.max(1, Math.floor(options.warmupCommits / groupWriters))
  await atOnce(commitOne, warmup)
  await atOnce(commitRaw, warmup)
  const { rates, referenceRates } = await Workloads.alternating(
    options.sustainedRounds,
    options.budgetMs,
    () => atOnce(commitOne, perWriter),
    () => atOnce(commitRaw, perWriter)
  )
  for (const [writer, handle] of handles.entries()) {
    const { messages } = await Effect.runPromise(store.load(handle.id))
    const expected = (turns[writer] as number) * 4
    check(messages.length === expected, `writer ${writer}: ${messages.length} of ${expected} messages stored`)
    messages.forEach((message, index) => {
      const wanted = turn(Math.floor(index / 4))[index % 4] as Message.Message
      check(message.content === wanted.content, `writer ${writer}: message ${index} is not in its place`)
    })
    check(raw.storedMessages(writer) === (rawTurns[writer] as number) * 4, "every raw commit stored")
  }
  process.stderr.write(
    `  store.commit.group8: noema ${median(rates).toFixed(0)} turns/s, ` +
      `raw node:sqlite ${median(referenceRates).toFixed(0)} turns/s (one transaction each)\n`
  )
  return {
    "store.commit.group8.sqlite_per_s": median(rates),
    "store.commit.group8.rawsqlite_per_s": median(referenceRates)
  }
}

export const run = async (noema: Availability, options: StoreOptions): Promise<Record<string, number>> => {
  const session = noema.session
  if (session === undefined) return {}
  const directory = mkdtempSync(join(tmpdir(), "noema-bench-"))
  const opened: Workloads.WithStore = (target, use) => withStore(session, target, use)
  const files = (name: string) =>
    [join(directory, `${name}.sqlite`), join(directory, `${name}-raw.sqlite`)] as const
  try {
    return {
      ...(await withStores(session, files("commits"), 1, (stores) => commits(stores, options))),
      ...(await withStores(session, files("group8"), groupWriters, (stores) =>
        groupCommits(stores, options)
      )),
      ...(await Workloads.loads(opened, join(directory, "load100k.sqlite"), options.loadRuns, {
        ms: "store.load100k.sqlite_ms",
        heapMb: "store.load100k.heap_mb",
        raw: { ms: "store.load100k.rawsqlite_ms", heapMb: "store.load100k.rawsqlite_heap_mb" }
      })),
      ...(await Workloads.concurrent(opened, join(directory, "concurrent.sqlite"), options.concurrentTurns, {
        label: "store.concurrent8",
        turnsPerSecond: "store.concurrent8.sqlite_turns_per_s",
        damaged: "store.concurrent8.lost_or_interleaved"
      }))
    }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
