/**
 * `noema worker --engine cluster`: three effect/cluster runner processes over
 * the embedded PostgreSQL carry the runs clients hand them; one is killed with
 * SIGKILL in the middle of a stage, and the others take its shards over: every
 * run completes, each stage attempt runs once (the cut-off one is recorded
 * interrupted and its stage gets a new attempt), `runs verify` is clean.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as net from "node:net"
import * as path from "node:path"
import { OpenAiTestServer } from "@noema/openai/testing"
import { TestDatabase } from "@noema/testing-postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, type RunJson, removeHome, runCli } from "./support/cli.js"

let home: string
let server: OpenAiTestServer.TestServer
let database: TestDatabase.TestDatabase
const children: Array<ChildProcess> = []

beforeAll(async () => {
  home = makeHome()
  server = await OpenAiTestServer.start()
  database = await TestDatabase.make({ prefix: "noema_cluster" })
})
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL")
  await server.close()
  await database?.drop()
  removeHome(home)
})

/** A port nobody listens on now. */
const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const probe = net.createServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as net.AddressInfo
      probe.close(() => resolve(port))
    })
  })

/** The runs whose stage a runner's output shows started and not ended (completed or failed). */
const underWay = (stdout: string) =>
  [...stdout.matchAll(/(run_\S+)\s+▸ (\d\d-\S+)/g)]
    .filter(
      ([, runId, stage]) =>
        !stdout.includes(`${runId}  ✓ ${stage}`) && !stdout.includes(`${runId}  ✗ ${stage}`)
    )
    .map(([, runId]) => runId as string)

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A `noema worker` runner on 127.0.0.1:`port` with `args`; its output gathered as it comes. */
const startRunner = (port: number, args: ReadonlyArray<string>, env: Record<string, string>) => {
  const child = spawn(
    process.execPath,
    [binPath, "worker", "--runner-host", "127.0.0.1", "--runner-port", String(port), ...args],
    { env: cleanEnv({ ...env, NO_COLOR: "1" }), stdio: ["ignore", "pipe", "pipe"] }
  )
  children.push(child)
  const out = { child, stdout: "", stderr: "" }
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    out.stdout += chunk
  })
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    out.stderr += chunk
  })
  return out
}

