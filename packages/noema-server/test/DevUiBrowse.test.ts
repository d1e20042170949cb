/**
 * The Plans, Routines and Resources views in a real headless Chromium (from
 * @sparticuz/chromium, driven by playwright-core), one browser for the file,
 * over one SQLite database that the built CLI reads too: each view shows what
 * `noema tasks show`, `noema routine status` and `noema resources
 * ls|search|show` print for the same data; a plan worked on by another
 * process updates without a reload; hostile text is shown as text; a resource
 * the policy denies is listed as denied and its content is in no response;
 * everything is reachable from the keyboard.
 * NOEMA_DEVUI_SCREENSHOTS=DIR saves the docs' pictures there.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { Message } from "@noema/core"
import {
  CedarPolicy,
  LocalEmbedder,
  Resource,
  ResourceIndex,
  SqlResourceStore,
  VectorIndex
} from "@noema/resources"
import { type RoutineStore, SqlRoutineStore } from "@noema/routines"
import { RunsStore, SqlRunsStore } from "@noema/runs"
import { Database } from "@noema/sql"
import { Effect, Exit, Layer, Scope } from "effect"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Server from "../src/Server.js"
import * as StoreChanges from "../src/StoreChanges.js"
import { launchChromium, openPanel, problemsOf } from "../src/testing.js"
import { idleExecutor } from "./support/executor.js"

const run = promisify(execFile)
const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-devui-browse-"))
const home = path.join(directory, "home")
const filename = path.join(directory, "noema.db")
const policyFile = path.join(directory, "policy.cedar")
const routineFile = path.join(directory, "docs", "reports.md")
const actor = "cld:user.cli"
const secretText = "SECRET-CONTENT-42"
const secretName = "secret recipe"
const hostile = `<img src=x onerror="window.__pwned='name'">`
const cliBin = path.join(import.meta.dirname, "..", "..", "noema-cli", "bin", "noema.js")

let scope: Scope.Closeable
let server: Server.Server
let browser: Browser

// ---------------------------------------------------------------------------
// The data: a plan, resources (one of them denied), a routine's progress
// ---------------------------------------------------------------------------

const researcher = Resource.make("assistant", { name: "researcher", purpose: "find facts" })
const writer = Resource.make("assistant", { name: "writer", purpose: "write prose" })
const planConversation = Resource.make("conversation", { name: "2026-01-01T00:00:00.000Z tea report" })
const request = Resource.make("message", {
  name: "request 1",
  parent: planConversation.meta.urn,
  role: "user",
  content: `Write a report on tea <script>window.__pwned='request'</script>`
})
const assigned = (
  assistant: Resource.Assistant,
  score: number,
  by: "similarity" | "default" = "similarity"
) => ({
  assistant: assistant.meta.urn,
  score,
  by,
  candidates: [
    { assistant: assistant.meta.urn, score },
    { assistant: (assistant === writer ? researcher : writer).meta.urn, score: score / 2 }
  ]
})
const task = (
  parent: string,
  position: number,
  title: string,
  fields: Partial<Resource.Task> = {}
): Resource.Task =>
  Resource.make("task", {
    name: `${position}. ${title}`,
    parent,
    purpose: `purpose of ${title}`,
    evaluation: `success: ${title} is complete`,
    status: "pending",
    position,
    ...fields
  })
const gather = task(request.meta.urn, 1, "Gather the facts", {
  status: "done",
  assignment: assigned(researcher, 0.81),
  completedAt: "2026-01-01T00:01:00.000Z",
  reason: "the facts cover the history"
})
const history = task(gather.meta.urn, 1, "Find the history", {
  status: "failed",
  assignment: assigned(researcher, 0.64),
  reason: "no source found\nsecond line",
  completedAt: "2026-01-01T00:00:30.000Z"
})
const corrective = task(gather.meta.urn, 2, hostile, {
  status: "done",
  corrective: true,
  assignment: assigned(researcher, 0.4, "default"),
  completedAt: "2026-01-01T00:00:50.000Z"
})
const draft = task(request.meta.urn, 2, "Write the draft", {
  status: "running",
  assignment: assigned(writer, 0.77)
})
const output = (parent: string, at: string, content: string) =>
  Resource.make("message", { name: `${at} output`, parent, role: "assistant", content })
const outputs = [
  output(gather.meta.urn, "2026-01-01T00:00:59.000Z", "an earlier verdict"),
  output(gather.meta.urn, "2026-01-01T00:01:00.000Z", "The facts are gathered.\n\n## Details\nTea is old."),
  output(
    corrective.meta.urn,
    "2026-01-01T00:00:50.000Z",
    `[click me](javascript:window.__pwned='link') <iframe src=javascript:alert(1)>`
  )
]

const kitchen = Resource.make("conversation", { name: "kitchen" })
const bread = Resource.make("chunk", {
  name: "bread",
  parent: kitchen.meta.urn,
  text: "Sourdough bread: feed the starter, bake the loaf."
})
const pasta = Resource.make("chunk", {
  name: "pasta",
  parent: kitchen.meta.urn,
  text: "Tomato pasta with garlic."
})
const oddName = Resource.make("chunk", { name: hostile, parent: kitchen.meta.urn, text: "<b>not bold</b>" })
const vault = Resource.make("conversation", { name: "vault" })
const secret = Resource.make("chunk", {
  name: secretName,
  parent: vault.meta.urn,
  text: `${secretText}: bake the secret bread`
})
const note = Resource.make("chunk", { name: "public note", parent: vault.meta.urn, text: "opening hours" })
const privateText = "PRIVATE-PLAN-REQUEST"
const privateRequest = Resource.make("message", {
  name: "request 2",
  parent: vault.meta.urn,
  role: "user",
  content: privateText
})
const privateTask = task(privateRequest.meta.urn, 1, "Do the private thing", { status: "done" })

const everything: ReadonlyArray<Resource.Resource> = [
  researcher,
  writer,
  planConversation,
  request,
  gather,
  history,
  corrective,
  draft,
  ...outputs,
  kitchen,
  bread,
  pasta,
  oddName,
  vault,
  secret,
  note,
  privateRequest,
  privateTask
]

/** The local user may do everything but read the secret; the planner (`tasks show`) may read. */
const policy = `permit (principal == Noema::Actor::"${actor}", action, resource);
permit (principal == Noema::Actor::"cld:assistant.planner", action == Noema::Action::"get", resource);
@id("secret")
forbid (principal, action == Noema::Action::"get", resource == Noema::Resource::"${secret.meta.urn}");
forbid (principal, action == Noema::Action::"get", resource == Noema::Resource::"${privateRequest.meta.urn}");
`

