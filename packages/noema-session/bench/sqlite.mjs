// Measures the SQLite store's hot paths against its targets:
//   commits of a 4-message turn per second (durable: WAL + synchronous=FULL), target >= 5,000/s
//   loading a 100,000-message session, JSON decoding and validation included, target <= 300 ms
// Run after `npx tsc -b packages/noema-session`: node packages/noema-session/bench/sqlite.mjs
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Message } from "@noema/core"
import { Effect } from "effect"
import { Session, SessionStore, SqliteStore } from "../dist/index.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-"))
const filename = path.join(directory, "bench.db")
const text = (n) => `A message of ordinary length, like most of a chat (number ${n}). `.repeat(2)

const turn = (n) => [
  Message.user(text(n)),
  Message.assistant("", { toolCalls: [{ id: `call_${n}`, name: "lookup", arguments: `{"n":${n}}` }] }),
  Message.toolResult({ toolCallId: `call_${n}`, name: "lookup", content: text(n) }),
  Message.assistant(text(n))
]

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]

const program = Effect.gen(function* () {
  const store = yield* SqliteStore.make({ filename })

  // Commits straight on the store, then through a Session (stamping ids and times).
  const commits = 5_000
  const { id } = yield* store.create()
  let started = performance.now()
  for (let i = 0; i < commits; i++) yield* store.append(id, i * 4, turn(i))
  const storeRate = commits / ((performance.now() - started) / 1000)

  const session = yield* Effect.provideService(Session.create(), SessionStore.SessionStore, store)
  started = performance.now()
  for (let i = 0; i < commits; i++) {
    const transaction = session.begin()
    transaction.extend(turn(i))
    yield* session.commit(transaction)
  }
  const sessionRate = commits / ((performance.now() - started) / 1000)

  // A 100,000-message session, written in large batches to save time.
  const big = yield* store.create()
  for (let batch = 0; batch < 100; batch++) {
    const messages = []
    for (let i = 0; i < 250; i++) messages.push(...turn(batch * 250 + i))
    yield* store.append(big.id, batch * 1000, messages)
  }
  const loads = []
  let loaded = 0
  for (let run = 0; run < 7; run++) {
    started = performance.now()
    loaded = (yield* store.load(big.id)).messages.length
    loads.push(performance.now() - started)
  }
  const stored = yield* store.load(big.id)
  started = performance.now()
  for (const message of stored.messages) Message.decodeSync(message)
  const schemaDecode = performance.now() - started

  return { storeRate, sessionRate, loads, loaded, schemaDecode }
})

const result = await Effect.runPromise(Effect.scoped(program))
fs.rmSync(directory, { recursive: true, force: true })
console.log(`commits of a 4-message turn, store.append:   ${result.storeRate.toFixed(0)}/s`)
console.log(`commits of a 4-message turn, Session.commit: ${result.sessionRate.toFixed(0)}/s`)
console.log(
  `load of ${result.loaded} messages: median ${median(result.loads).toFixed(0)} ms, ` +
    `best ${Math.min(...result.loads).toFixed(0)} ms, worst ${Math.max(...result.loads).toFixed(0)} ms`
)
console.log(`(Message.decodeSync over the same messages would add ${result.schemaDecode.toFixed(0)} ms)`)
