import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, PlanPipeline, RunFiles, RunsStore, Worker } from "@noema/runs"
import { Effect, Exit, Fiber, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import { idleExecutor } from "./support/executor.js"

// biome-ignore lint/suspicious/noExplicitAny: JSON from the API, checked by the assertions
type Json = any
/** A thread and a run as the API sends them (snake_case keys). */
type ThreadJson = Json
type RunJson = Json

const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-server-"))
let server: Server.Started
let store: RunsStore.Service
let stop: () => Promise<void>
/** What the server logged (the details of failures answered 500). */
const logged: Array<string> = []

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
    approver: "the operator",
    log: (line) => logged.push(line),
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

/** The header that lets a program in. */
const auth = () => ({ authorization: `Bearer ${server.token}` })

/** `fetch` with the access token. */
const get = (route: string, init: RequestInit = {}) =>
  fetch(`${server.url}${route}`, {
    ...init,
    headers: { ...auth(), ...(init.headers as Record<string, string>) }
  })

const call = async (method: string, route: string, body?: unknown) => {
  const response = await get(route, {
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

const statusOf = async (runId: string) => (await call("GET", `/api/runs/${runId}`)).body.run as RunJson

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
      { headers: { ...auth(), ...(lastEventId === undefined ? {} : { "last-event-id": lastEventId }) } },
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
    const page = await get("/")
    expect(page.status).toBe(200)
    expect(page.headers.get("content-type")).toMatch(/^text\/html/)
    expect(await page.text()).toContain("<title>noema runs</title>")
    const rebinding = await new Promise<number>((resolve) =>
      http.get(`${server.url}/api/threads`, { headers: { ...auth(), host: "evil.example:80" } }, (r) => {
        r.resume()
        resolve(r.statusCode ?? 0)
      })
    )
    expect(rebinding).toBe(421)
    const form = await get("/api/threads", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "title=x"
    })
    expect(form.status).toBe(415)
    expect((await call("GET", "/api/nothing")).status).toBe(404)
    const badPath = await get("/api/runs/%E0%A4%A")
    expect(badPath.status).toBe(400)
  })

  it("serves the page's modules behind the token, scripts from the server only; without sessions, says so", async () => {
    expect((await fetch(`${server.url}/app/main.js`)).status).toBe(401)
    const main = await get("/app/main.js")
    expect(main.status).toBe(200)
    expect(main.headers.get("content-type")).toMatch(/^text\/javascript/)
    expect(await main.text()).toContain('from "./sessions.js"')
    const page = await get("/")
    // No inline script may run: the page's policy allows the server's own files only.
    expect(page.headers.get("content-security-policy")).toMatch(/script-src 'self';/)
    expect(await page.text()).not.toMatch(/<script>/)
    expect((await get("/app/../package.json")).status).toBe(404)
    expect((await get("/app/nothing.js")).status).toBe(404)
    const sessions = await call("GET", "/api/sessions")
    expect(sessions.status).toBe(404)
    expect(sessions.body.error.code).toBe("NoSessionStore")
    const badLimit = await call("GET", "/api/sessions?limit=100000")
    expect(badLimit.status).toBe(400)
    expect(badLimit.body.error.message).toBe("limit must be at most 200")
  })

  it("a run with approval: created over HTTP, waits, approved, completed by the worker; live over SSE", async () => {
    const thread = (await call("POST", "/api/threads", { title: "panel", queue_policy: "enqueue" }))
      .body as ThreadJson
    expect(thread.queue_policy).toBe("enqueue")
    const live = readEvents(4)
    const created = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "write a note",
      pipeline: approval
    })
    expect(created.status).toBe(201)
    const runId = (created.body as RunJson).run_id
    const waiting = await until(async () => {
      const run = await statusOf(runId)
      return run.status === "waiting_approval" ? run : undefined
    }, "waiting_approval")
    expect(waiting.stages.map((s: Json) => s.status)).toEqual(["completed", "waiting_approval"])
    const frames = await live
    expect(frames.map((f) => f.data.type)).toEqual([
      "RunQueued",
      "RunStarted",
      "StageStarted",
      "ArtifactPublished"
    ])
    expect(frames.every((f) => f.data.run_id === runId)).toBe(true)

    // Who approved is the server's to say, never the caller's.
    const claimed = await call("POST", `/api/runs/${runId}/approve`, { by: "nobody-the-attacker" })
    expect(claimed.status).toBe(400)
    expect(claimed.body.error.message).toMatch(/records approvals as "the operator"/)
    expect((await statusOf(runId)).status).toBe("waiting_approval")
    const approved = await call("POST", `/api/runs/${runId}/approve`, {})
    expect(approved.status).toBe(200)
    const done = await until(async () => {
      const run = await statusOf(runId)
      return run.status === "completed" ? run : undefined
    }, "completed")
    const artifact = done.stages[1]!.attempts[0]!.artifacts[0]!
    const file = await get(`/api/runs/${runId}/stages/2/attempts/1/artifacts/${artifact.path}`)
    expect(file.status).toBe(200)
    expect(file.headers.get("x-sha256")).toBe(artifact.sha256)
    expect(file.headers.get("x-sha256-matches")).toBe("true")
    expect(await file.text()).toBe("# Note\n\nmade by a stage\n")
    const detail = (await call("GET", `/api/runs/${runId}`)).body
    expect(detail.workflow).toEqual({
      execution_id: `${runId}/1`,
      completed: true,
      interrupted: false,
      activities: ["stage/1/attempt/1", "request-approval/2", "stage/2/attempt/1"],
      deferreds: ["approval/2"]
    })
    expect(detail.events.map((e: Json) => e.data.type)).toContain("ApprovalGranted")
    // Each attempt names the event that started it.
    expect(detail.run.stages.map((stage: Json) => stage.attempts[0].started_event_id)).toEqual(
      detail.events.filter((e: Json) => e.data.type === "StageStarted").map((e: Json) => e.event_id)
    )
    expect(detail.events.find((e: Json) => e.data.type === "ApprovalGranted").data.by).toBe("the operator")
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
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
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
    const brokenJson = await get("/api/threads", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{nope"
    })
    expect(brokenJson.status).toBe(400)

    const run = (await call("POST", "/api/runs", { thread_id: thread.id, request: "a note" })).body as RunJson
    const done = await until(async () => {
      const view = await statusOf(run.run_id)
      return view.status === "completed" ? view : undefined
    }, "completed")
    const refused = await call("POST", `/api/runs/${run.run_id}/approve`, {})
    expect(refused.status).toBe(409)
    expect(refused.body.error.code).toBe("IllegalTransition")
    const outside = await get(`/api/runs/${run.run_id}/stages/1/attempts/1/artifacts/..%2F..%2Frun.json`)
    expect(outside.status).toBe(404)
    expect(done.status).toBe("completed")
    const closed = await call("POST", `/api/threads/${thread.id}/close`, {})
    expect(closed.body.status).toBe("closed")
    const refusedRun = await call("POST", "/api/runs", { thread_id: thread.id, request: "more" })
    expect(refusedRun.status).toBe(409)
    expect(refusedRun.body.error.code).toBe("ThreadClosed")
  })

  it("a waiting run whose run.json was changed: approve is refused with 409, naming the file, not the workspace", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
    const created = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "a note",
      pipeline: approval
    })
    const runId = (created.body as RunJson).run_id
    await until(async () => {
      const run = await statusOf(runId)
      return run.status === "waiting_approval" ? run : undefined
    }, "waiting_approval")
    const file = path.join(RunFiles.runDirectory(workspace, runId), "run.json")
    fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace("Publish", "Leak"))
    const refused = await call("POST", `/api/runs/${runId}/approve`, {})
    expect(refused.status).toBe(409)
    expect(refused.body.error.code).toBe("RunFileChanged")
    expect(refused.body.error.message).toMatch(new RegExp(`^runs/${runId}/run\\.json was changed`))
    expect(JSON.stringify(refused.body)).not.toContain(workspace)
    expect((await statusOf(runId)).status).toBe("waiting_approval")
    const cancel = await call("POST", `/api/runs/${runId}/cancel`, {})
    expect(cancel.status).toBe(200)
  })

  it("reject fails the run; retry is refused saying why, forced it asks again; cancel ends it", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
    const run = (
      await call("POST", "/api/runs", { thread_id: thread.id, request: "gate", pipeline: approval })
    ).body as RunJson
    await until(
      async () => ((await statusOf(run.run_id)).status === "waiting_approval" ? true : undefined),
      "waiting"
    )
    expect((await call("POST", `/api/runs/${run.run_id}/reject`, {})).status).toBe(400)
    const rejected = await call("POST", `/api/runs/${run.run_id}/reject`, { reason: "not yet" })
    expect(rejected.body.status).toBe("failed")
    expect(rejected.body.error.error_code).toBe("approval_rejected")
    // A rejection is not retryable: a retry is refused saying why, as the CLI's is, unless forced.
    const refused = await call("POST", `/api/runs/${run.run_id}/retry`, {})
    expect(refused.status).toBe(409)
    expect(refused.body.error.code).toBe("NotRetryable")
    expect(refused.body.error.message).toMatch(
      /failed with approval_rejected \(not yet\), which is not retryable: /
    )
    expect((await statusOf(run.run_id)).status).toBe("failed")
    expect((await call("POST", `/api/runs/${run.run_id}/retry`, { force: "yes" })).status).toBe(400)
    expect((await call("POST", `/api/runs/${run.run_id}/retry`, { force: true })).status).toBe(200)
    await until(
      async () => ((await statusOf(run.run_id)).status === "waiting_approval" ? true : undefined),
      "again"
    )
    const canceled = await call("POST", `/api/runs/${run.run_id}/cancel`, {})
    expect(canceled.body.status).toBe("canceled")
    expect((await call("GET", `/api/runs?thread=${thread.id}`)).body.map((r: RunJson) => r.status)).toEqual([
      "canceled"
    ])
  })

  it("plan: true makes the stages from the model's plan, with approval as asked", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
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
    const run = created.body as RunJson
    expect(run.pipeline).toBe("plan")
    expect(run.stages.map((s: Json) => [s.key, s.needs_approval])).toEqual([
      ["collect", true],
      ["write", true]
    ])
    await until(
      async () => ((await statusOf(run.run_id)).status === "waiting_approval" ? true : undefined),
      "gate"
    )
    expect(
      (await call("POST", "/api/runs", { thread_id: "thr_nope", request: "x", plan: true })).status
    ).toBe(404)
  })
})

