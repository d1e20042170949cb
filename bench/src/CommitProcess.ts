/**
 * CommitProcess: one of several processes committing turns to one database at
 * once (a SQLite file, or a PostgreSQL URL), each to its own session, through
 * `Session.commit`. Run by `Store.ts` and `StorePostgres.ts` as
 * `node CommitProcess.ts <file | postgres:// URL> <session id> <turns> [go file]`.
 * Waits for the go file (default `<file>.go`) before starting, so all
 * processes start together. Prints one JSON line: `{ "turns", "ms" }`.
 */
import { existsSync } from "node:fs"
import { PostgresStore, Session, SessionStore, SqliteStore } from "@noema/session"
import { Postgres } from "@noema/sql"
import { Effect, Exit, Scope } from "effect"
import { turn } from "./Conversation.ts"
import { now } from "./Harness.ts"

const [filename, sessionId, turnsText, goArgument] = process.argv.slice(2)
if (filename === undefined || sessionId === undefined || turnsText === undefined) {
  throw new Error("usage: node CommitProcess.ts <file | postgres:// URL> <session id> <turns> [go file]")
}
const goFile = goArgument ?? `${filename}.go`
const turns = Number(turnsText)
const scope = Effect.runSync(Scope.make())
const store = await Effect.runPromise(
  Scope.provide(
    Postgres.isUrl(filename)
      ? PostgresStore.make({ url: filename, maxConnections: 1 })
      : SqliteStore.make({ filename, busyTimeout: "60 seconds" }),
    scope
  )
)
const session = await Effect.runPromise(
  Session.create({ id: sessionId }).pipe(Effect.provideService(SessionStore.SessionStore, store))
)
while (!existsSync(goFile)) await new Promise((resolve) => setTimeout(resolve, 1))
const start = now()
for (let index = 0; index < turns; index++) {
  const transaction = session.begin()
  transaction.extend(turn(index))
  await Effect.runPromise(session.commit(transaction))
}
const ms = now() - start
await Effect.runPromise(Scope.close(scope, Exit.void))
process.stdout.write(`${JSON.stringify({ turns, ms })}\n`)
