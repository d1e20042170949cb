/**
 * Cluster: runs on effect/cluster runners (`noema worker --engine cluster`)
 * beside the claims engine (`noema worker`), on one PostgreSQL, in one run:
 * real worker processes of the CLI, three of each, each side in its own schema.
 *
 * - `runs.cluster3_per_s` vs `runs.claims3_per_s`: runs of the default pipeline
 *   (2 stages, the offline model: the machinery, not a model) created in bulk
 *   while three workers run, from the first run's start to the last one's end
 *   (the timeline's own times, so process start-up is not in it).
 * - `runs.cluster_approve_to_start_ms` vs `runs.claims_approve_to_start_ms`: a run
 *   waiting for approval, `noema runs approve` run as a command; from its
 *   ApprovalGranted to the stage's StageStarted in the timeline (median).
 * - `runs.cluster_failover_ms` vs `runs.claims_failover_ms`: the worker carrying a
 *   run's slow stage is killed with SIGKILL; from the kill to the stage's next
 *   attempt starting in another worker.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { OfflineModel } from "@noema/cli"
import { OpenAiTestServer } from "@noema/openai/testing"
import { Executor, Pipeline, type Run, type RunsStore, SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { check, median, postgresDatabase } from "./Harness.ts"
import * as SqlCounter from "./SqlCounter.ts"

export interface ClusterOptions {
  readonly runs: number
  readonly approvals: number
  /**
   * Workers reach PostgreSQL through `SqlCounter` (NOEMA_BENCH_COUNT_SQL=1), and the run gives
   * `runs.<engine>_statements_per_run` (during the throughput runs, less what the idle workers
   * executed in as long before them) and prints the statements most executed on stderr. The
   * proxy slows both sides, so take the throughput figures from a run without it.
   */
  readonly countStatements?: boolean
}

type EngineName = "claims" | "cluster"

const bin = fileURLToPath(new URL("../../packages/noema-cli/bin/noema.js", import.meta.url))
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const probe = net.createServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as net.AddressInfo
      probe.close(() => resolve(port))
    })
  })

interface Side {
  readonly engine: EngineName
  readonly storage: ReadonlyArray<string>
  readonly store: RunsStore.Service
  readonly workspace: string
  readonly counter?: SqlCounter.Counter
}

interface Worker {
  readonly child: ChildProcess
  stdout: string
}