/** A run of the default pipeline, completed: each stage wrote note.md. */
const completedRun = async () => {
  const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
  const run = (await call("POST", "/api/runs", { thread_id: thread.id, request: "a note" })).body as RunJson
  return until(async () => {
    const view = await statusOf(run.run_id)
    return view.status === "completed" ? view : undefined
  }, "completed")
}

/** The first stage's note.md: its place on disk and its address in the API. */
const noteOf = (run: RunJson) => {
  const stage = run.stages[0]!
  const artifacts = path.join(RunFiles.stagePath(workspace, run.run_id, 1, stage.key), "artifacts")
  return {
    artifacts,
    file: path.join(artifacts, "note.md"),
    route: `/api/runs/${run.run_id}/stages/1/attempts/1/artifacts/note.md`
  }
}

/** A file outside the workspace, with a secret in it. */
const outside = fs.mkdtempSync(path.join(os.tmpdir(), "noema-runs-outside-"))
fs.writeFileSync(path.join(outside, "note.md"), "SECRET of another user\n")
afterAll(() => fs.rmSync(outside, { recursive: true, force: true }))

/** No absolute path of this machine's in an error body. */
const expectNoPath = (text: string) => {
  expect(text).not.toContain(workspace)
  expect(text).not.toContain(fs.realpathSync(workspace))
  expect(text).not.toContain(os.tmpdir())
}

