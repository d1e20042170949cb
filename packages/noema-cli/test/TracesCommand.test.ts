/**
 * `noema traces list|show` with the built CLI: a turn of `noema ask` (the offline
 * model calling the calculator) is kept as a trace, listed with its session, and
 * shown span by span on the Traces view's own line (`TraceStore.describeSpan`),
 * the tool call with its arguments and result; a call the server failed once
 * shows its retry. NOEMA_TRACES_KEEP bounds what is kept (0: nothing), and a
 * value that is not a number is refused in one line.
 */
import { OpenAiTestServer } from "@noema/openai/testing"
import { TraceStore } from "@noema/session"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let server: OpenAiTestServer.TestServer
const homes: Array<string> = []

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => {
  server.reset()
  for (const home of homes.splice(0)) removeHome(home)
})

const newHome = () => {
  const home = makeHome()
  homes.push(home)
  return home
}

const noema = async (home: string, args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const result = await runCli(args, {
    env: { NOEMA_HOME: home, NOEMA_MODEL: "offline", NO_COLOR: "1", ...env }
  })
  expect(result.code, `noema ${args.join(" ")}: ${result.stderr}`).toBe(0)
  return result.stdout
}

interface ListJson {
  readonly total: number
  readonly traces: ReadonlyArray<{ readonly traceId: string; readonly sessionId: string | null }>
}

interface ShowJson {
  readonly traceId: string
  readonly spans: ReadonlyArray<TraceStore.FinishedSpan & { readonly depth: number; readonly line: string }>
}

const listed = async (home: string, args: ReadonlyArray<string> = [], env?: Record<string, string>) =>
  JSON.parse(await noema(home, ["traces", "list", "--json", ...args], env)) as ListJson