const startWorker = async (side: Side, model: ReadonlyArray<string>): Promise<Worker> => {
  const runner =
    side.engine === "cluster"
      ? ["--engine", "cluster", "--runner-host", "127.0.0.1", "--runner-port", String(await freePort())]
      : []
  // NOEMA_BENCH_CPU_PROF=<dir>: each worker writes its CPU profile there when it stops (SIGTERM).
  const profile = process.env.NOEMA_BENCH_CPU_PROF
  const profiling = profile === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profile}`]
  const child = spawn(process.execPath, [...profiling, bin, "worker", ...runner, ...side.storage, ...model], {
    env: { ...process.env, NO_COLOR: "1", NOEMA_HOME: side.workspace },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const worker: Worker = { child, stdout: "" }
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    worker.stdout += chunk
  })
  child.stderr!.resume()
  for (let round = 0; round < 1500 && !worker.stdout.includes("noema worker:"); round++) await pause(20)
  check(worker.stdout.includes("noema worker:"), `a ${side.engine} worker did not start`)
  return worker
}

const cli = (side: Side, args: ReadonlyArray<string>) =>
  new Promise<number>((resolve) => {
    const child = spawn(
      process.execPath,
      [bin, ...args, ...(side.engine === "cluster" ? ["--engine", "cluster"] : []), ...side.storage],
      { env: { ...process.env, NO_COLOR: "1", NOEMA_HOME: side.workspace }, stdio: "ignore" }
    )
    child.on("exit", (code) => resolve(code ?? 1))
  })

const runPromise = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

/** Waits (bounded by rounds) until every run of the store is completed; fails on a failed run. */
const allCompleted = async (store: RunsStore.Service, count: number) => {
  for (let round = 0; round < 6000; round++) {
    const runs = await runPromise(store.listRuns())
    check(!runs.some((run) => run.status === "failed" || run.status === "canceled"), "a bench run failed")
    if (runs.length >= count && runs.every((run) => run.status === "completed")) return runs
    await pause(50)
  }
  throw new Error("the bench runs did not complete")
}

const offline = ["-m", "offline", "--no-tools"]

const throughput = async (side: Side, count: number) => {
  const workers = [
    await startWorker(side, offline),
    await startWorker(side, offline),
    await startWorker(side, offline)
  ]
  // The runners settle their shards (and the claim workers their first poll) before the runs come.
  await pause(3000)
  const idleStart = Date.now()
  side.counter?.reset()
  await pause(side.counter === undefined ? 0 : 3000)
  const idle = side.counter === undefined ? 0 : total(side.counter.counts()) / (Date.now() - idleStart)
  side.counter?.reset()
  const busyStart = Date.now()
  const creator = Executor.make({ store: side.store, workspace: side.workspace, model: OfflineModel.make() })
  await runPromise(
    Effect.gen(function* () {
      const threads = yield* Effect.forEach(Array.from({ length: 20 }), () =>
        side.store.createThread({ queuePolicy: "enqueue" })
      )
      for (let i = 0; i < count; i++)
        yield* creator.create({
          threadId: threads[i % threads.length]!.id,
          request: `request ${i}`,
          pipeline: Pipeline.defaultPipeline
        })
    })
  )
  const runs = await allCompleted(side.store, count)
  const first = Math.min(...runs.map((run) => Date.parse(run.startedAt!)))
  const last = Math.max(...runs.map((run) => Date.parse(run.finishedAt!)))
  const perSecond = count / ((last - first) / 1000)
  await breakdown(side, runs, last - first)
  if (side.counter === undefined) return { workers, perSecond }
  const counts = side.counter.counts()
  const busy = total(counts) - idle * (Date.now() - busyStart)
  const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 25)
  process.stderr.write(
    `[cluster] ${side.engine}: ${total(counts)} statements for ${count} runs (idle ${(idle * 1000).toFixed(1)}/s)\n${top
      .map(([text, n]) => `  ${(n / count).toFixed(2).padStart(7)}  ${text.slice(0, 160)}`)
      .join("\n")}\n`
  )
  return { workers, perSecond, statementsPerRun: busy / count }
}

/**
 * Where the throughput runs' time went, from their timelines (stderr): the medians of each
 * step of a run and of the gap before a thread's next run, and how busy the workers' slots were.
 */
const breakdown = async (side: Side, runs: ReadonlyArray<Run.RunView>, window: number) => {
  const steps = new Map<string, Array<number>>()
  const add = (name: string, ms: number) => steps.set(name, [...(steps.get(name) ?? []), ms])
  let busy = 0
  const byThread = new Map<string, Array<{ started: number; finished: number }>>()
  for (const run of runs) {
    const events = await runPromise(side.store.events(run.runId))
    const at = (type: string, position?: number) =>
      Date.parse(
        events.find(
          (event) =>
            event.data.type === type &&
            (position === undefined || ("position" in event.data && event.data.position === position))
        )?.at ?? ""
      )
    const started = at("RunStarted")
    const finished = at("RunCompleted")
    busy += finished - started
    add("started to stage 1", at("StageStarted", 1) - started)
    add("stage 1", at("StageCompleted", 1) - at("StageStarted", 1))
    add("stage 1 to stage 2", at("StageStarted", 2) - at("StageCompleted", 1))
    add("stage 2", at("StageCompleted", 2) - at("StageStarted", 2))
    add("stage 2 to completed", finished - at("StageCompleted", 2))
    byThread.set(run.threadId, [...(byThread.get(run.threadId) ?? []), { started, finished }])
  }
  for (const list of byThread.values()) {
    list.sort((a, b) => a.started - b.started)
    for (let i = 1; i < list.length; i++)
      add("completed to thread's next run", list[i]!.started - list[i - 1]!.finished)
  }
  process.stderr.write(
    `[cluster] ${side.engine}: ${runs.length} runs in ${window} ms, runs under way ${(busy / window).toFixed(1)} on average; medians (ms): ${[
      ...steps
    ]
      .map(([name, values]) => `${name} ${median(values)}`)
      .join(", ")}\n`
  )
}

const total = (counts: ReadonlyMap<string, number>) => [...counts.values()].reduce((sum, n) => sum + n, 0)

const gated: Pipeline.Pipeline = {
  name: "gated",
  stages: [{ key: "gate", instructions: "Say yes.", tools: [], approval: true }]
}

const approveToStart = async (side: Side, samples: number) => {
  const creator = Executor.make({ store: side.store, workspace: side.workspace, model: OfflineModel.make() })
  const times: Array<number> = []
  for (let n = 0; n < samples; n++) {
    const run = await runPromise(
      Effect.gen(function* () {
        const thread = yield* side.store.createThread({})
        return yield* creator.create({ threadId: thread.id, request: `gated ${n}`, pipeline: gated })
      })
    )
    for (let round = 0; round < 1200; round++) {
      if ((await runPromise(side.store.getRun(run.runId))).status === "waiting_approval") break
      await pause(25)
    }
    // On the claims engine the command carries the run on (so it needs the model); on the
    // cluster it is a client, and the owning runner keeps the run's model (--model is refused).
    check(
      await cli(side, ["runs", "approve", run.runId, ...(side.engine === "claims" ? offline : [])]).then(
        (code) => code === 0
      ),
      "approve failed"
    )
    const events = await runPromise(side.store.events(run.runId))
    const granted = events.find((event) => event.data.type === "ApprovalGranted")!
    const started = events.find((event) => event.data.type === "StageStarted")!
    times.push(Date.parse(started.at) - Date.parse(granted.at))
  }
  return median(times)
}

const failover = async (side: Side, workers: ReadonlyArray<Worker>, server: OpenAiTestServer.TestServer) => {
  // The offline workers stop; three on a slow model take their place.
  for (const worker of workers) worker.child.kill("SIGTERM")
  const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
  const slow = [
    await startWorker(side, model),
    await startWorker(side, model),
    await startWorker(side, model)
  ]
  await pause(3000)
  const thread = await runPromise(side.store.createThread({}))
  check((await cli(side, ["run", "slow", "--thread", thread.id, "--detach", ...model])) === 0, "run failed")
  let victim: Worker | undefined
  for (let round = 0; round < 3000 && victim === undefined; round++) {
    victim = slow.find((worker) => /▸ 01-/.test(worker.stdout))
    if (victim === undefined) await pause(10)
  }
  check(victim !== undefined, "no worker started the slow stage")
  victim!.child.kill("SIGKILL")
  const killedAt = Date.now()
  const runId = (await runPromise(side.store.listRuns())).find((run) => run.threadId === thread.id)!.runId
  for (let round = 0; round < 6000; round++) {
    const events = await runPromise(side.store.events(runId))
    const next = events.find((event) => event.data.type === "StageStarted" && event.data.attempt === 2)
    if (next !== undefined) {
      for (const worker of slow) worker.child.kill("SIGKILL")
      return Date.parse(next.at) - killedAt
    }
    await pause(20)
  }
  throw new Error("the killed worker's run was not carried on")
}

export const run = async (options: ClusterOptions): Promise<Record<string, number>> => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-cluster-"))
  const { url: base, release } = await postgresDatabase({ prefix: "noema_bench_cluster" })
  const server = await OpenAiTestServer.start()
  server.setFallback(() => ({ type: "text", text: "a slow answer", delayMs: 4000 }))
  const results: Record<string, number> = {}
  const children: Array<ChildProcess> = []
  // Each side's store pool, closed at the end: an open pool keeps the bench process alive.
  const pools: Array<Scope.Closeable> = []
  const served = new URL(base)
  const counter =
    options.countStatements === true
      ? await SqlCounter.start({ host: served.hostname, port: Number(served.port) })
      : undefined
  try {
    for (const engine of ["claims", "cluster"] as const) {
      // Each side in its own schema of the one server.
      await runPromise(
        Effect.scoped(
          Effect.flatMap(Layer.build(Database.layer({ kind: "postgres", url: base })), (context) =>
            Effect.provideContext(
              Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`CREATE SCHEMA ${engine}`)),
              context
            )
          )
        )
      )
      const url = TestDatabase.withSearchPath(base, engine)
      const workspace = path.join(directory, engine)
      const pool = Scope.makeUnsafe()
      pools.push(pool)
      const store = await runPromise(
        Effect.flatMap(
          Layer.buildWithScope(Database.layer({ kind: "postgres", url, maxConnections: 4 }), pool),
          (context) => Effect.provideContext(SqlRunsStore.fromDatabase, context)
        )
      )
      const side: Side = {
        engine,
        storage: ["--database", counter?.url(url) ?? url, "--workspace", workspace],
        store,
        workspace,
        ...(counter !== undefined && { counter })
      }
      const { workers, perSecond, statementsPerRun } = await throughput(side, options.runs)
      children.push(...workers.map((worker) => worker.child))
      results[`runs.${engine}3_per_s`] = perSecond
      if (statementsPerRun !== undefined) results[`runs.${engine}_statements_per_run`] = statementsPerRun
      results[`runs.${engine}_approve_to_start_ms`] = await approveToStart(side, options.approvals)
      results[`runs.${engine}_failover_ms`] = await failover(side, workers, server)
    }
  } finally {
    for (const child of children) child.kill("SIGKILL")
    for (const pool of pools) await runPromise(Scope.close(pool, Exit.void))
    await counter?.close()
    await server.close()
    await release()
    fs.rmSync(directory, { recursive: true, force: true })
  }
  return results
}