const routineDocument = `---
title: Reports
---
# Write reports {#report}
You write reports.

## Quarterly {#quarterly}
- [ ] Gather the figures {#gather}
- [x] Draft the summary {#draft}
- [ ] Send it <b>now</b> {#send}

## Yearly {#yearly}
- [ ] Collect the quarters {#collect}
`

const chainState = (chain: string, fields: Partial<RoutineStore.ChainState>): RoutineStore.ChainState => ({
  routine: routineFile,
  chain,
  status: "active",
  variables: {},
  sent: { skillPreamble: true, scenarioPreamble: true },
  completed: [],
  open: [],
  messages: [],
  failures: [],
  updatedAt: Date.UTC(2026, 0, 2),
  revision: 1,
  ...fields
})

const seed = Effect.gen(function* () {
  const store = yield* SqlResourceStore.fromDatabase
  const vectors = yield* VectorIndex.fromDatabase(LocalEmbedder.make())
  for (const resource of everything) yield* store.put(resource)
  yield* vectors.upsert(everything)
  const routines = yield* SqlRoutineStore.fromDatabase
  yield* routines.save(
    chainState("report/quarterly", {
      completed: [
        {
          task: "gather",
          evidence: Message.assistant("figures gathered"),
          completedAt: Date.UTC(2026, 0, 2),
          source: "tool-call",
          summary: "gathered the figures from the brief"
        }
      ],
      open: [{ task: "send", reason: "no mail <tool> configured", at: Date.UTC(2026, 0, 2) }]
    })
  )
})

