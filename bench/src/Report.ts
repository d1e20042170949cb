/**
 * Report: the results as a table (one row per workload, one column per
 * contender, so comparisons read across), and the targets, each computed from
 * figures of the same run and marked PASS or MISS.
 */
import type { Availability } from "./Noema.ts"

type Column = "noema" | "raw" | "aisdk" | "langgraph"

interface Row {
  readonly workload: string
  readonly unit: string
  readonly suite: string
  readonly cells: Partial<Record<Column, string>>
  /** Lower is better (latencies, sizes) or higher is better (rates). */
  readonly better: "lower" | "higher"
  /** Measured only when this environment variable is 1 (it costs the other rows): left out otherwise. */
  readonly optIn?: string
}

const rows: ReadonlyArray<Row> = [
  {
    workload: "inproc.plain  (1 model call, text)",
    unit: "us",
    suite: "inproc",
    better: "lower",
    cells: {
      noema: "inproc.plain.noema_us",
      aisdk: "inproc.plain.aisdk_us",
      langgraph: "inproc.plain.langgraph_us"
    }
  },
  {
    workload: "inproc.tools  (tool call + answer)",
    unit: "us",
    suite: "inproc",
    better: "lower",
    cells: {
      noema: "inproc.tools.noema_us",
      aisdk: "inproc.tools.aisdk_us",
      langgraph: "inproc.tools.langgraph_us"
    }
  },
  {
    workload: "inproc.pipeline3  (3 agents)",
    unit: "us",
    suite: "inproc",
    better: "lower",
    cells: { noema: "inproc.pipeline3.noema_us" }
  },
  {
    workload: "http.turn  (one completion)",
    unit: "us",
    suite: "http",
    better: "lower",
    cells: { noema: "http.turn.noema_us", raw: "http.turn.raw_us", aisdk: "http.turn.aisdk_us" }
  },
  {
    workload: "http.turn  raw SDK + AbortSignal (reference)",
    unit: "us",
    suite: "http",
    better: "lower",
    cells: { raw: "http.turn.raw_signal_us" }
  },
  {
    workload: "http.turn  (a session's turn: its trace kept | no tracer)",
    unit: "us",
    suite: "http",
    better: "lower",
    cells: { noema: "http.turn.session_traced_us", raw: "http.turn.session_us" }
  },
  {
    workload: "http.ttft  (first text delta)",
    unit: "us",
    suite: "http",
    better: "lower",
    cells: { noema: "http.ttft.noema_us", raw: "http.ttft.raw_us" }
  },
  {
    workload: "http.ttft  raw SDK + AbortSignal (reference)",
    unit: "us",
    suite: "http",
    better: "lower",
    cells: { raw: "http.ttft.raw_signal_us" }
  },
  {
    workload: "http.concurrent50",
    unit: "turns/s",
    suite: "http",
    better: "higher",
    cells: { noema: "http.concurrent50.noema_per_s", raw: "http.concurrent50.raw_per_s" }
  },
  {
    workload: "http.concurrent50  raw SDK + AbortSignal (reference)",
    unit: "turns/s",
    suite: "http",
    better: "higher",
    cells: { raw: "http.concurrent50.raw_signal_per_s" }
  },
  {
    workload: "http.alloc  (allocated per turn, 50 in flight)",
    unit: "KiB",
    suite: "http",
    better: "lower",
    cells: { noema: "http.alloc.noema_kib", raw: "http.alloc.raw_kib" }
  },
  {
    workload: "http.alloc  raw SDK + AbortSignal (reference)",
    unit: "KiB",
    suite: "http",
    better: "lower",
    cells: { raw: "http.alloc.raw_signal_kib" }
  },
  {
    workload: "anthropic.turn  (one message)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { noema: "anthropic.turn.noema_us", raw: "anthropic.turn.raw_us" }
  },
  {
    workload: "anthropic.ttft  (first text delta)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { noema: "anthropic.ttft.noema_us", raw: "anthropic.ttft.raw_us" }
  },
  {
    workload: "bridge.turn  (@ai-sdk/anthropic model)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { noema: "bridge.turn.noema_us", aisdk: "bridge.turn.aisdk_us" }
  },
  {
    workload: "bridge.turn  the model + AbortSignal (reference)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { aisdk: "bridge.turn.aisdk_signal_us" }
  },
  {
    workload: "bridge.ttft  (first text delta)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { noema: "bridge.ttft.noema_us", aisdk: "bridge.ttft.aisdk_us" }
  },
  {
    workload: "bridge.ttft  the model + AbortSignal (reference)",
    unit: "us",
    suite: "providers",
    better: "lower",
    cells: { aisdk: "bridge.ttft.aisdk_signal_us" }
  },
  {
    workload: "store.commit  (1 turn, 4 msgs)",
    unit: "us",
    suite: "store",
    better: "lower",
    cells: { noema: "store.commit.sqlite_us" }
  },
  {
    workload: "store.commit sustained",
    unit: "commits/s",
    suite: "store",
    better: "higher",
    cells: { noema: "store.commit.sqlite_per_s", raw: "store.commit.rawsqlite_per_s" }
  },
  {
    workload: "store.commit group8  (8 writers, 1 process)",
    unit: "turns/s",
    suite: "store",
    better: "higher",
    cells: { noema: "store.commit.group8.sqlite_per_s", raw: "store.commit.group8.rawsqlite_per_s" }
  },
  {
    workload: "store.commit pg  (1 turn, 4 msgs)",
    unit: "us",
    suite: "postgres",
    better: "lower",
    cells: { noema: "store.commit.pg_us", raw: "store.commit.rawpg_us" }
  },
  {
    workload: "store.commit pg sustained",
    unit: "commits/s",
    suite: "postgres",
    better: "higher",
    cells: { noema: "store.commit.pg_per_s", raw: "store.commit.rawpg_per_s" }
  },
  {
    workload: "store.load100k pg  (open + read)",
    unit: "ms",
    suite: "postgres",
    better: "lower",
    cells: { noema: "store.load100k.pg_ms" }
  },
  {
    workload: "store.load100k pg heap growth",
    unit: "MB",
    suite: "postgres",
    better: "lower",
    cells: { noema: "store.load100k.pg_heap_mb" }
  },
  {
    workload: "store.concurrent8 pg  (8 processes)",
    unit: "turns/s",
    suite: "postgres",
    better: "higher",
    cells: { noema: "store.concurrent8.pg_turns_per_s" }
  },
  {
    workload: "store.concurrent8 pg lost/interleaved",
    unit: "messages",
    suite: "postgres",
    better: "lower",
    cells: { noema: "store.concurrent8.pg_lost_or_interleaved" }
  },
  {
    workload: "store.load100k  (open + read)",
    unit: "ms",
    suite: "store",
    better: "lower",
    cells: { noema: "store.load100k.sqlite_ms", raw: "store.load100k.rawsqlite_ms" }
  },
  {
    workload: "store.load100k heap growth",
    unit: "MB",
    suite: "store",
    better: "lower",
    cells: { noema: "store.load100k.heap_mb", raw: "store.load100k.rawsqlite_heap_mb" }
  },
  {
    workload: "store.concurrent8  (8 processes)",
    unit: "turns/s",
    suite: "store",
    better: "higher",
    cells: { noema: "store.concurrent8.sqlite_turns_per_s" }
  },
  {
    workload: "store.concurrent8 lost/interleaved",
    unit: "messages",
    suite: "store",
    better: "lower",
    cells: { noema: "store.concurrent8.lost_or_interleaved" }
  },
  {
    workload: "runtime.interrupt  (trigger -> request aborted)",
    unit: "us",
    suite: "runtime",
    better: "lower",
    cells: { noema: "runtime.interrupt_us", raw: "runtime.interrupt_raw_us" }
  },
  {
    workload: "runtime.triggers  (delivered, scripted model)",
    unit: "per s",
    suite: "runtime",
    better: "higher",
    cells: { noema: "runtime.triggers_per_s" }
  },
  {
    workload: "runtime.triggers lost",
    unit: "triggers",
    suite: "runtime",
    better: "lower",
    cells: { noema: "runtime.triggers_lost" }
  },
  {
    workload: "resources.find_prefix  (100 of 10k, SQLite)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.find_prefix_10k.sqlite_us" }
  },
  {
    workload: "resources.find_prefix  (100 of big, SQLite)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.find_prefix_big.sqlite_us" }
  },
  {
    workload: "resources.find_prefix  (100 of 10k, Postgres)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.find_prefix_10k.pg_us" }
  },
  {
    workload: "resources.find_prefix  (100 of big, Postgres)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.find_prefix_big.pg_us" }
  },
  {
    workload: "resources big store size",
    unit: "resources",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.big_size" }
  },
  {
    workload: "resources.get_many_100  (SQLite, big store)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "resources.get_many_100_us" }
  },
  {
    workload: "policy.cedar_authorize  (500 policies | raw cedar-wasm call)",
    unit: "us",
    suite: "resources",
    better: "lower",
    cells: { noema: "policy.cedar_authorize_us", raw: "policy.cedar_authorize_raw_us" }
  },
  {
    workload: "vector.search_100k  (exact, 384 dims, memory | raw loop)",
    unit: "ms",
    suite: "resources",
    better: "lower",
    cells: { noema: "vector.search_100k_ms", raw: "vector.search_100k_raw_ms" }
  },
  {
    workload: "vector.search_100k  (exact, SQLite | raw node:sqlite scan)",
    unit: "ms",
    suite: "resources",
    better: "lower",
    cells: { noema: "vector.search_100k_sqlite_ms", raw: "vector.search_100k_sqlite_raw_ms" }
  },
  {
    workload: "vector.search_100k  (exact, SQLite | raw sqlite-vec KNN, k=10)",
    unit: "ms",
    suite: "resources",
    better: "lower",
    cells: { noema: "vector.search_100k_sqlite_ms", raw: "vector.search_100k_sqlite_vec0_raw_ms" }
  },
  {
    workload: "planner.overhead  (20 tasks, instant model, memory | the same calls alone)",
    unit: "ms",
    suite: "planner",
    better: "lower",
    cells: { noema: "planner.overhead_ms", raw: "planner.overhead_raw_ms" }
  },
  {
    workload: "planner.overhead  (20 tasks, instant model, SQLite)",
    unit: "ms",
    suite: "planner",
    better: "lower",
    cells: { noema: "planner.overhead_sqlite_ms" }
  },
  {
    workload: "planner.tasks_per_s  (10 ms calls, 8 in parallel | ceiling 8/10 ms)",
    unit: "tasks/s",
    suite: "planner",
    better: "higher",
    cells: { noema: "planner.parallel8.tasks_per_s", raw: "planner.ceiling8.tasks_per_s" }
  },
  {
    workload: "planner.tasks_per_s  (10 ms calls, 1 at a time)",
    unit: "tasks/s",
    suite: "planner",
    better: "higher",
    cells: { noema: "planner.parallel1.tasks_per_s" }
  },
  {
    workload: "runs.stage_overhead  (instant model, SQLite | the calls alone)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_overhead_ms", raw: "runs.stage_overhead_raw_ms" }
  },
  {
    workload: "runs.stage  (noema's stage | the disk floor: its fsyncs and commits by hand)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_overhead_ms", raw: "runs.stage_disk_floor_ms" }
  },
  {
    workload: "runs.stage CPU  (noema's stage | the disk floor's, user and system)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_overhead_cpu_ms", raw: "runs.stage_disk_floor_cpu_ms" }
  },
  {
    workload: "runs.stage_fsync_wait  (of a stage's time: an fsync of node:fs in flight)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_fsync_wait_ms" }
  },
  {
    workload: "runs.four_stage_fsyncs  (file and directory fsyncs of a 4-stage run)",
    unit: "fsyncs",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.four_stage_fsyncs" }
  },
  {
    workload: "runs.four_stage_commits  (store commits of a 4-stage run)",
    unit: "commits",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.four_stage_commits" }
  },
  {
    workload: "runs.stage  (4th, given 3 stages' work | 2nd, given 1)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_fourth_ms", raw: "runs.stage_second_ms" }
  },
  {
    workload: "runs.stage CPU  (4th, given 3 stages' work | 2nd, given 1)",
    unit: "ms",
    suite: "runs",
    better: "lower",
    cells: { noema: "runs.stage_fourth_cpu_ms", raw: "runs.stage_second_cpu_ms" }
  },
  {
    workload: "runs.per_s  (100 runs of 2 stages, SQLite)",
    unit: "runs/s",
    suite: "runs",
    better: "higher",
    cells: { noema: "runs.sqlite_per_s" }
  },
  {
    workload: "serve.first_paint  (sessions list in Chromium, 1,000 sessions | the API alone)",
    unit: "ms",
    suite: "serve",
    better: "lower",
    cells: { noema: "serve.first_paint_ms", raw: "serve.list_api_ms" }
  },
  {
    workload: "serve.plan_paint  (a 300-task plan's tree in Chromium | the API alone)",
    unit: "ms",
    suite: "serve",
    better: "lower",
    cells: { noema: "serve.plan_paint_ms", raw: "serve.plan_api_ms" }
  },
  {
    workload: "serve.cold_start  (noema serve to its address)",
    unit: "ms",
    suite: "serve",
    better: "lower",
    cells: { noema: "serve.cold_start_ms" }
  },
  {
    workload: "serve.chat_turn  (Enter to the stored answer in Chromium, offline model | the API alone)",
    unit: "ms",
    suite: "serve",
    better: "lower",
    cells: { noema: "serve.chat_turn_ms", raw: "serve.chat_turn_api_ms" }
  },
  {
    workload: "runs.per_s  (100 runs of 2 stages, Postgres)",
    unit: "runs/s",
    suite: "runs",
    better: "higher",
    cells: { noema: "runs.pg_per_s" }
  },
  {
    workload: "runs.cluster3_per_s  (60 runs, 3 cluster runners | 3 claim workers, Postgres)",
    unit: "runs/s",
    suite: "cluster",
    better: "higher",
    cells: { noema: "runs.cluster3_per_s", raw: "runs.claims3_per_s" }
  },
  {
    workload: "runs.statements_per_run  (cluster | claims)",
    unit: "SQL/run",
    suite: "cluster",
    better: "lower",
    optIn: "NOEMA_BENCH_COUNT_SQL",
    cells: { noema: "runs.cluster_statements_per_run", raw: "runs.claims_statements_per_run" }
  },
  {
    workload: "runs.approve_to_start  (cluster runner | claims, runs approve)",
    unit: "ms",
    suite: "cluster",
    better: "lower",
    cells: { noema: "runs.cluster_approve_to_start_ms", raw: "runs.claims_approve_to_start_ms" }
  },
  {
    workload: "runs.failover  (SIGKILL to next attempt: cluster | claims)",
    unit: "ms",
    suite: "cluster",
    better: "lower",
    cells: { noema: "runs.cluster_failover_ms", raw: "runs.claims_failover_ms" }
  },
  {
    workload: "runs.per_s  (100 runs in 10 threads, 2 workers x 4, Postgres | 1 worker x 1)",
    unit: "runs/s",
    suite: "runs",
    better: "higher",
    cells: { noema: "runs.pg_workers_per_s", raw: "runs.pg_one_worker_per_s" }
  },
  {
    workload: "context.window1m  (window 50)",
    unit: "us",
    suite: "context",
    better: "lower",
    cells: { noema: "context.window1m.us" }
  },
  {
    workload: "context.window1m heap",
    unit: "MB",
    suite: "context",
    better: "lower",
    cells: { noema: "context.window1m.heap_mb" }
  },
  {
    workload: "start-up  (noema --version | node -e 0)",
    unit: "ms",
    suite: "startup",
    better: "lower",
    cells: { noema: "cli.version_ms", raw: "node.baseline_ms" }
  }
]

