/**
 * `noema ask` end to end: the built binary against a local server that speaks
 * OpenAI's wire format.
 */
import * as http from "node:http"
import { Message } from "@noema/core"
import { OpenAiTestServer } from "@noema/openai/testing"
import { Session } from "@noema/session"
import { Effect } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import * as Sessions from "../src/internal/Sessions.js"
import { makeHome, removeHome, runCli } from "./support/cli.js"
import { commitElsewhere, proxyAfter, withStore } from "./support/store.js"

let server: OpenAiTestServer.TestServer
let home: string

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())

const setup = () => {
  home = makeHome()
}
afterEach(() => {
  server.reset()
  if (home !== undefined) removeHome(home)
})

const ask = (args: ReadonlyArray<string>, options: { stdin?: string; env?: Record<string, string> } = {}) =>
  runCli(["ask", "--base-url", server.url, "--api-key", "test", ...args], {
    env: { NOEMA_HOME: home, ...options.env },
    ...(options.stdin !== undefined && { stdin: options.stdin })
  })

interface RequestMessage {
  readonly role: string
  readonly content?: string | null
  readonly tool_call_id?: string
}

/** The body of the server's request number `index` (which must exist). */
const bodyOf = <A>(index: number): A => {
  const request = server.requests[index]
  if (request === undefined) throw new Error(`the server got no request #${index}`)
  return request.body as A
}

const messagesOf = (index: number): ReadonlyArray<RequestMessage> =>
  bodyOf<{ messages: ReadonlyArray<RequestMessage> }>(index).messages

/** A port nothing listens on: bound by the OS, then released. */
const freePort = (): Promise<number> =>
  new Promise((resolve) => {
    const probe = http.createServer()
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      probe.close(() => resolve(port))
    })
  })

