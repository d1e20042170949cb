/**
 * `noema chat` as a client of the runtime, on a real pseudo-terminal: typing
 * while an answer streams (queued, not echoed into the answer), `!` to
 * interrupt, `/exit` during an answer, and Ctrl-C read as a key, so a shell
 * that started `npx noema chat` never sees the signal; and a call waiting for
 * approval, decided at the prompt, going on as a runtime turn like any other.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { SqliteStore } from "@noema/session"
import { Effect } from "effect"
import { afterEach, describe, expect, it } from "vitest"
import {
  plainText,
  repositoryRoot,
  requestMessages,
  shellQuote,
  startTerminal,
  type TerminalSession,
  useServerAndHome
} from "./support/cli.js"

const suite = useServerAndHome()
let terminal: TerminalSession | undefined
afterEach(() => {
  terminal?.kill()
  terminal = undefined
})

const chat = (): TerminalSession => {
  terminal = startTerminal(["chat", "--base-url", suite.server.url, "--api-key", "test", "--no-tools"], {
    env: { NOEMA_HOME: suite.home }
  })
  return terminal
}

const prompt = /› $/
const slow = (text: string) => ({ type: "text" as const, text, chunkDelayMs: 120 })

const messagesOf = (index: number) =>
  requestMessages(suite.server, index)
    .filter((message) => message.role !== "system")
    .map((message) => [message.role, message.content] as const)

const stored = () =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const store = yield* SqliteStore.make({ filename: path.join(suite.home, "noema.db") })
        const sessions = yield* store.list()
        return yield* Effect.forEach(sessions, (info) => store.load(info.id))
      })
    )
  )

describe("noema chat on the runtime", () => {
  it("a line typed during an answer is queued (not echoed into it) and joins the turn when the answer ends", async () => {
    suite.server.enqueue(slow("One two three four five six seven."), {
      type: "text",
      text: "Got the second one."
    })
    const session = chat()
    await session.waitFor(prompt)
    session.type("first\r")
    await session.waitFor(/One two/)
    session.type("second\r")
    await session.waitFor(/\(queued: second\)/)
    await session.waitFor(/Got the second one\.[\s\S]*› $/)
    // The typed keys never went into the answer's text; the line shows where it joined.
    expect(plainText(session.output())).not.toMatch(/seven\.\s*second|second\s*three/)
    expect(plainText(session.output())).toMatch(/seven\.\n› second\n…?Got the second one\./)
    // One turn: the queued line joined when the first answer ended, and the model went on.
    expect(messagesOf(1)).toEqual([
      ["user", "first"],
      ["assistant", "One two three four five six seven."],
      ["user", "second"]
    ])
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const [saved] = await stored()
    expect(saved?.messages.map((message) => message.role)).toEqual(["user", "assistant", "user", "assistant"])
  })

  it("a line starting with ! interrupts the answer; the new turn starts with it", async () => {
    suite.server.enqueue(slow("A long answer that goes on and on and on and on."), {
      type: "text",
      text: "Stopped."
    })
    const session = chat()
    await session.waitFor(prompt)
    session.type("tell me a story\r")
    await session.waitFor(/A long/)
    session.type("!stop please\r")
    await session.waitFor(/Stopped\.[\s\S]*› $/)
    await suite.server.waitForClose(0)
    expect(suite.server.requests[0]?.clientClosedEarly).toBe(true)
    const sent = messagesOf(1)
    expect(sent[0]).toEqual(["user", "tell me a story"])
    expect(sent[1]?.[0]).toBe("assistant")
    expect(sent[1]?.[1]).toMatch(/^A long/)
    expect(sent[1]?.[1]).not.toContain("on and on and on and on.")
    expect(sent[2]).toEqual(["user", "stop please"])
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
  })

  it("/exit typed during an answer stops the runtime and exits 0, keeping what was shown", async () => {
    suite.server.enqueue(slow("Words keep coming one by one for quite a while here."))
    const session = chat()
    await session.waitFor(prompt)
    session.type("talk\r")
    await session.waitFor(/Words keep/)
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const [saved] = await stored()
    expect(saved?.messages[1]?.metadata).toEqual({ interrupted: true })
  })

  it("through npx in a shell: Ctrl-C during an answer, later /exit, and the shell goes on", async () => {
    suite.server.enqueue(slow("An answer that will be cut short by Ctrl-C before it ends."), {
      type: "text",
      text: "Fine."
    })
    const npx = `npx --no-install noema chat --base-url ${shellQuote(suite.server.url)} --api-key test --no-tools`
    terminal = startTerminal([], {
      env: { NOEMA_HOME: suite.home },
      cwd: repositoryRoot,
      command: `sh -c ${shellQuote(`${npx}; echo "shell went on: $?"`)}`
    })
    const session = terminal
    await session.waitFor(prompt, 90_000)
    session.type("go\r")
    await session.waitFor(/An answer/)
    session.type("\u0003")
    await session.waitFor(/interrupted; what was shown is kept[\s\S]*› $/)
    session.type("next\r")
    await session.waitFor(/Fine\.[\s\S]*› $/)
    session.type("/exit\r")
    await session.waitFor(/shell went on: 0/)
    expect(await session.exited).toBe(0)
  })

  it("a call waiting for approval is asked about when the answer ends; y goes on as a runtime turn, which takes a line typed meanwhile", async () => {
    const fixture = path.join(
      import.meta.dirname,
      "..",
      "..",
      "noema-mcp",
      "test",
      "fixtures",
      "StdioServer.ts"
    )
    const mcpFile = path.join(suite.home, "mcp.json")
    fs.writeFileSync(
      mcpFile,
      JSON.stringify({ mcpServers: { calc: { command: process.execPath, args: [fixture] } } })
    )
    suite.server.enqueue(
      { type: "tool-calls", calls: [{ id: "call_pid", name: "calc__pid", arguments: "{}" }] },
      slow("The pid is known now, and a few more words follow it."),
      { type: "text", text: "Got the extra line." }
    )
    terminal = startTerminal(
      ["chat", "--base-url", suite.server.url, "--api-key", "test", "--no-tools", "--mcp", mcpFile],
      { env: { NOEMA_HOME: suite.home } }
    )
    const session = terminal
    await session.waitFor(prompt)
    session.type("pid?\r")
    await session.waitFor(/Allow calc__pid\(\)\? \[y\/N\] $/)
    session.type("y\r")
    await session.waitFor(/The pid/)
    session.type("and this\r")
    await session.waitFor(/\(queued: and this\)/)
    await session.waitFor(/Got the extra line\.[\s\S]*› $/)
    // The continued turn ran the call and let the queued line join it, as any runtime turn does.
    const sent = messagesOf(2)
    expect(sent.map(([role]) => role)).toEqual(["user", "assistant", "tool", "assistant", "user"])
    expect(Number(sent[2]?.[1])).toBeGreaterThan(0)
    expect(sent[4]).toEqual(["user", "and this"])
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
  })

  it("with /plan on, a line typed during a step is queued and joins the plan at its next step (one turn)", async () => {
    const json = (value: unknown) => JSON.stringify(value)
    suite.server.enqueue(
      {
        type: "text",
        text: json({ thoughts: "t", goal: "Answer", steps: [{ title: "Work", detail: "Do it" }] })
      },
      slow("Working on it, one word at a time, slowly."),
      {
        type: "text",
        text: json({
          thoughts: "t",
          outcome: "done",
          summary: "done",
          decision: "finish",
          remainingSteps: null
        })
      },
      {
        type: "tool-calls",
        calls: [{ name: "user_sendMessage", arguments: json({ text: "Done, with the extra line." }) }]
      }
    )
    const session = chat()
    await session.waitFor(prompt)
    session.type("/plan on\r")
    await session.waitFor(/Plan workflow on[\s\S]*› $/)
    session.type("first\r")
    await session.waitFor(/Working on/)
    session.type("second\r")
    await session.waitFor(/\(queued: second\)/)
    await session.waitFor(/Done, with the extra line\.[\s\S]*› $/)
    // The review of the step saw the queued line: it joined the running plan, not a turn of its own.
    expect(messagesOf(2)).toEqual([
      ["user", "first"],
      ["assistant", "Working on it, one word at a time, slowly."],
      ["user", "second"]
    ])
    expect(suite.server.requests.length).toBe(4)
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const [saved] = await stored()
    expect(
      saved?.messages.filter((message) => message.role === "user").map((message) => message.content)
    ).toEqual(["first", "second"])
  })
})