const columns: ReadonlyArray<{ readonly key: Column; readonly title: string }> = [
  { key: "noema", title: "noema" },
  { key: "raw", title: "raw SDK / node" },
  { key: "aisdk", title: "AI SDK" },
  { key: "langgraph", title: "LangGraph" }
]

/** The package a noema figure needs. */
const packageOf = (figure: string): string | undefined => {
  if (figure.startsWith("inproc.")) return "@noema/agents"
  if (figure.startsWith("http.") && figure.includes(".noema_")) return "@noema/openai"
  if (figure.startsWith("anthropic.") && figure.includes(".noema_")) return "@noema/anthropic"
  if (figure.startsWith("bridge.") && figure.includes(".noema_")) return "@noema/ai-sdk"
  if (figure.startsWith("store.")) return "@noema/session"
  if (figure.startsWith("runtime.") && !figure.includes("_raw_")) return "@noema/runtime"
  if (
    figure.startsWith("resources.") ||
    figure.startsWith("policy.") ||
    (figure.startsWith("vector.") && !figure.includes("_raw_"))
  )
    return "@noema/resources"
  if (figure.startsWith("planner.") && !figure.includes("_raw_") && !figure.includes("ceiling"))
    return "@noema/planner"
  if (figure.startsWith("runs.") && !figure.includes("_raw_")) return "@noema/runs"
  if (figure === "cli.version_ms") return "@noema/cli"
  return undefined
}

