/**
 * RunsProbe: where `runs.stage_overhead_ms` goes, counted. Not part of `npm run bench`; run by
 * hand (bench/README.md, "Where the time goes: runs, runtime and HTTP rows").
 *
 *   node src/RunsProbe.ts [runs] [--statements] [--fs]
 *
 * Builds the bench's world (Executor, SqlRunsStore on SQLite, the scripted instant model) in
 * TMPDIR, runs the 4-stage pipeline `runs` times (default 200; the first 5 are warm-up) and
 * prints the median time and CPU time of a stage (all, and the user part: on ext4 an fsync is
 * paid in system time) and, per timed run: the SQL statements
 * node:sqlite executed (by text with `--statements`) and the fsyncs of `node:fs` (with `--fs`,
 * every `node:fs` call, by name). Point TMPDIR at a tmpfs to leave the disk out; add
 * `--cpu-prof` to node for a profile.
 */
import * as fs from "node:fs"
import { createRequire, syncBuiltinESMExports } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, type RunsStore, SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { Effect, Layer } from "effect"
import { check, median, now } from "./Harness.ts"
import { fourStages } from "./Runs.ts"
import * as StatementCounts from "./StatementCounts.ts"

const runs = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 200)
const byText = process.argv.includes("--statements")
const fsCalls = process.argv.includes("--fs")

let counting = false
// NOEMA_PROBE_TRACE=1: the first timed run's statements and fsyncs, in order.
let traceOne = false
const tracing = process.env.NOEMA_PROBE_TRACE !== undefined
const sql = StatementCounts.install((text) => {
  if (traceOne) console.log(`  sql ${text.slice(0, 110)}`)
})
const statements = sql.counts
const micros = sql.micros

// node:fs's calls, by name (every module sees the wrappers once the ESM bindings are synced).
const calls = new Map<string, number>()
const cjs = createRequire(import.meta.url)("node:fs") as Record<string, unknown>
for (const name of Object.keys(cjs)) {
  const original = cjs[name]
  if (typeof original !== "function" || /^[A-Z]/.test(name) || name === "promises") continue
  if (!fsCalls && name !== "fsync" && name !== "fsyncSync") continue
  cjs[name] = function (this: unknown, ...args: Array<unknown>) {
    if (counting) calls.set(name, (calls.get(name) ?? 0) + 1)
    if (traceOne && (fsCalls || name.startsWith("fsync")))
      console.log(`  fs.${name} ${String(args[0]).slice(-60)}`)
    return (original as (...args: Array<unknown>) => unknown).apply(this, args)
  }
}
syncBuiltinESMExports()

const cpuNow = () => {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

// NOEMA_PROBE_TIMES=1: the wall time spent in each store call, by name, per run.
const spent = new Map<string, number>()
const timed =
  (name: string, f: (...args: Array<unknown>) => Effect.Effect<unknown, unknown>) =>
  (...args: Array<unknown>) =>
    Effect.suspend(() => {
      const started = now()
      return Effect.ensuring(
        f(...args),
        Effect.sync(() => {
          if (counting) spent.set(name, (spent.get(name) ?? 0) + now() - started)
        })
      )
    })
const timedStore = (store: RunsStore.Service): RunsStore.Service => {
  const wrapped: Record<string, unknown> = { ...store }
  for (const [name, value] of Object.entries(store))
    if (typeof value === "function") wrapped[name] = timed(name, value as never)
  const journal: Record<string, unknown> = { ...store.journal }
  for (const [name, value] of Object.entries(store.journal))
    if (typeof value === "function") journal[name] = timed(`journal.${name}`, value as never)
  return {
    ...(wrapped as unknown as RunsStore.Service),
    journal: journal as unknown as RunsStore.WorkflowJournal
  }
}

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-probe-runs-"))
const program = Effect.scoped(
  Effect.gen(function* () {
    const context = yield* Layer.build(
      Database.layer({ kind: "sqlite", filename: path.join(directory, "runs.db") })
    )
    const stored = yield* Effect.provideContext(SqlRunsStore.fromDatabase, context)
    const store = process.env.NOEMA_PROBE_TIMES === undefined ? stored : timedStore(stored)
    const executor = Executor.make({
      store,
      workspace: path.join(directory, "workspace"),
      model: ScriptedChatModel.make({ fallback: "done: a short answer" })
    })
    const thread = yield* store.createThread({ title: "probe" })
    const times: Array<number> = []
    const cpus: Array<number> = []
    const users: Array<number> = []
    for (let i = 0; i < runs; i++) {
      counting = i >= 5
      sql.counting = counting
      traceOne = tracing && i === 5
      const [started, cpu, user] = [now(), cpuNow(), process.cpuUsage().user]
      const run = yield* executor.create({
        threadId: thread.id,
        request: `request ${i}`,
        pipeline: fourStages
      })
      const outcome = yield* executor.execute(run.runId, fourStages)
      if (counting) {
        times.push(now() - started)
        cpus.push(cpuNow() - cpu)
        users.push((process.cpuUsage().user - user) / 1000)
      }
      check(outcome._tag === "Finished" && outcome.run.status === "completed", "probe run did not complete")
    }
    counting = false
    sql.counting = false
    traceOne = false
    const timed = runs - 5
    const total = (map: Map<string, number>) => [...map.values()].reduce((a, b) => a + b, 0) / timed
    console.log(
      `stage ${(median(times) / 4).toFixed(3)} ms, cpu ${(median(cpus) / 4).toFixed(3)} ms ` +
        `(user ${(median(users) / 4).toFixed(3)} ms); per run: ` +
        `${total(statements)} statements, ${(calls.get("fsync") ?? 0) / timed + (calls.get("fsyncSync") ?? 0) / timed} fsyncs`
    )
    if (byText) {
      for (const [text, count] of [...statements].sort((a, b) => b[1] - a[1])) {
        const each = (micros.get(text) ?? 0) / count
        console.log(
          `${(count / timed).toFixed(2).padStart(6)} ${each.toFixed(1).padStart(7)} us  ${text.slice(0, 140)}`
        )
      }
    }
    for (const [name, ms] of [...spent].sort((a, b) => b[1] - a[1]))
      console.log(`${((ms / timed) * 1000).toFixed(0).padStart(6)} us  store.${name}`)
    if (fsCalls) {
      for (const [name, count] of [...calls].sort((a, b) => b[1] - a[1])) {
        console.log(`${(count / timed).toFixed(2).padStart(6)}  fs.${name}`)
      }
    }
  })
)

try {
  await Effect.runPromise(program)
} finally {
  fs.rmSync(directory, { recursive: true, force: true })
}
