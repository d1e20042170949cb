/**
 * The Chat view in a real headless Chromium (one browser for the file), on a
 * session runtime (`@noema/runtime`) with a scripted model that waits at a
 * gate the test opens: a turn streamed into the page and stored, a message
 * sent while it runs queued and joining it, Stop and Escape interrupting it
 * (what was shown kept, marked interrupted), a tool call approved in the page,
 * hostile text shown as text, a turn another process added shown and
 * continued, and over the API: a client that goes away mid-turn leaves the
 * turn to finish and be stored, a full queue is refused, and a server stopped
 * mid-turn stores what it acknowledged. NOEMA_DEVUI_SCREENSHOTS=DIR saves the
 * docs' picture there.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { ToolAgent } from "@noema/agents"
import { type ChatModel, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Executor, SqlRunsStore } from "@noema/runs"
import { Runtime as AgentRuntime, Submind } from "@noema/runtime"
import { type SessionStore, SqlStore, Usage } from "@noema/session"
import { Database } from "@noema/sql"
import { type Context, Effect, Exit, Layer, Schema, Scope, Stream } from "effect"
import type { SqlClient } from "effect/sql"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import { launchChromium, openPanel, problemsOf } from "../src/testing.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-devui-chat-"))
const filename = path.join(directory, "noema.db")
let browser: Browser
let sessions: SessionStore.Service
let server: Server.Server
let scope: Scope.Closeable
let context: Context.Context<Database.Database | SqlClient.SqlClient>

/** Turns whose message starts with "slow" stream a first word, then wait here until the test opens it. */
const latch = () => {
  let resolve = () => {}
  const promise = new Promise<void>((done) => {
    resolve = done
  })
  return { promise, resolve }
}
let gate = latch()
const releaseGate = () => gate.resolve()

const lastUserText = (messages: ReadonlyArray<Message.Message>) =>
  Message.text([...messages].reverse().find((message) => message.role === "user") ?? Message.user(""))

/** Answers the last user message: a payment is a call of `pay` (it needs approval), the rest is echoed. */
const scripted = ScriptedChatModel.make({
  model: "chat-model",
  fallback: (request) => {
    const last = Array.from(request.messages).at(-1)
    if (last?.role === "tool")
      return { text: `Done: ${last.content}.`, usage: { inputTokens: 30, outputTokens: 4, totalTokens: 34 } }
    const text = lastUserText(Array.from(request.messages))
    if (/^pay/i.test(text)) return { toolCalls: [{ id: "call_pay", name: "pay", arguments: { amount: 20 } }] }
    return { text: `You said: ${text}`, usage: { inputTokens: 20, outputTokens: 3, totalTokens: 23 } }
  }
})

const model: ChatModel.Service = {
  ...scripted,
  stream: (request) =>
    /^slow/.test(lastUserText(Array.from(request.messages))) &&
    Array.from(request.messages).at(-1)?.role === "user"
      ? Stream.concat(
          Stream.make({ type: "text-delta", delta: "Working on it" } as const),
          Stream.unwrap(
            Effect.map(
              Effect.promise(() => gate.promise),
              () => scripted.stream(request)
            )
          )
        )
      : scripted.stream(request)
}

const payTool = Tool.make({
  name: "pay",
  description: "Pays an amount",
  parameters: Schema.Struct({ amount: Schema.Number }),
  needsApproval: true,
  handler: ({ amount }) => Effect.succeed(`paid ${amount}`)
})

const agent: Server.ChatAgent = {
  description: "chat-model · 1 tool",
  systemPrompt: "You are a test agent.",
  runtime: (session) =>
    AgentRuntime.make({
      session,
      model,
      subminds: [Submind.userMessages, Submind.approvalDecisions],
      agent: (steering) => ToolAgent.make({ name: "noema", tools: [payTool], steering })
    })
}

/** A server on the test's database, in its own scope (closed by the caller or at the end). */
const startServer = (options: Partial<Server.Options> = {}) =>
  Effect.gen(function* () {
    const store = yield* SqlRunsStore.fromDatabase
    return yield* Server.make({
      store,
      executor: Executor.make({ store, workspace: directory, model: scripted }),
      workspace: directory,
      sessions: yield* SqlStore.fromDatabase,
      chat: agent,
      approver: "panel (tester)",
      ...options
    })
  }).pipe(Effect.provideContext(context))

beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  context = await Effect.runPromise(
    Layer.build(Database.layer({ kind: "sqlite", filename })).pipe(Scope.provide(scope))
  )
  sessions = await Effect.runPromise(SqlStore.fromDatabase.pipe(Effect.provideContext(context)))
  server = await Effect.runPromise(startServer().pipe(Scope.provide(scope)))
  browser = await launchChromium()
}, 120_000)