describe("noema ask", () => {
  it("streams the answer to stdout and exits 0", async () => {
    setup()
    server.enqueue({ type: "text", text: "The sky is blue because of Rayleigh scattering." })
    const result = await ask(["Why is the sky blue?"])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("The sky is blue because of Rayleigh scattering.\n")
    expect(server.requests).toHaveLength(1)
    expect(server.requests[0]?.stream).toBe(true)
    expect(messagesOf(0).at(-1)).toMatchObject({ role: "user", content: "Why is the sky blue?" })
    expect(bodyOf<{ model: string }>(0).model).toBe("gpt-4o-mini")
    // Not a terminal: no session id chatter, no offline notice, no colour codes.
    expect(result.stderr).toBe("")
    expect(result.stdout).not.toContain("\u001b")
  })

  it("runs a requested tool and sends its result back to the server", async () => {
    setup()
    server.enqueue(
      {
        type: "tool-calls",
        calls: [{ id: "call_calc", name: "calculator", arguments: '{"expression":"2+2*3"}' }]
      },
      { type: "text", text: "2 + 2 * 3 = 8" }
    )
    const result = await ask(["What is 2+2*3?"])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("2 + 2 * 3 = 8\n")
    expect(result.stderr).toContain("⚙ calculator(2+2*3) → 8")
    expect(server.requests).toHaveLength(2)
    const tools = bodyOf<{ tools: ReadonlyArray<{ function: { name: string } }> }>(0).tools
    expect(tools.map((tool) => tool.function.name)).toEqual(["calculator", "current_time", "read_file"])
    const second = messagesOf(1)
    expect(second.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_calc", content: "8" })
  })

  it("shows a refusal", async () => {
    setup()
    server.enqueue({ type: "refusal", refusal: "I can't help with that." })
    const result = await ask(["something bad"])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("(refused) I can't help with that.\n")
  })

  it("sends no tools with --no-tools", async () => {
    setup()
    server.enqueue({ type: "text", text: "ok" })
    const result = await ask(["--no-tools", "hi"])
    expect(result.code).toBe(0)
    expect(bodyOf<{ tools?: unknown }>(0).tools).toBeUndefined()
  })

  it("prints the turn's messages as JSON with --json, and continues a session with --session", async () => {
    setup()
    server.enqueue({ type: "text", text: "Nice to meet you, Ada." })
    const first = await ask(["--json", "My name is Ada."])
    expect(first.code).toBe(0)
    const output = JSON.parse(first.stdout) as {
      sessionId: string
      messages: ReadonlyArray<{ role: string; content: string; id: string }>
    }
    expect(output.messages.map((message) => [message.role, message.content])).toEqual([
      ["user", "My name is Ada."],
      ["assistant", "Nice to meet you, Ada."]
    ])
    expect(output.messages.every((message) => typeof message.id === "string")).toBe(true)

    server.enqueue({ type: "text", text: "Your name is Ada." })
    const second = await ask(["--session", output.sessionId.slice(0, 8), "What is my name?"])
    expect(second.code).toBe(0)
    expect(second.stdout).toBe("Your name is Ada.\n")
    expect(messagesOf(1).map((message) => [message.role, message.content])).toEqual([
      ["system", expect.stringContaining("You are noema")],
      ["user", "My name is Ada."],
      ["assistant", "Nice to meet you, Ada."],
      ["user", "What is my name?"]
    ])
  })

  it("reads the question from stdin when none is given, or with -", async () => {
    setup()
    server.enqueue({ type: "text", text: "one" }, { type: "text", text: "two" })
    expect((await ask([], { stdin: "first question\n" })).stdout).toBe("one\n")
    expect((await ask(["-"], { stdin: "second question" })).stdout).toBe("two\n")
    expect(messagesOf(0).at(-1)).toMatchObject({ content: "first question" })
    expect(messagesOf(1).at(-1)).toMatchObject({ content: "second question" })
    const empty = await ask([], { stdin: "  \n" })
    expect(empty.code).toBe(2)
    expect(empty.stderr.trim().split("\n")).toHaveLength(1)
  })

  it("sends the argument and piped stdin together: the instruction, then the text in a fence", async () => {
    setup()
    server.enqueue({ type: "text", text: "Add the greeting" })
    const diff = "diff --git a/x b/x\n+hello ```code```\n"
    const result = await ask(["Write a commit message for this diff:"], { stdin: diff })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("Add the greeting\n")
    expect(messagesOf(0).at(-1)).toMatchObject({
      role: "user",
      content: "Write a commit message for this diff:\n\n````\ndiff --git a/x b/x\n+hello ```code```\n````"
    })
    // Empty stdin (a script's closed pipe) leaves the argument alone.
    server.enqueue({ type: "text", text: "ok" })
    expect((await ask(["just this"], { stdin: "" })).code).toBe(0)
    expect(messagesOf(1).at(-1)).toMatchObject({ content: "just this" })
  })

  it("fails with one line and saves nothing when the API key is rejected", async () => {
    setup()
    server.enqueue({ type: "error", status: 401, message: "Incorrect API key provided: test." })
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    expect(result.stdout).toBe("")
    const lines = result.stderr.trim().split("\n")
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^noema: openai rejected the credentials .*401.*--api-key or OPENAI_API_KEY$/)
    expect(result.stderr).not.toMatch(/\n\s+at /)
    const sessions = await runCli(["sessions", "list", "--json"], { env: { NOEMA_HOME: home } })
    expect(JSON.parse(sessions.stdout)).toEqual([])
  })

  it("fails with one line when the server is unreachable", async () => {
    setup()
    const port = await freePort()
    const result = await runCli(["ask", "--base-url", `http://127.0.0.1:${port}/v1`, "hello"], {
      env: { NOEMA_HOME: home }
    })
    expect(result.code).toBe(1)
    const lines = result.stderr.trim().split("\n")
    // Each retry says so before its wait; the last line is the failure.
    expect(lines).toHaveLength(3)
    expect(lines[0]).toMatch(
      /^noema: the connection to the model server failed; retrying in \d+ s \(attempt 2 of 3\)$/
    )
    expect(lines[2]).toMatch(
      new RegExp(`^noema: cannot reach the model server at http://127.0.0.1:${port}/v1`)
    )
  })

  it("names a model server given with credentials without them", async () => {
    setup()
    const port = await freePort()
    const result = await runCli(
      ["ask", "--base-url", `http://user:hunter2secret@127.0.0.1:${port}/v1?api-key=tok3nvalue`, "hello"],
      { env: { NOEMA_HOME: home } }
    )
    expect(result.code).toBe(1)
    expect(result.stderr.trim().split("\n").at(-1)).toMatch(
      new RegExp(
        `^noema: cannot reach the model server at http://user:\\*\\*\\*@127\\.0\\.0\\.1:${port}/v1\\?api-key=\\*\\*\\* `
      )
    )
    expect(result.stderr + result.stdout).not.toMatch(/hunter2secret|tok3nvalue/)
  })

  it("gives up with one line when rate limited after retries", async () => {
    setup()
    const limited = {
      type: "error" as const,
      status: 429,
      message: "Rate limit reached",
      headers: { "retry-after-ms": "10" }
    }
    server.enqueue(limited, limited, limited)
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    expect(server.requests).toHaveLength(3)
    expect(result.stdout).toBe("")
    const lines = result.stderr.trim().split("\n")
    // Not a terminal: one plain line per retry, before its wait, then the failure.
    expect(lines).toHaveLength(3)
    expect(lines[0]).toMatch(/^noema: rate limited by the server; retrying in \d+ s \(attempt 2 of 3\)$/)
    expect(lines[1]).toMatch(/^noema: rate limited by the server; retrying in \d+ s \(attempt 3 of 3\)$/)
    expect(lines[2]).toMatch(/^noema: openai is rate limiting requests and retrying did not help/)
    expect(result.stderr).not.toContain("\u001b")
  })

  it("exits 130 on Ctrl-C (SIGINT), aborting the request and saving nothing", async () => {
    setup()
    server.enqueue({ type: "hang" })
    const result = await runCli(["ask", "--base-url", server.url, "--api-key", "test", "hello?"], {
      env: { NOEMA_HOME: home },
      onStart: (child) => {
        void server.waitForRequests(1).then(() => child.kill("SIGINT"))
      }
    })
    expect(result.code).toBe(130)
    expect(result.stderr).toBe("noema: cancelled; nothing was saved\n")
    await server.waitForClose(0)
    const sessions = await runCli(["sessions", "list", "--json"], { env: { NOEMA_HOME: home } })
    expect(JSON.parse(sessions.stdout)).toEqual([])
  })

  it("prints the full cause with NOEMA_DEBUG=1", async () => {
    setup()
    server.enqueue({ type: "error", status: 401, message: "Incorrect API key provided." })
    const result = await ask(["hello"], { env: { NOEMA_DEBUG: "1" } })
    expect(result.code).toBe(1)
    expect(result.stderr.split("\n").length).toBeGreaterThan(2)
  })
})

