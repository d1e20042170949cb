/**
 * Token usage end to end: answers from a local server speaking OpenAI's wire
 * format carry usage, the session keeps it with the messages, and
 * `noema sessions show` and `/usage` in chat sum it.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { runCli, useServerAndHome } from "./support/cli.js"

const suite = useServerAndHome()

const model = ["--base-url", "", "--api-key", "test"]
const withServer = () => model.map((value) => (value === "" ? suite.server.url : value))

/** Three model calls over two turns: a tool call and its answer, then a plain answer. */
const enqueueTwoTurns = () =>
  suite.server.enqueue(
    {
      type: "tool-calls",
      calls: [{ name: "calculator", arguments: '{"expression":"2+2"}' }],
      usage: { promptTokens: 100, completionTokens: 10, cachedTokens: 40 }
    },
    { type: "text", text: "It is 4.", usage: { promptTokens: 130, completionTokens: 6 } },
    {
      type: "text",
      text: "Hello Ada.",
      usage: { promptTokens: 150, completionTokens: 4, reasoningTokens: 2 }
    }
  )

describe("token usage", () => {
  it("noema sessions show sums the session's usage and each turn's", async () => {
    enqueueTwoTurns()
    const env = { NOEMA_HOME: suite.home }
    const first = await runCli(["ask", ...withServer(), "--json", "what is 2+2?"], { env })
    expect(first.code).toBe(0)
    const id = (JSON.parse(first.stdout) as { sessionId: string }).sessionId
    const second = await runCli(["ask", ...withServer(), "--session", id, "my name is Ada"], { env })
    expect(second.code).toBe(0)

    const shown = await runCli(["sessions", "show", id.slice(0, 8)], { env })
    expect(shown.code).toBe(0)
    expect(shown.stdout).toContain("usage: 380 in (40 cached) · 20 out (2 reasoning) · 3 calls\n")
    expect(shown.stdout).toContain("── turn 1 · 230 in (40 cached) · 16 out · 2 calls\n› what is 2+2?")
    expect(shown.stdout).toContain("── turn 2 · 150 in · 4 out (2 reasoning) · 1 call\n› my name is Ada")

    const json = await runCli(["sessions", "show", id, "--json"], { env })
    const parsed = JSON.parse(json.stdout) as {
      messages: ReadonlyArray<unknown>
      usage: { total: Record<string, number>; turns: ReadonlyArray<Record<string, number>> }
    }
    expect(parsed.messages).toHaveLength(6)
    expect(parsed.usage.total).toEqual({
      calls: 3,
      unreportedCalls: 0,
      inputTokens: 380,
      outputTokens: 20,
      totalTokens: 400,
      cachedInputTokens: 40,
      reasoningTokens: 2
    })
    expect(
      parsed.usage.turns.map((turn) => [turn.turn, turn.calls, turn.inputTokens, turn.outputTokens])
    ).toEqual([
      [1, 2, 230, 16],
      [2, 1, 150, 4]
    ])
  })

  it("counts answers stored without a usage report (older sessions) as unknown, not zero", async () => {
    const env = { NOEMA_HOME: suite.home }
    const id = "01d5e551-0000-0000-0000-000000000000"
    const archived = {
      format: "noema-session",
      version: 1,
      session: { id, title: "old", createdAt: 1, updatedAt: 2, messageCount: 4, metadata: {} },
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello" },
        { role: "user", content: "again" },
        {
          role: "assistant",
          content: "hello again",
          usage: { inputTokens: 7, outputTokens: 3, totalTokens: 10 }
        }
      ]
    }
    const imported = await runCli(["sessions", "import"], { env, stdin: `${JSON.stringify(archived)}\n` })
    expect(imported.code).toBe(0)
    const shown = await runCli(["sessions", "show", id], { env })
    expect(shown.stdout).toContain("usage: 7 in · 3 out · 2 calls, 1 without usage report\n")
    expect(shown.stdout).toContain("── turn 1 · tokens unknown · 1 call, 1 without usage report\n")
    expect(shown.stdout).toContain("── turn 2 · 7 in · 3 out · 1 call\n")
  })

  it("/usage in chat shows the session's totals and the last turn's", async () => {
    enqueueTwoTurns()
    const result = await runCli(["chat", ...withServer()], {
      env: { NOEMA_HOME: suite.home },
      stdin: "/usage\nwhat is 2+2?\nmy name is Ada\n/usage\n"
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("(no messages yet)")
    expect(result.stdout).toContain(
      "Session:   380 in (40 cached) · 20 out (2 reasoning) · 3 calls over 2 turns\n"
    )
    expect(result.stdout).toContain("Last turn: 150 in · 4 out (2 reasoning) · 1 call\n")
  })

  it("shows the cost with the user's prices (NOEMA_PRICES, or $NOEMA_HOME/prices.json), and refuses a bad prices file", async () => {
    enqueueTwoTurns()
    const env = { NOEMA_HOME: suite.home }
    // The local server answers as the model it was asked for (gpt-4o-mini by default); each message keeps it.
    fs.writeFileSync(
      path.join(suite.home, "prices.json"),
      JSON.stringify({ "gpt-4o-mini": { input: 1000, output: 2000, cachedInput: 500 } })
    )
    const first = await runCli(["ask", ...withServer(), "--json", "what is 2+2?"], { env })
    const id = (JSON.parse(first.stdout) as { sessionId: string }).sessionId
    await runCli(["ask", ...withServer(), "--session", id, "my name is Ada"], { env })
    const shown = await runCli(["sessions", "show", id], { env })
    // 340 uncached * 1000 + 40 cached * 500 + 20 out * 2000 = 400,000 per million = $0.40
    expect(shown.stdout).toContain("cost: $0.4000\n")

    const chat = await runCli(["chat", "--session", id, ...withServer()], { env, stdin: "/usage\n/exit\n" })
    expect(chat.stdout).toContain("Cost:      $0.4000 (session)")

    const bad = path.join(suite.home, "bad-prices.json")
    fs.writeFileSync(bad, '{"gpt-4o-mini": {"input": "cheap"}}')
    const refused = await runCli(["sessions", "show", id], { env: { ...env, NOEMA_PRICES: bad } })
    expect(refused.code).toBe(2)
    expect(refused.stderr).toContain("bad-prices.json is not a prices file")
  })
})