beforeAll(async () => {
  fs.mkdirSync(home)
  fs.mkdirSync(path.dirname(routineFile))
  fs.writeFileSync(routineFile, routineDocument)
  fs.writeFileSync(policyFile, policy)
  scope = Effect.runSync(Scope.make())
  server = await Effect.runPromise(
    Effect.gen(function* () {
      const context = yield* Layer.build(Database.layer({ kind: "sqlite", filename }))
      return yield* Effect.gen(function* () {
        yield* seed
        const runs = yield* SqlRunsStore.fromDatabase
        const store = yield* SqlResourceStore.fromDatabase
        const engine = yield* CedarPolicy.make(policy)
        const index = ResourceIndex.make(store, engine, {
          vectors: yield* VectorIndex.fromDatabase(LocalEmbedder.make())
        })
        return yield* Server.make({
          store: runs,
          executor: idleExecutor(runs, directory),
          workspace: path.join(directory, "workspace"),
          resources: { store, index, policy: engine, actor },
          routines: { store: yield* SqlRoutineStore.fromDatabase, root: directory },
          changes: yield* StoreChanges.fromDatabase({ pollMs: 50 })
        })
      }).pipe(Effect.provideContext(context))
    }).pipe(Scope.provide(scope))
  )
  browser = await launchChromium()
}, 180_000)

afterAll(async () => {
  await browser?.close()
  if (scope !== undefined) await Effect.runPromise(Scope.close(scope, Exit.void))
  fs.rmSync(directory, { recursive: true, force: true })
})

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/** The built CLI on the same database and policy, as a person would run it; its output's lines. */
const cli = async (...args: ReadonlyArray<string>): Promise<Array<string>> => {
  const { stdout } = await run(process.execPath, [cliBin, ...args], {
    cwd: directory,
    env: { PATH: process.env.PATH ?? "", NOEMA_HOME: home, NOEMA_DATABASE_URL: filename, NO_COLOR: "1" },
    timeout: 120_000
  })
  return stdout.split("\n").filter((line) => line.trim() !== "")
}

/** The panel at `hash`, opened at the tokened address as a person would. */
const open = (hash: string): Promise<Page> => openPanel(browser, `${server.panelUrl}${hash}`)

const screenshot = async (page: Page, name: string) => {
  const target = process.env.NOEMA_DEVUI_SCREENSHOTS
  if (target !== undefined) await page.screenshot({ path: path.join(target, name), fullPage: true })
}

const texts = (page: Page, selector: string) =>
  page.$$eval(selector, (nodes) => nodes.map((node) => (node.textContent ?? "").trim()))

/** A GET of the API with the token, as any client: the raw body. */
const raw = async (route: string) => {
  const response = await fetch(`${server.url}${route}`, {
    headers: { authorization: `Bearer ${server.token}` }
  })
  return { status: response.status, body: await response.text() }
}

const hash = (view: string, params: Record<string, string> = {}) =>
  `#${new URLSearchParams({ view, ...params }).toString()}`

// ---------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------

