import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Fiber, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Executor from "../src/Executor.js"
import * as PlanPipeline from "../src/PlanPipeline.js"
import type { RunView, Thread } from "../src/Run.js"
import * as RunFiles from "../src/RunFiles.js"
import * as RunsStore from "../src/RunsStore.js"
import * as Server from "../src/Server.js"
import * as Worker from "../src/Worker.js"

// biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked by the assertions
type Json = any

const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-server-"))
let server: Server.Server
let store: RunsStore.Service
let stop: () => Promise<void>

beforeAll(async () => {
  store = await Effect.runPromise(RunsStore.makeMemory())
  const model = ScriptedChatModel.make({
    fallback: (request) =>
      request.request.responseFormat?.type === "json-schema" && request.request.responseFormat.name === "plan"
        ? JSON.stringify({
            thoughts: "t",
            goal: "a planned note",
            steps: [
              { title: "Collect", detail: "the facts" },
              { title: "Write", detail: "the note" }
            ]
          })
        : request.request.tools?.some((tool) => tool.name === "write_artifact") &&
            !request.messages.some((m) => m.role === "tool")
          ? {
              toolCalls: [
                {
                  name: "write_artifact",
                  arguments: { path: "note.md", content: "# Note\n\nmade by a stage\n" }
                }
              ]
            }
          : "done"
  })
  const executor = Executor.make({ store, workspace, model })
  const scope = await Effect.runPromise(Scope.make())
  const { worker, fiber } = await Effect.runPromise(
    Effect.gen(function* () {
      const worker = yield* Worker.make({ store, executor, pollMs: 50 })
      const fiber = yield* Effect.forkDetach(worker.run)
      return { worker, fiber }
    }).pipe(Scope.provide(scope))
  )
  server = await Server.start({
    store,
    executor,
    workspace,
    wake: worker.wake,
    feedPollMs: 20,
    plan: (request, approval) => PlanPipeline.plan(request, model, { approval })
  })
  stop = async () => {
    await server.close()
    await Effect.runPromise(Fiber.interrupt(fiber))
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
})
afterAll(async () => {
  await stop?.()
  fs.rmSync(workspace, { recursive: true, force: true })
})

const call = async (method: string, route: string, body?: unknown) => {
  const response = await fetch(`${server.url}${route}`, {
    method,
    ...(body !== undefined && { headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
  })
  return { status: response.status, body: (await response.json()) as Json }
}

const until = async <A>(f: () => Promise<A | undefined>, what: string): Promise<A> => {
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    const value = await f()
    if (value !== undefined) return value
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`timed out waiting for ${what}`)
}

const statusOf = async (runId: string) => (await call("GET", `/api/runs/${runId}`)).body.run as RunView

const approval = {
  name: "gated",
  stages: [
    { key: "draft", instructions: "Draft it." },
    { key: "publish", instructions: "Publish it.", approval: true }
  ]
}

/** Reads SSE frames from /api/events until `count` run events arrived. */
const readEvents = (count: number, lastEventId?: string) =>
  new Promise<Array<{ id: string; data: Json }>>((resolve, reject) => {
    const url = new URL(`${server.url}/api/events`)
    const request = http.get(
      url,
      { headers: lastEventId === undefined ? {} : { "last-event-id": lastEventId } },
      (response) => {
        let buffer = ""
        const frames: Array<{ id: string; data: Json }> = []
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => {
          buffer += chunk
          let end = buffer.indexOf("\n\n")
          while (end >= 0) {
            const block = buffer.slice(0, end)
            buffer = buffer.slice(end + 2)
            const id = /^id: (.*)$/m.exec(block)?.[1]
            const data = /^data: (.*)$/m.exec(block)?.[1]
            if (id !== undefined && data !== undefined) frames.push({ id, data: JSON.parse(data) })
            if (frames.length >= count) {
              request.destroy()
              resolve(frames)
              return
            }
            end = buffer.indexOf("\n\n")
          }
        })
      }
    )
    request.on("error", (error) => {
      if (!(error as NodeJS.ErrnoException).code?.startsWith("ECONNRESET")) reject(error)
    })
  })

describe("runs server (JSON API, SSE, worker)", () => {
  it("serves the panel page, and refuses other hosts and non-JSON posts", async () => {
    const page = await fetch(server.url)
    expect(page.status).toBe(200)
    expect(page.headers.get("content-type")).toMatch(/^text\/html/)
    expect(await page.text()).toContain("<title>noema runs</title>")
    const rebinding = await new Promise<number>((resolve) =>
      http.get(`${server.url}/api/threads`, { headers: { host: "evil.example:80" } }, (r) => {
        r.resume()
        resolve(r.statusCode ?? 0)
      })
    )
    expect(rebinding).toBe(421)
    const form = await fetch(`${server.url}/api/threads`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "title=x"
    })
    expect(form.status).toBe(415)
    expect((await call("GET", "/api/nothing")).status).toBe(404)
    const badPath = await fetch(`${server.url}/api/runs/%E0%A4%A`)
    expect(badPath.status).toBe(400)
  })

  it("a run with approval: created over HTTP, waits, approved, completed by the worker; live over SSE", async () => {
    const thread = (await call("POST", "/api/threads", { title: "panel", queue_policy: "enqueue" }))
      .body as Thread
    expect(thread.queuePolicy).toBe("enqueue")
    const live = readEvents(4)
    const created = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "write a note",
      pipeline: approval
    })
    expect(created.status).toBe(201)
    const runId = (created.body as RunView).runId
    const waiting = await until(async () => {
      const run = await statusOf(runId)
      return run.status === "waiting_approval" ? run : undefined
    }, "waiting_approval")
    expect(waiting.stages.map((s) => s.status)).toEqual(["completed", "waiting_approval"])
    const frames = await live
    expect(frames.map((f) => f.data.type)).toEqual([
      "RunQueued",
      "RunStarted",
      "StageStarted",
      "ArtifactPublished"
    ])
    expect(frames.every((f) => f.data.run_id === runId)).toBe(true)

    const approved = await call("POST", `/api/runs/${runId}/approve`, { by: "ana" })
    expect(approved.status).toBe(200)
    const done = await until(async () => {
      const run = await statusOf(runId)
      return run.status === "completed" ? run : undefined
    }, "completed")
    const artifact = done.stages[1]!.attempts[0]!.artifacts[0]!
    const file = await fetch(`${server.url}/api/runs/${runId}/stages/2/attempts/1/artifacts/${artifact.path}`)
    expect(file.status).toBe(200)
    expect(file.headers.get("x-sha256")).toBe(artifact.sha256)
    expect(file.headers.get("x-sha256-matches")).toBe("true")
    expect(await file.text()).toBe("# Note\n\nmade by a stage\n")
    const detail = (await call("GET", `/api/runs/${runId}`)).body
    expect(detail.workflow).toEqual({
      executionId: `${runId}/1`,
      completed: true,
      interrupted: false,
      activities: ["stage/1/attempt/1", "request-approval/2", "stage/2/attempt/1", "complete"],
      deferreds: ["approval/2"]
    })
    expect(detail.events.map((e: Json) => e.data.type)).toContain("ApprovalGranted")
    expect(detail.events.find((e: Json) => e.data.type === "ApprovalGranted").data.by).toBe("ana")
    expect((await call("GET", `/api/runs/${runId}/verify`)).body.ok).toBe(true)
    // The file on disk is the one the API served.
    const onDisk = path.join(RunFiles.stagePath(workspace, runId, 2, "publish"), "artifacts", artifact.path)
    expect(RunFiles.sha256(fs.readFileSync(onDisk))).toBe(artifact.sha256)

    // A reconnecting client gets what it missed after its Last-Event-ID.
    const replay = await readEvents(2, frames[3]!.id)
    expect(replay.map((f) => f.data.type)).toEqual(["StageCompleted", "ApprovalRequested"])
  })

  it("clear errors: unknown run, a refused transition, a bad pipeline, a path outside the artifacts", async () => {
    expect((await call("GET", "/api/runs/run_nope")).status).toBe(404)
    const thread = (await call("POST", "/api/threads", {})).body as Thread
    const bad = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "x",
      pipeline: { name: "p", stages: [{ key: "Bad Key" }] }
    })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe("PipelineError")
    expect(bad.body.error.message).toMatch(/stages\[0\]\.key/)
    expect(bad.body.error.message).toMatch(/stages\[0\]\.instructions/)
    const missing = await call("POST", "/api/runs", { thread_id: thread.id })
    expect(missing.status).toBe(400)
    expect(missing.body.error.message).toBe("request is required (a non-empty string)")
    const unknownThread = await call("POST", "/api/runs", { thread_id: "thr_nope", request: "x" })
    expect(unknownThread.status).toBe(404)
    const brokenJson = await fetch(`${server.url}/api/threads`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{nope"
    })
    expect(brokenJson.status).toBe(400)

    const run = (await call("POST", "/api/runs", { thread_id: thread.id, request: "a note" })).body as RunView
    const done = await until(async () => {
      const view = await statusOf(run.runId)
      return view.status === "completed" ? view : undefined
    }, "completed")
    const refused = await call("POST", `/api/runs/${run.runId}/approve`, {})
    expect(refused.status).toBe(409)
    expect(refused.body.error.code).toBe("IllegalTransition")
    const outside = await fetch(
      `${server.url}/api/runs/${run.runId}/stages/1/attempts/1/artifacts/..%2F..%2Frun.json`
    )
    expect(outside.status).toBe(404)
    expect(done.status).toBe("completed")
    const closed = await call("POST", `/api/threads/${thread.id}/close`, {})
    expect(closed.body.status).toBe("closed")
    const refusedRun = await call("POST", "/api/runs", { thread_id: thread.id, request: "more" })
    expect(refusedRun.status).toBe(409)
    expect(refusedRun.body.error.code).toBe("ThreadClosed")
  })

  it("reject fails the run; retry asks again; cancel ends it", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as Thread
    const run = (
      await call("POST", "/api/runs", { thread_id: thread.id, request: "gate", pipeline: approval })
    ).body as RunView
    await until(
      async () => ((await statusOf(run.runId)).status === "waiting_approval" ? true : undefined),
      "waiting"
    )
    expect((await call("POST", `/api/runs/${run.runId}/reject`, {})).status).toBe(400)
    const rejected = await call("POST", `/api/runs/${run.runId}/reject`, { reason: "not yet" })
    expect(rejected.body.status).toBe("failed")
    expect(rejected.body.error.error_code).toBe("approval_rejected")
    expect((await call("POST", `/api/runs/${run.runId}/retry`, {})).status).toBe(200)
    await until(
      async () => ((await statusOf(run.runId)).status === "waiting_approval" ? true : undefined),
      "again"
    )
    const canceled = await call("POST", `/api/runs/${run.runId}/cancel`, {})
    expect(canceled.body.status).toBe("canceled")
    expect((await call("GET", `/api/runs?thread=${thread.id}`)).body.map((r: RunView) => r.status)).toEqual([
      "canceled"
    ])
  })

  it("plan: true makes the stages from the model's plan, with approval as asked", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as Thread
    const both = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "x",
      plan: true,
      pipeline: approval
    })
    expect(both.status).toBe(400)
    const created = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "a planned note",
      plan: true,
      approve: "all"
    })
    expect(created.status).toBe(201)
    const run = created.body as RunView
    expect(run.pipeline).toBe("plan")
    expect(run.stages.map((s) => [s.key, s.needsApproval])).toEqual([
      ["collect", true],
      ["write", true]
    ])
    await until(
      async () => ((await statusOf(run.runId)).status === "waiting_approval" ? true : undefined),
      "gate"
    )
    expect(
      (await call("POST", "/api/runs", { thread_id: "thr_nope", request: "x", plan: true })).status
    ).toBe(404)
  })
})
