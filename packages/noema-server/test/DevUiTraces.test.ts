/**
 * The Traces view in a real headless Chromium (its own browser, set up as
 * DevUi.test.ts does): the waterfall shows a trace's spans in tree order with
 * the lines `noema traces show` prints (`TraceStore.describeSpan`), bars placed
 * by start and duration; a span's details (tokens, first token, retry, tool
 * arguments and result) as text, hostile ones too; keyboard use; a session's
 * turn links to its trace; a trace another process keeps appears unreloaded.
 * NOEMA_DEVUI_SCREENSHOTS=DIR saves the docs' picture there.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { Message } from "@noema/core"
import { SqlRunsStore } from "@noema/runs"
import { type SessionStore, SqlStore, TraceStore } from "@noema/session"
import { Database } from "@noema/sql"
import { Effect, Exit, Layer, Scope } from "effect"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import { launchChromium, openPanel } from "../src/testing.js"
import { turnTrace } from "./fixtures/WriteTrace.js"
import { idleExecutor } from "./support/executor.js"

const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-devui-traces-"))
const filename = path.join(directory, "noema.db")
const hostile = `{"url":"<img src=x onerror=\\"window.__pwned='args'\\">"}`
let scope: Scope.Closeable
let server: Server.Server
let traces: TraceStore.Service
let browser: Browser
let sessionId: string

beforeAll(async () => {
  scope = Effect.runSync(Scope.make())
  let sessions: SessionStore.Service
  ;({ server, sessions, traces } = await Effect.runPromise(
    Effect.gen(function* () {
      const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename }))
      return yield* Effect.gen(function* () {
        const store = yield* SqlRunsStore.fromDatabase
        const sessions = yield* SqlStore.fromDatabase
        const traces = yield* TraceStore.fromDatabase
        const server = yield* Server.make({
          store,
          executor: idleExecutor(store, directory),
          workspace: directory,
          sessions,
          traces
        })
        return { server, sessions, traces }
      }).pipe(Effect.provideContext(context))
    }).pipe(Scope.provide(scope))
  ))
  sessionId = (
    await Effect.runPromise(
      sessions.create({
        title: "Looked up",
        messages: [
          Message.user("look it up"),
          Message.assistant("done"),
          Message.user("again"),
          Message.assistant("ok")
        ]
      })
    )
  ).id
  await Effect.runPromise(traces.record(turnTrace("trace-one", sessionId, 0, hostile)))
  browser = await launchChromium()
}, 120_000)

afterAll(async () => {
  await browser?.close()
  if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
  fs.rmSync(directory, { recursive: true, force: true })
})

/** The panel at `hash`, opened at the tokened address as a person would. */
const open = (hash: string): Promise<Page> => openPanel(browser, `${server.panelUrl}${hash}`)

const texts = (page: Page, selector: string) =>
  page.$$eval(selector, (nodes) => nodes.map((node) => node.textContent ?? ""))

describe("the Traces view", () => {
  it("shows the waterfall with the spans and lines `noema traces show` prints, bars placed by time", async () => {
    const page = await open("#view=traces&trace=trace-one")
    await page.waitForSelector("#waterfall [data-span-id]")
    const stored = await Effect.runPromise(traces.get("trace-one"))
    const ordered = TraceStore.treeOrder(stored.spans)
    expect(await texts(page, "#waterfall .name")).toEqual(ordered.map((span) => span.name))
    expect(await texts(page, "#waterfall .line")).toEqual(ordered.map(TraceStore.describeSpan))
    expect(
      await page.$$eval("#waterfall [data-span-id]", (rows) =>
        rows.map((row) => row.getAttribute("data-depth"))
      )
    ).toEqual(["0", "1", "1", "1", "1", "2"])
    // The tool call starts at 410 of the turn's 900 ms.
    const left = await page.$eval(
      '[data-span-id="trace-one-x"] .bar',
      (bar) => (bar as unknown as { style: { left: string } }).style.left
    )
    expect(Number.parseFloat(left)).toBeCloseTo((410 / 900) * 100, 1)
    expect(await page.textContent('[data-span-id="trace-one-c1"] .line')).toContain("1 retry")
    if (process.env.NOEMA_DEVUI_SCREENSHOTS !== undefined) {
      await page.click('[data-span-id="trace-one-c1"]')
      await page.screenshot({
        path: path.join(process.env.NOEMA_DEVUI_SCREENSHOTS, "dev-ui-traces.png"),
        fullPage: true
      })
    }
    await page.close()
  }, 60_000)

  it("shows hostile tool arguments and results as text, and is used from the keyboard", async () => {
    const page = await open("#view=traces&trace=trace-one")
    await page.waitForSelector("#waterfall [data-span-id]")
    await page.focus('#waterfall [data-span-id="trace-one-t"]')
    await page.keyboard.press("ArrowDown")
    await page.keyboard.press("ArrowDown")
    expect(await page.evaluate("document.activeElement.getAttribute('data-span-id')")).toBe("trace-one-x")
    await page.keyboard.press("Enter")
    await page.waitForSelector('[data-span-id="trace-one-x"][aria-selected="true"]')
    expect(await texts(page, "#span-detail pre")).toEqual([
      "lookup",
      hostile,
      "<iframe src=javascript:alert(1)>"
    ])
    expect(await page.$$eval("#view-traces img, #view-traces iframe", (nodes) => nodes.length)).toBe(0)
    expect(await page.evaluate("window.__pwned")).toBeUndefined()
    await page.focus('#waterfall [data-span-id="trace-one-c1"]')
    await page.keyboard.press("Enter")
    expect(await page.textContent("#span-detail .events")).toContain("noema.retry")
    await page.close()
  }, 60_000)

  it("opens a session's turn's trace from the Sessions view, and shows a trace another process keeps", async () => {
    const page = await open(`#view=sessions&session=${sessionId}`)
    await page.waitForSelector('article[data-turn="1"] a.trace-link')
    await page.click('article[data-turn="1"] a.trace-link')
    await page.waitForSelector('#waterfall [data-span-id="trace-one-t"]')
    expect(new URL(page.url()).hash).toContain("trace=trace-one")
    await page.goto(`${server.panelUrl}#view=traces&session=${sessionId}`)
    await page.waitForSelector('#traces a[data-trace-id="trace-one"]')
    await promisify(execFile)(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WriteTrace.ts"),
      filename,
      sessionId,
      "trace-two"
    ])
    await page.waitForSelector('#traces a[data-trace-id="trace-two"]', { timeout: 60_000 })
    expect(await page.textContent("#traces-range")).toBe("1–2 of 2")
    await page.close()
  }, 120_000)
})
