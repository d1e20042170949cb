/**
 * The benchmark run: every figure measured in one process (plus the child
 * processes some figures need), printed side by side with the targets, and
 * written to `bench/results.json` as a flat `{ "<figure>": number }`.
 *
 *   npm run bench                 full run (a few minutes)
 *   npm run bench -- --quick      fewer repetitions (under two minutes)
 *   npm run bench -- --only http  only the suites named (startup, inproc, http, providers, store, postgres, runtime, serve, cluster, context);
 *                                 results.json is then left alone unless --out FILE is given
 */
import { writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import * as ClusterBench from "./Cluster.ts"
import * as Context from "./Context.ts"
import type { LatencyOptions, ThroughputOptions } from "./Harness.ts"
import * as Http from "./Http.ts"
import * as InProcess from "./InProcess.ts"
import * as Noema from "./Noema.ts"
import * as PlannerBench from "./Planner.ts"
import * as Providers from "./Providers.ts"
import * as Report from "./Report.ts"
import * as ResourcesBench from "./Resources.ts"
import * as RunsBench from "./Runs.ts"
import * as RuntimeBench from "./Runtime.ts"
import * as ServeBench from "./Serve.ts"
import * as Startup from "./Startup.ts"
import type { StoreOptions } from "./Store.ts"
import * as Store from "./Store.ts"
import * as StorePostgres from "./StorePostgres.ts"

const suites = [
  "startup",
  "inproc",
  "http",
  "providers",
  "store",
  "postgres",
  "runtime",
  "resources",
  "planner",
  "runs",
  "serve",
  "cluster",
  "context"
] as const
type Suite = (typeof suites)[number]

interface Settings {
  readonly inProcess: LatencyOptions
  readonly http: { readonly latency: LatencyOptions; readonly throughput: ThroughputOptions }
  readonly store: StoreOptions
  readonly postgres: StorePostgres.StorePostgresOptions
  readonly context: LatencyOptions
  readonly startup: Startup.StartupOptions
  readonly runtime: RuntimeBench.RuntimeOptions
  readonly resources: ResourcesBench.ResourcesOptions
  readonly planner: PlannerBench.PlannerOptions
  readonly runs: RunsBench.RunsOptions
  readonly serve: ServeBench.ServeOptions
}

const settings = (quick: boolean): Settings =>
  quick
    ? {
        inProcess: { warmupMs: 500, sampleMs: 10, rounds: 25, budgetMs: 6_000 },
        http: {
          latency: { warmupMs: 500, sampleMs: 20, rounds: 25, budgetMs: 8_000 },
          throughput: { concurrency: 50, total: 500, warmupTotal: 500, rounds: 5, budgetMs: 6_000 }
        },
        store: {
          warmupCommits: 100,
          latencyCommits: 500,
          sustainedCommits: 2_000,
          sustainedRounds: 1,
          loadRuns: 3,
          concurrentTurns: 200,
          budgetMs: 5_000
        },
        postgres: {
          warmupCommits: 100,
          latencyCommits: 500,
          sustainedCommits: 1_000,
          sustainedRounds: 1,
          loadRuns: 3,
          concurrentTurns: 200,
          budgetMs: 5_000
        },
        context: { warmupMs: 300, sampleMs: 10, rounds: 25, budgetMs: 3_000 },
        startup: { runs: 10, warmup: 2 },
        runtime: { interrupts: 15, triggers: 1_000 },
        resources: { big: 100_000, lookups: 100, authorizations: 500, searches: 5, vectors: 100_000 },
        planner: { rounds: 9, warmupMs: 500 },
        runs: { overheadRuns: 15, runs: 100 },
        serve: { rounds: 3 }
      }
    : {
        inProcess: { warmupMs: 1_500, sampleMs: 25, rounds: 101, budgetMs: 30_000 },
        http: {
          latency: { warmupMs: 1_500, sampleMs: 40, rounds: 101, budgetMs: 45_000 },
          throughput: { concurrency: 50, total: 1_000, warmupTotal: 1_000, rounds: 9, budgetMs: 20_000 }
        },
        store: {
          warmupCommits: 200,
          latencyCommits: 2_000,
          sustainedCommits: 2_000,
          sustainedRounds: 3,
          loadRuns: 7,
          concurrentTurns: 500,
          budgetMs: 20_000
        },
        postgres: {
          warmupCommits: 200,
          latencyCommits: 2_000,
          sustainedCommits: 2_000,
          sustainedRounds: 3,
          loadRuns: 7,
          concurrentTurns: 500,
          budgetMs: 20_000
        },
        context: { warmupMs: 1_000, sampleMs: 25, rounds: 41, budgetMs: 8_000 },
        startup: { runs: 25, warmup: 3 },
        runtime: { interrupts: 41, triggers: 5_000 },
        resources: { big: 1_000_000, lookups: 300, authorizations: 2_000, searches: 15, vectors: 100_000 },
        planner: { rounds: 31, warmupMs: 1_500 },
        runs: { overheadRuns: 41, runs: 100 },
        serve: { rounds: 7 }
      }

const main = async (): Promise<void> => {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      only: { type: "string" },
      out: { type: "string" }
    }
  })
  const only = values.only?.split(",").map((name) => name.trim())
  for (const name of only ?? []) {
    if (!suites.includes(name as Suite))
      throw new Error(`Unknown suite "${name}"; known: ${suites.join(", ")}`)
  }
  const selected = (suite: Suite) => only === undefined || only.includes(suite)
  const quick = values.quick
  const config = settings(quick)
  const noema = await Noema.load()
  const began = performance.now()
  const log = (text: string) =>
    process.stderr.write(`[bench ${((performance.now() - began) / 1000).toFixed(1)}s] ${text}\n`)

  log(`${quick ? "quick" : "full"} run on Node ${process.version}`)
  for (const [name, reason] of Object.entries(noema.missing)) log(`${name}: ${reason}`)

  const results: Record<string, number> = {}
  // Start-up first, while the machine is quiet; the big in-memory context last.
  if (selected("startup")) {
    log("start-up")
    Object.assign(results, Startup.run(noema, config.startup))
  }
  if (selected("inproc")) {
    log("in-process framework overhead")
    Object.assign(results, await InProcess.run(noema, config.inProcess))
  }
  if (selected("http")) {
    log("HTTP against the local OpenAI wire-format server")
    Object.assign(results, await Http.run(noema, config.http))
  }
  if (selected("providers")) {
    log(
      "providers against the local Anthropic wire-format server: noema vs @anthropic-ai/sdk, the bridge vs @ai-sdk/anthropic"
    )
    Object.assign(results, await Providers.run(noema, config.http.latency))
  }
  if (selected("store")) {
    log("SQLite sessions")
    Object.assign(results, await Store.run(noema, config.store))
  }
  if (selected("postgres")) {
    log("PostgreSQL sessions (a server started from npm, or NOEMA_TEST_PG_URL's)")
    Object.assign(results, await StorePostgres.run(noema, config.postgres))
  }
  if (selected("runtime")) {
    log("the runtime: interruption against the local server, triggers delivered")
    Object.assign(results, await RuntimeBench.run(config.runtime))
  }
  if (selected("resources")) {
    log("resources: prefix lookups at two store sizes, Cedar with 500 policies, exact vector search")
    Object.assign(results, await ResourcesBench.run(config.resources))
  }
  if (selected("planner")) {
    log("the planner: a 20-task tree with an instant model, 64 leaves with 8 in parallel")
    Object.assign(results, await PlannerBench.run(config.planner))
  }
  if (selected("serve")) {
    log("serve: noema serve's panel from a cold start, 1,000 sessions and 10,000 messages, in Chromium")
    Object.assign(results, await ServeBench.run(config.serve))
  }
  if (selected("runs")) {
    log("runs: one stage's overhead with an instant model, 100 small runs on SQLite and PostgreSQL")
    Object.assign(results, await RunsBench.run(config.runs))
  }
  if (selected("cluster")) {
    log("runs on effect/cluster runners beside claim workers: 3 processes each, on PostgreSQL")
    Object.assign(
      results,
      await ClusterBench.run({
        runs: 60,
        rounds: 5,
        approvals: 5,
        countStatements: process.env.NOEMA_BENCH_COUNT_SQL === "1"
      })
    )
  }
  if (selected("context")) {
    log("context views over 1,000,000 messages")
    Object.assign(results, await Context.run(config.context))
  }
  log("done")

  const rounded = Report.round(results)
  process.stdout.write(`${Report.render(rounded, noema, only === undefined ? undefined : new Set(only))}\n`)
  // A partial run (--only) must not replace the full set of figures unless asked to.
  const out =
    values.out ??
    (only === undefined ? fileURLToPath(new URL("../results.json", import.meta.url)) : undefined)
  if (out === undefined) {
    process.stdout.write("\nPartial run (--only): results.json left as it was; pass --out FILE to save.\n")
  } else {
    writeFileSync(out, `${JSON.stringify(rounded, null, 2)}\n`)
    process.stdout.write(`\nWrote ${out}\n`)
  }
}

await main()
