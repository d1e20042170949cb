/**
 * PlannerProbe: where `planner.overhead_sqlite_ms` goes, counted. Not part of `npm run bench`;
 * run by hand (bench/README.md, "Where the time goes: the planner on SQLite").
 *
 *   node src/PlannerProbe.ts [runs] [--statements]
 *
 * Builds the suite's SQLite world (one database, the three assistants), runs the 20-task tree
 * `runs` times (default 20; the first 2 are warm-up) and prints the median time of a run and, per
 * timed run (their sums divided by their number): the SQL statements executed (node:sqlite's `StatementSync` calls, by text
 * with `--statements`), the transactions committed, and the vec0 KNN searches. Add `--cpu-prof`
 * to node for a profile, or run it under `strace -f -e trace=fsync,fdatasync -c` for the fsyncs.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Planner, TaskTree } from "@noema/planner"
import * as PlannerTesting from "@noema/planner/testing"
import {
  LocalEmbedder,
  Policy,
  ResourceEvents,
  ResourceIndex,
  SqlResourceStore,
  VectorIndex
} from "@noema/resources"
import { Database } from "@noema/sql"
import { Effect, Layer } from "effect"
import { median, now } from "./Harness.ts"
import { team, treeOf } from "./Planner.ts"
import * as StatementCounts from "./StatementCounts.ts"

const runs = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 20)
const byText = process.argv.includes("--statements")

// NOEMA_PROBE_TRACE=file: the counted run's statements in order, one a line.
const trace = process.env.NOEMA_PROBE_TRACE
// Every statement node:sqlite runs, by its text: the counts of one run.
const sql = StatementCounts.install((text, args) => {
  if (trace === undefined) return
  // A resource write names what it writes: every fourth parameter is a URN.
  const urns = text.startsWith('INSERT INTO "noema_resources"')
    ? ` ${args.filter((_, i) => i % 4 === 0).join(" ")}`
    : ""
  fs.appendFileSync(trace, `${text.slice(0, 100)}${urns}\n`)
})
const counts = sql.counts
const micros = sql.micros

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-probe-planner-"))
const twenty = treeOf(4, 4)
const limits = { maxChildren: 64, maxTasks: 20, maxModelCalls: 10_000, maxTokens: 100_000_000, parallel: 4 }

const program = Effect.scoped(
  Effect.gen(function* () {
    const model = PlannerTesting.scriptedModel({ plan: twenty })
    const context = yield* Layer.build(
      Database.layer({ kind: "sqlite", filename: path.join(directory, "planner.db") })
    )
    const store = yield* Effect.provideContext(SqlResourceStore.fromDatabase, context)
    const vectors = yield* Effect.provideContext(VectorIndex.fromDatabase(LocalEmbedder.make()), context)
    const policy = yield* Policy.allowAll
    const events = yield* ResourceEvents.makeMemory(policy)
    const index = ResourceIndex.make(store, policy, { events, vectors })
    yield* PlannerTesting.registerAssistants(index, "cld:assistant.planner", team)
    const world = { store, index, events, vectors }
    const once = Effect.gen(function* () {
      const started = now()
      const cpu = process.cpuUsage()
      const result = yield* Planner.run("bench", { model, ...world, limits })
      if (result.tasks.length !== TaskTree.count(twenty.tasks)) throw new Error("tasks missing")
      const used = process.cpuUsage(cpu)
      return { ms: now() - started, cpuMs: (used.user + used.system) / 1000 }
    })
    const times: Array<number> = []
    const cpus: Array<number> = []
    // The statements of the timed runs are counted (and timed, which they pay for alike).
    for (let run = 0; run < runs; run++) {
      sql.counting = run >= 2
      const { ms, cpuMs } = yield* once
      if (run >= 2) {
        times.push(ms)
        cpus.push(cpuMs)
      }
    }
    sql.counting = false
    return { times, cpus }
  })
)

try {
  const { times, cpus } = await Effect.runPromise(program)
  // Per run: the counted runs' sums divided by their number.
  const perRun = times.length
  for (const [text, n] of counts) counts.set(text, n / perRun)
  for (const [text, n] of micros) micros.set(text, n / perRun)
  const total = [...counts.values()].reduce((sum, n) => sum + n, 0)
  const inSqlite = [...micros.values()].reduce((sum, n) => sum + n, 0) / 1000
  const matching = (pattern: RegExp) =>
    [...counts]
      .filter(([text]) => pattern.test(text))
      .reduce((sum, [, n]) => sum + n, 0)
      .toFixed(1)
  process.stdout.write(
    `run: median ${median(times).toFixed(2)} ms over ${times.length} runs (min ${Math.min(...times).toFixed(2)}), ` +
      `CPU ${median(cpus).toFixed(2)} ms\n` +
      `a run: ${total.toFixed(0)} statements (${inSqlite.toFixed(2)} ms in node:sqlite), ${matching(/^COMMIT/)} commits, ${matching(/^BEGIN/)} begins, ` +
      `${matching(/^SAVEPOINT/)} savepoints, ${matching(/MATCH/)} vec0 KNN searches, ` +
      `${matching(/^INSERT INTO "noema_vectors_vec0/)} vec0 inserts\n`
  )
  if (byText) {
    for (const [text, n] of [...counts].sort((a, b) => b[1] - a[1]))
      process.stdout.write(
        `${n.toFixed(1).padStart(6)} ${(((micros.get(text) ?? 0) / 1000).toFixed(2)).padStart(7)} ms  ${text.slice(0, 140)}\n`
      )
  }
} finally {
  // NOEMA_PROBE_KEEP=1 leaves the database for a look (its path on stderr).
  if (process.env.NOEMA_PROBE_KEEP === "1") process.stderr.write(`kept ${directory}/planner.db\n`)
  else fs.rmSync(directory, { recursive: true, force: true })
}