describe("noema ask with the offline model", () => {
  it("says it is offline and does arithmetic through the calculator tool", async () => {
    setup()
    const result = await runCli(["ask", "--json", "what is 2+2?"], { env: { NOEMA_HOME: home } })
    expect(result.code).toBe(0)
    expect(result.stderr).toMatch(/^noema: no model configured, using the built-in offline model/)
    expect(result.stderr).toContain("OPENAI_API_KEY")
    const { messages } = JSON.parse(result.stdout) as {
      messages: ReadonlyArray<{ role: string; content: string; toolCalls?: ReadonlyArray<{ name: string }> }>
    }
    expect(messages.map((message) => message.role)).toEqual(["user", "assistant", "tool", "assistant"])
    expect(messages[1]?.toolCalls?.[0]?.name).toBe("calculator")
    expect(messages[2]).toMatchObject({ role: "tool", content: "4" })
    expect(messages[3]).toMatchObject({ role: "assistant", content: "2 + 2 = 4" })
    expect(server.requests).toHaveLength(0)
  })

  it("streams plain answers", async () => {
    setup()
    const result = await runCli(["ask", "what is 6 times 7"], { env: { NOEMA_HOME: home } })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("6 * 7 = 42\n")
    expect(result.stderr).toContain("⚙ calculator(6 * 7) → 42")
  })
})

