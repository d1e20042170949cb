/**
 * Postgres: a connection to a PostgreSQL server as effect's `SqlClient`.
 *
 * The SQL stores run on `effect/sql`, so the same store code serves SQLite and
 * PostgreSQL; this module gives them the PostgreSQL side from a
 * `postgres://` / `postgresql://` URL, through `@effect/sql-pg`. The password
 * never leaves the `Redacted` it arrives in: `redactUrl` is the form of a URL
 * for messages to people, and failures name the server by it, so an error, a
 * status line or a log never shows the password.
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import { Printable } from "@noema/core"
import { Effect, Layer, Redacted } from "effect"
import type * as SqlClient from "effect/sql/SqlClient"
import { Connection, type DatabaseError, fromSqlError, isMappable, make } from "./DatabaseError.js"

export interface Options {
  /** `postgres://user:password@host:port/database?sslmode=...`; a plain string is wrapped in `Redacted`. */
  readonly url: Redacted.Redacted<string> | string
  /** Connections in the pool (default 10). */
  readonly maxConnections?: number
  /** Shown in `pg_stat_activity` (default "noema"). */
  readonly applicationName?: string
}

/** Whether `text` is a PostgreSQL connection URL (rather than, say, a SQLite file path). */
export const isUrl = (text: string): boolean => /^postgres(?:ql)?:\/\//i.test(text.trim())

/**
 * `url` as it may be shown to people: without its password (in the user part
 * or a `password=` parameter). The one definition is core's `Printable.redactUrl`.
 */
export const redactUrl = (url: string): string => Printable.redactUrl(url.trim())

const secretOf = (url: Options["url"]): Redacted.Redacted<string> =>
  typeof url === "string" ? Redacted.make(url.trim()) : url

const passwordOf = (url: string): string | undefined => {
  try {
    const parsed = new URL(url)
    return parsed.password === "" ? undefined : decodeURIComponent(parsed.password)
  } catch {
    return undefined
  }
}

/** `text` with the password cut out, and the URL shown without it, should a driver ever repeat them. */
const hidePassword =
  (url: string) =>
  (text: string): string => {
    const password = passwordOf(url)
    const hidden = password === undefined ? text : text.replaceAll(password, "***")
    return hidden.replaceAll(url, redactUrl(url))
  }

/**
 * A failure to reach or use the server as a `DatabaseError` naming it without its
 * password: mapped by `DatabaseError.fromSqlError` (a wrong password or an
 * unreachable server is `Connection`), anything else the driver raised is `Connection` too.
 */
export const databaseError = (url: Redacted.Redacted<string>, error: unknown): DatabaseError => {
  const value = Redacted.value(url)
  const location = redactUrl(value)
  const redact = hidePassword(value)
  if (isMappable(error)) return fromSqlError(location, error, redact)
  return make(
    new Connection({ location, detail: redact(error instanceof Error ? error.message : String(error)) })
  )
}

/**
 * `PgClient` and `SqlClient` for the server at `options.url`: a pool of up to
 * `maxConnections` connections, opened lazily and closed with the layer. The
 * layer checks that the server answers (`SELECT 1`) before it is built, so a
 * wrong URL, password or database fails here, as one `DatabaseError`, rather than
 * at the first query.
 */
export const layer = (
  options: Options
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, DatabaseError> => {
  const url = secretOf(options.url)
  return Layer.unwrap(
    // Loaded on demand, so programs that only use SQLite never load the PostgreSQL driver.
    Effect.map(
      Effect.promise(() => import("@effect/sql-pg/PgClient")),
      (Pg) =>
        Pg.layerFrom(
          Effect.gen(function* () {
            const client = yield* Pg.make({
              url,
              applicationName: options.applicationName ?? "noema",
              ...(options.maxConnections !== undefined && { maxConnections: options.maxConnections })
            })
            yield* client`SELECT 1`
            return client
          }).pipe(Effect.mapError((error) => databaseError(url, error)))
        )
    )
  )
}
