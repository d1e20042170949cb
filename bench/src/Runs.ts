/**
 * Runs: what a run's machinery costs around the model.
 *
 * - `runs.stage_overhead_ms`: one stage with an instant model (input.json,
 *   the agent, one artifact, output.json, manifest.json, each written to a
 *   temporary file, fsynced and linked, the directories fsynced once before the
 *   manifest is linked; the events appended to the store in one commit, with the next
 *   stage's start), measured as the time
 *   of a 4-stage run divided by
 *   4, on SQLite; beside it, the same four model calls through `ToolAgent`
 *   alone (the floor).
 * - `runs.stage_fourth_ms` beside `runs.stage_second_ms`: in those same runs,
 *   the time of the 4th stage, which is given the three earlier stages' work
 *   (their answers and small artifacts: read back, hashed, counted, put whole in
 *   its prompt and named in its input.json), beside the 2nd's, given one stage's.
 *   Each is timed from its StageStarted to its StageCompleted as the executor
 *   reports them; the `_cpu_ms` figures are the process's CPU time over the same
 *   spans (without the waits for fsync, which are most of a stage's time and of
 *   its noise). What one more earlier stage adds, (4th - 2nd) / 2, bounds the
 *   hand-off of one stage's work (the store's projections of a longer run are in
 *   it too); the 4th stage's hand-off is three of it. The 1st stage is no
 *   baseline: it alone creates the run's stages/ directory and reads run.json.
 * - `runs.stage_disk_floor_ms`: in runs interleaved with those (one after each), the same
 *   durable writes by hand with `node:fs` and `node:sqlite` (`RunsFloor.ts`: the same files,
 *   fsyncs, links and commits, waiting on each other as a stage's must), divided by 4: what
 *   this disk takes for a stage's guarantees, with nothing of noema's around them. Its fsyncs
 *   are checked to be as many as noema's. Beside both, their CPU time (the process's, user and
 *   system: on this VM's ext4 an fsync is mostly paid in the kernel's time) per stage.
 * - `runs.four_stage_fsyncs` and `runs.four_stage_commits`: in those same runs, per run
 *   (its creation, start and completion included), the file and directory fsyncs noema
 *   makes (`node:fs`'s `fsync`/`fsyncSync`, counted on the real calls) and the store's
 *   commits (each write of the store is one transaction; SQLite fsyncs its WAL at each).
 * - `runs.per_s`: 100 small runs (the default pipeline: 2 stages) one after
 *   another in one thread, on SQLite and on PostgreSQL (a server started from
 *   npm, or NOEMA_TEST_PG_URL's).
 * - `runs.pg_workers_per_s`: 100 runs created in 10 threads, then carried on by
 *   two `Worker`s (4 runs at a time each, each run claimed in the store) on
 *   PostgreSQL, from the first run taken to the last completed; beside it one
 *   worker taking one run at a time.
 */
