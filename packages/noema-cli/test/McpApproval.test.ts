/**
 * Approval of tool calls end to end: an MCP server's tool that is not marked
 * read-only waits for a person. `noema ask` leaves the call waiting in the
 * session and says so (exit 3); `noema chat --session`, another process, asks
 * y/N and goes on: the call runs (or is refused) and the model answers. The
 * decision goes through chat's runtime as a trigger, like its messages: the
 * session records it with the call's result, and a session another process
 * changed meanwhile gets the runtime's one conflict message.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Approval, ConversationContext, Message } from "@noema/core"
import { ContextItem } from "@noema/runtime"
import { SqliteStore } from "@noema/session"
import { Effect } from "effect"
import { beforeEach, describe, expect, it } from "vitest"
import { requestMessages, runCli, useServerAndHome } from "./support/cli.js"
import { commitElsewhere, proxyAfter } from "./support/store.js"

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

/** The stored messages of session `id`, read through the session package. */
const storedMessages = (id: string) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function* () {
        const store = yield* SqliteStore.make({ filename: path.join(suite.home, "noema.db") })
        return (yield* store.load(id)).messages
      })
    )
  )

/** `noema ask` leaves `calc__pid()` waiting for approval; the session's id. */
const askForPid = async (): Promise<string> => {
  suite.server.enqueue({
    type: "tool-calls",
    calls: [{ id: "call_pid", name: "calc__pid", arguments: "{}" }]
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
  return (JSON.parse(asked.stdout) as { sessionId: string }).sessionId
}

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
    // The decision went through chat's runtime: its trigger is recorded with the call's result.
    const result = (await storedMessages(sessionId)).find(
      (message) => message.role === "tool" && message.toolCallId === "call_pid"
    )
    expect(result?.metadata?.[ContextItem.decisionMetadataKey]).toEqual({
      approved: true,
      by: "user",
      trigger: expect.stringMatching(/^[0-9a-f-]{36}$/)
    })
  })

  it("a decision answered while another noema added to the session gets the one conflict message, and is not saved", async () => {
    const sessionId = await askForPid()
    const before = await storedMessages(sessionId)
    const call = { id: "call_pid", name: "calc__pid", arguments: "{}" }
    // Another noema moves on while this chat's continued turn asks the model.
    const elsewhere = [Approval.superseded(call), Message.user("elsewhere"), Message.assistant("theirs")]
    const proxy = await proxyAfter(suite.server.url, () => commitElsewhere(suite.home, sessionId, elsewhere))
    try {
      suite.server.enqueue({ type: "text", text: "Lost." })
      const chat = await runCli(
        ["chat", "--base-url", proxy.url, "--api-key", "test", "--mcp", mcpFile, "--session", sessionId],
        { env: { NOEMA_HOME: suite.home }, stdin: "y\n/exit\n" }
      )
      expect(chat.code).toBe(1)
      expect(chat.stderr).toBe(
        "error: another noema changed this session meanwhile, so your decision was not saved\n"
      )
      expect(chat.stdout).toContain("Allowed calc__pid().")
      expect(chat.stdout).toContain("The session is reloaded with the other turns.")
    } finally {
      await proxy.close()
    }
    const after = await storedMessages(sessionId)
    expect(after.map((message) => Message.text(message))).toEqual([
      ...before.map((message) => Message.text(message)),
      ...elsewhere.map((message) => Message.text(message))
    ])
    expect(ConversationContext.problems(after)).toEqual([])
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