describe("the Plans view", () => {
  it("shows a plan's tree as `noema tasks show` prints it, with the scores, evaluations and outputs under each task", async () => {
    const page = await open(hash("plans"))
    await page.waitForSelector(`#plans a[data-plan-urn="${request.meta.urn}"]`)
    // A plan whose request the actor may not read: listed as denied, nothing of it shown.
    expect(await page.textContent(`#plans li:has(a[data-plan-urn="${privateRequest.meta.urn}"])`)).toBe(
      "(withheld)denied to this server's actordenied"
    )
    expect(await page.textContent("#plans-range")).toBe("1–2 of 2")
    await page.click(`#plans a[data-plan-urn="${request.meta.urn}"]`)
    await page.waitForSelector("#plan-tasks li.task")
    const shown = await page.$$eval("#plan-tasks li.task", (items) =>
      items.flatMap((item) => [
        item.querySelector(".task-line")?.textContent ?? "",
        ...[...item.querySelectorAll(":scope > .task-detail")].map((detail) => detail.textContent ?? "")
      ])
    )
    const printed = await cli("tasks", "show", request.meta.urn, "--policy", policyFile)
    expect(shown).toEqual(printed.map((line) => line.trim()))
    // The same tree, in plan order, depth first: the corrective subtask under its parent.
    expect(await page.getAttribute(`li[data-urn="${corrective.meta.urn}"]`, "style")).toContain("18px")
    // What the terminal leaves out: candidates and scores, criteria, the evaluation, the whole output.
    const gathered = `li[data-urn="${gather.meta.urn}"]`
    await page.click(`${gathered} > details summary`)
    expect(await texts(page, `${gathered} > details table.candidates tr.elected td`)).toEqual([
      "researcher",
      "0.81"
    ])
    expect(await page.textContent(`${gathered} > details`)).toContain(
      "success means: success: Gather the facts is complete"
    )
    expect(await page.textContent(`${gathered} > details`)).toContain(
      "evaluation: the facts cover the history"
    )
    expect(await page.textContent(`${gathered} > details .output h2`)).toBe("Details")
    expect(await page.textContent("#plan-progress")).toBe("2 of 4 tasks done")
    await screenshot(page, "dev-ui-plans.png")
    expect(problemsOf(page)).toEqual([])
    await page.close()
  }, 180_000)

  it("follows a plan worked on by another process without a reload", async () => {
    const page = await open(hash("plans", { plan: request.meta.urn }))
    const drafted = `li[data-urn="${draft.meta.urn}"]`
    await page.waitForSelector(`${drafted}[data-status="running"]`)
    // Opened details stay open when the tree is drawn again.
    await page.click(`li[data-urn="${gather.meta.urn}"] > details summary`)
    await run(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WritePlanTask.ts"),
      filename,
      draft.meta.urn,
      "The draft is written."
    ])
    await page.waitForSelector(`${drafted}[data-status="done"]`, { timeout: 60_000 })
    expect(await page.textContent(`${drafted} .task-detail`)).toBe("The draft is written.")
    expect(await page.textContent("#plan-progress")).toBe("3 of 4 tasks done")
    expect(await page.getAttribute(`li[data-urn="${gather.meta.urn}"] > details`, "open")).not.toBeNull()
    await page.close()
  }, 180_000)
})

// ---------------------------------------------------------------------------
// Routines
// ---------------------------------------------------------------------------

describe("the Routines view", () => {
  it("shows each goal's progress as `noema routine status` prints it, named without the absolute path", async () => {
    const page = await open(hash("routines"))
    await page.waitForSelector("#routines a")
    expect(await texts(page, "#routines a .title")).toEqual([path.join("docs", "reports.md")])
    await page.click("#routines a")
    await page.waitForSelector("#routine-goals article")
    const shown = await page.$$eval("#routine-goals article", (goals) =>
      goals.flatMap((goal) => [
        goal.querySelector(".goal-line")?.textContent ?? "",
        ...[...goal.querySelectorAll(".task-line")].map((line) => line.textContent ?? "")
      ])
    )
    const printed = await cli("routine", "status", routineFile)
    expect(shown).toEqual(printed.map((line) => line.trim()))
    expect(shown).toContain("[ ] send: Send it <b>now</b> (open: no mail <tool> configured)")
    expect(await page.textContent('li[data-task="gather"]')).toContain("gathered the figures from the brief")
    expect(await page.$$eval("#view-routines b, #view-routines tool", (nodes) => nodes.length)).toBe(0)
    await screenshot(page, "dev-ui-routines.png")
    const list = await raw("/api/routines")
    expect(list.status).toBe(200)
    const id = (JSON.parse(list.body) as { routines: Array<{ id: string }> }).routines[0]?.id
    const detail = await raw(`/api/routines/${id}`)
    for (const body of [list.body, detail.body]) expect(body).not.toContain(directory)
    expect(problemsOf(page)).toEqual([])
    await page.close()
  }, 180_000)
})

describe("the Routines view, live", () => {
  it("ticks off a task another process completed (a routine run in a terminal) without a reload", async () => {
    const page = await open(hash("routines"))
    await page.waitForSelector("#routines a")
    await page.click("#routines a")
    await page.waitForSelector('article[data-chain="report/yearly"]')
    expect(await page.textContent('li[data-task="collect"] .task-line')).toBe(
      "[ ] collect: Collect the quarters"
    )
    await run(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WriteRoutineTask.ts"),
      filename,
      routineFile,
      "report/yearly",
      "collect",
      "collected all four quarters"
    ])
    await page.waitForSelector('article[data-chain="report/yearly"] .goal-line:has-text("complete, 1/1")', {
      timeout: 60_000
    })
    expect(await page.textContent('li[data-task="collect"] .task-line')).toBe(
      "[x] collect: Collect the quarters"
    )
    expect(await page.textContent('li[data-task="collect"]')).toContain("collected all four quarters")
    await page.close()
  }, 180_000)
})