import * as fs from "node:fs"
import { createRequire, syncBuiltinESMExports } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { ToolAgent } from "@noema/agents"
import { ConversationContext, Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, Pipeline, type Run, type RunsStore, SqlRunsStore, Worker } from "@noema/runs"
import { Database } from "@noema/sql"
import { TestDatabase } from "@noema/testing-postgres"
import { Context, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { check, median, now, postgresDatabase } from "./Harness.ts"
import * as Floor from "./RunsFloor.ts"

export interface RunsOptions {
  readonly overheadRuns: number
  readonly runs: number
}

/** The pipeline of the stage rows (and of `RunsProbe.ts`): four stages, no tools, no approval. */
export const fourStages: Pipeline.Pipeline = {
  name: "four",
  stages: ["one", "two", "three", "four"].map((key) => ({
    key,
    instructions: `Do stage ${key}.`,
    tools: [],
    approval: false
  }))
}

const model = ScriptedChatModel.make({ fallback: "done: a short answer" })

/** The process's CPU time (user and system), in ms. */
const cpuNow = (): number => {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

/**
 * How long each stage took, by position, from its StageStarted to its StageCompleted: the
 * time, and the process's CPU time (the runs go one at a time, so it is the stage's; it
 * leaves out the waits for fsync, which are most of the time and most of its noise).
 */
const stageClock = () => {
  const started = new Map<string, { readonly at: number; readonly cpu: number }>()
  const byPosition = new Map<number, Array<number>>()
  const cpuByPosition = new Map<number, Array<number>>()
  const onEvent = (run: Run.RunView, event: Run.EventData) =>
    Effect.sync(() => {
      if (event.type !== "StageStarted" && event.type !== "StageCompleted") return
      const key = `${run.runId}/${event.position}`
      if (event.type === "StageStarted") {
        started.set(key, { at: now(), cpu: cpuNow() })
        return
      }
      const from = started.get(key)!
      byPosition.set(event.position, [...(byPosition.get(event.position) ?? []), now() - from.at])
      cpuByPosition.set(event.position, [...(cpuByPosition.get(event.position) ?? []), cpuNow() - from.cpu])
    })
  return { onEvent, byPosition, cpuByPosition }
}

/** What `countingFsyncs` has seen so far. */
interface FsyncCounts {
  /** The fsyncs of `node:fs` made. */
  readonly count: () => number
  /**
   * The wall time, in ms, during which at least one of them was in flight (an async fsync from
   * its call to its callback, overlapping ones counted once): the time the disk's fsyncs can
   * have held a run up, an upper bound (work may go on beside an async one).
   */
  readonly waitedMs: () => number
}

/**
 * Counts the fsyncs of `node:fs` (its ESM bindings synced, so every module sees the
 * wrapper) while `use` runs, and the time they were in flight.
 */
const countingFsyncs = async <A>(use: (counts: FsyncCounts) => Promise<A>): Promise<A> => {
  const cjs = createRequire(import.meta.url)("node:fs") as typeof fs
  const original = { fsync: cjs.fsync, fsyncSync: cjs.fsyncSync }
  let fsyncs = 0
  let inFlight = 0
  let since = 0
  let waited = 0
  const begin = () => {
    fsyncs++
    if (inFlight++ === 0) since = now()
  }
  const end = () => {
    if (--inFlight === 0) waited += now() - since
  }
  cjs.fsync = ((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
    begin()
    return original.fsync(fd, (error) => {
      end()
      callback(error)
    })
  }) as typeof fs.fsync
  cjs.fsyncSync = (fd: number) => {
    begin()
    try {
      return original.fsyncSync(fd)
    } finally {
      end()
    }
  }
  syncBuiltinESMExports()
  try {
    return await use({ count: () => fsyncs, waitedMs: () => waited })
  } finally {
    Object.assign(cjs, original)
    syncBuiltinESMExports()
  }
}

/** The store, counting its writes: each is one transaction, one commit. */
const countingCommits = (store: RunsStore.Service) => {
  let commits = 0
  const counted =
    <Args extends ReadonlyArray<unknown>, A, E>(write: (...args: Args) => Effect.Effect<A, E>) =>
    (...args: Args) =>
      Effect.tap(write(...args), () => Effect.sync(() => commits++))
  const journal = store.journal
  const service: RunsStore.Service = {
    ...store,
    createRun: counted(store.createRun),
    append: counted(store.append),
    journal: {
      ...journal,
      start: counted(journal.start),
      complete: counted(journal.complete),
      interrupt: counted(journal.interrupt),
      record: counted(journal.record)
    }
  }
  return { service, commits: () => commits }
}

const runMany = (
  store: RunsStore.Service,
  workspace: string,
  pipeline: Pipeline.Pipeline,
  count: number,
  onEvent?: Executor.Options["onEvent"],
  fsyncs: FsyncCounts = { count: () => 0, waitedMs: () => 0 },
  /** Run after each run, outside its figures (the disk floor's run, interleaved). */
  between?: (index: number) => Promise<void>
) =>
  Effect.gen(function* () {
    const counting = countingCommits(store)
    const executor = Executor.make({
      store: counting.service,
      workspace,
      model,
      ...(onEvent !== undefined && { onEvent })
    })
    const thread = yield* store.createThread({ title: "bench" })
    const times: Array<number> = []
    const fsyncsPerRun: Array<number> = []
    const fsyncWaitPerRun: Array<number> = []
    const commitsPerRun: Array<number> = []
    const cpuPerRun: Array<number> = []
    for (let i = 0; i < count; i++) {
      const [fsyncsBefore, waitedBefore, commitsBefore] = [
        fsyncs.count(),
        fsyncs.waitedMs(),
        counting.commits()
      ]
      const [started, cpu] = [now(), cpuNow()]
      const run = yield* executor.create({ threadId: thread.id, request: `request ${i}`, pipeline })
      const outcome = yield* executor.execute(run.runId, pipeline)
      times.push(now() - started)
      cpuPerRun.push(cpuNow() - cpu)
      fsyncsPerRun.push(fsyncs.count() - fsyncsBefore)
      fsyncWaitPerRun.push(fsyncs.waitedMs() - waitedBefore)
      commitsPerRun.push(counting.commits() - commitsBefore)
      check(outcome._tag === "Finished" && outcome.run.status === "completed", "bench run did not complete")
      if (between !== undefined) yield* Effect.promise(() => between(i))
    }
    return { times, cpuPerRun, fsyncsPerRun, fsyncWaitPerRun, commitsPerRun }
  })

/** 100 runs in 10 threads carried on by `workers` workers of `concurrency` each; runs per second. */
const byWorkers = (
  store: RunsStore.Service,
  workspace: string,
  count: number,
  workers: number,
  concurrency: number
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const creator = Executor.make({ store, workspace, model })
      const threads = yield* Effect.forEach(Array.from({ length: 10 }), () =>
        store.createThread({ queuePolicy: "enqueue" })
      )
      const ids: Array<string> = []
      for (let i = 0; i < count; i++) {
        const thread = threads[i % threads.length]!
        ids.push(
          (yield* creator.create({
            threadId: thread.id,
            request: `request ${i}`,
            pipeline: Pipeline.defaultPipeline
          })).runId
        )
      }
      const started = now()
      const fibers = yield* Effect.forEach(Array.from({ length: workers }), (_, n) =>
        Effect.flatMap(
          Worker.make({
            store,
            executor: Executor.make({ store, workspace, model }),
            concurrency,
            pollMs: 20,
            lease: { owner: `bench/${process.pid}/${n}` }
          }),
          (worker) => Effect.forkChild(worker.run)
        )
      )
      while (true) {
        const runs = yield* store.listRuns()
        if (runs.every((run) => run.status === "completed")) break
        check(!runs.some((run) => run.status === "failed" || run.status === "canceled"), "a bench run failed")
        yield* Effect.sleep("5 millis")
      }
      const elapsed = now() - started
      yield* Effect.forEach(fibers, Fiber.interrupt)
      return count / (elapsed / 1000)
    })
  )

