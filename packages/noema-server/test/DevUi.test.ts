/**
 * The panel as a single page app in a real headless Chromium (from
 * @sparticuz/chromium, driven by playwright-core), one browser for the file:
 * the view switcher, the Sessions view (search, pages, a session's turns with
 * tool calls, approvals, interruptions and compactions marked, usage and cost
 * in the CLI's own words), hostile text shown as text, keyboard use, and a
 * session changed by another process shown without a reload.
 * NOEMA_DEVUI_SCREENSHOTS=DIR saves the docs' pictures there.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { Message } from "@noema/core"
import { SqlRunsStore } from "@noema/runs"
import { ContextItem } from "@noema/runtime"
import { Compaction, Session, type SessionStore, SqlStore, Usage } from "@noema/session"
import { Database } from "@noema/sql"
import { Effect, Exit, Layer, Scope } from "effect"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import * as StoreChanges from "../src/StoreChanges.js"
import { launchChromium, openPanel, problemsOf } from "../src/testing.js"
import { idleExecutor } from "./support/executor.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-devui-"))
const filename = path.join(directory, "noema.db")
const prices: Usage.Prices = { "tea-model": { input: 2, output: 8 } }
let scope: Scope.Closeable
let server: Server.Server
let sessions: SessionStore.Service
let browser: Browser

const usage = (inputTokens: number, outputTokens: number) => ({
  inputTokens,
  outputTokens,
  totalTokens: inputTokens + outputTokens
})

const call = (id: string, name: string, args: object) => ({ id, name, arguments: JSON.stringify(args) })

/** A conversation with every mark the view shows: tools, an approval, a compaction, an interruption. */
const teaMessages: ReadonlyArray<Message.Message> = [
  Message.user("How long should green tea steep?"),
  Message.assistant("", {
    toolCalls: [call("call_calc", "calculator", { expression: "2*60" })],
    usage: usage(120, 10),
    model: "tea-model"
  }),
  Message.toolResult({ toolCallId: "call_calc", name: "calculator", content: "120" }),
  Message.assistant("Steep it **2 minutes** (120 s) at `80 °C`.", {
    usage: usage(150, 20),
    model: "tea-model"
  }),
  Message.user("Delete my old notes"),
  Message.assistant("", {
    toolCalls: [call("call_delete", "delete_file", { path: "notes.txt" })],
    usage: usage(200, 12),
    model: "tea-model"
  }),
  Message.toolResult({
    toolCallId: "call_delete",
    name: "delete_file",
    content: 'The user did not approve this call of "delete_file", so it was not run: not now',
    isError: true,
    metadata: { [ContextItem.decisionMetadataKey]: { approved: false, reason: "not now", by: "user" } }
  }),
  Message.assistant("Understood, I left them.", { usage: usage(230, 8), model: "tea-model" }),
  Message.system("Summary: the user asked about tea and kept their notes.", {
    metadata: {
      [Compaction.metadataKey]: {
        keepFrom: 8,
        replaced: 8,
        tokensBefore: 900,
        tokensAfter: 40,
        counter: "estimate",
        exact: false,
        model: "tea-model"
      }
    }
  }),
  Message.user("Now write a long essay"),
  Message.assistant("", { toolCalls: [call("call_search", "search", { q: "tea history" })] }),
  Session.interruptedCallResult(call("call_search", "search", { q: "tea history" })),
  Message.assistant("Tea began in", { metadata: { interrupted: true } })
]

const hostileTitle = `<img src=x onerror="window.__pwned='title'">`
const hostileMessages: ReadonlyArray<Message.Message> = [
  Message.user(`<script>window.__pwned='user'</script> hello`),
  Message.assistant(
    "[click me](javascript:window.__pwned='link') <img src=x onerror=\"window.__pwned='answer'\">",
    { toolCalls: [call("call_x", "fetch", { url: "<b>bold</b>" })] }
  ),
  Message.toolResult({ toolCallId: "call_x", name: "fetch", content: "<iframe src=javascript:alert(1)>" })
]

let teaId: string
let hostileId: string
let pendingId: string

beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  ;({ server, sessions } = await Effect.runPromise(
    Effect.gen(function* () {
      const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename }))
      return yield* Effect.gen(function* () {
        const store = yield* SqlRunsStore.fromDatabase
        const sessions = yield* SqlStore.fromDatabase
        const server = yield* Server.make({
          store,
          executor: idleExecutor(store, directory),
          workspace: directory,
          sessions,
          prices,
          changes: yield* StoreChanges.fromDatabase({ pollMs: 50 })
        })
        return { server, sessions }
      }).pipe(Effect.provideContext(context))
    }).pipe(Scope.provide(scope))
  ))
  const start = Date.UTC(2026, 0, 1)
  await Effect.runPromise(
    Effect.gen(function* () {
      for (let index = 0; index < 60; index++)
        yield* sessions.create({
          title: `filler ${index}`,
          messages: [Message.user(`filler ${index}`)],
          createdAt: start + index * 1000,
          updatedAt: start + index * 1000
        })
      teaId = (yield* sessions.create({
        title: "Tea brewing",
        metadata: { [Session.systemPromptKey]: "You are a tea expert." },
        messages: teaMessages
      })).id
      hostileId = (yield* sessions.create({ title: hostileTitle, messages: hostileMessages })).id
      pendingId = (yield* sessions.create({
        title: "Waiting on a decision",
        metadata: { [Session.awaitingApprovalKey]: ["call_pay"] },
        messages: [
          Message.user("Pay the bill"),
          Message.assistant("", { toolCalls: [call("call_pay", "pay", { amount: 20 })] })
        ]
      })).id
    })
  )
  browser = await launchChromium()
}, 120_000)