// ---------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------

describe("the Resources view", () => {
  it("lists by prefix, searches and shows a resource as `noema resources ls|search|show` print them", async () => {
    const page = await open(hash("resources", { prefix: kitchen.meta.urn }))
    await page.waitForSelector("#resources a")
    expect(await texts(page, "#resources .line")).toEqual(
      await cli("resources", "ls", kitchen.meta.urn, "--policy", policyFile)
    )
    await page.click(`#resources a[data-urn="${bread.meta.urn}"]`)
    await page.waitForSelector("#resource-detail:not([hidden])")
    const shown = await page.textContent("#resource-json")
    const printed = await cli("resources", "show", bread.meta.urn, "--policy", policyFile)
    expect(shown?.split("\n")).toEqual(printed)
    expect(await texts(page, "#resource-decisions td:nth-child(2)")).toEqual([
      "allowed",
      "allowed",
      "allowed"
    ])
    await page.fill("#resource-search", "how do I bake bread?")
    await page.press("#resource-search", "Enter")
    await page.waitForSelector("#resources-range:has-text('found')")
    // Searched under the prefix listed, as `--prefix` does.
    expect(await texts(page, "#resources .line")).toEqual(
      await cli(
        "resources",
        "search",
        "how do I bake bread?",
        "--prefix",
        kitchen.meta.urn,
        "--policy",
        policyFile
      )
    )
    // The roots: the resources with no parent.
    await page.goto(`${server.panelUrl}${hash("resources")}`)
    await page.waitForSelector(`#resources a[data-urn="${vault.meta.urn}"]`)
    expect((await texts(page, "#resources .line")).length).toBe(5)
    expect(problemsOf(page)).toEqual([])
    await page.close()
  }, 180_000)

  it("lists a resource another process put (noema resources put) without a reload", async () => {
    const page = await open(hash("resources", { prefix: kitchen.meta.urn }))
    await page.waitForSelector(`#resources a[data-urn="${bread.meta.urn}"]`)
    const file = path.join(directory, "soup.json")
    fs.writeFileSync(
      file,
      JSON.stringify({ type: "chunk", name: "soup", parent: kitchen.meta.urn, text: "Leek soup." })
    )
    const [put] = await cli("resources", "put", file, "--policy", policyFile)
    const urn = put?.replace(/^put /, "") ?? ""
    await page.waitForSelector(`#resources a[data-urn="${urn}"]`, { timeout: 60_000 })
    expect(await page.textContent(`#resources a[data-urn="${urn}"]`)).toBe(`${urn}  chunk  soup`)
    await page.close()
  }, 180_000)

  it("lists a resource the policy denies as denied, and sends its content in no response", async () => {
    const page = await open(hash("resources", { prefix: vault.meta.urn, urn: secret.meta.urn }))
    await page.waitForSelector(`#resources a[data-urn="${secret.meta.urn}"][data-decision="deny"]`)
    expect(await page.textContent(`#resources li:has(a[data-urn="${secret.meta.urn}"]) .badge`)).toBe(
      "denied"
    )
    expect(await page.textContent(`#resources a[data-urn="${secret.meta.urn}"]`)).toBe(
      `${secret.meta.urn}  chunk`
    )
    await page.waitForSelector("#resource-detail:not([hidden])")
    expect(await texts(page, "#resource-decisions tr[data-action='get'] td")).toEqual([
      "get",
      "denied",
      `cedar: get ${secret.meta.urn} denied by secret`
    ])
    expect(await page.isVisible("#resource-denied")).toBe(true)
    expect(await page.textContent("#resource-json")).toBe("")
    await screenshot(page, "dev-ui-resources.png")
    const html = await page.content()
    expect(html).not.toContain(secretText)
    expect(html).not.toContain(secretName)
    // Every route that could carry it, read raw.
    const routes = [
      `/api/resources?prefix=${encodeURIComponent(vault.meta.urn)}`,
      "/api/resources",
      `/api/resources/show?urn=${encodeURIComponent(secret.meta.urn)}`,
      `/api/resources/search?q=${encodeURIComponent("secret bread recipe")}`,
      `/api/resources/search?q=${encodeURIComponent("secret")}&prefix=${encodeURIComponent(vault.meta.urn)}`,
      `/api/resources/search?q=${encodeURIComponent(privateText)}`,
      "/api/plans",
      "/api/plans?limit=1&offset=1"
    ]
    for (const route of routes) {
      const { status, body } = await raw(route)
      expect(status, route).toBe(200)
      for (const hidden of [secretText, secretName, privateText]) expect(body, route).not.toContain(hidden)
    }
    const page2 = JSON.parse((await raw("/api/plans?limit=1&offset=1")).body)
    expect([page2.total, page2.plans.length]).toEqual([2, 1])
    const tree = await raw(`/api/plans/tree?urn=${encodeURIComponent(privateRequest.meta.urn)}`)
    expect(tree.status).toBe(403)
    expect(tree.body).not.toContain(privateText)
    // The CLI refuses the same listing whole: the page lists what it may, and marks the rest.
    await expect(cli("resources", "ls", vault.meta.urn, "--policy", policyFile)).rejects.toThrow(
      /may not get/
    )
    await page.close()
  }, 180_000)

  it("shows hostile names and texts as text: nothing runs, no element is made of them", async () => {
    const page = await open(hash("resources", { prefix: kitchen.meta.urn, urn: oddName.meta.urn }))
    await page.waitForSelector("#resource-detail:not([hidden])")
    expect(await page.textContent(`#resources a[data-urn="${oddName.meta.urn}"]`)).toContain(hostile)
    expect(await page.textContent("#resource-json")).toContain("<b>not bold</b>")
    const plan = await open(hash("plans", { plan: request.meta.urn }))
    await plan.waitForSelector(`li[data-urn="${corrective.meta.urn}"]`)
    await plan.click(`li[data-urn="${corrective.meta.urn}"] > details summary`)
    expect(await plan.textContent("#plan-request")).toBe(request.content)
    expect(await plan.textContent(`li[data-urn="${corrective.meta.urn}"] .task-line`)).toContain(hostile)
    for (const shown of [page, plan]) {
      const made = await shown.$$eval(
        "main img, main script, main iframe, main b, main .markdown a",
        (nodes) => nodes.length
      )
      expect(made).toBe(0)
      expect(await shown.evaluate("window.__pwned")).toBeUndefined()
    }
    await page.close()
    await plan.close()
  }, 180_000)

  it("is used from the keyboard: / searches, arrows move between resources, Enter opens one", async () => {
    const page = await open(hash("resources", { prefix: kitchen.meta.urn }))
    await page.waitForSelector("#resources a")
    await page.keyboard.press("/")
    expect(await page.evaluate("document.activeElement.id")).toBe("resource-search")
    await page.keyboard.type("tomato pasta")
    await page.keyboard.press("Enter")
    await page.waitForSelector("#resources-range:has-text('found')")
    await page.focus("#resources a")
    const first = await page.evaluate("document.activeElement.getAttribute('data-urn')")
    await page.keyboard.press("ArrowDown")
    const second = await page.evaluate("document.activeElement.getAttribute('data-urn')")
    expect(second).not.toBe(first)
    await page.keyboard.press("ArrowUp")
    expect(await page.evaluate("document.activeElement.getAttribute('data-urn')")).toBe(first)
    await page.keyboard.press("Enter")
    await page.waitForSelector("#resource-detail:not([hidden])")
    expect(await page.textContent("#resource-urn")).toBe(first)
    // The plans list too: Enter opens the plan focused.
    await page.goto(`${server.panelUrl}${hash("plans")}`)
    await page.waitForSelector("#plans a")
    await page.focus("#plans a")
    await page.keyboard.press("ArrowDown")
    await page.keyboard.press("ArrowUp")
    expect(await page.evaluate("document.activeElement.getAttribute('data-plan-urn')")).toBe(request.meta.urn)
    await page.keyboard.press("Enter")
    await page.waitForSelector("#plan-tasks li.task")
    // And the routines: Enter opens the routine focused; a task's details open from the keyboard.
    await page.goto(`${server.panelUrl}${hash("routines")}`)
    await page.waitForSelector("#routines a")
    await page.focus("#routines a")
    await page.keyboard.press("Enter")
    await page.waitForSelector("#routine-goals article")
    await page.goto(`${server.panelUrl}${hash("plans", { plan: request.meta.urn })}`)
    await page.waitForSelector(`li[data-urn="${gather.meta.urn}"] > details summary`)
    await page.focus(`li[data-urn="${gather.meta.urn}"] > details summary`)
    await page.keyboard.press("Enter")
    await page.waitForSelector(`li[data-urn="${gather.meta.urn}"] > details .output`)
    await page.close()
  }, 180_000)
})