const onDatabase = <A, E>(
  layer: Layer.Layer<SqlClient.SqlClient | Database.Database, unknown>,
  use: (store: RunsStore.Service) => Effect.Effect<A, E>
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const context = yield* Layer.build(layer)
      const store = yield* Effect.provideContext(SqlRunsStore.fromDatabase, context)
      return yield* use(store)
    })
  )

export const run = async (options: RunsOptions): Promise<Record<string, number>> => {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-runs-"))
  const results: Record<string, number> = {}
  const { url: pgUrl, release } = await postgresDatabase({ prefix: "noema_bench_runs" })
  try {
    await Effect.runPromise(
      Effect.gen(function* () {
        const sqlite = (name: string) =>
          Database.layer({ kind: "sqlite", filename: path.join(directory, `${name}.db`) })
        const workspace = (name: string) => path.join(directory, name)

        // One stage's overhead: a 4-stage run / 4, after a few warm-up runs; after each, the disk
        // floor's run (the same durable writes by hand), so both meet the disk in the same mood.
        const clock = stageClock()
        const floor = Floor.make(workspace("floor"), path.join(directory, "floor.db"))
        const floorTimes: Array<number> = []
        const floorCpu: Array<number> = []
        const floorFsyncs: Array<number> = []
        const overhead = yield* Effect.promise(() =>
          countingFsyncs((fsyncs) =>
            Effect.runPromise(
              onDatabase(sqlite("overhead"), (store) =>
                runMany(
                  store,
                  workspace("overhead"),
                  fourStages,
                  options.overheadRuns + 5,
                  clock.onEvent,
                  fsyncs,
                  async (index) => {
                    const [started, cpu, before] = [now(), cpuNow(), fsyncs.count()]
                    await floor.run(`run-${index}`)
                    floorTimes.push(now() - started)
                    floorCpu.push(cpuNow() - cpu)
                    floorFsyncs.push(fsyncs.count() - before)
                  }
                )
              )
            )
          )
        ).pipe(Effect.ensuring(Effect.sync(floor.close)))
        results["runs.stage_overhead_ms"] = median(overhead.times.slice(5)) / 4
        results["runs.stage_overhead_cpu_ms"] = median(overhead.cpuPerRun.slice(5)) / 4
        results["runs.stage_disk_floor_ms"] = median(floorTimes.slice(5)) / 4
        results["runs.stage_disk_floor_cpu_ms"] = median(floorCpu.slice(5)) / 4
        check(
          median(floorFsyncs) === median(overhead.fsyncsPerRun),
          `the disk floor makes noema's fsyncs (${median(floorFsyncs)} against ${median(overhead.fsyncsPerRun)} a run)`
        )
        results["runs.four_stage_fsyncs"] = median(overhead.fsyncsPerRun.slice(5))
        // Of a stage's time, what its file and directory fsyncs held it up (the disk's part).
        results["runs.stage_fsync_wait_ms"] = median(overhead.fsyncWaitPerRun.slice(5)) / 4
        results["runs.four_stage_commits"] = median(overhead.commitsPerRun.slice(5))
        // The same runs' 2nd stage (one stage's work handed to it) and 4th (three stages').
        results["runs.stage_second_ms"] = median(clock.byPosition.get(2)!.slice(5))
        results["runs.stage_fourth_ms"] = median(clock.byPosition.get(4)!.slice(5))
        results["runs.stage_second_cpu_ms"] = median(clock.cpuByPosition.get(2)!.slice(5))
        results["runs.stage_fourth_cpu_ms"] = median(clock.cpuByPosition.get(4)!.slice(5))
        const callsAlone: Array<number> = []
        for (let i = 0; i < options.overheadRuns + 5; i++) {
          const started = now()
          for (const stage of fourStages.stages) {
            const agent = ToolAgent.make({ name: stage.key, system: stage.instructions, tools: [] })
            yield* agent.execute(ConversationContext.of(Message.user(`request ${i}`)), model)
          }
          if (i >= 5) callsAlone.push((now() - started) / 4)
        }
        results["runs.stage_overhead_raw_ms"] = median(callsAlone)

        // 100 small runs, one after another.
        const perSecond = (times: ReadonlyArray<number>) =>
          times.length / (times.reduce((a, b) => a + b, 0) / 1000)
        results["runs.sqlite_per_s"] = perSecond(
          (yield* onDatabase(sqlite("many"), (store) =>
            runMany(store, workspace("many-sqlite"), Pipeline.defaultPipeline, options.runs)
          )).times
        )
        const pgLayer = Database.layer({
          kind: "postgres",
          url: TestDatabase.withSearchPath(pgUrl, "public")
        })
        results["runs.pg_per_s"] = perSecond(
          (yield* onDatabase(pgLayer, (store) =>
            runMany(store, workspace("many-pg"), Pipeline.defaultPipeline, options.runs)
          )).times
        )
        // Each in its own schema: the workers look at every run of the store.
        yield* Effect.scoped(
          Effect.gen(function* () {
            const sql = Context.get(yield* Layer.build(pgLayer), SqlClient.SqlClient)
            yield* sql.unsafe("CREATE SCHEMA IF NOT EXISTS workers")
            yield* sql.unsafe("CREATE SCHEMA IF NOT EXISTS one_worker")
          })
        )
        results["runs.pg_workers_per_s"] = yield* onDatabase(
          Database.layer({ kind: "postgres", url: TestDatabase.withSearchPath(pgUrl, "workers") }),
          (store) => byWorkers(store, workspace("workers-pg"), options.runs, 2, 4)
        )
        results["runs.pg_one_worker_per_s"] = yield* onDatabase(
          Database.layer({ kind: "postgres", url: TestDatabase.withSearchPath(pgUrl, "one_worker") }),
          (store) => byWorkers(store, workspace("one-worker-pg"), options.runs, 1, 1)
        )
      })
    )
  } finally {
    await release()
    fs.rmSync(directory, { recursive: true, force: true })
  }
  return results
}
