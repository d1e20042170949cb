/**
 * StoreChanges: when the live feed reads the runs store again, from this
 * process or any other.
 *
 * PostgreSQL says so itself: the runs store NOTIFYs `SqlRunsStore.changesChannel`
 * with every append (delivered when it commits), and the server LISTENs, so a
 * change made anywhere shows at once and nothing is read while nothing
 * changes. If the listening connection is lost, it is taken again (a second
 * later) and the feed reads once on each new start, so nothing appended
 * meanwhile is missed. A SQLite file has no such thing: another process's
 * writes to it notify nobody. So it is polled, but cheaply: every `pollMs` one
 * query reads `PRAGMA data_version` (which moves when another connection
 * commits) and `total_changes()` (this connection's own writes, which
 * data_version does not count), and the feed reads the store only when either
 * moved. A store with no database (memory) is polled.
 */

import type * as PgClient from "@effect/sql-pg/PgClient"
import { SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { Effect, Option, Schedule, Stream } from "effect"
import { SqlClient } from "effect/sql"

/** An element each time the store may have new events. */
export type StoreChanges = Stream.Stream<void>

/** Every `pollMs`. */
export const polling = (pollMs: number): StoreChanges => Stream.tick(pollMs)

export interface Options {
  /** How often SQLite's versions are read. Default 250 ms. */
  readonly pollMs?: number
  /** Told when PostgreSQL's LISTEN fails (it is taken again). */
  readonly onListenFailure?: (detail: string) => void
}

/** Each notification on `channel`, and one on each (re)start of the listening. */
const notified = (
  pg: PgClient.PgClient,
  channel: string,
  onFailure: (detail: string) => void
): StoreChanges =>
  Stream.unwrap(
    Effect.map(pg.listen(channel), (queue) =>
      Stream.concat(Stream.succeed(undefined), Stream.as(Stream.fromQueue(queue), undefined))
    )
  ).pipe(
    Stream.tapError((error) => Effect.sync(() => onFailure(`cannot listen for changes: ${error.message}`))),
    Stream.retry(Schedule.spaced("1 second")),
    Stream.orDie
  )

/** The SQLite file's versions, as one text: it moves when anyone commits. */
const versionOf = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<{ readonly version: number; readonly own: number }>`SELECT
      (SELECT data_version FROM pragma_data_version) AS version, total_changes() AS own`,
    (rows) => `${rows[0]?.version}/${rows[0]?.own}`
  )

/** Every `pollMs`, when the file's versions moved (or could not be read: the store's read says why). */
const versioned = (sql: SqlClient.SqlClient, pollMs: number): StoreChanges =>
  Stream.suspend(() => {
    let last: string | undefined
    return polling(pollMs).pipe(
      Stream.mapEffect(() => Effect.option(versionOf(sql))),
      Stream.filter((version) => {
        if (Option.isNone(version)) return true
        const moved = version.value !== last
        last = version.value
        return moved
      }),
      Stream.as(undefined)
    )
  })

/** The changes of the database in context, the runs store's (see the module's comment). */
export const fromDatabase = (
  options: Options = {}
): Effect.Effect<StoreChanges, never, SqlClient.SqlClient> =>
  Effect.map(SqlClient.SqlClient, (sql) =>
    Database.dialectOf(sql) === "pg"
      ? notified(sql as PgClient.PgClient, SqlRunsStore.changesChannel, options.onListenFailure ?? (() => {}))
      : versioned(sql, options.pollMs ?? 250)
  )
