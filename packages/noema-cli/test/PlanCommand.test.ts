import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "vitest"
import { type ChatBody, textOf } from "./support/chat.js"
import { runCli, useServerAndHome } from "./support/cli.js"

type Event = { readonly type: string; readonly title?: string; readonly [key: string]: unknown }

const linesOf = (stdout: string): Array<Event> =>
  stdout
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as Event)

const frame = useServerAndHome()

describe("noema plan on the offline model", () => {
  it("plans the parts of a request, runs them with the tools, and tasks show reads the stored tree", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "offline") }
    const planned = await runCli(["plan", "what is 12*7; what time is it in UTC", "--json"], { env })
    assert.equal(planned.code, 0, planned.stderr)
    const events = linesOf(planned.stdout)
    const result = events.at(-1) as Event & {
      answer: string
      missing: Array<unknown>
      tree: { message: string }
      modelCalls: number
    }
    assert.equal(result.type, "result")
    assert.deepEqual(result.missing, [])
    assert.match(result.answer, /## what is 12\*7 \(done\)\n12 \* 7 = 84/)
    assert.match(result.answer, /## what time is it in UTC \(done\)\nIt is \d{4}-\d\d-\d\dT/)
    // One plan, three model calls per leaf with a tool (call, answer), one evaluation.
    assert.equal(result.modelCalls, 6)
    assert.deepEqual(
      events.filter((e) => e.type === "assigned").map((e) => e.title),
      ["what is 12*7; what time is it in UTC", "what is 12*7", "what time is it in UTC"]
    )
    assert.ok(
      events
        .filter((e) => e.type === "assigned")
        .every((e) => (e.assignment as { by: string }).by !== undefined)
    )

    const shown = await runCli(["tasks", "show", result.tree.message], { env })
    assert.equal(shown.code, 0, shown.stderr)
    const rows = shown.stdout.trimEnd().split("\n")
    assert.match(
      rows[0]!,
      /^✓ 1\. what is 12\*7; what time is it in UTC {2}→ \w+ \((similarity|model) \d\.\d\d\)$/
    )
    assert.match(rows[2]!, /^ {2}✓ 1\. what is 12\*7 {2}→ analyst \(similarity \d\.\d\d\)$/)
    assert.equal(rows[3], "    12 * 7 = 84")
    const json = JSON.parse((await runCli(["tasks", "show", result.tree.message, "--json"], { env })).stdout)
    assert.deepEqual(
      (json as Array<{ status: string }>).map((task) => task.status),
      ["done", "done", "done"]
    )
  })

  it("shows the tree live on a terminal-free stdout and prints the answer last", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "live") }
    const planned = await runCli(["plan", "what is 2+2"], { env })
    assert.equal(planned.code, 0, planned.stderr)
    const [header, assigned, started, done, blank, heading, answer] = planned.stdout.split("\n")
    assert.match(header!, /^planned 1 tasks under cld:conversation\.[0-9a-f]+\/message\.[0-9a-f]+$/)
    assert.match(assigned!, /^ {2}□ what is 2\+2 → analyst \(similarity \d\.\d\d\)$/)
    assert.equal(started, "  ▸ what is 2+2 working")
    assert.match(done!, /^ {2}✓ what is 2\+2 \(\d+ ms\) {2}2 \+ 2 = 4$/)
    assert.equal(blank, "")
    assert.equal(heading, "## what is 2+2")
    assert.equal(answer, "2 + 2 = 4")
    assert.match(planned.stderr, /registered the built-in team \(researcher, writer, analyst, generalist\)/)
    assert.match(
      planned.stderr,
      /noema: 1 tasks \(0 not done\), 3 model calls, \d+ tokens; noema tasks show cld:/
    )
  })

  it("refuses bad input with a usage error", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "usage") }
    const cases: Array<[ReadonlyArray<string>, RegExp]> = [
      [["plan"], /^noema: missing REQUEST \(see noema plan --help\)$/m],
      [["plan", "x", "--parallel", "0"], /^noema: --parallel: "0" is not a whole number of at least 1/],
      [["plan", "x", "--threshold", "2"], /^noema: --threshold: "2" is not a similarity from -1 to 1/],
      [["plan", "x", "--stall-timeout", "soon"], /--stall-timeout needs a duration such as "90 seconds"/],
      [["plan", "x", "--conversation", "nope"], /--conversation: invalid URN "nope"/],
      [["tasks", "show"], /^noema: missing URN \(see noema tasks show --help\)$/m],
      [
        ["tasks", "show", "cld:x.y", "--model", "m"],
        /^noema: unknown flag --model \(see noema tasks show --help\)$/m
      ]
    ]
    for (const [args, expected] of cases) {
      const result = await runCli(args, { env })
      assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`)
      assert.match(result.stderr, expected)
    }
  })
})

describe("noema plan against an OpenAI-compatible server", () => {
  it("a depth-3 tree planned in one create_tasks call, evaluated, corrected, answered", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "server") }
    const assistants = path.join(frame.home, "team.json")
    fs.writeFileSync(
      assistants,
      JSON.stringify([
        {
          type: "assistant",
          name: "historian",
          purpose: "research the history of drinks and foods",
          examples: ["find the history of tea"]
        },
        {
          type: "assistant",
          name: "copywriter",
          purpose: "write short prose: introductions, summaries, conclusions",
          examples: ["write an introduction"]
        }
      ])
    )
    const leaf = (title: string, purpose: string) => ({
      title,
      purpose,
      instructions: `${purpose}.`,
      evaluation: "it is written",
      subtasks: []
    })
    const plan = {
      tasks: [
        {
          title: "Tea article",
          purpose: "write a short article on the history of tea",
          instructions: "research, then write",
          evaluation: "an introduction and the history are written",
          subtasks: [
            {
              title: "History",
              purpose: "research the history of tea",
              instructions: "find the history",
              evaluation: "the origins are covered",
              subtasks: [
                leaf("Origins", "find the history of tea in China"),
                leaf("Trade", "find the history of the tea trade")
              ]
            },
            leaf("Introduction", "write an introduction on tea")
          ]
        }
      ]
    }
    let evaluations = 0
    frame.server.setFallback((request) => {
      const body = request.body as ChatBody
      if (body.tools?.some((tool) => tool.function.name === "create_tasks"))
        return { type: "tool-calls", calls: [{ name: "create_tasks", arguments: JSON.stringify(plan) }] }
      if (body.response_format?.json_schema?.name === "evaluation") {
        const asked = textOf(body.messages.at(-1)?.content)
        // The article's first evaluation asks for a conclusion.
        const unsuccessful = asked.startsWith("Task: Tea article") && evaluations++ === 0
        return {
          type: "text",
          text: JSON.stringify(
            unsuccessful
              ? {
                  successful: false,
                  reason: "there is no conclusion",
                  corrective: [leaf("Conclusion", "write a conclusion on tea")]
                }
              : { successful: true, reason: "complete", corrective: [] }
          )
        }
      }
      const system = textOf(body.messages.find((m) => m.role === "system")?.content)
      const task = /Your task: (.*)/.exec(system)?.[1] ?? "?"
      return { type: "text", text: `${task} written`, chunks: [task, " written"] }
    })
    const before = frame.server.requests.length
    const planned = await runCli(
      [
        "plan",
        "Write a short article on the history of tea",
        "--assistants",
        assistants,
        "--base-url",
        frame.server.url,
        "--api-key",
        "k",
        "-m",
        "m",
        "--no-tools",
        "--json"
      ],
      { env }
    )
    assert.equal(planned.code, 0, planned.stderr)
    const events = linesOf(planned.stdout)
    const result = events.at(-1) as Event & {
      answer: string
      missing: Array<unknown>
      tree: { message: string }
    }
    assert.deepEqual(result.missing, [])
    const requests = frame.server.requests.slice(before).map((r) => r.body as ChatBody)
    // The whole tree in one call: the tool's parameters are the recursive schema.
    const planning = requests.filter((body) => body.tools?.some((t) => t.function.name === "create_tasks"))
    assert.equal(planning.length, 1)
    assert.include(JSON.stringify(planning[0]!.tools![0]!.function.parameters), "#/$defs/Task")
    const assigned = new Map(
      events
        .filter((e) => e.type === "assigned")
        .map((e) => [e.title, e.assignment as { assistant: string; by: string; score: number }])
    )
    assert.sameMembers(
      [...assigned.keys()],
      ["Tea article", "History", "Origins", "Trade", "Introduction", "Conclusion"]
    )
    assert.deepEqual(
      events
        .filter((e) => e.type === "corrective")
        .map((e) => (e.tasks as Array<{ spec: { title: string } }>).map((t) => t.spec.title)),
      [["Conclusion"]]
    )
    assert.match(result.answer, /^## Tea article\ncomplete\n/)
    assert.match(result.answer, /## Conclusion \(done\)\nConclusion written/)

    const shown = await runCli(["tasks", "show", result.tree.message], { env })
    assert.equal(shown.code, 0, shown.stderr)
    assert.match(shown.stdout, /^✓ 1\. Tea article {2}→ (historian|copywriter) \(similarity \d\.\d\d\)\n/)
    assert.match(shown.stdout, /\n {2}✓ 1\. History {2}→ historian \(similarity \d\.\d\d\)\n/)
    assert.match(shown.stdout, /\n {4}✓ 2\. Trade {2}→ historian/)
    assert.match(shown.stdout, /\n {2}✓ 3\. Conclusion \(corrective\) {2}→ copywriter/)
  })

  it("Ctrl-C in the middle stops the work and stores the task under way as interrupted", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "interrupted") }
    frame.server.setFallback((request) => {
      const body = request.body as ChatBody
      if (body.tools?.some((tool) => tool.function.name === "create_tasks"))
        return {
          type: "tool-calls",
          calls: [
            {
              name: "create_tasks",
              arguments: JSON.stringify({
                tasks: [
                  {
                    title: "Slow",
                    purpose: "answer slowly",
                    instructions: "wait",
                    evaluation: "answered",
                    subtasks: []
                  }
                ]
              })
            }
          ]
        }
      return { type: "hang" }
    })
    let started: () => void = () => undefined
    const working = new Promise<void>((resolve) => {
      started = resolve
    })
    const run = runCli(
      [
        "plan",
        "answer slowly",
        "--base-url",
        frame.server.url,
        "--api-key",
        "k",
        "-m",
        "m",
        "--no-tools",
        "--fallback",
        "cld:assistant.any"
      ],
      {
        env,
        onStart: (child) => {
          child.stdout?.on("data", (chunk: Buffer) => {
            if (chunk.toString().includes("▸ Slow working")) started()
          })
          void working.then(() => setTimeout(() => child.kill("SIGINT"), 200))
        }
      }
    )
    const result = await run
    assert.equal(result.code, 130, result.stderr)
    assert.match(result.stderr, /noema: interrupted; the tasks under way are stored as interrupted/)
    const message = /planned 1 tasks under (\S+)/.exec(result.stdout)?.[1]
    assert.ok(message, result.stdout)
    const shown = await runCli(["tasks", "show", message!], { env })
    assert.match(shown.stdout, /^✗ 1\. Slow .*\n {2}interrupted before it finished\n$/)
  })

  it("killed (SIGKILL) in the middle, --resume continues from the store: what is done is not run again", async () => {
    const env = { NOEMA_HOME: path.join(frame.home, "killed") }
    const leaf = (title: string) => ({
      title,
      purpose: `answer ${title}`,
      instructions: `answer ${title}`,
      evaluation: "answered",
      subtasks: []
    })
    const plan = {
      tasks: [
        {
          title: "Both",
          purpose: "answer both",
          instructions: "answer both",
          evaluation: "both answered",
          subtasks: [leaf("Fast"), leaf("Slow")]
        }
      ]
    }
    const asked: Array<string> = []
    const answer = (hangOnSlow: boolean) => (request: { readonly body: unknown }) => {
      const body = request.body as ChatBody
      if (body.tools?.some((tool) => tool.function.name === "create_tasks"))
        return {
          type: "tool-calls" as const,
          calls: [{ name: "create_tasks", arguments: JSON.stringify(plan) }]
        }
      if (body.response_format?.json_schema?.name === "evaluation")
        return {
          type: "text" as const,
          text: JSON.stringify({ successful: true, reason: "both answered", corrective: [] })
        }
      const system = textOf(body.messages.find((m) => m.role === "system")?.content)
      const task = /Your task: (.*)/.exec(system)?.[1] ?? "?"
      asked.push(task)
      if (hangOnSlow && task === "Slow") return { type: "hang" as const }
      return { type: "text" as const, text: `${task} answered` }
    }
    frame.server.setFallback(answer(true))
    const flags = [
      "--base-url",
      frame.server.url,
      "--api-key",
      "k",
      "-m",
      "m",
      "--no-tools",
      "--fallback",
      "cld:assistant.any"
    ]
    let fastDone: () => void = () => undefined
    const fast = new Promise<void>((resolve) => {
      fastDone = resolve
    })
    let output = ""
    const killed = await runCli(["plan", "answer fast and slow", ...flags], {
      env,
      onStart: (child) => {
        child.stdout?.on("data", (chunk: Buffer) => {
          output += chunk.toString()
          if (output.includes("✓ Fast") && output.includes("▸ Slow working")) fastDone()
        })
        void fast.then(() => child.kill("SIGKILL"))
      }
    })
    assert.equal(killed.signal, "SIGKILL")
    const message = /planned 3 tasks under (\S+)/.exec(output)?.[1]
    assert.ok(message, output)
    assert.deepEqual(asked.sort(), ["Fast", "Slow"])

    asked.length = 0
    frame.server.setFallback(answer(false))
    const resumed = await runCli(["plan", "--resume", message!, ...flags], { env })
    assert.equal(resumed.code, 0, resumed.stderr)
    assert.deepEqual(asked, ["Slow"], "the finished leaf is not asked again")
    assert.match(resumed.stdout, /✓ Fast \(done before\) {2}Fast answered/, resumed.stdout)
    assert.match(
      resumed.stdout,
      /## Both\nboth answered\n\n## Fast \(done\)\nFast answered\n\n## Slow \(done\)\nSlow answered/
    )
    const shown = await runCli(["tasks", "show", message!], { env })
    assert.match(
      shown.stdout,
      /^✓ 1\. Both .*\n {2}both answered\n {2}✓ 1\. Fast .*\n {4}Fast answered\n {2}✓ 2\. Slow .*\n {4}Slow answered\n$/
    )
  })
})
