/**
 * `noema serve` in a real headless Chromium (from @sparticuz/chromium, driven by
 * playwright-core): the panel shows threads, runs, stages, artifacts (Markdown
 * rendered, safely) and the timeline (one row per event), follows runs made by
 * other processes live (SSE), and its buttons approve, reject, retry and cancel. The panel is opened at the tokened address
 * `noema serve` prints, as a person would; without the token a page gets
 * nothing. One browser for the whole file.
 * NOEMA_PANEL_SCREENSHOT=FILE saves a screenshot of the panel (the docs' picture).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as os from "node:os"
import * as path from "node:path"
import { OpenAiTestServer } from "@noema/openai/testing"
import { SqlRunsStore } from "@noema/runs"
import { launchChromium } from "@noema/server/testing"
import { Database } from "@noema/sql"
import { Effect } from "effect"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
let serve: ChildProcess
let url: string
/** The address serve prints: the panel's, with the access token. */
let panel: string
let token: string
let browser: Browser
let serveOutput = ""
const env = () => ({ NOEMA_HOME: path.join(home, "panel") })

beforeAll(async () => {
  home = makeHome()
  serve = spawn(process.execPath, [binPath, "serve", "--port", "0", "--json"], {
    env: cleanEnv({ ...env(), NO_COLOR: "1" }),
    stdio: ["ignore", "pipe", "pipe"]
  })
  ;({ url, panel, token } = await new Promise<{ url: string; panel: string; token: string }>(
    (resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`noema serve did not start: ${serveOutput}`)), 20_000)
      // Its first line on stdout is the address (stderr may say first that the model is the offline one).
      let stdout = ""
      serve.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
        serveOutput += chunk
        stdout += chunk
        const line = stdout.split("\n")[0] ?? ""
        if (stdout.includes("\n")) {
          clearTimeout(timer)
          resolve(JSON.parse(line) as { url: string; panel: string; token: string })
        }
      })
      serve.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
        serveOutput += chunk
      })
      serve.on("exit", (code) => reject(new Error(`noema serve exited with ${code}: ${serveOutput}`)))
    }
  ))
  browser = await launchChromium()
}, 60_000)

afterAll(async () => {
  await browser?.close()
  serve?.kill("SIGTERM")
  removeHome(home)
})

const openPanel = async (hash = ""): Promise<Page> => {
  const page = await browser.newPage({ viewport: { width: 1360, height: 860 } })
  const problems: Array<string> = []
  page.on("pageerror", (error) => problems.push(error.message))
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(message.text())
  })
  await page.goto(`${panel}${hash}`)
  await page.waitForSelector("#live.on")
  // The token was traded for the cookie and is gone from the address bar.
  expect(page.url()).toBe(`${url}/${hash}`)
  ;(page as Page & { problems?: Array<string> }).problems = problems
  return page
}

/** The API, as a program calls it: with the token in a header. */
const api = (route: string, init: RequestInit = {}) =>
  fetch(`${url}${route}`, {
    ...init,
    headers: { authorization: `Bearer ${token}`, ...(init.headers as Record<string, string>) }
  })

const problemsOf = (page: Page) => (page as Page & { problems?: Array<string> }).problems ?? []

const gated = JSON.stringify({
  name: "gated",
  stages: [
    { key: "draft", instructions: "Draft it." },
    { key: "publish", instructions: "Publish it.", approval: true }
  ]
})

/** What an agent could write: Markdown, with HTML and links meant to run script in the panel. */
const hostileMarkdown = [
  "# Findings",
  "",
  "Brew **slowly** at `80 °C`; see [a guide](https://example.com/tea).",
  "",
  "- green tea",
  "- black tea",
  "",
  "1. steep",
  "2. pour",
  "",
  "```js",
  'const label = "<b>not bold</b>"',
  "```",
  "",
  "## Next steps",
  "",
  "<img src=x onerror=\"window.__pwned = 'img'\">",
  "<script>window.__pwned = 'script'</script>",
  "[click me](javascript:window.__pwned='link')",
  ""
].join("\n")

