/**
 * TestDatabase: a fresh, empty PostgreSQL database for one test suite.
 *
 * The server is started once per test run by `globalSetup` (see
 * `globalSetup.ts`; the root vitest.config.ts lists it) or given by
 * `NOEMA_TEST_PG_URL`. Each suite then creates its own database with a random
 * name, so suites running in parallel workers never see each other's rows,
 * and drops it when done. Within a database, `schema()` gives a fresh, empty
 * schema in well under a millisecond (a database takes ~80 ms), for suites
 * that need an empty store per case.
 */
import pg from "pg"

/** The variable naming a server to use instead of starting one. */
export const environmentVariable = "NOEMA_TEST_PG_URL"

/** The key under which `globalSetup` provides the server's URL to the test workers. */
export const providedKey = "noemaTestPostgresUrl"

declare module "vitest" {
  export interface ProvidedContext {
    noemaTestPostgresUrl: string
  }
}

export interface TestDatabase {
  /** A URL for the new database, with the server's user and password. */
  readonly url: string
  readonly name: string
  /**
   * Creates a fresh, empty schema in the database; resolves with a URL whose connections
   * have `search_path` set to it (through the URL's `options` parameter), so unqualified
   * tables are created and found there.
   */
  readonly schema: (prefix?: string) => Promise<string>
  /** Drops the database (closing any connection left open to it). Safe to call twice. */
  readonly drop: () => Promise<void>
  readonly [Symbol.asyncDispose]: () => Promise<void>
}

/** The server's URL: `NOEMA_TEST_PG_URL`, else the one `globalSetup` provided. */
export const serverUrl = async (): Promise<string> => {
  const fromEnvironment = process.env[environmentVariable]
  if (fromEnvironment !== undefined && fromEnvironment.trim() !== "") return fromEnvironment.trim()
  const { inject } = await import("vitest")
  const provided = inject(providedKey)
  if (provided === undefined) {
    throw new Error(
      `no PostgreSQL server for tests: set ${environmentVariable}, or list ` +
        `@noema/testing-postgres's globalSetup in vitest.config.ts`
    )
  }
  return provided
}

/** `url` with another database name. */
export const withDatabase = (url: string, database: string): string => {
  const parsed = new URL(url)
  parsed.pathname = `/${encodeURIComponent(database)}`
  return parsed.toString()
}

/** `url` whose connections use `schema` as their `search_path` (the `options` startup parameter). */
export const withSearchPath = (url: string, schema: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.set("options", `-c search_path=${schema}`)
  return parsed.toString()
}

const identifier = (prefix: string): string =>
  `${prefix.toLowerCase().replace(/[^a-z0-9_]/g, "_")}_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`

const withAdmin = async <A>(url: string, use: (client: pg.Client) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await use(client)
  } finally {
    await client.end()
  }
}

/** Creates a fresh database on the test server. */
export const make = async (options: { readonly prefix?: string } = {}): Promise<TestDatabase> => {
  const server = await serverUrl()
  const name = identifier(options.prefix ?? "noema_test")
  await withAdmin(server, (client) => client.query(`CREATE DATABASE "${name}"`))
  const url = withDatabase(server, name)
  // One connection to the new database, opened on the first `schema()` and closed by `drop`.
  let schemas: Promise<pg.Client> | undefined
  const schema = async (prefix = "noema_schema") => {
    schemas ??= (async () => {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      return client
    })()
    const created = identifier(prefix)
    await (await schemas).query(`CREATE SCHEMA "${created}"`)
    return withSearchPath(url, created)
  }
  let dropped: Promise<void> | undefined
  const drop = () => {
    dropped ??= (async () => {
      if (schemas !== undefined) await (await schemas).end()
      await withAdmin(server, async (client) => {
        await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)
      })
    })()
    return dropped
  }
  return { url, name, schema, drop, [Symbol.asyncDispose]: drop }
}