describe("runs server: only the operator gets in", () => {
  it("every route needs the token; the 401 says how to get in and never shows the token", async () => {
    const routes: Array<[string, string]> = [
      ["GET", "/"],
      ["GET", "/api/threads"],
      ["GET", "/api/runs"],
      ["GET", "/api/events"],
      ["POST", "/api/threads"],
      ["GET", "/api/nothing"]
    ]
    for (const [method, route] of routes) {
      const response = await fetch(`${server.url}${route}`, {
        method,
        ...(method === "POST" && { headers: { "content-type": "application/json" }, body: "{}" })
      })
      expect(response.status, `${method} ${route}`).toBe(401)
      expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/)
      const body = (await response.json()) as Json
      expect(body.error.code).toBe("Unauthorized")
      expect(body.error.message).toContain(`open the address noema serve printed (${server.url}/?token=…)`)
      expect(JSON.stringify(body)).not.toContain(server.token)
    }
    const wrong = await fetch(`${server.url}/api/threads`, {
      headers: { authorization: "Bearer not-the-token" }
    })
    expect(wrong.status).toBe(401)
    const longer = await fetch(`${server.url}/api/threads`, {
      headers: { authorization: `Bearer ${server.token}x` }
    })
    expect(longer.status).toBe(401)
    const jupyterStyle = await fetch(`${server.url}/api/threads`, {
      headers: { authorization: `token ${server.token}` }
    })
    expect(jupyterStyle.status).toBe(200)
    expect(server.token).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })

  it("another local user cannot approve the operator's run: no token, no approval", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
    const run = (
      await call("POST", "/api/runs", { thread_id: thread.id, request: "gate", pipeline: approval })
    ).body as RunJson
    await until(
      async () => ((await statusOf(run.run_id)).status === "waiting_approval" ? true : undefined),
      "waiting"
    )
    const attack = await fetch(`${server.url}/api/runs/${run.run_id}/approve`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ by: "nobody-the-attacker" })
    })
    expect(attack.status).toBe(401)
    const read = await fetch(`${server.url}/api/runs/${run.run_id}`)
    expect(read.status).toBe(401)
    const detail = (await call("GET", `/api/runs/${run.run_id}`)).body
    expect(detail.run.status).toBe("waiting_approval")
    expect(detail.events.map((e: Json) => e.data.type)).not.toContain("ApprovalGranted")
    expect((await call("POST", `/api/runs/${run.run_id}/cancel`, {})).status).toBe(200)
  })

  it("the tokened address sets an HttpOnly SameSite=Strict cookie and redirects to /; the cookie lets page, API and feed in", async () => {
    expect(server.panelUrl).toBe(`${server.url}/?token=${server.token}`)
    const entry = await fetch(server.panelUrl, { redirect: "manual" })
    expect(entry.status).toBe(303)
    expect(entry.headers.get("location")).toBe("/")
    const cookie = entry.headers.get("set-cookie") ?? ""
    expect(cookie).toBe(`noema-token-${server.port}=${server.token}; Path=/; HttpOnly; SameSite=Strict`)
    const jar = { cookie: cookie.split(";")[0]! }
    expect((await fetch(server.url, { headers: jar })).status).toBe(200)
    expect((await fetch(`${server.url}/api/threads`, { headers: jar })).status).toBe(200)
    const feed = await new Promise<number>((resolve) =>
      http.get(`${server.url}/api/events`, { headers: jar }, (response) => {
        resolve(response.statusCode ?? 0)
        response.destroy()
      })
    )
    expect(feed).toBe(200)
    // A cookie of a server on another port, or a wrong token in the address, gets nothing.
    const otherPort = { cookie: `noema-token-${server.port + 1}=${server.token}` }
    expect((await fetch(`${server.url}/api/threads`, { headers: otherPort })).status).toBe(401)
    const guess = await fetch(`${server.url}/?token=guess`, { redirect: "manual" })
    expect(guess.status).toBe(401)
    expect(guess.headers.get("set-cookie")).toBeNull()
  })

  it("a page of another site changes nothing; no CORS header; the panel cannot be framed", async () => {
    const before = (await call("GET", "/api/threads")).body.length
    const foreign = await get("/api/threads", {
      method: "POST",
      headers: { "content-type": "application/json", origin: "http://evil.example" },
      body: "{}"
    })
    expect(foreign.status).toBe(403)
    expect(((await foreign.json()) as Json).error.code).toBe("ForeignOrigin")
    expect((await call("GET", "/api/threads")).body.length).toBe(before)
    const own = await get("/api/threads", {
      method: "POST",
      headers: { "content-type": "application/json", origin: server.url },
      body: "{}"
    })
    expect(own.status).toBe(201)
    const read = await get("/api/threads", { headers: { origin: "http://evil.example" } })
    const preflight = await get("/api/threads", {
      method: "OPTIONS",
      headers: { origin: "http://evil.example", "access-control-request-method": "POST" }
    })
    const page = await get("/")
    for (const response of [read, preflight, page, own]) {
      expect([...response.headers.keys()].filter((name) => name.startsWith("access-control-"))).toEqual([])
      expect(response.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
      expect(response.headers.get("x-frame-options")).toBe("DENY")
    }
  })

  it("a body over the limit is answered 413 with the JSON error (a real 2 MiB POST), not a reset", async () => {
    const body = JSON.stringify({ title: "x".repeat(2 * 1024 * 1024) })
    const response = await get("/api/threads", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body
    })
    expect(response.status).toBe(413)
    const error = ((await response.json()) as Json).error
    expect(error.code).toBe("PayloadTooLarge")
    expect(error.message).toBe("the body is larger than 1048576 bytes")
    // The server still answers (on a new connection or the same one).
    expect((await call("GET", "/api/threads")).status).toBe(200)
  })

  it("requests, titles, reasons and pipelines past their bounds are refused, saying the bound", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
    const long = await call("POST", "/api/runs", { thread_id: thread.id, request: "x".repeat(100_001) })
    expect(long.status).toBe(400)
    expect(long.body.error.message).toMatch(/100001 characters, more than the 100000 a run takes/)
    const title = await call("POST", "/api/threads", { title: "t".repeat(201) })
    expect(title.status).toBe(400)
    expect(title.body.error.message).toBe("title must have at most 200 characters")
    const stages = Array.from({ length: 51 }, (_, index) => ({ key: `s${index}`, instructions: "Do it." }))
    const big = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "x",
      pipeline: { name: "p", stages }
    })
    expect(big.status).toBe(400)
    expect(big.body.error.code).toBe("PipelineError")
    expect(big.body.error.message).toMatch(/stages: 51 stages, more than the 50 allowed/)
    const run = await completedRun()
    const reason = await call("POST", `/api/runs/${run.run_id}/cancel`, { reason: "r".repeat(2001) })
    expect(reason.status).toBe(400)
    expect(reason.body.error.message).toBe("reason must have at most 2000 characters")
  })
})

