/**
 * `noema chat` end to end: the built binary on a real pseudo-terminal (util-linux
 * `script`), typing as a person would, against a local server that speaks
 * OpenAI's wire format. The store is checked afterwards through the session
 * package, so "nothing of a cancelled turn is saved" is checked in the database.
 */
import * as path from "node:path"
import { Message } from "@noema/core"
import { OpenAiTestServer } from "@noema/openai/testing"
import { SqliteStore } from "@noema/session"
import { Effect } from "effect"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import * as Sessions from "../src/internal/Sessions.js"
import {
  makeHome,
  plainText,
  removeHome,
  runCli,
  startTerminal,
  type TerminalSession
} from "./support/cli.js"
import { commitElsewhere, proxyAfter } from "./support/store.js"

let server: OpenAiTestServer.TestServer
let home: string
let terminal: TerminalSession | undefined

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
beforeEach(() => {
  home = makeHome()
})
afterEach(() => {
  terminal?.kill()
  terminal = undefined
  server.reset()
  removeHome(home)
})

const chat = (args: ReadonlyArray<string> = [], env: Record<string, string> = {}): TerminalSession => {
  terminal = startTerminal(["chat", "--base-url", server.url, "--api-key", "test", ...args], {
    env: { NOEMA_HOME: home, ...env }
  })
  return terminal
}

const prompt = /› $/

interface RequestMessage {
  readonly role: string
  readonly content?: string | null
}

const messagesOf = (index: number): ReadonlyArray<readonly [string, string | null | undefined]> => {
  const request = server.requests[index]
  if (request === undefined) throw new Error(`the server got no request #${index}`)
  return (request.body as { messages: ReadonlyArray<RequestMessage> }).messages
    .filter((message) => message.role !== "system")
    .map((message) => [message.role, message.content])
}

/** Every stored session with its messages, read through the session package. */
const stored = () =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const store = yield* SqliteStore.make({ filename: path.join(home, "noema.db") })
        const sessions = yield* store.list()
        return yield* Effect.forEach(sessions, (info) => store.load(info.id))
      })
    )
  )

