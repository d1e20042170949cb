/**
 * CommitProcess: one of several processes committing turns to one SQLite file
 * at once, each to its own session, through `Session.commit`. Run by
 * `Store.ts` as `node CommitProcess.ts <file> <session id> <turns>`. Waits for
 * the file `<file>.go` before starting, so all processes start together.
 * Prints one JSON line: `{ "turns", "ms" }`.
 */
import { existsSync } from "node:fs"
import { Session, SessionStore, SqliteStore } from "@noema/session"
import { Effect, Exit, Scope } from "effect"
import { turn } from "./Conversation.ts"
import { now } from "./Harness.ts"

const [filename, sessionId, turnsText] = process.argv.slice(2)
if (filename === undefined || sessionId === undefined || turnsText === undefined) {
  throw new Error("usage: node CommitProcess.ts <file> <session id> <turns>")
}
const turns = Number(turnsText)
const scope = Effect.runSync(Scope.make())
const store = await Effect.runPromise(
  Scope.provide(SqliteStore.make({ filename, busyTimeout: "60 seconds" }), scope)
)
const session = await Effect.runPromise(
  Session.create({ id: sessionId }).pipe(Effect.provideService(SessionStore.SessionStore, store))
)
while (!existsSync(`${filename}.go`)) await new Promise((resolve) => setTimeout(resolve, 1))
const start = now()
for (let index = 0; index < turns; index++) {
  const transaction = session.begin()
  transaction.extend(turn(index))
  await Effect.runPromise(session.commit(transaction))
}
const ms = now() - start
await Effect.runPromise(Scope.close(scope, Exit.void))
process.stdout.write(`${JSON.stringify({ turns, ms })}\n`)