describe("runs server: artifacts are regular files inside the run's directory, read without blocking", () => {
  it("a symbolic link planted in the artifacts directory is refused, not followed", async () => {
    const note = noteOf(await completedRun())
    fs.rmSync(note.file)
    fs.symlinkSync(path.join(outside, "note.md"), note.file)
    const response = await get(note.route)
    const text = await response.text()
    expect(response.status).toBe(403)
    expect(text).not.toContain("SECRET")
    expect(JSON.parse(text).error.message).toBe("artifact note.md: the artifact is a symbolic link")
    expectNoPath(text)
  })

  it("a directory on the way replaced by a link is refused", async () => {
    const note = noteOf(await completedRun())
    fs.rmSync(note.artifacts, { recursive: true })
    fs.symlinkSync(outside, note.artifacts)
    const response = await get(note.route)
    const text = await response.text()
    expect(response.status).toBe(403)
    expect(text).not.toContain("SECRET")
    expect(JSON.parse(text).error.message).toBe("artifact note.md: the path goes through a symbolic link")
    expectNoPath(text)
  })

  it("a FIFO does not stop the server: it is refused, and other requests are answered meanwhile", async () => {
    const note = noteOf(await completedRun())
    fs.rmSync(note.file)
    execFileSync("mkfifo", [note.file])
    const [fifo, threads] = await Promise.all([get(note.route), call("GET", "/api/threads")])
    expect(threads.status).toBe(200)
    expect(fifo.status).toBe(403)
    expect(((await fifo.json()) as Json).error.message).toBe(
      "artifact note.md: the artifact is not a regular file"
    )
  })

  it("a missing artifact is a 404 that names it by its relative path only", async () => {
    const note = noteOf(await completedRun())
    fs.rmSync(note.file)
    const response = await get(note.route)
    const text = await response.text()
    expect(response.status).toBe(404)
    expect(JSON.parse(text).error.message).toBe("artifact note.md: no such file")
    expectNoPath(text)
  })
})

