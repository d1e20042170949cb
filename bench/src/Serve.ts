/**
 * Serve: how soon `noema serve` shows its panel, from a cold start, over a
 * store with many sessions.
 *
 * The store (a SQLite file) holds 1,000 sessions and 10,000 messages. Each
 * round starts `noema serve` afresh (a new process, nothing cached) and opens
 * the Sessions view in headless Chromium (launched once, before the rounds):
 *
 * - `serve.first_paint_ms`: from the page's navigation (the tokened address)
 *   to the first page of the sessions list drawn in it; beside it, the same
 *   page of the list fetched from the API alone (`serve.list_api_ms`, the
 *   floor: what the data costs without the page).
 * - `serve.cold_start_ms`: from the process's start to its printed address.
 * - `serve.plan_paint_ms`: a plan of 300 tasks (100 with 2 subtasks each, every
 *   one elected among 4 assistants, done, with its output) opened in the Plans
 *   view, from the navigation to its whole tree drawn; beside it, the same tree
 *   fetched from the API alone (`serve.plan_api_ms`).
 *
 * - `serve.chat_turn_ms`: in the Chat view, from Enter to the stored answer
 *   drawn (the offline model: a tool call and its answer), beside the same
 *   turn through the API alone (`serve.chat_turn_api_ms`: the message posted,
 *   the stream read to `turn-ended`, the stored turn read), the floor. The
 *   round's chats are deleted again, so every round sees the same store.
 *
 * The list is paginated (50 a page), so the page's cost does not grow with
 * the store; the target is a first paint under a second.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Message } from "@noema/core"
import { Resource, SqlResourceStore } from "@noema/resources"
import { SqlStore } from "@noema/session"
import { Database } from "@noema/sql"
import { Effect } from "effect"
import { check, median, now } from "./Harness.ts"

export interface ServeOptions {
  readonly rounds: number
}

const sessionCount = 1000
const messagesPerSession = 10
const cliBin = fileURLToPath(new URL("../../packages/noema-cli/dist/bin.js", import.meta.url))

/** 1,000 sessions of 10 messages in the database at `filename`. */
const seed = (filename: string) =>
  Effect.runPromise(
    Effect.gen(function* () {
      const store = yield* SqlStore.fromDatabase
      for (let index = 0; index < sessionCount; index++)
        yield* store.create({
          title: `session ${index}: about tea and the weather`,
          messages: Array.from({ length: messagesPerSession / 2 }, (_, turn) => [
            Message.user(`question ${turn} of session ${index}`),
            Message.assistant(`answer ${turn}: a few sentences of an ordinary reply.`, {
              usage: { inputTokens: 100, outputTokens: 20, totalTokens: 120 }
            })
          ]).flat()
        })
    }).pipe(Effect.provide(Database.layer({ kind: "sqlite", filename })))
  )

const planTopTasks = 100
const planSubtasks = 2
const planTaskCount = planTopTasks * (1 + planSubtasks)

