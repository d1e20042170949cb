/**
 * `noema routine run|status` as a person runs them: live progress on the
 * offline model, status written back into the document, and a run killed with
 * SIGKILL at random moments, again and again, that still ends with every task
 * done once, each preamble sent once, and the overview told after each resume.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { OpenAiTestServer } from "@noema/openai/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { type ChatBody, textOf } from "./support/chat.js"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
afterEach(() => removeHome(home))

const markdown = `---
variables: [documents.brief, thread.topic]
---
# Reports {#report}
You write reports. Brief: {{documents.brief}}

## Quarterly {#quarterly}
Topic: {{thread.topic}}

- [ ] Gather the figures {#gather}
- [ ] Draft the summary {#draft}
- [ ] Send it {#send}

## Yearly {#yearly}
- [ ] Collect the quarters {#collect}
`

interface StoredState {
  readonly chain: string
  readonly status: string
  readonly completed: ReadonlyArray<{
    readonly task: string
    readonly evidence: { readonly content: unknown }
  }>
  readonly messages: ReadonlyArray<{
    readonly role: string
    readonly content: unknown
    readonly metadata?: Record<string, unknown>
  }>
}

const readStates = (database: string): ReadonlyArray<StoredState> => {
  if (!fs.existsSync(database)) return []
  const db = new DatabaseSync(database, { readOnly: true })
  try {
    const tables = db.prepare("SELECT name FROM sqlite_schema WHERE name = 'noema_routine_chains'").all()
    if (tables.length === 0) return []
    return db
      .prepare("SELECT state FROM noema_routine_chains ORDER BY chain")
      .all()
      .map((row) => JSON.parse((row as { state: string }).state) as StoredState)
  } finally {
    db.close()
  }
}

describe("noema routine on the offline model", () => {
  it("runs a goal with live progress, resumes nothing twice, and writes the progress back", async () => {
    home = makeHome()
    const file = path.join(home, "plan.md")
    fs.writeFileSync(file, markdown)
    fs.writeFileSync(path.join(home, "brief.md"), "Q3 numbers")
    const env = { NOEMA_HOME: home, NOEMA_MODEL: "offline" }

    const missing = await runCli(["routine", "run", "plan.md", "--goal", "quarterly"], { env, cwd: home })
    expect(missing.code).toBe(1)
    expect(missing.stderr).toContain("{{thread.topic}}")
    expect(missing.stderr).toContain("noema: Setting up goal report/quarterly failed after 1 attempt")

    const run = await runCli(
      ["routine", "run", "plan.md", "--goal", "quarterly", "--var", "thread.topic=growth"],
      {
        env,
        cwd: home
      }
    )
    expect(run.stderr).toBe("")
    expect(run.code).toBe(0)
    const lines = run.stdout.split("\n")
    expect(lines.slice(0, 4)).toEqual([
      "▶ report/quarterly: 0 of 3 tasks done",
      "  skill preamble sent",
      "  scenario preamble sent",
      "  · report/quarterly gather: Gather the figures"
    ])
    expect(lines.filter((line) => line.startsWith("  ✓ ")).map((line) => line.split(":")[0])).toEqual([
      "  ✓ report/quarterly gather",
      "  ✓ report/quarterly draft",
      "  ✓ report/quarterly send"
    ])
    expect(lines).toContain("✔ report/quarterly complete")

    const again = await runCli(["routine", "run", "plan.md", "--goal", "report/quarterly"], {
      env,
      cwd: home
    })
    expect(again.code).toBe(0)
    expect(again.stdout).toBe("✔ report/quarterly already complete\n")

    const status = await runCli(["routine", "status", "plan.md", "--write"], { env, cwd: home })
    expect(status.code).toBe(0)
    expect(status.stdout).toBe(
      [
        "report/quarterly (complete, 3/3)",
        "  [x] gather: Gather the figures",
        "  [x] draft: Draft the summary",
        "  [x] send: Send it",
        "report/yearly (not started, 0/1)",
        "  [ ] collect: Collect the quarters",
        "progress written to plan.md",
        ""
      ].join("\n")
    )
    expect(fs.readFileSync(file, "utf8")).toBe(
      markdown
        .replace("- [ ] Gather", "- [x] Gather")
        .replace("- [ ] Draft", "- [x] Draft")
        .replace("- [ ] Send", "- [x] Send")
    )
    const json = await runCli(["routine", "status", "plan.md", "--json"], { env, cwd: home })
    expect(JSON.parse(json.stdout)[1]).toEqual({
      chain: "report/yearly",
      status: "not started",
      tasks: [{ id: "collect", title: "Collect the quarters", done: false, ticked: false }]
    })

    const bad = await runCli(["routine", "run", "plan.md", "--goal", "weekly"], { env, cwd: home })
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain('no goal "weekly"; goals: report/quarterly, report/yearly')
    const usage = await runCli(["routine", "walk", "plan.md"], { env, cwd: home })
    expect(usage.code).toBe(2)
    expect(usage.stderr).toContain('unknown command "walk"')
  })

  it("leaves a task it cannot do open with the reason, skips ticked tasks, and reopens a grown chain", async () => {
    home = makeHome()
    const file = path.join(home, "ops.md")
    const document = [
      "# Ops {#ops}",
      "",
      "## Check {#check}",
      "- [x] Read the runbook {#runbook}",
      "- [ ] Say hello {#hello}",
      "- [ ] What is 2+2? {#sum}",
      ""
    ].join("\n")
    fs.writeFileSync(file, document)
    const env = { NOEMA_HOME: home, NOEMA_MODEL: "offline" }
    // No tools named by the chain, and none taken away with --no-tools: nobody may say they are "turned off".
    const run = await runCli(["routine", "run", "ops.md"], { env, cwd: home })
    expect(run.code).toBe(1)
    const lines = run.stdout.split("\n")
    expect(lines).toContain("  ⤼ ops/check runbook: ticked in the document, not run")
    expect(lines.filter((line) => line.startsWith("  ✓ ")).map((line) => line.split(":")[0])).toEqual([
      "  ✓ ops/check hello"
    ])
    const open = lines.find((line) => line.startsWith("  ○ ops/check sum left open: "))
    expect(open).toContain("That needs the calculator tool, which I was not given here (only complete_task)")
    expect(run.stdout).not.toContain("--no-tools")
    expect(run.stderr).toContain(
      "noema: 1 task left open (ops/check sum); `noema routine status ops.md` says why"
    )

    const status = await runCli(["routine", "status", "ops.md"], { env, cwd: home })
    expect(status.stdout.split("\n").slice(0, 4)).toEqual([
      "ops/check (active, 2/3)",
      "  [x] runbook: Read the runbook (ticked in the document, not run)",
      "  [x] hello: Say hello",
      `  [ ] sum: What is 2+2? (open: ${open!.slice("  ○ ops/check sum left open: ".length)})`
    ])
    const [state] = readStates(path.join(home, "noema.db"))
    expect(state?.completed.map((entry) => entry.task)).toEqual(["hello"])

    // Ticked by hand, the open task is done for the document: the chain completes and stays so.
    fs.writeFileSync(file, document.replace("- [ ] What is", "- [x] What is"))
    const ticked = await runCli(["routine", "run", "ops.md"], { env, cwd: home })
    expect(ticked.code, ticked.stderr).toBe(0)
    expect(ticked.stdout).toContain("✔ ops/check complete")
    expect(ticked.stdout).toContain("  ⤼ ops/check sum: ticked in the document, not run")
    const again = await runCli(["routine", "run", "ops.md"], { env, cwd: home })
    expect(again.stdout).toBe("✔ ops/check already complete\n")

    // A task added to the complete chain reopens it: status says so, and a run does only that task.
    fs.writeFileSync(file, `${document.replace("- [ ] What is", "- [x] What is")}- [ ] Say goodbye {#bye}\n`)
    const reopened = await runCli(["routine", "status", "ops.md"], { env, cwd: home })
    expect(reopened.stdout.split("\n")[0]).toBe("ops/check (reopened, 3/4)")
    const grown = await runCli(["routine", "run", "ops.md"], { env, cwd: home })
    expect(grown.code, grown.stderr).toBe(0)
    expect(grown.stdout).toContain("↺ ops/check was complete; reopened for bye")
    expect(grown.stdout.split("\n").filter((line) => line.startsWith("  · "))).toEqual([
      "  · ops/check bye: Say goodbye"
    ])
    expect(grown.stdout).toContain("✔ ops/check complete")
  })

  it("takes message and thread variables from a saved session (--session)", async () => {
    home = makeHome()
    const env = { NOEMA_HOME: home, NOEMA_MODEL: "offline" }
    expect((await runCli(["ask", "ship the release"], { env, cwd: home })).code).toBe(0)
    const [session] = JSON.parse(
      (await runCli(["sessions", "list", "--json"], { env, cwd: home })).stdout
    ) as Array<{
      id: string
    }>
    fs.writeFileSync(
      path.join(home, "s.yaml"),
      'variables: [message.last, thread.title]\nskills:\n  - id: s\n    preamble: "{{thread.title}} / {{message.last}}"\n    scenarios:\n      - id: c\n        tasks: [{ id: t, title: Do it }]\n'
    )
    const run = await runCli(["routine", "run", "s.yaml", "--session", session!.id.slice(0, 8)], {
      env,
      cwd: home
    })
    expect(run.code, run.stderr).toBe(0)
    const [state] = readStates(path.join(home, "noema.db"))
    expect(state?.messages[0]?.content).toBe("ship the release / ship the release")
    const unknown = await runCli(["routine", "run", "s.yaml", "--session", "zzzz"], { env, cwd: home })
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toContain('No session with id "zzzz"')
  })

  it("names the line of a broken document", async () => {
    home = makeHome()
    fs.writeFileSync(
      path.join(home, "plan.yaml"),
      "skills:\n  - id: s\n    scenarios:\n      - id: c\n        tasks: 3\n"
    )
    const result = await runCli(["routine", "status", "plan.yaml"], { env: { NOEMA_HOME: home }, cwd: home })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/^noema: .*plan\.yaml:5: skills\[0\]\.scenarios\[0\]\.tasks: /)
  })
})

// ---------------------------------------------------------------------------
// SIGKILL at random moments
// ---------------------------------------------------------------------------

let server: OpenAiTestServer.TestServer
beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server?.close())

const tasks = ["t1", "t2", "t3", "t4", "t5", "t6"]
const yaml = `variables: [thread.topic]
skills:
  - id: ops
    preamble: "Skill preamble for {{thread.topic}}."
    scenarios:
      - id: run
        preamble: "Scenario preamble."
        tasks:
${tasks.map((id) => `          - { id: ${id}, title: "Do ${id}" }`).join("\n")}
`

describe("noema routine run, killed with SIGKILL at random moments", () => {
  it("resumes every time: no task done twice, each preamble once, the overview after each resume", async () => {
    home = makeHome()
    const file = path.join(home, "ops.yaml")
    fs.writeFileSync(file, yaml)
    const database = path.join(home, "state.db")
    // Every answer streams slowly enough that a kill can land in the middle of a task.
    server.setFallback((request) => {
      const messages = (request.body as ChatBody).messages
      const last = textOf(messages.at(-1)?.content)
      const task = /^Task (\S+):/.exec(last)?.[1] ?? "?"
      // The answer, then the verdict that completes the task (complete_task), streamed slowly.
      return {
        type: "tool-calls",
        text: `done ${task} with care`,
        calls: [
          { name: "complete_task", arguments: JSON.stringify({ done: true, summary: `done ${task}` }) }
        ],
        chunkDelayMs: 30
      }
    })
    const args = [
      "routine",
      "run",
      "ops.yaml",
      "--var",
      "thread.topic=ops",
      "--database",
      database,
      "--base-url",
      server.url,
      "--api-key",
      "k",
      "-m",
      "m",
      "--no-tools"
    ]
    const seed = Math.floor(Math.random() * 2 ** 31)
    let random = seed
    const next = () => {
      random = (random * 1103515245 + 12345) % 2 ** 31
      return random / 2 ** 31
    }
    const runs: Array<{ readonly firstRequest: number; readonly completedBefore: ReadonlyArray<string> }> = []
    let kills = 0
    for (let round = 0; round < 14 && kills < 6; round++) {
      const before = readStates(database)[0]
      const completedBefore = before?.completed.map((entry) => entry.task) ?? []
      if (completedBefore.length === tasks.length) break
      runs.push({ firstRequest: server.requests.length, completedBefore })
      // The command starts in a few hundred milliseconds; the kill lands in setup, mid-task or between tasks.
      const delay = 250 + Math.floor(next() * 900)
      const result = await runCli(args, {
        env: { NOEMA_HOME: home },
        cwd: home,
        onStart: (child) => {
          setTimeout(() => child.kill("SIGKILL"), delay)
        }
      })
      if (result.signal === "SIGKILL") kills++
      else expect(result.code, `seed ${seed}: ${result.stderr}`).toBe(0)
      // What is on disk after every kill: a prefix of the tasks, each with its evidence.
      const state = readStates(database)[0]
      if (state !== undefined) {
        const done = state.completed.map((entry) => entry.task)
        expect(done, `seed ${seed}`).toEqual(tasks.slice(0, done.length))
        expect(done.length).toBeGreaterThanOrEqual(completedBefore.length)
        for (const entry of state.completed)
          expect(textOf(entry.evidence.content)).toBe(`done ${entry.task} with care`)
      }
    }
    // Then to the end, undisturbed.
    const before = readStates(database)[0]
    runs.push({
      firstRequest: server.requests.length,
      completedBefore: before?.completed.map((entry) => entry.task) ?? []
    })
    const last = await runCli(args, { env: { NOEMA_HOME: home }, cwd: home })
    expect(last.code, last.stderr).toBe(0)

    const [state] = readStates(database)
    expect(state?.status).toBe("complete")
    expect(state?.completed.map((entry) => entry.task)).toEqual(tasks)
    const marks = state!.messages.map((message) => message.metadata?.routine)
    expect(marks.filter((mark) => mark === "skill-preamble")).toHaveLength(1)
    expect(marks.filter((mark) => mark === "scenario-preamble")).toHaveLength(1)
    for (const task of tasks) {
      expect(
        state!.messages.filter((message) => message.metadata?.task === task),
        `seed ${seed}`
      ).toHaveLength(1)
    }

    // What each request carried: the preambles exactly once; no completed task asked for again;
    // the first request after a resume with completed tasks tells the model which.
    const requests = server.requests.filter((request) => request.path.endsWith("/chat/completions"))
    for (const request of requests) {
      const texts = (request.body as ChatBody).messages.map((message) => textOf(message.content))
      expect(texts.filter((text) => text === "Skill preamble for ops.")).toHaveLength(1)
      expect(texts.filter((text) => text === "Scenario preamble.")).toHaveLength(1)
    }
    runs.forEach((run, index) => {
      const end = runs[index + 1]?.firstRequest ?? requests.length
      const mine = requests.slice(run.firstRequest, end)
      for (const request of mine) {
        const messages = (request.body as ChatBody).messages
        const task = /^Task (\S+):/.exec(textOf(messages.at(-1)?.content))?.[1]
        expect(run.completedBefore, `seed ${seed}: task ${task} asked for again`).not.toContain(task)
        if (run.completedBefore.length > 0) {
          const overviews = messages.filter((message) =>
            textOf(message.content).startsWith("These tasks of ops/run are already completed")
          )
          const latest = textOf(overviews.at(-1)?.content)
          for (const done of run.completedBefore) expect(latest).toContain(`- ${done}: Do ${done}`)
        }
      }
    })
    expect(kills, `seed ${seed}`).toBeGreaterThan(0)
  }, 120_000)
})

describe("noema routine run: what the model says is shown escaped", () => {
  it("evidence with an escape sequence and a bidi override is printed with both escaped", async () => {
    home = makeHome()
    fs.writeFileSync(
      path.join(home, "one.yaml"),
      [
        "skills:",
        "  - id: ops",
        "    scenarios:",
        "      - id: run",
        "        tasks:",
        '          - { id: t1, title: "Do t1" }',
        ""
      ].join("\n")
    )
    server.setFallback({
      type: "tool-calls",
      calls: [
        {
          name: "complete_task",
          arguments: JSON.stringify({ done: true, summary: "done\u001b]0;pwned\u0007 \u202eko" })
        }
      ]
    })
    const model = ["--base-url", server.url, "--api-key", "k", "-m", "m", "--no-tools"]
    const result = await runCli(["routine", "run", "one.yaml", ...model], {
      env: { NOEMA_HOME: home },
      cwd: home
    })
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout).toContain("  ✓ ops/run t1: done\\x1b]0;pwned\\x07 \\u202eko\n")
    for (const character of ["\u001b", "\u0007", "\u202e"]) expect(result.stdout).not.toContain(character)
  })
})