afterAll(async () => {
  releaseGate()
  await browser?.close()
  if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
  fs.rmSync(directory, { recursive: true, force: true })
})

beforeEach(() => {
  releaseGate()
  gate = latch()
})

// Console errors are not problems here: the tests provoke refused requests on purpose.
const open = (hash = "#view=chat"): Promise<Page> =>
  openPanel(browser, `${server.panelUrl}${hash}`, {
    ready: "#view-chat:not([hidden])",
    viewport: { width: 1100, height: 860 },
    consoleErrors: false
  })

/** Types a message and sends it with Enter, as a person would. */
const say = async (page: Page, text: string) => {
  await page.focus("#chat-input")
  await page.keyboard.type(text)
  await page.keyboard.press("Enter")
}

const sessionOf = async (page: Page): Promise<string> => {
  await expect.poll(() => new URL(page.url()).hash, { timeout: 30_000 }).toMatch(/session=/)
  return new URLSearchParams(new URL(page.url()).hash.slice(1)).get("session") as string
}

const stored = (id: string) => Effect.runPromise(Effect.map(sessions.load(id), (session) => session.messages))

const texts = (page: Page, selector: string) =>
  page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent ?? ""))

const api = (method: string, route: string, body?: unknown) =>
  fetch(`${server.url}${route}`, {
    method,
    headers: {
      authorization: `Bearer ${server.token}`,
      ...(body !== undefined && { "content-type": "application/json", origin: server.url })
    },
    ...(body !== undefined && { body: JSON.stringify(body) })
  })