describe("noema ask: the system prompt and the outcome of a turn", () => {
  const systemMessages = (index: number) =>
    messagesOf(index)
      .filter((message) => message.role === "system")
      .map((message) => message.content)

  it("sends exactly one system message, the CLI default, and keeps it as the session's own", async () => {
    setup()
    server.enqueue({ type: "text", text: "Hello." })
    const result = await ask(["--json", "--no-tools", "hi"])
    expect(result.code).toBe(0)
    expect(systemMessages(0)).toEqual([Sessions.defaultSystemPrompt])
    const { sessionId } = JSON.parse(result.stdout) as { sessionId: string }
    const session = await withStore(home, Session.open(sessionId))
    expect(session.systemPrompt).toBe(Sessions.defaultSystemPrompt)
    expect(
      session
        .context()
        .toArray()
        .map((message) => message.role)
    ).toEqual(["user", "assistant"])
  })

  it("sends exactly one system message with --system: that one", async () => {
    setup()
    server.enqueue({ type: "text", text: "Ok." })
    expect((await ask(["--system", "Be brief.", "hi"])).code).toBe(0)
    expect(systemMessages(0)).toEqual(["Be brief."])
  })

  it("gives a session without a prompt of its own (as noema 0.1 made them) the default, once", async () => {
    setup()
    const id = await withStore(
      home,
      Effect.gen(function* () {
        const session = yield* Session.create()
        const transaction = session.begin()
        transaction.extend([Message.user("earlier"), Message.assistant("before")])
        yield* session.commit(transaction)
        return session.id
      })
    )
    server.enqueue({ type: "text", text: "One." }, { type: "text", text: "Two." })
    expect((await ask(["--session", id, "now"])).code).toBe(0)
    expect((await ask(["--session", id, "again"])).code).toBe(0)
    expect(systemMessages(0)).toEqual([Sessions.defaultSystemPrompt])
    expect(systemMessages(1)).toEqual([Sessions.defaultSystemPrompt])
    expect((await withStore(home, Session.open(id))).systemPrompt).toBe(Sessions.defaultSystemPrompt)
  })

  it("reports a turn another noema overtook as not saved, exits 1, and stores nothing of it", async () => {
    setup()
    server.enqueue({ type: "text", text: "First answer." })
    const first = await ask(["--json", "first"])
    const { sessionId } = JSON.parse(first.stdout) as { sessionId: string }
    const proxy = await proxyAfter(server.url, () =>
      commitElsewhere(home, sessionId, [Message.user("elsewhere"), Message.assistant("theirs")])
    )
    try {
      server.enqueue({ type: "text", text: "Mine." })
      const result = await runCli(
        ["ask", "--base-url", proxy.url, "--api-key", "test", "--session", sessionId, "mine"],
        {
          env: { NOEMA_HOME: home }
        }
      )
      expect(result.code).toBe(1)
      const lines = result.stderr.trim().split("\n")
      expect(lines).toHaveLength(1)
      expect(lines[0]).toBe(
        "noema: another noema added to this session while this answer was being written; the answer was not saved. " +
          "Run the question again to answer on the updated conversation"
      )
    } finally {
      await proxy.close()
    }
    const stored = await withStore(home, Session.open(sessionId))
    expect(
      stored
        .context()
        .toArray()
        .map((message) => message.content)
    ).toEqual(["first", "First answer.", "elsewhere", "theirs"])
  })
})

describe("noema ask: retries shown and capped", () => {
  it("shows the retry on stderr and keeps stdout for the answer when the retry succeeds", async () => {
    setup()
    server.enqueue(
      { type: "error", status: 429, message: "Rate limit reached", headers: { "retry-after-ms": "10" } },
      { type: "text", text: "Answer." }
    )
    const result = await ask(["hello"])
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("Answer.\n")
    expect(result.stderr).toMatch(/^noema: rate limited by the server; retrying in 1 s \(attempt 2 of 3\)\n$/)
  })

  it("fails at once when the server asks to wait longer than the cap (60 s by default)", async () => {
    setup()
    server.enqueue({ type: "error", status: 429, message: "Slow down", headers: { "retry-after": "120" } })
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    expect(server.requests).toHaveLength(1)
    expect(result.stderr.trim().split("\n")).toEqual([
      "noema: openai is rate limiting requests and asked to wait 120 s before retrying, more than noema waits (60 s); " +
        "try again later, or allow longer waits with --max-retry-wait / NOEMA_MAX_RETRY_WAIT"
    ])
  })

  it("takes the cap from --max-retry-wait and NOEMA_MAX_RETRY_WAIT, and refuses one that is not seconds", async () => {
    setup()
    server.enqueue({ type: "error", status: 429, message: "Slow down", headers: { "retry-after": "3" } })
    const flagged = await ask(["--max-retry-wait", "2", "hello"])
    expect(flagged.code).toBe(1)
    expect(flagged.stderr).toMatch(/asked to wait 3 s before retrying, more than noema waits \(2 s\)/)
    server.enqueue({ type: "error", status: 429, message: "Slow down", headers: { "retry-after": "3" } })
    const fromEnv = await ask(["hello"], { env: { NOEMA_MAX_RETRY_WAIT: "1" } })
    expect(fromEnv.stderr).toMatch(/more than noema waits \(1 s\)/)
    expect(server.requests).toHaveLength(2)
    const wrong = await ask(["hello"], { env: { NOEMA_MAX_RETRY_WAIT: "soon" } })
    expect(wrong.code).toBe(2)
    expect(wrong.stderr).toBe(
      'noema: NOEMA_MAX_RETRY_WAIT: "soon" is not a number of seconds (e.g. 60) (see noema ask --help)\n'
    )
    expect(server.requests).toHaveLength(2)
  })
})