describe("noema chat", () => {
  it("streams answers, runs tools, saves each turn, and exits 0 on /exit", async () => {
    server.enqueue(
      {
        type: "text",
        text: "Hello! I am a test server streaming this answer slowly.",
        chunks: ["Hello! ", "I am ", "a test ", "server ", "streaming ", "this ", "answer ", "slowly."],
        chunkDelayMs: 150
      },
      {
        type: "tool-calls",
        calls: [{ id: "call_calc", name: "calculator", arguments: '{"expression":"2+2*3"}' }]
      },
      { type: "text", text: "It is 8." }
    )
    const session = chat()
    await session.waitFor(prompt)
    expect(plainText(session.output())).toContain("noema chat · gpt-4o-mini at http://127.0.0.1")
    session.mark()
    session.type("hi there\r")
    // The first words are on screen while the server is still sending the rest.
    await session.waitFor(/I am /)
    expect(session.sinceMark()).not.toContain("slowly.")
    await session.waitFor(/slowly\.[\s\S]*› $/)

    session.mark()
    session.type("what is 2+2*3?\r")
    await session.waitFor(/It is 8\.[\s\S]*› $/)
    const turn = plainText(session.sinceMark())
    expect(turn).toContain("  ⚙ calculator(2+2*3) → 8\n")
    expect(server.requests).toHaveLength(3)
    expect(messagesOf(2).slice(-3)).toEqual([
      ["user", "what is 2+2*3?"],
      ["assistant", null],
      ["tool", "8"]
    ])

    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const [saved, ...others] = await stored()
    expect(others).toEqual([])
    expect(saved?.messages.map((message) => message.role)).toEqual([
      "user",
      "assistant",
      "user",
      "assistant",
      "tool",
      "assistant"
    ])
    expect(saved?.info.title).toBe("hi there")
  })

  it("cancels a streaming turn on Ctrl-C: the request is aborted, what was shown is kept marked interrupted", async () => {
    server.enqueue(
      { type: "text", text: "First answer." },
      {
        type: "text",
        text: "A very long answer that would take a long time to stream completely to the end.",
        chunkDelayMs: 300
      },
      { type: "text", text: "Third answer." }
    )
    const session = chat()
    await session.waitFor(prompt)
    session.type("first\r")
    await session.waitFor(/First answer\.[\s\S]*› $/)

    session.mark()
    session.type("second\r")
    await session.waitFor(/very /)
    session.type("\u0003")
    await session.waitFor(/interrupted; what was shown is kept, marked interrupted[\s\S]*› $/)
    await server.waitForClose(1)
    expect(server.requests[1]?.clientClosedEarly).toBe(true)

    session.mark()
    session.type("third\r")
    await session.waitFor(/Third answer\.[\s\S]*› $/)
    // The model sees what the user saw of the cancelled answer, and no more.
    const sent = messagesOf(2)
    expect(sent.slice(0, 3)).toEqual([
      ["user", "first"],
      ["assistant", "First answer."],
      ["user", "second"]
    ])
    expect(sent[3]?.[0]).toBe("assistant")
    expect(sent[3]?.[1]).toMatch(/^A very /)
    expect(sent[3]?.[1]).not.toContain("to the end.")
    expect(sent[4]).toEqual(["user", "third"])

    session.type("\u0004")
    expect(await session.exited).toBe(0)
    const [saved] = await stored()
    const partial = saved?.messages[3]
    expect(partial?.metadata).toEqual({ interrupted: true })
    expect(saved?.messages.map((message) => message.role)).toEqual([
      "user",
      "assistant",
      "user",
      "assistant",
      "user",
      "assistant"
    ])
  })

  it("cancels a turn whose server never answers", async () => {
    server.enqueue({ type: "hang" })
    const session = chat()
    await session.waitFor(prompt)
    session.type("hello?\r")
    await server.waitForRequests(1)
    session.type("\u0003")
    await session.waitFor(/cancelled/)
    await server.waitForClose(0)
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const sessions = await stored()
    expect(sessions.flatMap((saved) => saved.messages)).toEqual([])
  })

  it("/resume shows the earlier turns and continues that session", async () => {
    server.enqueue({ type: "text", text: "Paris is the capital of France." })
    const asked = await runCli(
      ["ask", "--json", "--base-url", server.url, "--api-key", "test", "What is the capital of France?"],
      { env: { NOEMA_HOME: home } }
    )
    expect(asked.code).toBe(0)
    const sessionId = (JSON.parse(asked.stdout) as { sessionId: string }).sessionId

    server.enqueue({ type: "text", text: "Rome." })
    const session = chat()
    await session.waitFor(prompt)
    session.mark()
    session.type(`/resume ${sessionId.slice(0, 8)}\r`)
    await session.waitFor(/Paris is the capital of France\.[\s\S]*› $/)
    const shown = plainText(session.sinceMark())
    expect(shown).toContain(
      `Resumed session ${sessionId.slice(0, 8)}: What is the capital of France? (2 messages)`
    )
    expect(shown).toContain("› What is the capital of France?\nParis is the capital of France.")

    session.type("And of Italy?\r")
    await session.waitFor(/Rome\.[\s\S]*› $/)
    expect(messagesOf(1)).toEqual([
      ["user", "What is the capital of France?"],
      ["assistant", "Paris is the capital of France."],
      ["user", "And of Italy?"]
    ])
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    const [saved, ...others] = await stored()
    expect(others).toEqual([])
    expect(saved?.info.id).toBe(sessionId)
    expect(saved?.info.messageCount).toBe(4)
  })

  it("quits with 0 on Ctrl-C at an empty prompt, and keeps no empty session", async () => {
    const session = chat()
    await session.waitFor(prompt)
    session.type("\u0003")
    expect(await session.exited).toBe(0)
    expect(await stored()).toEqual([])
  })

  it("shows an answer's terminal control sequences as visible escapes, and stores it intact", async () => {
    const answer = "Hello\u001b]0;pwned\u0007 there\u001b[2J, friend."
    server.enqueue({
      type: "text",
      text: answer,
      chunks: ["Hello\u001b]0;pw", "ned\u0007 there\u001b[", "2J, friend."]
    })
    const session = chat([], { NO_COLOR: "1" })
    await session.waitFor(prompt)
    session.mark()
    session.type("hi\r")
    await session.waitFor(/friend\.[\s\S]*› $/)
    expect(session.sinceMark()).toContain("Hello\\x1b]0;pwned\\x07 there\\x1b[2J, friend.")
    session.mark()
    session.type("/history\r")
    await session.waitFor(/friend\.[\s\S]*› $/)
    session.type("/exit\r")
    expect(await session.exited).toBe(0)
    expect(session.output()).not.toContain("\u001b]0;pwned")
    expect(session.output()).not.toContain("\u001b[2J")
    const [saved] = await stored()
    expect(saved?.messages.map((message) => message.content)).toEqual(["hi", answer])
  })

  it("uses no colour codes with NO_COLOR, and colour without it", async () => {
    const colourless = startTerminal(["chat"], { env: { NOEMA_HOME: home, NO_COLOR: "1" } })
    terminal = colourless
    await colourless.waitFor(prompt)
    colourless.type("what is 2+2?\r")
    await colourless.waitFor(/2 \+ 2 = 4[\s\S]*› $/)
    colourless.type("/exit\r")
    expect(await colourless.exited).toBe(0)
    const sgr = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`)
    expect(colourless.output()).not.toMatch(sgr)

    const coloured = startTerminal(["chat"], { env: { NOEMA_HOME: home } })
    terminal = coloured
    await coloured.waitFor(prompt)
    coloured.type("/exit\r")
    expect(await coloured.exited).toBe(0)
    expect(coloured.output()).toMatch(sgr)
  })
})

describe("noema chat without a terminal", () => {
  it("reads messages line by line, answers with the offline model, and prints no escape codes", async () => {
    const result = await runCli(["chat"], {
      env: { NOEMA_HOME: home },
      stdin: "what is 2+2?\nmy name is Grace\nwhat's my name?\n/exit\n"
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe(
      "  ⚙ calculator(2+2) → 4\n2 + 2 = 4\nNice to meet you, Grace. I'll remember that.\nYour name is Grace.\n"
    )
    expect(result.stderr).toMatch(/^noema: no model configured, using the built-in offline model/)
    expect(result.stdout + result.stderr).not.toContain("\u001b")
  })

  it("sends a pasted block as one message and one model call, and joins lines ended by a backslash", async () => {
    server.enqueue({ type: "text", text: "One." }, { type: "text", text: "Two." })
    const paste = "\u001b[200~line one\nline two\nline three\n\u001b[201~"
    const result = await runCli(["chat", "--base-url", server.url, "--api-key", "test", "--no-tools"], {
      env: { NOEMA_HOME: home },
      stdin: `${paste}\nfirst\\\nsecond\n/exit\n`
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("One.\nTwo.\n")
    expect(server.requests).toHaveLength(2)
    expect(messagesOf(1)).toEqual([
      ["user", "line one\nline two\nline three"],
      ["assistant", "One."],
      ["user", "first\nsecond"]
    ])
  })

  it("gives hints in chat's own terms: slash commands, not shell commands", async () => {
    const result = await runCli(["chat"], {
      env: { NOEMA_HOME: home },
      stdin: "/resume zzzz\n/sessions\n/exit\n"
    })
    expect(result.code).toBe(0)
    expect(result.stderr).toContain('error: No session with id "zzzz" (/sessions lists them)\n')
    expect(result.stdout).toBe("No sessions yet; your first message starts one.\n")
    expect(result.stdout + result.stderr).not.toMatch(/noema (sessions|chat)/)
  })

  it("reports a failed turn in one line, goes on, and exits 1 at the end", async () => {
    server.enqueue(
      { type: "error", status: 401, message: "Incorrect API key provided." },
      { type: "text", text: "Hi." }
    )
    const result = await runCli(["chat", "--base-url", server.url, "--api-key", "test"], {
      env: { NOEMA_HOME: home },
      stdin: "hello\nhello again\n"
    })
    expect(result.code).toBe(1)
    expect(result.stdout).toBe("Hi.\n")
    expect(result.stderr).toMatch(/^error: openai rejected the credentials .*401.*\n$/)
  })

  it("reports a turn another noema overtook as not saved, reloads the session, and the next turn sees both", async () => {
    server.enqueue({ type: "text", text: "First answer." })
    const first = await runCli(["ask", "--base-url", server.url, "--api-key", "test", "--json", "first"], {
      env: { NOEMA_HOME: home }
    })
    const { sessionId } = JSON.parse(first.stdout) as { sessionId: string }
    const proxy = await proxyAfter(server.url, () =>
      commitElsewhere(home, sessionId, [Message.user("elsewhere"), Message.assistant("theirs")])
    )
    try {
      server.enqueue({ type: "text", text: "Lost." }, { type: "text", text: "Seen both." })
      const result = await runCli(
        ["chat", "--base-url", proxy.url, "--api-key", "test", "--session", sessionId],
        {
          env: { NOEMA_HOME: home },
          stdin: "mine\nmine again\n"
        }
      )
      expect(result.code).toBe(1)
      expect(result.stderr).toBe(
        "error: another noema changed this session meanwhile, so your message was not saved\n"
      )
      expect(result.stdout).toContain(
        "The session is reloaded with the other turns; send your message again."
      )
    } finally {
      await proxy.close()
    }
    expect(messagesOf(2)).toEqual([
      ["user", "first"],
      ["assistant", "First answer."],
      ["user", "elsewhere"],
      ["assistant", "theirs"],
      ["user", "mine again"]
    ])
    const sessions = await stored()
    expect(sessions[0]?.messages.map((message) => message.content)).toEqual([
      "first",
      "First answer.",
      "elsewhere",
      "theirs",
      "mine again",
      "Seen both."
    ])
  })

  it("sends exactly one system message each turn: the session's, which /system changes", async () => {
    server.enqueue({ type: "text", text: "a" }, { type: "text", text: "b" }, { type: "text", text: "c" })
    const result = await runCli(["chat", "--base-url", server.url, "--api-key", "test", "--no-tools"], {
      env: { NOEMA_HOME: home },
      stdin: "one\n/system Be brief.\ntwo\n/system default\nthree\n"
    })
    expect(result.code).toBe(0)
    const systemOf = (index: number) =>
      (server.requests[index]?.body as { messages: ReadonlyArray<RequestMessage> } | undefined)?.messages
        .filter((message) => message.role === "system")
        .map((message) => message.content)
    expect(server.requests).toHaveLength(3)
    expect(systemOf(0)).toEqual([Sessions.defaultSystemPrompt])
    expect(systemOf(1)).toEqual(["Be brief."])
    expect(systemOf(2)).toEqual([Sessions.defaultSystemPrompt])
    const sessions = await stored()
    expect(sessions[0]?.info.metadata.systemPrompt).toBe(Sessions.defaultSystemPrompt)
    expect(sessions[0]?.messages.every((message) => message.role !== "system")).toBe(true)
  })
})
