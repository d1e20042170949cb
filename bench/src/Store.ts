/**
 * Store: sessions on the SQLite store (a file in a temporary directory, WAL,
 * `synchronous=FULL`, so every acknowledged commit reached the disk).
 *
 * - commit latency: one turn (user, assistant with two tool calls, two tool
 *   results) committed through `Session.commit`, each commit timed alone;
 * - sustained commits: thousands of such commits back to back, per second;
 * - loading: a session of 100,000 messages opened and read in a fresh process
 *   (see `LoadProcess.ts`), its time and heap growth.
 */
import { spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
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

const commits = async (
  session: SessionPackage,
  filename: string,
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
    for (let i = 0; i < options.warmupCommits; i++) await commitOne()

    const latencies: Array<number> = []
    const started = now()
    for (let i = 0; i < options.latencyCommits; i++) {
      if (i >= 100 && now() - started > options.budgetMs) break
      const start = now()
      await commitOne()
      latencies.push((now() - start) * 1000)
    }

    const rates: Array<number> = []
    for (let round = 0; round < options.sustainedRounds; round++) {
      if (round >= 1 && now() - started > options.budgetMs * 2) break
      const start = now()
      for (let i = 0; i < options.sustainedCommits; i++) await commitOne()
      rates.push(options.sustainedCommits / ((now() - start) / 1000))
    }

    const stored = await Effect.runPromise(store.info(handle.id))
    check(stored.messageCount === index * 4, `every commit stored (${stored.messageCount} of ${index * 4})`)
    return { "store.commit.sqlite_us": median(latencies), "store.commit.sqlite_per_s": median(rates) }
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

export const run = async (noema: Availability, options: StoreOptions): Promise<Record<string, number>> => {
  const session = noema.session
  if (session === undefined) return {}
  const directory = mkdtempSync(join(tmpdir(), "noema-bench-"))
  try {
    return {
      ...(await commits(session, join(directory, "commits.sqlite"), options)),
      ...(await loads(session, join(directory, "load100k.sqlite"), options))
    }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
