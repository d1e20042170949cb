/**
 * LoadProcess: opens one stored session in a fresh process and reads all of it,
 * the way a CLI or a server does when a user resumes a long conversation. Run
 * by `Store.ts` and `StorePostgres.ts` as
 * `node --expose-gc LoadProcess.ts <file | postgres:// URL> <session id>`.
 *
 * What is timed: opening the store on the file (or connecting to the server), loading the session (rows read
 * and each message checked) and iterating its context to the end. Module
 * loading is not in it (start-up is its own figure). Heap growth is the heap
 * after a full collection with the session still held, minus the heap before.
 * Prints one JSON line: `{ "ms", "heapMb", "messages" }`.
 */
import { Message } from "@noema/core"
import { PostgresStore, Session, SessionStore, SqliteStore } from "@noema/session"
import { Postgres } from "@noema/sql"
import { Effect, Exit, Scope } from "effect"
import { megabytes, now, settledHeap } from "./Harness.ts"

const [filename, sessionId] = process.argv.slice(2)
if (filename === undefined || sessionId === undefined) {
  throw new Error("usage: node --expose-gc LoadProcess.ts <file | postgres:// URL> <session id>")
}

const heapBefore = settledHeap()
const start = now()
const scope = Effect.runSync(Scope.make())
const store = await Effect.runPromise(
  Scope.provide(
    Postgres.isUrl(filename) ? PostgresStore.make({ url: filename }) : SqliteStore.make({ filename }),
    scope
  )
)
const session = await Effect.runPromise(
  Session.open(sessionId).pipe(Effect.provideService(SessionStore.SessionStore, store))
)
let messages = 0
let characters = 0
for (const message of session.context()) {
  messages++
  characters += Message.text(message).length
}
const ms = now() - start
const heapAfter = settledHeap()
// Still reading the session here keeps it alive through the second measurement.
const held = session.context().length
await Effect.runPromise(Scope.close(scope, Exit.void))
process.stdout.write(
  `${JSON.stringify({ ms, heapMb: megabytes(heapAfter - heapBefore), messages, held, characters })}\n`
)