afterAll(async () => {
  await browser?.close()
  if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
  fs.rmSync(directory, { recursive: true, force: true })
})

/** The panel at `hash`, opened at the tokened address as a person would. */
const open = (hash: string): Promise<Page> => openPanel(browser, `${server.panelUrl}${hash}`)

const screenshot = async (page: Page, name: string) => {
  const target = process.env.NOEMA_DEVUI_SCREENSHOTS
  if (target !== undefined) await page.screenshot({ path: path.join(target, name), fullPage: true })
}

const texts = (page: Page, selector: string) =>
  page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent ?? ""))

describe("the panel in Chromium: one page, a view per concern", () => {
  it("switches views from the nav, keeping its place in the address; Runs stays as it was", async () => {
    const page = await open("")
    expect(await page.isVisible("#view-runs")).toBe(true)
    expect(await page.isHidden("#view-sessions")).toBe(true)
    await page.click('nav a[data-view="sessions"]')
    await page.waitForSelector("#view-sessions:not([hidden])")
    expect(await page.isHidden("#view-runs")).toBe(true)
    expect(new URL(page.url()).hash).toBe("#view=sessions")
    expect(await page.getAttribute('nav a[data-view="sessions"]', "aria-current")).toBe("page")
    await page.goBack()
    await page.waitForSelector("#view-runs:not([hidden])")
    await page.waitForSelector("#threads li")
    expect(problemsOf(page)).toEqual([])
    await page.close()
  })
})

describe("the Runs view", () => {
  it("is used from the keyboard: threads and runs are reached with Tab and arrows, chosen with Enter", async () => {
    const page = await open("")
    for (const title of ["kb first", "kb second"]) {
      await page.fill("#new-thread input", title)
      await page.press("#new-thread input", "Enter")
      await page.waitForSelector(`#threads li:has-text("${title}")`)
    }
    const first = '#threads li:has-text("kb first")'
    expect(await page.getAttribute(first, "tabindex")).toBe("0")
    await page.focus(first)
    await page.keyboard.press("ArrowDown")
    await page.keyboard.press("ArrowUp")
    expect(await page.evaluate("document.activeElement.textContent")).toMatch(/^kb first/)
    await page.keyboard.press("Enter")
    await page.waitForSelector(`${first}.selected`)
    expect(await page.textContent("#thread-title")).toBe("· kb first")
    // Redrawn, the list gives the focus back to the entry it was on.
    expect(await page.evaluate("document.activeElement.textContent")).toMatch(/^kb first/)
    expect(problemsOf(page)).toEqual([])
    await page.close()
  })
})

