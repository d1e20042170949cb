/**
 * Approval of tool calls end to end: an MCP server's tool that is not marked
 * read-only waits for a person. `noema ask` leaves the call waiting in the
 * session and says so (exit 3); `noema chat --session`, another process, asks
 * y/N and goes on: the call runs (or is refused) and the model answers.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { beforeEach, describe, expect, it } from "vitest"
import { requestMessages, runCli, useServerAndHome } from "./support/cli.js"

const fixture = path.join(import.meta.dirname, "..", "..", "noema-mcp", "test", "fixtures", "StdioServer.ts")

const suite = useServerAndHome()
let mcpFile: string
beforeEach(() => {
  mcpFile = path.join(suite.home, "mcp.json")
  fs.writeFileSync(
    mcpFile,
    JSON.stringify({ mcpServers: { calc: { command: process.execPath, args: [fixture] } } })
  )
})

const cli = (args: ReadonlyArray<string>, stdin?: string) =>
  runCli(
    args.map((arg) => (arg === "$URL" ? suite.server.url : arg)),
    {
      env: { NOEMA_HOME: suite.home },
      ...(stdin !== undefined && { stdin })
    }
  )

const messagesOf = (index: number) => requestMessages(suite.server, index)

describe("approval of tool calls", () => {
  it("ask leaves the call waiting (exit 3); chat --session in another process asks, runs it on y, and goes on", async () => {
    suite.server.enqueue({
      type: "tool-calls",
      calls: [
        { id: "call_pid", name: "calc__pid", arguments: "{}" },
        { id: "call_add", name: "calc__add", arguments: '{"a":1,"b":2}' }
      ]
    })
    const asked = await cli([
      "ask",
      "--base-url",
      "$URL",
      "--api-key",
      "test",
      "--mcp",
      mcpFile,
      "--json",
      "pid?"
    ])
    expect(asked.code).toBe(3)
    expect(asked.stderr).toContain(
      "calc__pid() waits for approval and did not run; decide with: noema chat --session"
    )
    // The read-only tool ran; the other waits. One model call so far.
    expect(suite.server.requests).toHaveLength(1)
    const sessionId = (JSON.parse(asked.stdout) as { sessionId: string }).sessionId

    suite.server.enqueue({ type: "text", text: "The server's pid is known now." })
    const chat = await cli(
      ["chat", "--base-url", "$URL", "--api-key", "test", "--mcp", mcpFile, "--session", sessionId],
      "y\n/exit\n"
    )
    expect(chat.code).toBe(0)
    expect(chat.stdout).toContain("Allowed calc__pid().")
    expect(chat.stdout).toContain("The server's pid is known now.")
    const sent = messagesOf(1)
    const pid = sent.find((message) => message.tool_call_id === "call_pid")
    expect(Number(pid?.content)).toBeGreaterThan(0)
    expect(sent.find((message) => message.tool_call_id === "call_add")?.content).toBe("3")
    expect(sent.map((message) => message.role)).toEqual(["system", "user", "assistant", "tool", "tool"])
  })

  it("chat asks right away; n refuses the call and the model is told", async () => {
    suite.server.enqueue(
      { type: "tool-calls", calls: [{ id: "call_fail", name: "calc__fail", arguments: '{"reason":"x"}' }] },
      { type: "text", text: "Understood, I will not." }
    )
    const chat = await cli(
      ["chat", "--base-url", "$URL", "--api-key", "test", "--no-tools", "--mcp", mcpFile],
      "break it\nn\n/exit\n"
    )
    expect(chat.code).toBe(0)
    expect(chat.stdout).toContain("⏸ calc__fail(x) waits for your approval")
    expect(chat.stdout).toContain("Refused calc__fail(x).")
    expect(chat.stdout).toContain("Understood, I will not.")
    const refusal = messagesOf(1).find((message) => message.tool_call_id === "call_fail")
    expect(refusal?.content).toContain("The user did not approve this call")
  })

  it("--yes runs every call without asking", async () => {
    suite.server.enqueue(
      { type: "tool-calls", calls: [{ id: "call_pid", name: "calc__pid", arguments: "{}" }] },
      { type: "text", text: "Done." }
    )
    const asked = await cli([
      "ask",
      "--base-url",
      "$URL",
      "--api-key",
      "test",
      "--mcp",
      mcpFile,
      "--yes",
      "pid?"
    ])
    expect(asked.code).toBe(0)
    expect(asked.stdout).toBe("Done.\n")
  })
})