describe("the Chat view in Chromium", () => {
  it("streams a turn, queues a message sent meanwhile (it joins the turn), and shows the stored turn as the Sessions view does", async () => {
    const page = await open()
    await say(page, "slow start")
    const id = await sessionOf(page)
    await page.waitForSelector('#chat-live [data-kind="streaming"]', { timeout: 30_000 })
    expect(await page.textContent('#chat-live [data-kind="streaming"]')).toBe("Working on it")
    expect(await page.isDisabled("#chat-stop")).toBe(false)
    await say(page, "second thought")
    await page.waitForSelector("#chat-queued li", { timeout: 30_000 })
    expect(await page.textContent("#chat-queued li")).toBe("queued second thought")
    releaseGate()
    await page.waitForSelector('#chat-turns article[data-turn="1"] [data-kind="assistant"]', {
      timeout: 30_000
    })
    await expect.poll(() => page.getAttribute("body", "data-chat"), { timeout: 30_000 }).toBe("idle")
    const messages = await stored(id)
    expect(messages.map((message) => `${message.role}:${Message.text(message)}`)).toEqual([
      "user:slow start",
      "assistant:Working on itYou said: slow start",
      "user:second thought",
      "assistant:You said: second thought"
    ])
    await expect
      .poll(() => texts(page, "#chat-turns article h3"), { timeout: 30_000 })
      .toEqual(Usage.byTurn(messages).map((turn) => `turn ${turn.number} · ${Usage.format(turn.usage)}`))
    expect(await texts(page, '#chat-turns [data-kind="user"] .text')).toEqual([
      "slow start",
      "second thought"
    ])
    expect(await page.$$eval("#chat-queued li", (nodes) => nodes.length)).toBe(0)
    expect(problemsOf(page)).toEqual([])
    await page.close()
  })

  it("Stop and Escape cancel the answer as Ctrl-C does: what was shown is kept, marked interrupted", async () => {
    const page = await open()
    await say(page, "slow one")
    const id = await sessionOf(page)
    await page.waitForSelector('#chat-live [data-kind="streaming"]', { timeout: 30_000 })
    await page.keyboard.press("Escape")
    await expect
      .poll(() => page.textContent("#chat-status"), { timeout: 30_000 })
      .toBe("interrupted; what was shown is kept, marked interrupted")
    await page.waitForSelector('#chat-turns [data-kind="assistant"] .badge.s-interrupted', {
      timeout: 30_000
    })
    const answer = (await stored(id)).find((message) => message.role === "assistant")
    expect(answer && Message.text(answer)).toBe("Working on it")
    expect(answer?.metadata?.interrupted).toBe(true)
    // The Stop button does the same.
    gate = latch()
    await say(page, "slow two")
    await page.waitForSelector('#chat-live [data-kind="streaming"]', { timeout: 30_000 })
    await page.click("#chat-stop")
    await expect
      .poll(async () => (await stored(id)).filter((m) => m.metadata?.interrupted === true).length, {
        timeout: 30_000
      })
      .toBe(2)
    await page.close()
  })

  it("answers a call waiting for approval in the page, from the keyboard; the decision is recorded as the panel's", async () => {
    const page = await open()
    await say(page, "pay the bill")
    const id = await sessionOf(page)
    await page.waitForSelector('#chat-approvals [data-call-id="call_pay"]', { timeout: 30_000 })
    expect(await page.textContent('#chat-approvals [data-call-id="call_pay"] .mono')).toBe(" pay(amount=20) ")
    await screenshot(page, "dev-ui-chat.png")
    await page.focus('#chat-approvals [data-call-id="call_pay"] button[data-action="approve"]')
    await page.keyboard.press("Enter")
    await page.waitForSelector('#chat-turns details[data-call-id="call_pay"]', { timeout: 30_000 })
    await expect
      .poll(() => page.textContent('#chat-turns details[data-call-id="call_pay"] summary'), {
        timeout: 30_000
      })
      .toContain("approved by panel (tester)")
    const messages = await stored(id)
    expect(messages.filter((m) => m.role === "tool").map((m) => Message.text(m))).toEqual(["paid 20"])
    expect(Message.text(messages.at(-1) as Message.Message)).toBe("Done: paid 20.")
    expect(await page.$$eval("#chat-approvals [data-call-id]", (nodes) => nodes.length)).toBe(0)
    await page.close()
  })

  it("shows hostile text as text, streamed and stored: nothing runs, no element is made of it", async () => {
    const page = await open()
    const hostile = `<img src=x onerror="window.__pwned=1"> [x](javascript:window.__pwned=2)`
    await say(page, hostile)
    await page.waitForSelector('#chat-turns [data-kind="assistant"]', { timeout: 30_000 })
    expect(await page.textContent('#chat-turns [data-kind="user"] .text')).toBe(hostile)
    expect(await page.textContent('#chat-turns [data-kind="assistant"] .answer')).toContain(
      '<img src=x onerror="window.__pwned=1">'
    )
    expect(
      await page.$$eval(
        "#view-chat img, #view-chat script, #view-chat a[href^='javascript']",
        (n) => n.length
      )
    ).toBe(0)
    expect(await page.evaluate("window.__pwned")).toBeUndefined()
    await page.close()
  })

  it("shows a turn another process added (noema chat in a terminal) and the next turn in the page goes on from it", async () => {
    const page = await open()
    await say(page, "first from the page")
    const id = await sessionOf(page)
    await page.waitForSelector('#chat-turns article[data-turn="1"] [data-kind="assistant"]', {
      timeout: 30_000
    })
    await promisify(execFile)(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WriteTurn.ts"),
      filename,
      id,
      "from the terminal"
    ])
    await page.waitForSelector('#chat-turns article[data-turn="2"]', { timeout: 60_000 })
    expect(await page.textContent('#chat-turns article[data-turn="2"] [data-kind="user"] .text')).toBe(
      "from the terminal"
    )
    await say(page, "and from the page again")
    await page.waitForSelector('#chat-turns article[data-turn="3"] [data-kind="assistant"]', {
      timeout: 30_000
    })
    // The model saw the other process's turn: the session was read again before this turn.
    const request = scripted.requests.at(-1)
    expect(request?.messages.map((message) => Message.text(message))).toContain("from the terminal")
    expect((await stored(id)).filter((m) => m.role === "user").map((m) => Message.text(m))).toEqual([
      "first from the page",
      "from the terminal",
      "and from the page again"
    ])
    await page.close()
  })
})

/** Reads an event stream until `text` came (a bounded number of reads), and what it read. */
const readUntil = async (response: Response, text: string): Promise<string> => {
  const reader = response.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>
  let seen = ""
  for (let reads = 0; reads < 200 && !seen.includes(text); reads++) {
    const { value, done } = await reader.read()
    if (done) break
    seen += new TextDecoder().decode(value)
  }
  reader.releaseLock()
  return seen
}