describe("the API", () => {
  it("lists the views' endpoints in its OpenAPI document, and refuses a URN that is not one", async () => {
    const { body } = await raw("/api/openapi.json")
    const paths = Object.keys((JSON.parse(body) as { paths: Record<string, unknown> }).paths)
    for (const route of [
      "/api/plans",
      "/api/plans/tree",
      "/api/routines",
      "/api/routines/{id}",
      "/api/resources",
      "/api/resources/search",
      "/api/resources/show"
    ])
      expect(paths).toContain(route)
    // A page of a listing; a prefix the actor may not get is refused, as `resources ls` refuses it.
    const second = JSON.parse(
      (await raw(`/api/resources?prefix=${encodeURIComponent(vault.meta.urn)}&limit=1&offset=1`)).body
    )
    expect([second.total, second.resources.length]).toEqual([4, 1])
    const deniedPrefix = await raw(`/api/resources?prefix=${encodeURIComponent(privateRequest.meta.urn)}`)
    expect([deniedPrefix.status, JSON.parse(deniedPrefix.body).error.code]).toEqual([
      403,
      "AccessDeniedError"
    ])
    expect(deniedPrefix.body).not.toContain(privateText)
    const refused = await raw("/api/resources/show?urn=not-a-urn")
    expect(refused.status).toBe(400)
    expect(JSON.parse(refused.body).error.code).toBe("InvalidUrn")
    const notAPlan = await raw(`/api/plans/tree?urn=${encodeURIComponent(kitchen.meta.urn)}`)
    expect(notAPlan.status).toBe(404)
    expect(JSON.parse(notAPlan.body).error.code).toBe("NotAPlan")
  })

  it("shows a routine whose document is gone from what the store holds, saying why, without its path", async () => {
    const gone = path.join(directory, "elsewhere", "gone.md")
    await run(process.execPath, [
      path.join(import.meta.dirname, "fixtures", "WriteRoutineTask.ts"),
      filename,
      gone,
      "old/goal",
      "first",
      "did the first"
    ])
    const { body } = await raw("/api/routines")
    expect(body).not.toContain(directory)
    const listed = (
      JSON.parse(body) as { routines: Array<{ id: string; name: string; problem: string | null }> }
    ).routines
    const shown = listed.find((routine) => routine.name === path.join("elsewhere", "gone.md"))
    expect(shown?.problem).toBe(`cannot read ${path.join("elsewhere", "gone.md")} (ENOENT)`)
    const detail = JSON.parse((await raw(`/api/routines/${shown?.id}`)).body)
    expect(detail.goals).toEqual([
      {
        chain: "old/goal",
        status: "active",
        updated_at: expect.any(String),
        tasks: [
          {
            id: "first",
            title: "",
            done: true,
            ticked: false,
            open: null,
            summary: "did the first",
            completed_at: expect.any(String)
          }
        ]
      }
    ])
  }, 120_000)

  it("says why a view is empty on a server started without resources or routines", async () => {
    const store = await Effect.runPromise(RunsStore.makeMemory())
    const workspace = path.join(directory, "bare")
    const bare = await Server.start({
      store,
      executor: idleExecutor(store, workspace),
      workspace
    })
    try {
      const codes = await Promise.all(
        ["/api/plans", "/api/routines", "/api/resources"].map(async (route) => {
          const response = await fetch(`${bare.url}${route}`, {
            headers: { authorization: `Bearer ${bare.token}` }
          })
          return [response.status, ((await response.json()) as { error: { code: string } }).error.code]
        })
      )
      expect(codes).toEqual([
        [404, "NoResourceStore"],
        [404, "NoRoutineStore"],
        [404, "NoResourceStore"]
      ])
      const page = await browser.newPage()
      await page.goto(`${bare.panelUrl}${hash("plans")}`)
      expect(await page.textContent("#plans li.error")).toBe("this server was started without resources")
      await page.close()
    } finally {
      await bare.close()
    }
  }, 120_000)
})