const decimals = (figure: string, value: number): number => {
  if (figure.endsWith("_mb")) return 4
  if (figure.endsWith("_per_s")) return 1
  return Math.abs(value) >= 1000 ? 1 : Math.abs(value) >= 10 ? 2 : 3
}

/** Figures rounded to what their noise allows; non-finite ones dropped. */
export const round = (results: Readonly<Record<string, number>>): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const [figure, value] of Object.entries(results)) {
    if (Number.isFinite(value)) out[figure] = Number(value.toFixed(decimals(figure, value)))
  }
  return out
}

interface Target {
  readonly description: string
  readonly figures: ReadonlyArray<string>
  /** The measured quantity and whether it meets the target. */
  readonly evaluate: (values: ReadonlyArray<number>) => { readonly shown: string; readonly pass: boolean }
}

const ratio = (limit: number) => (values: ReadonlyArray<number>) => {
  const [ours = Number.NaN, theirs = Number.NaN] = values
  const value = ours / theirs
  return { shown: `${value.toFixed(3)}x`, pass: value <= limit }
}

/** A rate at least `factor` times another's. */
const atLeast = (factor: number) => (values: ReadonlyArray<number>) => {
  const [ours = Number.NaN, theirs = Number.NaN] = values
  return { shown: `${(ours / theirs).toFixed(3)}x`, pass: ours >= factor * theirs }
}