describe("the chat API: bounded, and nothing acknowledged is lost", () => {
  const newChat = async () =>
    ((await (await api("POST", "/api/chat", {})).json()) as { session_id: string }).session_id

  it("a client that goes away mid-turn leaves the turn to finish; it is stored and the client is let go", async () => {
    const id = await newChat()
    // A client as a browser tab is: a connection it closes mid-turn (node:http, to close it for sure).
    const request = http.get(`${server.url}/api/chat/${id}/events`, {
      headers: { authorization: `Bearer ${server.token}` }
    })
    let seen = ""
    const arrived = new Promise<void>((resolve, reject) => {
      request.on("response", (response) => {
        expect(response.statusCode).toBe(200)
        response.setEncoding("utf8").on("data", (chunk: string) => {
          seen += chunk
          if (seen.includes("Working on it")) resolve()
        })
      })
      request.on("error", reject)
    })
    await expect.poll(() => server.chats().clients, { timeout: 30_000 }).toBe(1)
    expect((await api("POST", `/api/chat/${id}/messages`, { text: "slow and alone" })).status).toBe(202)
    await arrived
    expect(seen).toContain('"type":"state"')
    request.destroy()
    await expect.poll(() => server.chats().clients, { timeout: 30_000 }).toBe(0)
    releaseGate()
    await expect
      .poll(async () => (await stored(id).catch(() => [])).map((m) => Message.text(m)).at(-1), {
        timeout: 30_000
      })
      .toBe("Working on itYou said: slow and alone")
  })

  it("refuses a message past the queue's bound (409 QueueFull) and takes it again once the turn ended", async () => {
    const id = await newChat()
    expect((await api("POST", `/api/chat/${id}/messages`, { text: "slow first" })).status).toBe(202)
    const answers: Array<number> = []
    for (let index = 0; index < 9; index++)
      answers.push((await api("POST", `/api/chat/${id}/messages`, { text: `queued ${index}` })).status)
    expect(answers.slice(0, 8)).toEqual(Array(8).fill(202))
    const refused = await api("POST", `/api/chat/${id}/messages`, { text: "one too many" })
    expect(refused.status).toBe(409)
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("QueueFull")
    expect(answers[8]).toBe(409)
    releaseGate()
    await expect
      .poll(async () => (await stored(id).catch(() => [])).filter((m) => m.role === "user").length, {
        timeout: 30_000
      })
      .toBe(9)
    await expect
      .poll(async () => (await api("POST", `/api/chat/${id}/messages`, { text: "after" })).status, {
        timeout: 30_000
      })
      .toBe(202)
  })

  it("refuses bad input with a clear error, and a session that does not exist with 404", async () => {
    const id = await newChat()
    const blank = await api("POST", `/api/chat/${id}/messages`, { text: "  " })
    expect(blank.status).toBe(400)
    expect(JSON.stringify(await blank.json())).toContain("text is required")
    const missing = await api("POST", "/api/chat/no-such-session/messages", { text: "hi" })
    expect(missing.status).toBe(404)
    const decision = await api("POST", `/api/chat/${id}/decisions`, {
      decisions: { call_nope: { approved: true } }
    })
    expect(decision.status).toBe(409)
    expect(((await decision.json()) as { error: { code: string } }).error.code).toBe("DecisionRefused")
    const foreign = await fetch(`${server.url}/api/chat/${id}/messages`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${server.token}`,
        "content-type": "application/json",
        origin: "http://evil.example"
      },
      body: JSON.stringify({ text: "hi" })
    })
    expect(foreign.status).toBe(403)
    const paths = Object.keys(
      ((await (await api("GET", "/api/openapi.json")).json()) as { paths: object }).paths
    )
    expect(paths).toEqual(
      expect.arrayContaining([
        "/api/chat",
        "/api/chat/{id}/events",
        "/api/chat/{id}/messages",
        "/api/chat/{id}/cancel",
        "/api/chat/{id}/decisions"
      ])
    )
  })

  it("a server stopped mid-turn (Ctrl-C) stores the turn as far as it went and the message waiting behind it", async () => {
    const own = Effect.runSync(Scope.make())
    const other = await Effect.runPromise(startServer().pipe(Scope.provide(own)))
    const call = (route: string, body: unknown) =>
      fetch(`${other.url}${route}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${other.token}`,
          "content-type": "application/json",
          origin: other.url
        },
        body: JSON.stringify(body)
      })
    const id = ((await (await call("/api/chat", {})).json()) as { session_id: string }).session_id
    const events = await fetch(`${other.url}/api/chat/${id}/events`, {
      headers: { authorization: `Bearer ${other.token}` }
    })
    expect((await call(`/api/chat/${id}/messages`, { text: "slow before the stop" })).status).toBe(202)
    await readUntil(events, "Working on it")
    const queued = (await (await call(`/api/chat/${id}/messages`, { text: "waiting behind it" })).json()) as {
      queued: boolean
    }
    expect(queued.queued).toBe(true)
    await Effect.runPromise(Scope.close(own, Exit.void))
    const messages = await stored(id)
    expect(messages.filter((m) => m.role !== "system").map((m) => `${m.role}:${Message.text(m)}`)).toEqual([
      "user:slow before the stop",
      "assistant:Working on it",
      "user:waiting behind it"
    ])
    expect(messages.find((m) => m.role === "assistant")?.metadata?.interrupted).toBe(true)
  })
})

const screenshot = async (page: Page, name: string) => {
  const target = process.env.NOEMA_DEVUI_SCREENSHOTS
  if (target !== undefined) await page.screenshot({ path: path.join(target, name), fullPage: true })
}