/** A plan of `planTaskCount` tasks, done, each with its assignment and output; its request's URN. */
const seedPlan = (filename: string) =>
  Effect.runPromise(
    Effect.gen(function* () {
      const store = yield* SqlResourceStore.fromDatabase
      const assistants = ["researcher", "writer", "analyst", "generalist"].map((name) =>
        Resource.make("assistant", { name, purpose: `the ${name}` })
      )
      const conversation = Resource.make("conversation", { name: "a long plan" })
      const request = Resource.make("message", {
        name: "request",
        parent: conversation.meta.urn,
        role: "user",
        content: "Write a long report"
      })
      const resources: Array<Resource.Resource> = [...assistants, conversation, request]
      const task = (parent: string, position: number): Resource.Task => {
        const elected = assistants[position % assistants.length] as Resource.Assistant
        const made = Resource.make("task", {
          name: `${position}. part ${position} of the report`,
          parent,
          purpose: "write a part of the report",
          evaluation: "the part is written",
          status: "done",
          position,
          completedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, position)).toISOString(),
          assignment: {
            assistant: elected.meta.urn,
            score: 0.8,
            by: "similarity",
            candidates: assistants.map((assistant, index) => ({
              assistant: assistant.meta.urn,
              score: 0.8 - index / 10
            }))
          }
        })
        resources.push(
          made,
          Resource.make("message", {
            name: "2026-01-01T00:00:00.000Z output",
            parent: made.meta.urn,
            role: "assistant",
            content: `Part ${position} is written.\n\n## Notes\n- a **point**\n- another`
          })
        )
        return made
      }
      for (let top = 1; top <= planTopTasks; top++) {
        const parent = task(request.meta.urn, top)
        for (let sub = 1; sub <= planSubtasks; sub++) task(parent.meta.urn, sub)
      }
      for (const resource of resources) yield* store.put(resource)
      return request.meta.urn
    }).pipe(Effect.provide(Database.layer({ kind: "sqlite", filename })))
  )

interface Started {
  readonly child: ChildProcess
  readonly url: string
  readonly panel: string
  readonly token: string
  readonly startMs: number
}

/** `noema serve` on a free port over `home`, and how long it took to print its address. */
const startServe = (home: string): Promise<Started> =>
  new Promise((resolve, reject) => {
    const started = now()
    const child = spawn(process.execPath, [cliBin, "serve", "--port", "0", "--json", "--no-worker"], {
      env: { PATH: process.env.PATH ?? "", NOEMA_HOME: home, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
    })
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      if (!stdout.includes("\n")) return
      const { url, panel, token } = JSON.parse(stdout.split("\n")[0] ?? "") as Omit<
        Started,
        "child" | "startMs"
      >
      resolve({ child, url, panel, token, startMs: now() - started })
    })
    child.on("exit", (code) => reject(new Error(`noema serve exited with ${code}: ${stderr}`)))
  })

/** One turn through the API alone: a new chat, its stream followed to `turn-ended`, the stored turn read. */
const apiTurn = async (served: Started): Promise<{ readonly ms: number; readonly id: string }> => {
  const headers = { authorization: `Bearer ${served.token}` }
  const post = (route: string, body: unknown) =>
    fetch(`${served.url}${route}`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json", origin: served.url },
      body: JSON.stringify(body)
    })
  const { session_id: id } = (await (await post("/api/chat", {})).json()) as { readonly session_id: string }
  const events = await fetch(`${served.url}/api/chat/${id}/events`, { headers })
  const reader = events.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>
  const started = now()
  await post(`/api/chat/${id}/messages`, { text: "what is 2+2?" })
  let seen = ""
  for (let reads = 0; reads < 1000 && !seen.includes('"turn-ended"'); reads++)
    seen += new TextDecoder().decode((await reader.read()).value)
  await (await fetch(`${served.url}/api/sessions/${id}`, { headers })).json()
  const ms = now() - started
  await reader.cancel()
  check(seen.includes('"outcome":"completed"'), `the API's turn completed: ${seen.slice(-200)}`)
  return { ms, id }
}

const deleteSessions = (filename: string, ids: ReadonlyArray<string>) =>
  Effect.runPromise(
    Effect.gen(function* () {
      const store = yield* SqlStore.fromDatabase
      for (const id of ids) yield* store.delete(id)
    }).pipe(Effect.provide(Database.layer({ kind: "sqlite", filename })))
  )

const stop = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    child.removeAllListeners("exit")
    child.once("exit", () => resolve())
    child.kill("SIGTERM")
  })