describe("noema worker --engine cluster", () => {
  it("is refused on SQLite with one line, before anything starts", async () => {
    const result = await runCli(["worker", "--engine", "cluster", "-m", "offline"], {
      env: { NOEMA_HOME: path.join(home, "sqlite") }
    })
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(/--engine cluster needs a PostgreSQL database/)
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
  })

  it("three runners share the runs; one killed mid-stage, its shards taken over, every run completes once per attempt", async () => {
    server.setFallback(() => ({ type: "text", text: "a careful answer", delayMs: 400 }))
    const url = await database.schema("cluster")
    const env = { NOEMA_HOME: path.join(home, "cluster"), NOEMA_RUNS_ENGINE: "cluster" }
    const storage = ["--database", url, "--workspace", path.join(home, "cluster-workspace")]
    const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
    const cli = (args: ReadonlyArray<string>) => runCli([...args, ...storage], { env, timeoutMs: 120_000 })

    const runner = async (name: string) => {
      const port = await freePort()
      return Object.assign(startRunner(port, [...storage, ...model], env), { name, port })
    }
    const runners = [await runner("a"), await runner("b"), await runner("c")]
    // Bounded by rounds, not by the clock: a busy machine only makes each round slower.
    for (let round = 0; round < 1500 && !runners.every((r) => /a cluster runner at/.test(r.stdout)); round++)
      await pause(20)
    for (const r of runners) expect(r.stdout, r.stderr).toMatch(/a cluster runner at 127\.0\.0\.1:/)

    const queued = (await cli(["threads", "create", "--queue", "enqueue"])).stdout.trim()
    const runIds: Array<string> = []
    const requests: Array<readonly [string, string]> = [
      [queued, "first in the queue"],
      [queued, "second in the queue"]
    ]
    for (let n = 0; n < 7; n++)
      requests.push([(await cli(["threads", "create"])).stdout.trim(), `alone ${n}`])
    for (const [thread, request] of requests) {
      const created = await cli(["run", request, "--thread", thread, "--detach", ...model])
      expect(created.code, created.stderr).toBe(0)
      runIds.push(created.stdout.trim())
    }

    // A stage under way in some runner, not finished: the moment to kill that runner.
    let victim: (typeof runners)[number] | undefined
    for (let round = 0; round < 3000 && victim === undefined; round++) {
      victim = runners.find((r) => underWay(r.stdout).length > 0)
      if (victim === undefined) await pause(20)
    }
    expect(victim, runners.map((r) => `${r.name}:\n${r.stdout}${r.stderr}`).join("\n")).toBeDefined()
    const killed = victim!
    killed.child.kill("SIGKILL")
    const killedAfter = killed.stdout
    // The runs whose stage the kill cut off: started in the killed runner, not completed there.
    const cutOff = underWay(killedAfter)

    let runs: ReadonlyArray<RunJson> = []
    for (let round = 0; round < 900; round++) {
      runs = JSON.parse((await cli(["runs", "list", "--json"])).stdout) as ReadonlyArray<RunJson>
      if (runs.length === runIds.length && runs.every((run) => run.status === "completed")) break
      await pause(200)
    }
    const survivors = runners.filter((r) => r !== killed)
    for (const r of survivors) r.child.kill("SIGTERM")
    const logs = runners.map((r) => `runner ${r.name}:\n${r.stdout}\n${r.stderr}`).join("\n")
    expect(
      runs.map((run) => run.status),
      logs
    ).toEqual(runIds.map(() => "completed"))

    // Every stage completed once; an attempt cut off by the kill is recorded interrupted.
    let interrupted = 0
    for (const run of runs)
      for (const stage of run.stages) {
        expect(stage.attempts.filter((attempt) => attempt.status === "completed")).toHaveLength(1)
        expect(stage.attempts.at(-1)?.status).toBe("completed")
        for (const attempt of stage.attempts.slice(0, -1)) {
          expect(attempt.error?.error_code).toBe("interrupted")
          interrupted++
        }
      }
    expect(interrupted, logs).toBeGreaterThanOrEqual(1)
    // The killed runner's shards were taken over: another runner gave the cut-off stage its new attempt.
    expect(cutOff.length, killedAfter).toBeGreaterThanOrEqual(1)
    expect(
      cutOff.some((runId) =>
        survivors.some((r) => new RegExp(`${runId}\\s+▸ \\d\\d-\\S+ \\(attempt 2\\)`).test(r.stdout))
      ),
      logs
    ).toBe(true)
    // The runs were spread: more than one runner ran stages.
    expect(runners.filter((r) => /▸ \d\d-/.test(r.stdout)).length, logs).toBeGreaterThanOrEqual(2)

    // A thread's runs one after another, in their order.
    const inQueue = runs.filter((run) => run.thread_id === queued).reverse()
    expect(inQueue).toHaveLength(2)
    expect(inQueue[1]!.started_at! >= inQueue[0]!.finished_at!).toBe(true)

    for (const runId of runIds) {
      const verified = await cli(["runs", "verify", runId])
      expect(verified.code, `${verified.stdout}${verified.stderr}`).toBe(0)
    }

    // runs show has the workflow from the cluster's message storage, as on the claims engine.
    const shown = await cli(["runs", "show", runIds[0]!, "--json"])
    expect(shown.code, shown.stderr).toBe(0)
    const workflow = (JSON.parse(shown.stdout) as { workflow: unknown }).workflow
    expect(workflow).toEqual({
      execution_id: `${runIds[0]}/1`,
      completed: true,
      interrupted: false,
      activities: ["stage/1/attempt/1", "stage/2/attempt/1"],
      deferreds: []
    })
    const text = await cli(["runs", "show", runIds[0]!])
    expect(text.stdout).toMatch(/activities recorded: stage\/1\/attempt\/1, stage\/2\/attempt\/1$/m)
    // Nothing is left for runs resume on the cluster; a --model it cannot honour there is refused.
    const resumed = await cli(["runs", "resume"])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(resumed.stderr).toMatch(/no run to resume/)
    const overridden = await cli(["runs", "resume", runIds[0]!, "-m", "offline"])
    expect(overridden.code).toBe(2)
    expect(overridden.stderr).toMatch(/--model is refused with --engine cluster/)
  }, 900_000)

  it("runs resume --engine cluster hands a run to its runner and follows it to its end", async () => {
    server.setFallback(() => ({ type: "text", text: "an answer", delayMs: 300 }))
    const url = await database.schema("resume")
    const env = { NOEMA_HOME: path.join(home, "resume") }
    const storage = ["--database", url, "--workspace", path.join(home, "resume-workspace")]
    const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
    const cli = (args: ReadonlyArray<string>) => runCli([...args, ...storage], { env, timeoutMs: 120_000 })
    const port = await freePort()
    const runner = startRunner(port, ["--engine", "cluster", ...storage, ...model], env)
    for (let round = 0; round < 1500 && !/a cluster runner at/.test(runner.stdout); round++) await pause(20)
    expect(runner.stdout).toMatch(/a cluster runner at 127\.0\.0\.1:\d+ over .*, 4 runs at a time/)
    // Created by a client of the claims engine: nobody has it until the resume (or the runner's worker) hands it over.
    const thread = (await cli(["threads", "create"])).stdout.trim()
    const created = await cli(["run", "left over", "--thread", thread, "--detach", ...model])
    expect(created.code, created.stderr).toBe(0)
    const runId = created.stdout.trim()
    const resumed = await cli(["runs", "resume", runId, "--engine", "cluster"])
    runner.child.kill("SIGTERM")
    expect(resumed.code, `${resumed.stdout}${resumed.stderr}${runner.stdout}`).toBe(0)
    expect(resumed.stdout).toContain(`resuming run ${runId}`)
    const run = JSON.parse((await cli(["runs", "show", runId, "--json"])).stdout) as RunJson & {
      workflow: { completed: boolean; activities: ReadonlyArray<string> } | null
    }
    expect(run.status).toBe("completed")
    expect(run.workflow?.activities).toEqual(["stage/1/attempt/1", "stage/2/attempt/1"])
  }, 300_000)
})