describe("noema ask: errors name the real cause", () => {
  const html = (title: string) =>
    `<!DOCTYPE html>\n<html><head><title>${title}</title></head><body><h1>${title}</h1></body></html>\n`

  it("an HTML page answered with 200 is not a connection failure", async () => {
    setup()
    const page = {
      type: "raw" as const,
      status: 200,
      headers: { "content-type": "text/html; charset=utf-8" },
      body: html("Welcome to nginx!")
    }
    server.enqueue(page, page, page)
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    const last = result.stderr.trim().split("\n").at(-1)
    expect(last).toMatch(/^noema: openai sent an answer noema could not read \(.*HTML page \(text\/html\)/)
    expect(result.stderr).not.toMatch(/cannot reach/)
  })

  it("an HTML error page is summarised, not dumped", async () => {
    setup()
    const page = {
      type: "raw" as const,
      status: 502,
      headers: { "content-type": "text/html" },
      body: html("502 Bad Gateway")
    }
    server.enqueue(page, page, page)
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    const last = result.stderr.trim().split("\n").at(-1)
    expect(last).toMatch(
      /unavailable \(server error \(502\): an HTML page titled "502 Bad Gateway", not an API response\)/
    )
    expect(result.stderr).not.toContain("<")
  })

  it("a stream that ends without a finish reason says the answer was cut short", async () => {
    setup()
    server.enqueue({
      type: "sse",
      events: [{ id: "c1", model: "m", choices: [{ index: 0, delta: { content: "Half an" } }] }]
    })
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/stopped before the answer was complete \(.*finish reason\)/)
    expect(result.stderr).not.toMatch(/cannot reach|is it running/)
  })

  it("a 404 from a base URL without /v1 suggests adding it, not checking the model name", async () => {
    setup()
    const origin = new URL(server.url).origin
    const result = await runCli(["ask", "--base-url", origin, "--api-key", "test", "hello"], {
      env: { NOEMA_HOME: home }
    })
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(new RegExp(`\\(invalid request \\(404\\).*try --base-url ${origin}/v1\\n$`))
    expect(result.stderr).not.toMatch(/model name/)
  })

  it("an invalid key reported inside a 200 event stream is an authentication failure", async () => {
    setup()
    server.enqueue({
      type: "sse",
      events: [
        {
          error: {
            message: "Incorrect API key provided: sk-bad.",
            type: "invalid_request_error",
            code: "invalid_api_key"
          }
        }
      ],
      done: false
    })
    const result = await ask(["hello"])
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(
      /^noema: openai rejected the credentials \(authentication failed: Incorrect API key/
    )
    expect(server.requests).toHaveLength(1)
  })

  it("--base-url that is not a URL is a usage error before any request", async () => {
    setup()
    const result = await runCli(["ask", "--base-url", "notaurl", "hello"], { env: { NOEMA_HOME: home } })
    expect(result.code).toBe(2)
    expect(result.stderr).toBe(
      'noema: --base-url: "notaurl" is not an http(s) URL (e.g. http://localhost:11434/v1) (see noema ask --help)\n'
    )
    expect(server.requests).toHaveLength(0)
  })
})