export const run = async (options: ServeOptions): Promise<Record<string, number>> => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-serve-"))
  // Before the import: @sparticuz/chromium then unpacks its own libraries and fonts.
  process.env.AWS_LAMBDA_JS_RUNTIME ??= "nodejs24.x"
  const chromium = (await import("@sparticuz/chromium")).default
  const { chromium: playwright } = await import("playwright-core")
  const browser = await playwright.launch({
    executablePath: await chromium.executablePath(),
    args: [],
    headless: true
  })
  try {
    await seed(path.join(home, "noema.db"))
    const plan = await seedPlan(path.join(home, "noema.db"))
    const planPaints: Array<number> = []
    const planFetches: Array<number> = []
    const paints: Array<number> = []
    const lists: Array<number> = []
    const starts: Array<number> = []
    const chatTurns: Array<number> = []
    const apiTurns: Array<number> = []
    for (let round = 0; round < options.rounds; round++) {
      const served = await startServe(home)
      try {
        starts.push(served.startMs)
        const page = await browser.newPage({ viewport: { width: 1360, height: 900 } })
        const navigated = now()
        await page.goto(`${served.panel}#view=sessions`)
        await page.waitForSelector("#sessions li a", { timeout: 60_000 })
        paints.push(now() - navigated)
        const range = await page.textContent("#sessions-range")
        check(
          range === `1–50 of ${sessionCount}`,
          `the list shows the first page of ${sessionCount}: ${range}`
        )
        await page.close()
        const fetched = now()
        const response = await fetch(`${served.url}/api/sessions?offset=0&limit=50`, {
          headers: { authorization: `Bearer ${served.token}` }
        })
        const body = (await response.json()) as { readonly total: number }
        lists.push(now() - fetched)
        check(body.total === sessionCount, "the API lists every session")
        const chat = await browser.newPage({ viewport: { width: 1100, height: 860 } })
        await chat.goto(`${served.panel}#view=chat`)
        await chat.waitForSelector("#view-chat:not([hidden])")
        await chat.focus("#chat-input")
        await chat.keyboard.type("what is 2+2?")
        const sent = now()
        await chat.keyboard.press("Enter")
        const answer = '#chat-turns [data-kind="assistant"] .answer'
        await chat.waitForSelector(answer, { timeout: 60_000 })
        chatTurns.push(now() - sent)
        check((await chat.textContent(answer)) === "2 + 2 = 4", "the page's turn is answered")
        const pageSession = new URLSearchParams(new URL(chat.url()).hash.slice(1)).get("session") ?? ""
        await chat.close()
        const api = await apiTurn(served)
        apiTurns.push(api.ms)
        await deleteSessions(path.join(home, "noema.db"), [pageSession, api.id])
        const planPage = await browser.newPage({ viewport: { width: 1360, height: 900 } })
        const opened = now()
        await planPage.goto(`${served.panel}#view=plans&plan=${encodeURIComponent(plan)}`)
        await planPage.waitForSelector(`#plan-tasks li.task:nth-child(${planTaskCount})`, { timeout: 60_000 })
        planPaints.push(now() - opened)
        await planPage.close()
        const treeFetched = now()
        const tree = await fetch(`${served.url}/api/plans/tree?urn=${encodeURIComponent(plan)}`, {
          headers: { authorization: `Bearer ${served.token}` }
        })
        const drawn = (await tree.json()) as { readonly tasks: ReadonlyArray<unknown> }
        planFetches.push(now() - treeFetched)
        check(drawn.tasks.length === planTaskCount, `the API sends the plan's ${planTaskCount} tasks`)
      } finally {
        await stop(served.child)
      }
    }
    return {
      "serve.first_paint_ms": median(paints),
      "serve.list_api_ms": median(lists),
      "serve.cold_start_ms": median(starts),
      "serve.chat_turn_ms": median(chatTurns),
      "serve.chat_turn_api_ms": median(apiTurns),
      "serve.plan_paint_ms": median(planPaints),
      "serve.plan_api_ms": median(planFetches)
    }
  } finally {
    await browser.close()
    fs.rmSync(home, { recursive: true, force: true })
  }
}
