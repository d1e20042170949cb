/**
 * Cluster: runs on effect/cluster runners (`noema worker --engine cluster`)
 * beside the claims engine (`noema worker`), on one PostgreSQL, in one run:
 * real worker processes of the CLI, three of each, each side in its own schema.
 *
 * - `runs.cluster3_per_s` vs `runs.claims3_per_s`: runs of the default pipeline
 *   (2 stages, the offline model: the machinery, not a model) created in bulk
 *   while three workers run, from the first run's start to the last one's end
 *   (the timeline's own times, so process start-up is not in it). Both sides'
 *   workers run from the start and the sides take turns, round after round, so
 *   the machine's load changing falls on both; the figure is the median round.
 *   Each round prints on stderr where its time went (CPU a run of the workers and
 *   of PostgreSQL, the medians of each step of a run, the runs each worker started).
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
  /** Runs per round of the throughput figure. */
  readonly runs: number
  /** Rounds each side runs, taking turns; the figure is the median. */
  readonly rounds: number
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
  /** The PostgreSQL server's main process (its backends are its children), for their CPU time. */
  readonly postmaster: number
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

/** Waits (bounded by rounds) until every run of `runIds` is completed; fails on a failed run. */
const allCompleted = async (store: RunsStore.Service, runIds: ReadonlySet<string>) => {
  for (let round = 0; round < 6000; round++) {
    const runs = (await runPromise(store.listRuns())).filter((run) => runIds.has(run.runId))
    check(!runs.some((run) => run.status === "failed" || run.status === "canceled"), "a bench run failed")
    if (runs.length === runIds.size && runs.every((run) => run.status === "completed")) return runs
    await pause(50)
  }
  throw new Error("the bench runs did not complete")
}

const offline = ["-m", "offline", "--no-tools"]

/**
 * What the workers do while no run is under way, per millisecond: statements (when counted),
 * PostgreSQL's CPU (both sides' workers) and each side's workers' CPU (polls, lock refreshes).
 */
interface Idle {
  readonly statements: number
  readonly postgresCpu: number
  readonly workersCpu: ReadonlyMap<Side, number>
}

const idleRates = async (
  sides: ReadonlyArray<Side>,
  workers: ReadonlyMap<Side, ReadonlyArray<Worker>>,
  counter: SqlCounter.Counter | undefined
): Promise<Idle> => {
  const postmaster = sides[0]!.postmaster
  const pidsOf = (side: Side) => workers.get(side)!.map((worker) => worker.child.pid!)
  counter?.reset()
  const cpuBefore = postgresCpu(postmaster)
  const workersBefore = new Map(sides.map((side) => [side, sumCpu(pidsOf(side))]))
  const start = Date.now()
  await pause(5000)
  const elapsed = Date.now() - start
  return {
    statements: counter === undefined ? 0 : total(counter.counts()) / elapsed,
    postgresCpu: (postgresCpu(postmaster) - cpuBefore) / elapsed,
    workersCpu: new Map(
      sides.map((side) => [side, (sumCpu(pidsOf(side)) - workersBefore.get(side)!) / elapsed])
    )
  }
}

/**
 * One round of the throughput figure on `side`: `count` runs of the default pipeline in 20
 * threads, created at once while its three workers run; runs per second from the first run's
 * start to the last one's end (the timelines' own times). Where the time went goes to stderr.
 */
const throughputRound = async (side: Side, workers: ReadonlyArray<Worker>, count: number, idle: Idle) => {
  side.counter?.reset()
  const busyStart = Date.now()
  const cpuBefore = {
    workers: sumCpu(workers.map((w) => w.child.pid!)),
    postgres: postgresCpu(side.postmaster)
  }
  const creator = Executor.make({ store: side.store, workspace: side.workspace, model: OfflineModel.make() })
  const created = await runPromise(
    Effect.gen(function* () {
      const threads = yield* Effect.forEach(Array.from({ length: 20 }), () =>
        side.store.createThread({ queuePolicy: "enqueue" })
      )
      const ids = new Set<string>()
      for (let i = 0; i < count; i++)
        ids.add(
          (yield* creator.create({
            threadId: threads[i % threads.length]!.id,
            request: `request ${i}`,
            pipeline: Pipeline.defaultPipeline
          })).runId
        )
      return ids
    })
  )
  const runs = await allCompleted(side.store, created)
  const elapsed = Date.now() - busyStart
  const first = Math.min(...runs.map((run) => Date.parse(run.startedAt!)))
  const last = Math.max(...runs.map((run) => Date.parse(run.finishedAt!)))
  const perSecond = count / ((last - first) / 1000)
  const cpu = {
    workers:
      sumCpu(workers.map((w) => w.child.pid!)) - cpuBefore.workers - idle.workersCpu.get(side)! * elapsed,
    postgres: postgresCpu(side.postmaster) - cpuBefore.postgres - idle.postgresCpu * elapsed
  }
  process.stderr.write(
    `[cluster] ${side.engine}: ${perSecond.toFixed(1)} runs/s; CPU a run beyond the idle workers' (ms, from /proc): the 3 workers ${(cpu.workers / count).toFixed(1)}, PostgreSQL ${(cpu.postgres / count).toFixed(1)}\n`
  )
  await breakdown(side, runs, last - first, workers)
  if (side.counter === undefined) return { perSecond }
  const counts = side.counter.counts()
  const top = [...counts].sort((a, b) => b[1] - a[1]).slice(0, 25)
  process.stderr.write(
    `[cluster] ${side.engine}: ${total(counts)} statements for ${count} runs (idle ${(idle.statements * 1000).toFixed(1)}/s)\n${top
      .map(([text, n]) => `  ${(n / count).toFixed(2).padStart(7)}  ${text.slice(0, 160)}`)
      .join("\n")}\n`
  )
  return { perSecond, statementsPerRun: (total(counts) - idle.statements * elapsed) / count }
}

