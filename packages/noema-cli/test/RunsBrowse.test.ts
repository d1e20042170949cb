/**
 * Browsing and recovering runs as a user expects, through `noema`: a run whose
 * process died is shown interrupted (and a thread it holds says how to go on),
 * `threads set-queue` changes what a busy thread does with a request, run and
 * thread ids take any unique prefix, and every `--json` output has the files'
 * snake_case keys.
 */
import { spawnSync } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"
import { type RunsStore, SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { Effect } from "effect"
import { assert, describe, it } from "vitest"
import { offlineNoticeLine, runCli, useServerAndHome } from "./support/cli.js"

const frame = useServerAndHome()

const envFor = (name: string) => ({ NOEMA_HOME: path.join(frame.home, name) })

/** Writes to the runs store in `home`'s database, as another process would. */
const inStore = <A, E>(home: string, effect: (store: RunsStore.Service) => Effect.Effect<A, E>) =>
  Effect.runPromise(
    Effect.flatMap(SqlRunsStore.fromDatabase, effect).pipe(
      Effect.provide(Database.layer({ kind: "sqlite", filename: path.join(home, "noema.db") }))
    )
  )

/**
 * A run in its second stage, claimed by `owner` (`<host>/<pid>/<random>`), as a `noema run`
 * of that process leaves it: the run's id.
 */
const runningRun = (home: string, threadId: string, owner: string) =>
  inStore(home, (store) =>
    Effect.gen(function* () {
      const run = yield* store.createRun({
        threadId,
        request: "a report",
        pipeline: "default",
        stages: [
          { key: "brief", position: 1, needsApproval: false },
          { key: "result", position: 2, needsApproval: false }
        ],
        claim: { owner, ttlMs: 3_600_000 }
      })
      yield* store.append(run.runId, [
        { type: "RunStarted" },
        { type: "StageStarted", position: 1, attempt: 1 },
        { type: "StageCompleted", position: 1, attempt: 1 },
        { type: "StageStarted", position: 2, attempt: 1 }
      ])
      return run.runId
    })
  )

/** A pid no process has any more. */
const deadPid = () => spawnSync(process.execPath, ["-e", ""]).pid

const threadOf = async (env: Record<string, string>, ...args: ReadonlyArray<string>) => {
  const created = await runCli(["threads", "create", ...args], { env })
  assert.equal(created.code, 0, created.stderr)
  return created.stdout.trim()
}

describe("a run whose process died", () => {
  it("is shown interrupted, with how to go on; the thread it holds says the same, and so do refusals", async () => {
    const env = envFor("dead")
    const thread = await threadOf(env, "--title", "reports")
    const runId = await runningRun(env.NOEMA_HOME, thread, `${os.hostname()}/${deadPid()}/gone`)
    const hint = `noema runs resume ${runId}, or a worker (noema worker, noema serve)`

    const shown = await runCli(["runs", "show", runId], { env })
    assert.equal(shown.code, 0, shown.stderr)
    assert.match(shown.stdout, new RegExp(`^run ${runId}  interrupted\\n`))
    assert.include(
      shown.stdout,
      `interrupted: no process carries it on (its process stopped); ${hint} carries it on`
    )
    assert.match(shown.stdout, /\n {2}01-brief {2}completed\n {4}attempt 1 {2}completed /)
    assert.match(
      shown.stdout,
      /\n {2}02-result {2}interrupted\n {4}attempt 1 {2}interrupted {2}started \d{4}-/
    )
    assert.notMatch(shown.stdout, /running/)
    const json = JSON.parse((await runCli(["runs", "show", runId, "--json"], { env })).stdout)
    assert.deepEqual(
      [json.status, json.stages[1].status, json.stages[1].attempts[0].status],
      ["interrupted", "interrupted", "interrupted"]
    )
    assert.match((await runCli(["runs", "list"], { env })).stdout, new RegExp(`^${runId}  interrupted `))

    const held = `held by run ${runId}, which was interrupted (no process carries it on): ${hint}, or cancel it`
    assert.include((await runCli(["threads", "list"], { env })).stdout, `  reports\n  ${held}\n`)
    assert.include((await runCli(["threads", "show", thread], { env })).stdout, `\n${held}\n`)
    const listed = JSON.parse((await runCli(["threads", "list", "--json"], { env })).stdout)
    assert.deepEqual(listed[0].active_run, { run_id: runId, status: "interrupted" })

    // A request on the thread (reject) is refused saying what frees it.
    const refused = await runCli(["run", "another", "--thread", thread], { env })
    assert.equal(refused.code, 1)
    assert.equal(
      refused.stderr,
      `${offlineNoticeLine}noema: Thread ${thread} is held by run ${runId}, which was interrupted (no process carries it on): carry it on with noema runs resume ${runId} (or a worker: noema worker, noema serve), or cancel it\n`
    )
    // Queued behind it (enqueue), a run says the same.
    assert.equal((await runCli(["threads", "set-queue", thread, "enqueue"], { env })).code, 0)
    const queued = await runCli(["run", "another", "--thread", thread], { env })
    assert.equal(queued.code, 4, queued.stderr)
    assert.match(
      queued.stdout,
      new RegExp(`\\nrun run_\\S+ is queued: the thread is ${held.replace(/[()]/g, "\\$&")}\\n$`)
    )
  })

  it("while its process lives, it is running, and its thread is merely busy", async () => {
    const env = envFor("alive")
    const thread = await threadOf(env)
    // This test's own process holds the claim: it is alive.
    const runId = await runningRun(env.NOEMA_HOME, thread, `${os.hostname()}/${process.pid}/here`)
    const shown = await runCli(["runs", "show", runId], { env })
    assert.match(shown.stdout, new RegExp(`^run ${runId}  running\\n`))
    assert.match(shown.stdout, /\n {4}attempt 1 {2}running {2}\d/)
    assert.notInclude(shown.stdout, "interrupted")
    assert.notInclude((await runCli(["threads", "list"], { env })).stdout, "held by")
    const refused = await runCli(["run", "another", "--thread", thread], { env })
    assert.equal(refused.code, 1)
    assert.include(refused.stderr, `already has an active run (${runId})`)
  })
})

describe("noema threads set-queue", () => {
  it("changes what a request does while a run of the thread is active, and threads list and show say it", async () => {
    const env = envFor("set-queue")
    const thread = await threadOf(env)
    const changed = await runCli(["threads", "set-queue", thread, "enqueue"], { env })
    assert.equal(changed.code, 0, changed.stderr)
    assert.match(
      changed.stdout,
      new RegExp(`^thread ${thread}: queue policy enqueue \\(a request while a run is active waits its turn`)
    )
    assert.match(
      (await runCli(["threads", "list"], { env })).stdout,
      new RegExp(`^${thread}  open    enqueue  `)
    )
    assert.include((await runCli(["threads", "show", thread], { env })).stdout, "\nqueue policy: enqueue ")
    const json = JSON.parse(
      (await runCli(["threads", "set-queue", thread, "reject", "--json"], { env })).stdout
    )
    assert.equal(json.queue_policy, "reject")
    assert.equal(
      JSON.parse((await runCli(["threads", "show", thread, "--json"], { env })).stdout).queue_policy,
      "reject"
    )

    const bad = await runCli(["threads", "set-queue", thread, "later"], { env })
    assert.equal(bad.code, 2)
    assert.include(bad.stderr, 'noema: POLICY: "later" is not valid')
    assert.equal((await runCli(["threads", "set-queue", thread], { env })).code, 2)
    const unknown = await runCli(["threads", "set-queue", "thr_nope", "enqueue"], { env })
    assert.equal(unknown.code, 1)
    assert.equal(unknown.stderr, "noema: No thread thr_nope\n")
  })
})

describe("ids by any unique prefix", () => {
  it("every runs and threads command takes a unique prefix; an ambiguous one lists a few; an unknown one is not found", async () => {
    const env = envFor("prefixes")
    const threads = [await threadOf(env), await threadOf(env), await threadOf(env), await threadOf(env)]
    const [thread, other] = threads as [string, string]
    /** The shortest prefix of `id` that no other of `ids` starts with. */
    const unique = (id: string, ids: ReadonlyArray<string>) => {
      for (let length = 1; length <= id.length; length++) {
        const prefix = id.slice(0, length)
        if (ids.every((one) => one === id || !one.startsWith(prefix))) return prefix
      }
      return id
    }
    const made = await runCli(["run", "a note", "--thread", unique(thread, threads)], { env })
    assert.equal(made.code, 0, made.stderr)
    const second = await runCli(["run", "a note", "--thread", unique(other, threads), "--detach"], { env })
    assert.equal(second.code, 0, second.stderr)
    const runs = (
      JSON.parse((await runCli(["runs", "list", "--json"], { env })).stdout) as Array<{ run_id: string }>
    ).map((run) => run.run_id)
    const [detached, completed] = runs as [string, string]
    const short = unique(completed, runs)

    assert.match(
      (await runCli(["runs", "show", short], { env })).stdout,
      new RegExp(`^run ${completed}  completed`)
    )
    assert.match((await runCli(["runs", "verify", short], { env })).stdout, /^ok: /)
    const listed = JSON.parse(
      (await runCli(["runs", "list", "--thread", unique(thread, threads), "--json"], { env })).stdout
    )
    assert.deepEqual(
      listed.map((run: { run_id: string }) => run.run_id),
      [completed]
    )
    assert.match(
      (await runCli(["threads", "show", unique(other, threads)], { env })).stdout,
      new RegExp(`^thread ${other}`)
    )
    assert.equal((await runCli(["threads", "set-queue", unique(other, threads), "enqueue"], { env })).code, 0)
    assert.equal((await runCli(["runs", "cancel", unique(detached, runs)], { env })).code, 0)
    assert.equal(
      JSON.parse((await runCli(["runs", "show", detached, "--json"], { env })).stdout).status,
      "canceled"
    )
    assert.match(
      (await runCli(["threads", "close", unique(other, threads)], { env })).stdout,
      new RegExp(`^closed ${other}\\n$`)
    )

    // Ambiguous: refused, naming three of them and how many there are.
    const sorted = [...threads].sort()
    const ambiguous = await runCli(["threads", "show", "thr_"], { env })
    assert.equal(ambiguous.code, 1)
    assert.equal(
      ambiguous.stderr,
      `noema: "thr_" matches 4 threads (${sorted.slice(0, 3).join(", ")}, …); give more of the id\n`
    )
    const runsAmbiguous = await runCli(["runs", "show", "run_"], { env })
    assert.equal(runsAmbiguous.code, 1)
    assert.equal(
      runsAmbiguous.stderr,
      `noema: "run_" matches 2 runs (${[...runs].sort().join(", ")}); give more of the id\n`
    )
    assert.equal((await runCli(["run", "x", "--thread", "thr_"], { env })).code, 1)
    // Unknown: not found, as before.
    const unknown = await runCli(["runs", "show", "run_nope"], { env })
    assert.equal(unknown.code, 1)
    assert.equal(unknown.stderr, "noema: No run run_nope\n")
  })
})

/** Every key in `value` that is not snake_case, with where it is. */
const notSnakeCase = (value: unknown, at = "$"): Array<string> =>
  Array.isArray(value)
    ? value.flatMap((item, index) => notSnakeCase(item, `${at}[${index}]`))
    : typeof value === "object" && value !== null
      ? Object.entries(value).flatMap(([key, inner]) => [
          ...(/^[a-z][a-z0-9_]*$/.test(key) ? [] : [`${at}.${key}`]),
          ...notSnakeCase(inner, `${at}.${key}`)
        ])
      : []

describe("--json: one naming style, the files' snake_case", () => {
  it("threads and runs, shown, listed, created, changed and verified, and a run's event lines", async () => {
    const env = envFor("json")
    const json = async (...args: ReadonlyArray<string>) => {
      const result = await runCli([...args, "--json"], { env })
      assert.equal(result.code, 0, `${args.join(" ")}: ${result.stderr}`)
      return result.stdout
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line))
    }
    const [thread] = await json("threads", "create", "--title", "t")
    const lines = await json("run", "a note", "--thread", thread.id)
    const runId = lines[0].run_id as string
    const outputs = {
      created: thread,
      lines,
      detached: await json("run", "a note", "--thread", thread.id, "--detach"),
      threads: await json("threads", "list"),
      shown: await json("threads", "show", thread.id),
      changed: await json("threads", "set-queue", thread.id, "enqueue"),
      runs: await json("runs", "list"),
      run: await json("runs", "show", runId),
      verify: await json("runs", "verify", runId),
      closed: await json("threads", "close", thread.id)
    }
    assert.deepEqual(notSnakeCase(outputs), [])
    const [run] = outputs.run
    assert.equal(run.run_id, runId)
    assert.equal(run.thread_id, thread.id)
    assert.equal(run.stages[0].needs_approval, false)
    assert.match(run.stages[0].attempts[0].started_at, /^\d{4}-/)
    assert.equal(run.workflow.execution_id, `${runId}/1`)
    assert.equal(outputs.verify[0].run_file, "matches")
    assert.equal(outputs.changed[0].queue_policy, "enqueue")
    assert.equal(outputs.lines.find((line) => line.type === "RunQueued").run_id, runId)
  })
})