/** A figure at most `limit` (a latency's goal). */
const atMost = (limit: number) => (values: ReadonlyArray<number>) => {
  const [value = Number.NaN] = values
  return { shown: `${value.toFixed(0)}`, pass: value <= limit }
}

const targets: ReadonlyArray<Target> = [
  {
    description: "vector.search_100k_sqlite_ms <= 60",
    figures: ["vector.search_100k_sqlite_ms"],
    evaluate: atMost(60)
  },
  {
    description: "serve.first_paint: under 1 s (1,000 sessions)",
    figures: ["serve.first_paint_ms"],
    evaluate: ([ms = Number.NaN]) => ({ shown: `${ms.toFixed(0)} ms`, pass: ms < 1000 })
  },
  {
    description: "runs.cluster3_per_s >= 0.9 x runs.claims3_per_s",
    figures: ["runs.cluster3_per_s", "runs.claims3_per_s"],
    evaluate: atLeast(0.9)
  },
  {
    description: "runs.cluster_approve_to_start_ms <= 500",
    figures: ["runs.cluster_approve_to_start_ms"],
    evaluate: atMost(500)
  },
  {
    description: "runs.cluster_failover_ms <= 10000",
    figures: ["runs.cluster_failover_ms"],
    evaluate: atMost(10_000)
  },
  {
    description: "inproc.plain: noema <= 0.5 x AI SDK",
    figures: ["inproc.plain.noema_us", "inproc.plain.aisdk_us"],
    evaluate: ratio(0.5)
  },
  {
    description: "inproc.tools: noema <= 0.5 x AI SDK",
    figures: ["inproc.tools.noema_us", "inproc.tools.aisdk_us"],
    evaluate: ratio(0.5)
  },
  {
    description: "http.turn: noema <= 1.05 x raw SDK",
    figures: ["http.turn.noema_us", "http.turn.raw_us"],
    evaluate: ratio(1.05)
  },
  {
    description: "http.concurrent50: noema >= 0.97 x raw SDK",
    figures: ["http.concurrent50.noema_per_s", "http.concurrent50.raw_per_s"],
    evaluate: atLeast(0.97)
  },
  {
    description: "http.ttft: noema <= raw SDK + 1 ms",
    figures: ["http.ttft.noema_us", "http.ttft.raw_us"],
    evaluate: ([ours = Number.NaN, raw = Number.NaN]) => ({
      shown: `${ours - raw >= 0 ? "+" : ""}${(ours - raw).toFixed(1)} us`,
      pass: ours - raw <= 1000
    })
  },
  {
    description: "anthropic.turn: noema <= 1.05 x raw SDK",
    figures: ["anthropic.turn.noema_us", "anthropic.turn.raw_us"],
    evaluate: ratio(1.05)
  },
  {
    description: "anthropic.ttft: noema <= 1.05 x raw SDK",
    figures: ["anthropic.ttft.noema_us", "anthropic.ttft.raw_us"],
    evaluate: ratio(1.05)
  },
  {
    description: "bridge.turn: noema <= 1.1 x the model alone",
    figures: ["bridge.turn.noema_us", "bridge.turn.aisdk_us"],
    evaluate: ratio(1.1)
  },
  {
    description: "bridge.ttft: noema <= 1.1 x the model alone",
    figures: ["bridge.ttft.noema_us", "bridge.ttft.aisdk_us"],
    evaluate: ratio(1.1)
  },
  {
    description: "store.commit: >= 5,000 commits/s",
    figures: ["store.commit.sqlite_per_s"],
    evaluate: ([rate = Number.NaN]) => ({ shown: `${rate.toFixed(0)}/s`, pass: rate >= 5000 })
  },
  {
    // One writer pays one fsync per commit, as raw does, plus validation and Effect's SqlClient.
    description: "store.commit: noema >= 0.8 x raw node:sqlite",
    figures: ["store.commit.sqlite_per_s", "store.commit.rawsqlite_per_s"],
    evaluate: atLeast(0.8)
  },
  {
    // Writers at once share a transaction and its fsync; raw commits one transaction per turn.
    description: "store.commit.group8: noema >= 2 x raw",
    figures: ["store.commit.group8.sqlite_per_s", "store.commit.group8.rawsqlite_per_s"],
    evaluate: atLeast(2)
  },
  {
    description: "store.load100k: <= 150 ms",
    figures: ["store.load100k.sqlite_ms"],
    evaluate: ([ms = Number.NaN]) => ({ shown: `${ms.toFixed(1)} ms`, pass: ms <= 150 })
  },
  {
    description: "resources.find_prefix: big <= 2 x 10k (SQLite)",
    figures: ["resources.find_prefix_big.sqlite_us", "resources.find_prefix_10k.sqlite_us"],
    evaluate: ratio(2)
  },
  {
    description: "resources.find_prefix: big <= 2 x 10k (Postgres)",
    figures: ["resources.find_prefix_big.pg_us", "resources.find_prefix_10k.pg_us"],
    evaluate: ratio(2)
  },
  {
    // Each earlier stage's work adds (4th - 2nd) / 2 of CPU to a stage; the 4th is given three.
    description: "runs.stage: hand-off <= 1 ms CPU (4th stage)",
    figures: ["runs.stage_fourth_cpu_ms", "runs.stage_second_cpu_ms"],
    evaluate: ([fourth = Number.NaN, second = Number.NaN]) => {
      const handOff = ((fourth - second) / 2) * 3
      return { shown: `${handOff.toFixed(3)} ms`, pass: handOff <= 1 }
    }
  },
  {
    description: "cli --version: <= node -e 0 + 150 ms",
    figures: ["cli.version_ms", "node.baseline_ms"],
    evaluate: ([cli = Number.NaN, node = Number.NaN]) => ({
      shown: `+${(cli - node).toFixed(1)} ms`,
      pass: cli - node <= 150
    })
  }
]