/**
 * Where the throughput runs' time went, from their timelines (stderr): the medians of each
 * step of a run and of the gap before a thread's next run, and how busy the workers' slots were.
 */
const breakdown = async (
  side: Side,
  runs: ReadonlyArray<Run.RunView>,
  window: number,
  workers: ReadonlyArray<Worker>
) => {
  // A worker's progress lines start with the run's id: the runs each one carried.
  const carried = workers.map(
    (worker) => runs.filter((run) => worker.stdout.includes(`${run.runId}  ▸ 01-`)).length
  )
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
    `[cluster] ${side.engine}: ${runs.length} runs in ${window} ms (the workers started ${carried.join(", ")} of them), runs under way ${(busy / window).toFixed(1)} on average; medians (ms): ${[
      ...steps
    ]
      .map(([name, values]) => `${name} ${median(values)}`)
      .join(", ")}\n`
  )
}

/** CPU time (ms) a process has used so far, from /proc (Linux); 0 where it is gone or unreadable. */
const cpuMs = (pid: number): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    // After the command's closing parenthesis: state, ppid, ..., utime (14th field), stime (15th).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) * (1000 / clockTicks)
  } catch {
    return 0
  }
}
const clockTicks = 100
const sumCpu = (pids: ReadonlyArray<number>) => pids.reduce((sum, pid) => sum + cpuMs(pid), 0)

/** A process's parent; 0 where it cannot be read (a server on another machine: NOEMA_TEST_PG_URL). */
const parentOf = (pid: number | string): number => {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
  } catch {
    return 0
  }
}

/** The server's CPU time: its main process and every backend and helper it started. */
const postgresCpu = (postmaster: number) => {
  if (postmaster === 0) return 0
  const children = fs
    .readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name) && parentOf(name) === postmaster)
  return cpuMs(postmaster) + sumCpu(children.map(Number))
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
    const sides: Array<Side> = []
    for (const engine of ["claims", "cluster"] as const) {
      // Each side in its own schema of the one server; the backend's parent is the server.
      const postmaster: number = await runPromise(
        Effect.scoped(
          Effect.flatMap(Layer.build(Database.layer({ kind: "postgres", url: base })), (context) =>
            Effect.provideContext(
              Effect.flatMap(SqlClient.SqlClient, (sql) =>
                Effect.andThen(
                  sql.unsafe(`CREATE SCHEMA ${engine}`),
                  Effect.map(sql.unsafe<{ readonly pid: number }>("SELECT pg_backend_pid() AS pid"), (rows) =>
                    parentOf(rows[0]!.pid)
                  )
                )
              ),
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
      sides.push({
        engine,
        postmaster,
        storage: ["--database", counter?.url(url) ?? url, "--workspace", workspace],
        store,
        workspace,
        ...(counter !== undefined && { counter })
      })
    }
    const workers = new Map<Side, ReadonlyArray<Worker>>()
    for (const side of sides) {
      const started = [
        await startWorker(side, offline),
        await startWorker(side, offline),
        await startWorker(side, offline)
      ]
      children.push(...started.map((worker) => worker.child))
      workers.set(side, started)
    }
    // The runners settle their shards (and the claim workers their first poll) before the runs come.
    await pause(3000)
    const idle = await idleRates(sides, workers, counter)
    // The sides take turns (claims first, then cluster first, ...), so a change in the machine's
    // load falls on both alike; each figure is the median of its rounds.
    const perSecond = new Map<Side, Array<number>>()
    const statements = new Map<Side, Array<number>>()
    for (let round = 0; round < options.rounds; round++)
      for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
        const figures = await throughputRound(side, workers.get(side)!, options.runs, idle)
        perSecond.set(side, [...(perSecond.get(side) ?? []), figures.perSecond])
        if (figures.statementsPerRun !== undefined)
          statements.set(side, [...(statements.get(side) ?? []), figures.statementsPerRun])
      }
    for (const side of sides) {
      results[`runs.${side.engine}3_per_s`] = median(perSecond.get(side)!)
      if (statements.has(side))
        results[`runs.${side.engine}_statements_per_run`] = median(statements.get(side)!)
      results[`runs.${side.engine}_approve_to_start_ms`] = await approveToStart(side, options.approvals)
      results[`runs.${side.engine}_failover_ms`] = await failover(side, workers.get(side)!, server)
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
