/**
 * `noema worker` processes sharing runs on PostgreSQL: one is killed with
 * SIGKILL in the middle of a stage, the other finishes every run; each stage
 * attempt runs once, and a thread's runs never overlap.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { OpenAiTestServer } from "@noema/openai/testing"
import { TestDatabase } from "@noema/testing-postgres"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, type RunJson, removeHome, runCli } from "./support/cli.js"

let home: string
let server: OpenAiTestServer.TestServer
let database: TestDatabase.TestDatabase
/** A fresh schema of the test database for one test. */
const databaseUrl = (prefix: string) => database.schema(prefix)
const children: Array<ChildProcess> = []

beforeAll(async () => {
  home = makeHome()
  server = await OpenAiTestServer.start()
  database = await TestDatabase.make({ prefix: "noema_workers" })
})
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL")
  await server.close()
  await database?.drop()
  removeHome(home)
})

describe("noema worker on PostgreSQL", () => {
  it("two workers share the runs; one killed mid-stage, the other finishes every run exactly once per attempt", async () => {
    server.setFallback(() => ({ type: "text", text: "a careful answer", delayMs: 300 }))
    const env = { NOEMA_HOME: path.join(home, "workers") }
    const storage = ["--database", database.url, "--workspace", path.join(home, "shared-workspace")]
    const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
    const cli = (args: ReadonlyArray<string>) => runCli([...args, ...storage], { env, timeoutMs: 90_000 })

    const queued = (await cli(["threads", "create", "--queue", "enqueue"])).stdout.trim()
    const other = (await cli(["threads", "create"])).stdout.trim()
    const another = (await cli(["threads", "create"])).stdout.trim()
    const runIds: Array<string> = []
    for (const [thread, request] of [
      [queued, "first in the queue"],
      [queued, "second in the queue"],
      [queued, "third in the queue"],
      [other, "alone"],
      [another, "alone too"]
    ] as const) {
      const created = await cli(["run", request, "--thread", thread, "--detach", ...model])
      expect(created.code, created.stderr).toBe(0)
      runIds.push(created.stdout.trim())
    }

    const start = (name: string) => {
      const child = spawn(process.execPath, [binPath, "worker", "--concurrency", "2", ...storage, ...model], {
        env: cleanEnv({ ...env, NO_COLOR: "1" }),
        stdio: ["ignore", "pipe", "pipe"]
      })
      children.push(child)
      const out = { name, child, stdout: "", stderr: "" }
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        out.stdout += chunk
      })
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
        out.stderr += chunk
      })
      return out
    }
    const a = start("a")
    // A stage under way in worker a, not finished: the moment to kill it.
    // Bounded by rounds, not by the clock: a busy machine only makes each round slower.
    for (let round = 0; round < 3000 && !/▸ \d\d-/.test(a.stdout); round++)
      await new Promise((r) => setTimeout(r, 20))
    expect(a.stdout).toMatch(/▸ \d\d-/)
    const b = start("b")
    await new Promise((r) => setTimeout(r, 100))
    a.child.kill("SIGKILL")
    const killedAfter = a.stdout

    let runs: ReadonlyArray<RunJson> = []
    for (let round = 0; round < 600; round++) {
      runs = JSON.parse((await cli(["runs", "list", "--json"])).stdout) as ReadonlyArray<RunJson>
      if (runs.length === runIds.length && runs.every((run) => run.status === "completed")) break
      await new Promise((r) => setTimeout(r, 200))
    }
    b.child.kill("SIGTERM")
    expect(
      runs.map((run) => run.status),
      `worker a:\n${killedAfter}\nworker b:\n${b.stdout}\n${b.stderr}`
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
    expect(interrupted).toBeGreaterThanOrEqual(1)
    // Worker b took over what a was doing.
    expect(b.stdout).toMatch(/\(attempt 2\)/)

    // A thread's runs one after another, in their order.
    const inQueue = runs.filter((run) => run.thread_id === queued).reverse()
    expect(inQueue).toHaveLength(3)
    for (let n = 1; n < inQueue.length; n++)
      expect(inQueue[n]!.started_at! >= inQueue[n - 1]!.finished_at!).toBe(true)

    for (const runId of runIds) {
      const verified = await cli(["runs", "verify", runId])
      expect(verified.code, verified.stdout).toBe(0)
    }
  }, 600_000)

  for (const backend of ["SQLite", "PostgreSQL"] as const)
    it(`${backend}: workers killed at random moments, again and again; every run completes, each stage once`, async () => {
      server.setFallback(() => ({ type: "text", text: "a careful answer", delayMs: 300 }))
      const env = { NOEMA_HOME: path.join(home, `random-${backend}`) }
      const database = backend === "SQLite" ? [] : ["--database", await databaseUrl(`random`)]
      const storage = [...database, "--workspace", path.join(home, `random-${backend}-workspace`)]
      const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
      const cli = (args: ReadonlyArray<string>) => runCli([...args, ...storage], { env, timeoutMs: 90_000 })
      const queued = (await cli(["threads", "create", "--queue", "enqueue"])).stdout.trim()
      const alone = (await cli(["threads", "create", "--queue", "enqueue"])).stdout.trim()
      const runIds: Array<string> = []
      for (let n = 0; n < 6; n++)
        runIds.push(
          (
            await cli(["run", `request ${n}`, "--thread", n % 2 === 0 ? queued : alone, "--detach", ...model])
          ).stdout.trim()
        )
      const seed = Math.floor(Math.random() * 2 ** 31)
      let state = seed
      const random = () => {
        state = (state * 1103515245 + 12345) % 2 ** 31
        return state / 2 ** 31
      }
      let kills = 0
      let runs: ReadonlyArray<RunJson> = []
      const list = async () =>
        JSON.parse((await cli(["runs", "list", "--json"])).stdout) as ReadonlyArray<RunJson>
      const allCompleted = () => runs.every((run) => run.status === "completed")
      // Eight workers killed with SIGKILL after a random while, then one left to finish.
      // Bounded by rounds, not by the clock: a busy machine only makes each round slower.
      for (let round = 0; round <= 8; round++) {
        runs = await list()
        if (allCompleted()) break
        const worker = spawn(
          process.execPath,
          [binPath, "worker", "--concurrency", "3", ...storage, ...model],
          {
            env: cleanEnv({ ...env, NO_COLOR: "1" }),
            stdio: ["ignore", "ignore", "pipe"]
          }
        )
        children.push(worker)
        if (round < 8) await new Promise((resolve) => setTimeout(resolve, 400 + Math.floor(random() * 900)))
        else
          for (let poll = 0; poll < 600 && !allCompleted(); poll++) {
            await new Promise((resolve) => setTimeout(resolve, 200))
            runs = await list()
          }
        worker.kill("SIGKILL")
        await new Promise((resolve) => worker.once("exit", resolve))
        kills++
        // After every kill, whatever is on disk is whole and agrees with the timeline.
        for (const runId of runIds) {
          const verified = await cli(["runs", "verify", runId])
          expect(verified.code, `seed ${seed}, after kill ${kills}: ${verified.stdout}`).toBe(0)
        }
      }
      expect(
        runs.map((run) => run.status),
        `seed ${seed}`
      ).toEqual(runIds.map(() => "completed"))
      expect(kills).toBeGreaterThanOrEqual(2)
      for (const run of runs)
        for (const stage of run.stages) {
          expect(
            stage.attempts.filter((attempt) => attempt.status === "completed"),
            `seed ${seed}`
          ).toHaveLength(1)
          for (const attempt of stage.attempts.slice(0, -1))
            expect(attempt.error?.error_code).toBe("interrupted")
        }
      const inQueue = runs.filter((run) => run.thread_id === queued).reverse()
      for (let n = 1; n < inQueue.length; n++)
        expect(inQueue[n]!.started_at! >= inQueue[n - 1]!.finished_at!, `seed ${seed}`).toBe(true)
    }, 600_000)
})