describe("the Sessions view", () => {
  it("lists the sessions a page at a time, most recent first, and searches titles", async () => {
    const page = await open("#view=sessions")
    await page.waitForSelector("#sessions li a")
    const all = await Effect.runPromise(sessions.list())
    expect(await page.textContent("#sessions-range")).toBe(`1–50 of ${all.length}`)
    const shown = await page.$$eval("#sessions a", (links) =>
      links.map((a) => a.getAttribute("data-session-id"))
    )
    expect(shown).toEqual(all.slice(0, 50).map((info) => info.id))
    await page.click("#sessions-next")
    await page.waitForSelector(`#sessions a[data-session-id="${all[50]?.id}"]`)
    expect(await page.textContent("#sessions-range")).toBe(`51–${all.length} of ${all.length}`)
    expect(await page.isDisabled("#sessions-next")).toBe(true)
    await page.fill("#session-search", "filler 1")
    await page.press("#session-search", "Enter")
    await expect.poll(() => page.textContent("#sessions-range"), { timeout: 30_000 }).toBe("1–11 of 11")
    // "filler 1", "filler 10" ... "filler 19": the text in the title.
    expect(await page.textContent("#sessions-range")).toBe("1–11 of 11")
    expect(problemsOf(page)).toEqual([])
    await page.close()
  })

  it("shows a session as `noema sessions show` does: turns with usage and cost, tools, approvals, compaction, interruption", async () => {
    const page = await open(`#view=sessions&session=${teaId}`)
    await page.waitForSelector('#session-turns article[data-turn="3"]')
    expect(await page.textContent("#session-title")).toBe("Tea brewing")
    expect(await page.textContent("#session-prompt")).toBe("system prompt: You are a tea expert.")
    const turns = Usage.byTurn(teaMessages)
    expect(await page.textContent("#session-usage")).toBe(
      `usage: ${Usage.format(Usage.ofMessages(teaMessages))} · cost: ${Usage.formatCost(Usage.cost(teaMessages, prices))}`
    )
    expect(await texts(page, "#session-turns article h3")).toEqual(
      turns.map(
        (turn) =>
          `turn ${turn.number} · ${Usage.format(turn.usage)} · ${Usage.formatCost(Usage.cost(turn.messages, prices))}`
      )
    )
    const calculator = '#session-turns details[data-call-id="call_calc"]'
    expect(await page.textContent(`${calculator} summary`)).toContain("⚙ calculator(2*60) → 120")
    await page.click(`${calculator} summary`)
    expect(await page.textContent(`${calculator} pre.arguments`)).toBe('{"expression":"2*60"}')
    expect(await page.textContent(`${calculator} pre.result`)).toBe("120")
    expect(await page.textContent('details[data-call-id="call_delete"] summary')).toContain(
      "rejected by user: not now"
    )
    expect(await page.textContent('[data-kind="compaction"]')).toBe(
      "(here the 8 messages before were summarised for the model)"
    )
    expect(await page.textContent('details[data-call-id="call_search"] summary')).toContain(
      "interrupted, may have partially run"
    )
    expect(await page.textContent('article[data-turn="3"] [data-kind="assistant"]:last-child')).toContain(
      "Tea began ininterrupted: this is what had streamed"
    )
    // The answer's Markdown is rendered: strong and code.
    expect(await page.textContent('article[data-turn="1"] .answer strong')).toBe("2 minutes")
    await screenshot(page, "dev-ui-sessions.png")
    const pending = await open(`#view=sessions&session=${pendingId}`)
    await pending.waitForSelector('[data-call-id="call_pay"].pending')
    expect(await pending.textContent('[data-call-id="call_pay"].pending')).toBe(
      "waits for approval pay(amount=20)"
    )
    expect([...(problemsOf(page) ?? []), ...(problemsOf(pending) ?? [])]).toEqual([])
    await page.close()
    await pending.close()
  })

  it("shows hostile titles, messages, arguments and results as text: nothing runs, no element is made of them", async () => {
    const page = await open(`#view=sessions&q=${encodeURIComponent("img")}&session=${hostileId}`)
    await page.waitForSelector('[data-call-id="call_x"]')
    await page.click('[data-call-id="call_x"] summary')
    expect(await page.textContent(`#sessions a[data-session-id="${hostileId}"] .title`)).toBe(hostileTitle)
    expect(await page.textContent("#session-title")).toBe(hostileTitle)
    expect(await page.textContent('[data-kind="user"] .text')).toBe(
      `<script>window.__pwned='user'</script> hello`
    )
    expect(await page.textContent('[data-call-id="call_x"] pre.result')).toBe(
      "<iframe src=javascript:alert(1)>"
    )
    expect(await page.textContent('[data-call-id="call_x"] pre.arguments')).toBe('{"url":"<b>bold</b>"}')
    const made = await page.$$eval(
      "#view-sessions img, #view-sessions script, #view-sessions iframe, #view-sessions b",
      (n) => n.length
    )
    expect(made).toBe(0)
    // The javascript: link is not a link.
    expect(await page.$$eval("#session-turns a:not(.trace-link)", (links) => links.length)).toBe(0)
    expect(await page.evaluate("window.__pwned")).toBeUndefined()
    await page.close()
  })

  it("is used from the keyboard: / searches, arrows move between sessions, Enter opens one", async () => {
    const page = await open("#view=sessions")
    await page.waitForSelector("#sessions li a")
    await page.keyboard.press("/")
    expect(await page.evaluate("document.activeElement.id")).toBe("session-search")
    await page.keyboard.type("filler 1")
    await page.keyboard.press("Enter")
    await expect.poll(() => page.textContent("#sessions-range"), { timeout: 30_000 }).toBe("1–11 of 11")
    await page.focus("#sessions a")
    await page.keyboard.press("ArrowDown")
    expect(await page.evaluate("document.activeElement.textContent")).toMatch(/^filler 18/)
    await page.keyboard.press("Enter")
    await page.waitForSelector('#session-turns article[data-turn="1"]')
    expect(await page.textContent("#session-title")).toBe("filler 18")
    await page.close()
  })

  it("shows a turn another process added (a chat in a terminal) without a reload", async () => {
    const page = await open(`#view=sessions&session=${pendingId}`)
    await page.waitForSelector('#session-turns article[data-turn="1"]')
    await promisify(execFile)(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WriteTurn.ts"),
      filename,
      pendingId,
      "from the terminal"
    ])
    await page.waitForSelector('#session-turns article[data-turn="2"]', { timeout: 60_000 })
    expect(await page.textContent('article[data-turn="2"] [data-kind="user"] .text')).toBe(
      "from the terminal"
    )
    await page.close()
  })
})
