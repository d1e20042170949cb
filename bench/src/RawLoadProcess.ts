/**
 * RawLoadProcess: the reference for `LoadProcess.ts` on SQLite: the same stored
 * session read in a fresh process by plain `node:sqlite`, the floor under noema's
 * load. Run by `StoreWorkloads.loads` as
 * `node --expose-gc RawLoadProcess.ts <file> <session id>`, in runs alternating
 * with noema's.
 *
 * The same work as the store's read, without what noema adds (Effect, the
 * `SqlClient`, the session handle, and the check of each message against
 * core's `Message` Schema): open the file, read the session's rows with the
 * store's statement in batches of the store's size (1,000), check each `seq`,
 * `JSON.parse` each message and keep it, then iterate them as `LoadProcess.ts`
 * does. Timed and measured as there. Prints one JSON line:
 * `{ "ms", "heapMb", "messages" }`.
 */
import { DatabaseSync } from "node:sqlite"
import { Message } from "@noema/core"
import { megabytes, now, settledHeap } from "./Harness.ts"

const [filename, sessionId] = process.argv.slice(2)
if (filename === undefined || sessionId === undefined) {
  throw new Error("usage: node --expose-gc RawLoadProcess.ts <file> <session id>")
}

/** The store's batch on SQLite (`messagesPerRead` in @noema/session's dialect). */
const batch = 1000

const heapBefore = settledHeap()
const start = now()
const database = new DatabaseSync(filename)
const count = database.prepare("SELECT message_count FROM sessions WHERE id = ?").get(sessionId)
const expected = Number(count?.message_count)
const read = database.prepare(
  "SELECT seq, message FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?"
)
read.setReturnArrays(true)
const loaded: Array<Message.Message> = []
for (;;) {
  const rows = read.all(sessionId, loaded.length, batch) as unknown as ReadonlyArray<ReadonlyArray<unknown>>
  for (let position = 0; position < rows.length; position++) {
    const row = rows[position] as ReadonlyArray<unknown>
    if (Number(row[0]) !== loaded.length) throw new Error(`message ${loaded.length} is missing`)
    loaded.push(JSON.parse(row[1] as string) as Message.Message)
  }
  if (rows.length < batch) break
}
if (loaded.length !== expected) throw new Error(`${loaded.length} of ${expected} messages read`)
let messages = 0
let characters = 0
for (const message of loaded) {
  messages++
  characters += Message.text(message).length
}
const ms = now() - start
const heapAfter = settledHeap()
// Still reading the messages here keeps them alive through the second measurement.
const held = loaded.length
database.close()
process.stdout.write(
  `${JSON.stringify({ ms, heapMb: megabytes(heapAfter - heapBefore), messages, held, characters })}\n`
)