describe("runs server: errors never show where things are", () => {
  it("a store failure is a 500 that says only that; the details, paths included, go to the log", async () => {
    const secretPath = path.join(workspace, "noema.db")
    const failing: RunsStore.Service = {
      ...store,
      getThread: () =>
        Effect.fail(
          new RunsStore.RunsStoreError({ location: secretPath, detail: `cannot open ${secretPath}` })
        )
    }
    const executor = idleExecutor(failing, workspace)
    const lines: Array<string> = []
    const other = await Server.start({ store: failing, executor, workspace, log: (line) => lines.push(line) })
    try {
      const response = await fetch(`${other.url}/api/threads/thr_x`, {
        headers: { authorization: `Bearer ${other.token}` }
      })
      const text = await response.text()
      expect(response.status).toBe(500)
      expect(JSON.parse(text).error).toEqual({
        code: "InternalError",
        message: "the server failed to answer this request (its log says why)"
      })
      expectNoPath(text)
      expect(lines.join("")).toContain(secretPath)
    } finally {
      await other.close()
    }
  })

  it("a configured token is used as given, and a weak one is refused at start", async () => {
    const executor = idleExecutor(store, workspace)
    await expect(Server.start({ store, executor, workspace, token: "short" })).rejects.toThrow(
      /the token must be 16 to 512 characters/
    )
    const other = await Server.start({ store, executor, workspace, token: "a-configured-token-0123456789" })
    try {
      expect(other.panelUrl).toBe(`${other.url}/?token=a-configured-token-0123456789`)
      const response = await fetch(`${other.url}/api/threads`, {
        headers: { authorization: "Bearer a-configured-token-0123456789" }
      })
      expect(response.status).toBe(200)
    } finally {
      await other.close()
    }
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

describe("runs server: one JSON style, snake_case, in every body and every event", () => {
  it("threads, runs, a run's detail, verify, an action's answer and the feed's frames", async () => {
    const live = readEvents(3)
    const thread = await call("POST", "/api/threads", { title: "style", queue_policy: "enqueue" })
    const created = await call("POST", "/api/runs", {
      thread_id: thread.body.id,
      request: "gated",
      pipeline: approval
    })
    const runId = created.body.run_id as string
    await until(
      async () => ((await statusOf(runId)).status === "waiting_approval" ? true : undefined),
      "waiting"
    )
    const bodies = {
      thread: thread.body,
      created: created.body,
      threads: (await call("GET", "/api/threads")).body,
      runs: (await call("GET", `/api/runs?thread=${thread.body.id}`)).body,
      detail: (await call("GET", `/api/runs/${runId}`)).body,
      verify: (await call("GET", `/api/runs/${runId}/verify`)).body,
      canceled: (await call("POST", `/api/runs/${runId}/cancel`, {})).body,
      frames: (await live).map((frame) => frame.data)
    }
    expect(notSnakeCase(bodies)).toEqual([])
    // The names the models spell in camelCase, as the files spell them.
    expect(bodies.thread.queue_policy).toBe("enqueue")
    expect(bodies.detail.run).toMatchObject({ run_id: runId, thread_id: thread.body.id })
    expect(bodies.detail.run.stages[1].needs_approval).toBe(true)
    expect(bodies.detail.workflow.execution_id).toBe(`${runId}/1`)
    expect(bodies.verify.run_file).toBe("matches")
    expect(bodies.frames[0].stages[1].needs_approval).toBe(true)
  })
})

describe("runs server: a run whose process died is shown interrupted", () => {
  it("the run, its stage and attempt, and its thread say so; a new run on the thread is refused saying how to go on", async () => {
    const own = await Effect.runPromise(RunsStore.makeMemory())
    const deadPid = spawnSync(process.execPath, ["-e", ""]).pid
    const make = (owner: string) =>
      Effect.runPromise(
        Effect.gen(function* () {
          const thread = yield* own.createThread()
          const run = yield* own.createRun({
            threadId: thread.id,
            request: "r",
            pipeline: "p",
            stages: [{ key: "draft", position: 1, needsApproval: false }],
            claim: { owner, ttlMs: 3_600_000 }
          })
          yield* own.append(run.runId, [
            { type: "RunStarted" },
            { type: "StageStarted", position: 1, attempt: 1 }
          ])
          return { threadId: thread.id, runId: run.runId }
        })
      )
    const dead = await make(`${os.hostname()}/${deadPid}/gone`)
    const live = await make(`${os.hostname()}/${process.pid}/here`)
    const executor = idleExecutor(own, workspace)
    const other = await Server.start({ store: own, executor, workspace })
    const ask = async (method: string, route: string, body?: unknown) => {
      const response = await fetch(`${other.url}${route}`, {
        method,
        headers: { authorization: `Bearer ${other.token}`, "content-type": "application/json" },
        ...(body !== undefined && { body: JSON.stringify(body) })
      })
      return { status: response.status, body: (await response.json()) as Json }
    }
    try {
      const shown = (await ask("GET", `/api/runs/${dead.runId}`)).body.run
      expect(shown.status).toBe("interrupted")
      expect(shown.stages[0].status).toBe("interrupted")
      expect(shown.stages[0].attempts[0].status).toBe("interrupted")
      // A run whose process lives is running.
      const carried = (await ask("GET", `/api/runs/${live.runId}`)).body.run
      expect([carried.status, carried.stages[0].attempts[0].status]).toEqual(["running", "running"])
      const threads = (await ask("GET", "/api/threads")).body as Array<Json>
      expect(threads.find((t) => t.id === dead.threadId).active_run).toEqual({
        run_id: dead.runId,
        status: "interrupted"
      })
      expect(threads.find((t) => t.id === live.threadId).active_run.status).toBe("running")
      expect((await ask("GET", `/api/runs?thread=${dead.threadId}`)).body[0].status).toBe("interrupted")

      const refused = await ask("POST", "/api/runs", { thread_id: dead.threadId, request: "more" })
      expect(refused.status).toBe(409)
      expect(refused.body.error).toEqual({
        code: "ThreadBusy",
        message: `Thread ${dead.threadId} is held by run ${dead.runId}, which was interrupted (no process carries it on): carry it on with noema runs resume ${dead.runId} (or a worker: noema worker, noema serve), or cancel it`
      })
      const waiting = await ask("POST", "/api/runs", { thread_id: live.threadId, request: "more" })
      expect(waiting.body.error.message).toMatch(/already has an active run/)
    } finally {
      await other.close()
    }
  })
})

describe("runs server: a thread's queue policy", () => {
  it("is changed with POST /api/threads/:id/queue-policy, and decides the next request", async () => {
    const thread = (await call("POST", "/api/threads", {})).body as ThreadJson
    const first = await call("POST", "/api/runs", {
      thread_id: thread.id,
      request: "gate",
      pipeline: approval
    })
    await until(
      async () => ((await statusOf(first.body.run_id)).status === "waiting_approval" ? true : undefined),
      "waiting"
    )
    expect((await call("POST", "/api/runs", { thread_id: thread.id, request: "next" })).status).toBe(409)
    const changed = await call("POST", `/api/threads/${thread.id}/queue-policy`, { queue_policy: "enqueue" })
    expect(changed.status).toBe(200)
    expect(changed.body).toMatchObject({
      id: thread.id,
      queue_policy: "enqueue",
      active_run: { run_id: first.body.run_id, status: "waiting_approval" }
    })
    const queued = await call("POST", "/api/runs", { thread_id: thread.id, request: "next" })
    expect([queued.status, queued.body.status]).toEqual([201, "queued"])
    const bad = await call("POST", `/api/threads/${thread.id}/queue-policy`, { queue_policy: "later" })
    expect([bad.status, bad.body.error.message]).toEqual([400, 'queue_policy must be "reject" or "enqueue"'])
    expect(
      (await call("POST", "/api/threads/thr_nope/queue-policy", { queue_policy: "enqueue" })).status
    ).toBe(404)
    await call("POST", `/api/runs/${queued.body.run_id}/cancel`, {})
    await call("POST", `/api/runs/${first.body.run_id}/cancel`, {})
  })
})

describe("runs server: the OpenAPI document", () => {
  it("is served at /api/openapi.json behind the token, from the API's one definition: every endpoint, snake_case bodies, the error shape, the token", async () => {
    expect((await fetch(`${server.url}/api/openapi.json`)).status).toBe(401)
    const response = await call("GET", "/api/openapi.json")
    expect(response.status).toBe(200)
    const document = response.body
    const methods = ["get", "post", "put", "patch", "delete"]
    const endpoints = Object.entries(document.paths as Record<string, Record<string, unknown>>).flatMap(
      ([route, item]) =>
        Object.keys(item)
          .filter((method) => methods.includes(method))
          .map((method) => `${method.toUpperCase()} ${route}`)
    )
    expect(endpoints.sort()).toEqual(
      [
        "GET /api/threads",
        "POST /api/threads",
        "GET /api/threads/{id}",
        "POST /api/threads/{id}/close",
        "POST /api/threads/{id}/queue-policy",
        "GET /api/runs",
        "POST /api/runs",
        "GET /api/runs/{id}",
        "GET /api/runs/{id}/verify",
        "GET /api/runs/{id}/stages/{position}/attempts/{attempt}/artifacts/*",
        "POST /api/runs/{id}/approve",
        "POST /api/runs/{id}/reject",
        "POST /api/runs/{id}/retry",
        "POST /api/runs/{id}/cancel",
        "GET /api/events",
        "GET /api/sessions",
        "GET /api/sessions/{id}",
        "GET /api/chat",
        "POST /api/chat",
        "GET /api/chat/{id}/events",
        "POST /api/chat/{id}/messages",
        "POST /api/chat/{id}/cancel",
        "POST /api/chat/{id}/decisions",
        "GET /api/traces",
        "GET /api/traces/{id}",
        "GET /api/plans",
        "GET /api/plans/tree",
        "GET /api/routines",
        "GET /api/routines/{id}",
        "GET /api/resources",
        "GET /api/resources/search",
        "GET /api/resources/show"
      ].sort()
    )
    const schemas = document.components.schemas
    const createRun = document.paths["/api/runs"].post
    expect(Object.keys(createRun.requestBody.content["application/json"].schema.properties)).toEqual([
      "thread_id",
      "request",
      "pipeline",
      "plan",
      "approve"
    ])
    expect(Object.keys(createRun.responses).sort()).toEqual(
      ["201", "400", "401", "403", "404", "409", "413", "415", "421", "500", "502"].sort()
    )
    expect(Object.keys(schemas.RunEncoded.properties)).toContain("run_file_sha256")
    expect(Object.keys(schemas.ThreadEncoded.properties)).toContain("queue_policy")
    expect(
      document.paths["/api/runs/{id}/retry"].post.requestBody.content["application/json"].schema.properties
    ).toHaveProperty("force")
    expect(Object.keys(document.paths["/api/events"].get.responses["200"].content)).toEqual([
      "text/event-stream"
    ])
    expect(schemas.ConflictEncoded.properties.error.properties).toHaveProperty("code")
    expect(document.security).toEqual([{ bearer: [] }, { cookie: [] }])
    expect(
      (document.paths["/api/sessions"].get.parameters as Array<{ name: string }>).map((p) => p.name).sort()
    ).toEqual(["limit", "offset", "q"])
  })
})