const pad = (text: string, width: number, right = false) =>
  right ? text.padStart(width) : text.padEnd(width)

const format = (figure: string, value: number): string => value.toFixed(decimals(figure, value))

/** noema's figure next to each other contender's, as "0.42x AI SDK". */
const comparison = (row: Row, results: Readonly<Record<string, number>>): string => {
  const ours = row.cells.noema === undefined ? undefined : results[row.cells.noema]
  if (ours === undefined) return ""
  const parts: Array<string> = []
  for (const { key, title } of columns) {
    const figure = row.cells[key]
    if (key === "noema" || figure === undefined) continue
    const theirs = results[figure]
    if (theirs === undefined || theirs === 0) continue
    parts.push(`${(ours / theirs).toFixed(2)}x ${title === "raw SDK / node" ? "raw" : title}`)
  }
  return parts.join(", ")
}

export const render = (
  results: Readonly<Record<string, number>>,
  noema: Availability,
  onlySuites: ReadonlySet<string> | undefined
): string => {
  const cell = (row: Row, figure: string | undefined): string => {
    if (figure === undefined) return ""
    const value = results[figure]
    if (value !== undefined) return format(figure, value)
    const needed = packageOf(figure)
    if (needed !== undefined && noema.missing[needed] !== undefined) return "not available yet"
    if (onlySuites !== undefined && !onlySuites.has(row.suite)) return "not run"
    return "failed"
  }
  const header = ["workload", "unit", ...columns.map((column) => column.title), "noema vs others"]
  const shown = rows.filter((row) => row.optIn === undefined || process.env[row.optIn] === "1")
  const lines = shown.map((row) => [
    row.workload,
    row.unit,
    ...columns.map((column) => cell(row, row.cells[column.key])),
    comparison(row, results)
  ])
  const widths = header.map((title, index) =>
    Math.max(title.length, ...lines.map((line) => (line[index] ?? "").length))
  )
  const numeric = (index: number) => index >= 2 && index < 2 + columns.length
  const renderLine = (line: ReadonlyArray<string>) =>
    line.map((text, index) => pad(text, widths[index] ?? 0, numeric(index))).join("  ")
  const out: Array<string> = [
    "",
    renderLine(header),
    widths.map((width) => "-".repeat(width)).join("  "),
    ...lines.map(renderLine),
    "",
    "Targets (ratios from this run):"
  ]
  for (const target of targets) {
    const values = target.figures.map((figure) => results[figure])
    if (values.some((value) => value === undefined)) {
      const missing = target.figures
        .map(packageOf)
        .find((name) => name !== undefined && noema.missing[name] !== undefined)
      out.push(
        `  n/a   ${pad(target.description, 42)} ${missing === undefined ? "not run" : `${missing} not available yet`}`
      )
      continue
    }
    const { shown, pass } = target.evaluate(values as ReadonlyArray<number>)
    out.push(`  ${pass ? "PASS" : "MISS"}  ${pad(target.description, 42)} ${shown}`)
  }
  const missing = Object.entries(noema.missing)
  if (missing.length > 0) {
    out.push("", "Left out of this run:")
    for (const [name, reason] of missing) out.push(`  ${name}: ${reason}`)
  }
  return out.join("\n")
}