describe("noema ask, then noema traces", () => {
  it("lists the turn's trace and shows its spans: the model calls' tokens, the calculator's arguments and result", async () => {
    const home = newHome()
    expect(await noema(home, ["ask", "what is 2+3*4?"])).toBe("2 + 3 * 4 = 14\n")
    const sessions = JSON.parse(await noema(home, ["sessions", "list", "--json"])) as Array<{ id: string }>
    const sessionId = sessions[0]?.id as string

    const list = await listed(home)
    expect(list.total).toBe(1)
    const traceId = list.traces[0]?.traceId as string
    expect(list.traces[0]?.sessionId).toBe(sessionId)
    // The session's own list, by a prefix of its id; another session's is empty.
    expect((await listed(home, ["--session", sessionId.slice(0, 8)])).traces.map((t) => t.traceId)).toEqual([
      traceId
    ])
    expect(await noema(home, ["traces"])).toMatch(
      new RegExp(`^${traceId}  .+  ok  \\d+ spans  session ${sessionId} from message 0\\n$`)
    )

    const shown = await noema(home, ["traces", "show", traceId.slice(0, 6)])
    const lines = shown.split("\n")
    expect(lines[0]).toBe(`trace ${traceId}`)
    expect(lines[2]).toMatch(/^noema\.turn {2}\S/)
    expect(
      lines.filter((line) =>
        /^ {2}chat noema-offline {2}.* · \d+ in, \d+ out tokens · first token /.test(line)
      )
    ).toHaveLength(2)
    const tool = lines.findIndex((line) => line.startsWith("  execute_tool calculator  "))
    expect(lines.slice(tool + 1, tool + 3)).toEqual([
      '      arguments: {"expression":"2+3*4"}',
      "      result: 14"
    ])
    expect(lines.some((line) => line.startsWith("  noema.session.commit  "))).toBe(true)

    // One home for a span's line: what show prints is TraceStore.describeSpan of the span kept.
    const json = JSON.parse(await noema(home, ["traces", "show", traceId, "--json"])) as ShowJson
    expect(json.traceId).toBe(traceId)
    for (const span of json.spans) {
      expect(span.line).toBe(TraceStore.describeSpan(span))
      expect(shown).toContain(`${"  ".repeat(span.depth)}${span.name}  ${span.line}\n`)
    }
    const calls = json.spans.filter((span) => span.name === "chat noema-offline")
    expect(calls.map((call) => call.depth)).toEqual([1, 1])
    expect(calls.every((call) => typeof call.attributes["gen_ai.usage.input_tokens"] === "number")).toBe(true)
  }, 60_000)

  it("shows a model call the server failed once: the failed attempt, the retry, the answer", async () => {
    const home = newHome()
    server.enqueue({ type: "error", status: 503, message: "overloaded" }, { type: "text", text: "Answer." })
    const asked = await runCli(["ask", "--base-url", server.url, "--api-key", "test-key", "hello"], {
      env: { NOEMA_HOME: home }
    })
    expect(asked.stdout, asked.stderr).toBe("Answer.\n")
    const [trace] = (await listed(home)).traces
    const shown = await noema(home, ["traces", "show", trace?.traceId as string])
    // The CLI retries around the model (its notices), so each attempt is a call of its own and
    // the retry an event of the turn: the failed attempt, then the one that answered.
    const lines = shown.split("\n")
    expect(lines[2]).toMatch(/^noema\.turn {2}.* · 1 retry$/)
    const calls = lines.filter((line) => line.startsWith("  chat gpt-4o-mini  "))
    expect(calls).toHaveLength(2)
    expect(calls[0]).toMatch(/ · failed: .*server error \(503\): overloaded/)
    expect(calls[1]).toMatch(/ · \d+ in, \d+ out tokens · first token /)
    const json = JSON.parse(
      await noema(home, ["traces", "show", "--json", trace?.traceId as string])
    ) as ShowJson
    expect(
      json.spans[0]?.events.map((event) => [event.name, event.attributes["noema.retry.attempt"]])
    ).toEqual([["noema.retry", 2]])
  }, 60_000)

  it("a trace id that names none is one line, status 1", async () => {
    const home = newHome()
    await noema(home, ["ask", "hello"])
    const result = await runCli(["traces", "show", "nope"], { env: { NOEMA_HOME: home } })
    expect(result.code).toBe(1)
    expect(result.stdout).toBe("")
    expect(result.stderr).toBe("noema: no trace nope\n")
  }, 60_000)
})

describe("NOEMA_TRACES_KEEP", () => {
  it("keeps the newest N turns' traces; 0 keeps none", async () => {
    const home = newHome()
    await noema(home, ["ask", "what is 1+1?"], { NOEMA_TRACES_KEEP: "1" })
    const first = (await listed(home)).traces[0]?.traceId
    await noema(home, ["ask", "what is 2+2?"], { NOEMA_TRACES_KEEP: "1" })
    const kept = await listed(home)
    expect(kept.total).toBe(1)
    expect(kept.traces[0]?.traceId).not.toBe(first)
    await noema(home, ["ask", "what is 3+3?"], { NOEMA_TRACES_KEEP: "0" })
    expect((await listed(home)).traces.map((trace) => trace.traceId)).toEqual([kept.traces[0]?.traceId])
  }, 60_000)

  it("refuses a value that is not a number of turns (or days), in one line, before the turn", async () => {
    const home = newHome()
    for (const [name, value] of [
      ["NOEMA_TRACES_KEEP", "lots"],
      ["NOEMA_TRACES_MAX_AGE_DAYS", "-3"]
    ] as const) {
      const result = await runCli(["ask", "hello"], {
        env: { NOEMA_HOME: home, NOEMA_MODEL: "offline", [name]: value }
      })
      expect(result.code).toBe(2)
      expect(result.stdout).toBe("")
      expect(result.stderr).toMatch(new RegExp(`^noema: ${name}: "${value}" is not a number of [^\\n]*\\n$`))
    }
  }, 60_000)
})