/** The run as the API shows it. */
const statusOf = async (runId: string) =>
  ((await (await api(`/api/runs/${runId}`)).json()) as { run: { status: string } }).run

const statusIs = (page: Page, status: string) =>
  page.waitForSelector(`#run-status[data-status="${status}"]`, { timeout: 15_000 })

describe("noema serve: the runs panel in Chromium", () => {
  it("create a thread and a run, approve it, read an artifact and its sha256, verify", async () => {
    const page = await openPanel()
    await page.fill('#new-thread input[name="title"]', "Tea notes")
    await page.selectOption('#new-thread select[name="queue_policy"]', "enqueue")
    await page.click('#new-thread button[type="submit"]')
    await page.waitForSelector("#threads li.selected")
    expect(await page.textContent("#threads li.selected")).toContain("Tea notes")

    await page.fill('#new-run textarea[name="request"]', "Write a short note about green tea")
    await page.click("#new-run summary")
    await page.fill('#new-run textarea[name="pipeline"]', gated)
    await page.click('#new-run button[type="submit"]')
    await statusIs(page, "waiting_approval")
    expect(await page.isEnabled('[data-action="approve"]')).toBe(true)
    expect(await page.isEnabled('[data-action="retry"]')).toBe(false)
    expect(await page.textContent('tr[data-stage="01-draft"]')).toContain("completed")
    expect(await page.textContent('tr[data-stage="02-publish"]')).toContain("waiting approval")

    await page.click('[data-action="approve"]')
    await statusIs(page, "completed")
    await page.waitForSelector('#timeline-rows tr[data-type="RunCompleted"]')
    const types = await page.$$eval("#timeline-rows tr", (items) =>
      items.map((item) => item.getAttribute("data-type"))
    )
    expect(types).toEqual([
      "RunQueued",
      "RunStarted",
      "StageStarted",
      "ArtifactPublished",
      "StageCompleted",
      "ApprovalRequested",
      "ApprovalGranted",
      "StageStarted",
      "ArtifactPublished",
      "StageCompleted",
      "RunCompleted"
    ])

    const runId = (await page.textContent("#run-id"))?.trim() ?? ""
    const detail = (await (await api(`/api/runs/${runId}`)).json()) as {
      run: { stages: Array<{ attempts: Array<{ artifacts: Array<{ path: string; sha256: string }> }> }> }
    }
    const artifact = detail.run.stages[1]!.attempts[0]!.artifacts[0]!
    await page.click(`a[data-artifact="2/1/${artifact.path}"]`)
    await expect.poll(() => page.textContent("#artifact-content")).not.toBe("")
    expect(await page.textContent("#artifact-sha")).toBe(artifact.sha256)
    expect(await page.textContent("#artifact-check")).toBe("matches the file")
    const served = await (
      await api(`/api/runs/${runId}/stages/2/attempts/1/artifacts/${artifact.path}`)
    ).text()
    expect(await page.textContent("#artifact-content")).toBe(served)

    expect(await page.textContent("#workflow")).toMatch(
      /^workflow run_\S+\/1 · completed · activities recorded: stage\/1\/attempt\/1, request-approval\/2, stage\/2\/attempt\/1 · deferreds completed: approval\/2$/
    )

    await page.click('[data-action="verify"]')
    await expect.poll(() => page.textContent("#verify")).toMatch(/^verified: /)
    expect(await page.textContent("#verify")).toMatch(
      /^verified: run.json matches its sha256; 2 artifacts in 2 stage directories match/
    )

    if (process.env.NOEMA_PANEL_SCREENSHOT !== undefined)
      await page.screenshot({ path: process.env.NOEMA_PANEL_SCREENSHOT, fullPage: true })
    expect(problemsOf(page)).toEqual([])
    await page.close()
  }, 60_000)

  it("a run made by another process appears and progresses live, without a reload", async () => {
    const thread = (await runCli(["threads", "create", "--title", "live"], { env: env() })).stdout.trim()
    const page = await openPanel(`#thread=${thread}`)
    await page.waitForSelector("#runs li.empty")
    // Set on this page; a reload would lose it.
    await page.evaluate(() => {
      ;(globalThis as { marker?: number }).marker = 42
    })
    const made = await runCli(["run", "Write a line about rain", "--thread", thread, "--detach"], {
      env: env()
    })
    expect(made.code, made.stderr).toBe(0)
    const runId = made.stdout.trim()
    await page.waitForSelector(`#runs li[data-run-id="${runId}"][data-status="completed"]`, {
      timeout: 15_000
    })
    expect(await page.evaluate(() => (globalThis as { marker?: number }).marker)).toBe(42)
    expect(Number(await page.getAttribute("body", "data-cursor"))).toBeGreaterThan(0)
    expect(problemsOf(page)).toEqual([])
    await page.close()
  }, 60_000)

  it("reject (with a reason), retry says why it is refused and retries anyway, cancel ends the run; a closed thread offers no new run", async () => {
    const thread = (await runCli(["threads", "create", "--title", "gates"], { env: env() })).stdout.trim()
    const created = await api("/api/runs", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ thread_id: thread, request: "a gated note", pipeline: JSON.parse(gated) })
    })
    const runId = ((await created.json()) as { run_id: string }).run_id
    const page = await openPanel(`#thread=${thread}&run=${runId}`)
    await statusIs(page, "waiting_approval")
    page.once("dialog", (dialog) => void dialog.accept("the draft is too long"))
    await page.click('[data-action="reject"]')
    await statusIs(page, "failed")
    expect(await page.textContent("#run-error")).toBe("approval_rejected: the draft is too long")
    // A rejection is not retryable: the server refuses the retry saying why, and the panel offers to force it.
    expect(await page.isHidden("#retry-refusal")).toBe(true)
    await page.click('[data-action="retry"]')
    await page.waitForSelector("#retry-refusal:not([hidden])")
    expect(await page.textContent("#retry-reason")).toMatch(
      /^Run run_\S+ failed with approval_rejected \(the draft is too long\), which is not retryable: /
    )
    expect((await statusOf(runId)).status).toBe("failed")
    await page.click("#retry-anyway")
    await statusIs(page, "waiting_approval")
    expect(await page.isHidden("#retry-refusal")).toBe(true)
    await page.click('[data-action="cancel"]')
    await statusIs(page, "canceled")
    for (const action of ["approve", "reject", "retry", "cancel"])
      expect(await page.isEnabled(`[data-action="${action}"]`)).toBe(false)
    // The thread's queue policy is changed from the page.
    expect(await page.inputValue("#thread-queue")).toBe("reject")
    await page.selectOption("#thread-queue", "enqueue")
    await expect
      .poll(
        async () =>
          ((await (await api(`/api/threads/${thread}`)).json()) as { queue_policy: string }).queue_policy
      )
      .toBe("enqueue")
    // A closed thread takes no new runs: the form is gone.
    await runCli(["threads", "close", thread], { env: env() })
    await page.reload()
    await page.waitForSelector("#live.on")
    expect(await page.isHidden("#new-run")).toBe(true)
    expect(await page.isHidden("#thread-queue-label")).toBe(true)
    // The browser logs the refused retry's answer; it is the only problem.
    expect(problemsOf(page)).toEqual([
      "Failed to load resource: the server responded with a status of 409 (Conflict)"
    ])
    await page.close()
  }, 60_000)

  it("a Markdown artifact is rendered as elements, its hostile HTML shown as text; the timeline is rows", async () => {
    const model = await OpenAiTestServer.start()
    try {
      // Each stage's agent writes findings.md, then answers.
      model.setFallback((request) =>
        (request.body as { messages: ReadonlyArray<{ role: string }> }).messages.at(-1)?.role === "tool"
          ? { type: "text", text: "done" }
          : {
              type: "tool-calls",
              calls: [
                {
                  name: "write_artifact",
                  arguments: JSON.stringify({ path: "findings.md", content: hostileMarkdown })
                }
              ]
            }
      )
      const thread = (await runCli(["threads", "create", "--title", "md"], { env: env() })).stdout.trim()
      const made = await runCli(
        [
          "run",
          "findings",
          "--thread",
          thread,
          "--base-url",
          model.url,
          "--api-key",
          "k",
          "-m",
          "m",
          "--no-tools"
        ],
        { env: env() }
      )
      expect(made.code, made.stderr).toBe(0)
      const runId = /^run (run_\S+)$/m.exec(made.stdout)?.[1] ?? ""
      const page = await openPanel(`#thread=${thread}&run=${runId}`)
      await statusIs(page, "completed")
      await page.click('a[data-artifact="1/1/findings.md"]')
      await page.waitForSelector("#artifact-rendered h1")
      const rendered = await page.$eval("#artifact-rendered", (root) => ({
        headings: [...root.querySelectorAll("h1, h2")].map((h) => `${h.tagName} ${h.textContent}`),
        bullets: [...root.querySelectorAll("ul > li")].map((li) => li.textContent),
        numbered: [...root.querySelectorAll("ol > li")].map((li) => li.textContent),
        code: root.querySelector("pre > code")?.textContent,
        inlineCode: [...root.querySelectorAll("p code")].map((code) => code.textContent),
        strong: root.querySelector("strong")?.textContent,
        links: [...root.querySelectorAll("a")].map((a) => [
          a.getAttribute("href"),
          a.getAttribute("rel"),
          a.textContent
        ]),
        elements: [...root.querySelectorAll("*")].map((node) => node.tagName.toLowerCase()),
        text: root.textContent ?? ""
      }))
      expect(rendered.headings).toEqual(["H1 Findings", "H2 Next steps"])
      expect(rendered.bullets).toEqual(["green tea", "black tea"])
      expect(rendered.numbered).toEqual(["steep", "pour"])
      expect(rendered.code).toBe('const label = "<b>not bold</b>"')
      expect(rendered.inlineCode).toEqual(["80 °C"])
      expect(rendered.strong).toBe("slowly")
      // Only the http(s) link is a link, and it opens no door back to the panel.
      expect(rendered.links).toEqual([["https://example.com/tea", "noopener noreferrer", "a guide"]])
      // The hostile HTML is there as text: no element of it, and none of its scripts ran.
      for (const tag of ["img", "script", "iframe", "b"]) expect(rendered.elements).not.toContain(tag)
      expect(rendered.text).toContain("<img src=x onerror=\"window.__pwned = 'img'\">")
      expect(rendered.text).toContain("<script>window.__pwned = 'script'</script>")
      expect(rendered.text).toContain("[click me](javascript:window.__pwned='link')")
      await page.click("#artifact-rendered >> text=click me").catch(() => {})
      expect(await page.evaluate(() => (globalThis as { __pwned?: string }).__pwned)).toBeUndefined()
      // The source is one click away, exactly as stored.
      expect(await page.textContent("#artifact-content")).toBe(hostileMarkdown)

      // The timeline: one row per event, with its time, kind, stage, who and a short detail.
      const rows = await page.$$eval("#timeline-rows tr", (trs) =>
        trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent ?? ""))
      )
      expect(rows.map((cells) => cells[1])).toEqual([
        "RunQueued",
        "RunStarted",
        "StageStarted",
        "ArtifactPublished",
        "StageCompleted",
        "StageStarted",
        "ArtifactPublished",
        "StageCompleted",
        "RunCompleted"
      ])
      for (const cells of rows) {
        expect(cells).toHaveLength(5)
        expect(cells[0]).toMatch(/\d/)
        expect(cells.join(" ")).not.toMatch(/[{}]/)
      }
      const published = rows[3] ?? []
      expect(published.slice(2, 4)).toEqual(["01-brief", "agent"])
      expect(published[4]).toMatch(/^findings\.md · markdown · \d+ B · sha256 [0-9a-f]{12}…$/)
      expect(rows[0]?.[4]).toBe("findings · pipeline default · 2 stages")
      expect(problemsOf(page)).toEqual([])
      await page.close()
    } finally {
      await model.close()
    }
  }, 60_000)

  it("a run whose process died is shown interrupted, with how to go on; so is the thread it holds", async () => {
    // A panel without a worker, so that nothing carries the run on while the page looks at it.
    const alone = { NOEMA_HOME: path.join(home, "alone") }
    const thread = (await runCli(["threads", "create", "--title", "held"], { env: alone })).stdout.trim()
    const deadPid = spawnSync(process.execPath, ["-e", ""]).pid
    const runId = await Effect.runPromise(
      Effect.gen(function* () {
        const store = yield* SqlRunsStore.fromDatabase
        const run = yield* store.createRun({
          threadId: thread,
          request: "a report",
          pipeline: "default",
          stages: [
            { key: "brief", position: 1, needsApproval: false },
            { key: "result", position: 2, needsApproval: false }
          ],
          // As a `noema run` killed with SIGKILL leaves it: claimed by a process that is gone.
          claim: { owner: `${os.hostname()}/${deadPid}/gone`, ttlMs: 3_600_000 }
        })
        yield* store.append(run.runId, [
          { type: "RunStarted" },
          { type: "StageStarted", position: 1, attempt: 1 },
          { type: "StageCompleted", position: 1, attempt: 1 },
          { type: "StageStarted", position: 2, attempt: 1 }
        ])
        return run.runId
      }).pipe(
        Effect.provide(Database.layer({ kind: "sqlite", filename: path.join(alone.NOEMA_HOME, "noema.db") }))
      )
    )
    const child = spawn(process.execPath, [binPath, "serve", "--port", "0", "--no-worker", "--json"], {
      env: cleanEnv({ ...alone, NO_COLOR: "1" }),
      stdio: ["ignore", "pipe", "pipe"]
    })
    try {
      const started = await new Promise<{ panel: string }>((resolve, reject) => {
        let output = ""
        child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
          output += chunk
          if (output.includes("\n")) resolve(JSON.parse(output.split("\n")[0] ?? ""))
        })
        child.on("exit", (code) => reject(new Error(`noema serve exited with ${code}`)))
      })
      const page = await browser.newPage()
      await page.goto(`${started.panel}#thread=${thread}&run=${runId}`)
      await statusIs(page, "interrupted")
      expect(await page.textContent("#run-interrupted")).toBe(
        `Interrupted: no process carries this run on (its process stopped). noema runs resume ${runId}, or a worker (noema worker, noema serve) carries it on; completed stages are kept.`
      )
      expect(await page.textContent('tr[data-stage="02-result"]')).toContain("interrupted")
      expect(await page.textContent('tr[data-stage="01-brief"]')).toContain("completed")
      expect(await page.textContent("#run-status")).toBe("interrupted")
      expect(await page.isEnabled('[data-action="cancel"]')).toBe(true)
      expect(await page.textContent("#thread-held")).toBe(
        `Held by run ${runId}, which was interrupted (no process carries it on): noema runs resume ${runId}, or a worker (noema worker, noema serve), or cancel it.`
      )
      expect(await page.textContent(`#threads li[data-thread-id="${thread}"]`)).toContain("held")
      expect(await page.textContent(`#runs li[data-run-id="${runId}"]`)).toContain("interrupted")
      await page.close()
    } finally {
      child.kill("SIGTERM")
    }
  }, 60_000)

  it("the server refuses a body that is not JSON (415) and a page reached by another host name (421); its OpenAPI document is behind the token", async () => {
    const page = await openPanel()
    // From the panel's own page, with its cookie: a form-encoded POST, and the API's document.
    const answers = await page.evaluate(async () => {
      const form = await fetch("/api/threads", {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "title=x"
      })
      const document = await fetch("/api/openapi.json")
      return [form.status, ((await form.json()) as { error: { code: string } }).error.code, document.status]
    })
    expect(answers).toEqual([415, "UnsupportedMediaType", 200])
    await page.close()
    // Chromium resolves any *.localhost to this machine, as a rebound DNS name would: the Host is not the server's.
    const port = new URL(url).port
    const rebound = await browser.newPage()
    const response = await rebound.goto(`http://rebound.localhost:${port}/?token=${token}`)
    expect(response?.status()).toBe(421)
    expect(await rebound.textContent("body")).toContain("MisdirectedRequest")
    expect(await rebound.context().cookies()).toEqual([])
    await rebound.close()
    const withoutToken = await fetch(`${url}/api/openapi.json`)
    expect(withoutToken.status).toBe(401)
  }, 60_000)

  it("without the token a page gets nothing: no panel, no data, no live feed", async () => {
    // bypassCSP: the 401's policy forbids any request from its page; the fetches below check the server, not the policy.
    const page = await browser.newPage({ bypassCSP: true })
    const response = await page.goto(url)
    expect(response?.status()).toBe(401)
    const shown = (await page.textContent("body")) ?? ""
    expect(shown).toContain("open the address noema serve printed")
    expect(shown).not.toContain(token)
    expect(await page.$("#threads")).toBeNull()
    // Requests from the browser without the cookie are refused too.
    const statuses = await page.evaluate(async () => {
      const threads = await fetch("/api/threads", { credentials: "same-origin" })
      const feed = await fetch("/api/events", { credentials: "same-origin" })
      return [threads.status, feed.status, (await threads.text()).includes("Tea notes")]
    })
    expect(statuses).toEqual([401, 401, false])
    // A wrong token in the address sets no cookie.
    expect((await page.goto(`${url}/?token=guess`))?.status()).toBe(401)
    expect(await page.context().cookies()).toEqual([])
    await page.close()
  }, 60_000)

  it("serve prints the tokened address; NOEMA_SERVE_TOKEN (or --token) sets the token; a weak one is refused", async () => {
    const configured = "a-token-from-the-environment-0123456789"
    const child = spawn(process.execPath, [binPath, "serve", "--port", "0", "--no-worker"], {
      env: cleanEnv({ ...env(), NO_COLOR: "1", NOEMA_SERVE_TOKEN: configured }),
      stdio: ["ignore", "pipe", "pipe"]
    })
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let output = ""
        child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
          output += chunk
          if (output.includes("\n")) resolve(output.split("\n")[0] ?? "")
        })
        child.on("exit", (code) => reject(new Error(`noema serve exited with ${code}`)))
      })
      expect(line).toMatch(
        new RegExp(`^noema serve: http://127\\.0\\.0\\.1:\\d+/\\?token=${configured}  \\(panel only: `)
      )
      const address = /http:\/\/127\.0\.0\.1:\d+/.exec(line)?.[0]
      const refused = await fetch(`${address}/api/threads`)
      expect(refused.status).toBe(401)
      const admitted = await fetch(`${address}/api/threads`, {
        headers: { authorization: `Bearer ${configured}` }
      })
      expect(admitted.status).toBe(200)
    } finally {
      child.kill("SIGTERM")
    }
    const weak = await runCli(["serve", "--port", "0", "--token", "short"], { env: env() })
    expect(weak.code).toBe(2)
    expect(weak.stderr).toContain("the token must be 16 to 512 characters")
  }, 60_000)
})
