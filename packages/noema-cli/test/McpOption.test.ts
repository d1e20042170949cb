/**
 * `--mcp FILE` end to end: the built binary starts a real MCP server process
 * (the fixture of @noema/mcp) and a local OpenAI wire-format server scripts
 * the model's calls of its tools.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { OpenAiTestServer } from "@noema/openai/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

const fixture = path.join(import.meta.dirname, "..", "..", "noema-mcp", "test", "fixtures", "StdioServer.ts")

let server: OpenAiTestServer.TestServer
let home: string

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => {
  server.reset()
  if (home !== undefined) removeHome(home)
})

/** Writes `document` as `mcp.json` in a fresh NOEMA_HOME and returns its path. */
const config = (document: unknown): string => {
  home = makeHome()
  const file = path.join(home, "mcp.json")
  fs.writeFileSync(file, typeof document === "string" ? document : JSON.stringify(document))
  return file
}

const calcServer = { mcpServers: { calc: { command: process.execPath, args: [fixture] } } }

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

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
const toolNames = (index: number) =>
  bodyOf<{ tools: ReadonlyArray<{ function: { name: string } }> }>(index).tools.map(
    (tool) => tool.function.name
  )
const messagesOf = (index: number) => bodyOf<{ messages: ReadonlyArray<RequestMessage> }>(index).messages

describe("noema ask --mcp", () => {
  it("gives the model the server's tools, runs the call, and ends the server", async () => {
    const file = config(calcServer)
    server.enqueue(
      {
        type: "tool-calls",
        calls: [
          { id: "call_add", name: "calc__add", arguments: '{"a":2,"b":40}' },
          { id: "call_pid", name: "calc__pid", arguments: "{}" }
        ]
      },
      { type: "text", text: "It is 42." }
    )
    const result = await runCli(
      ["ask", "--base-url", server.url, "--api-key", "test", "--mcp", file, "--yes", "What is 2+40?"],
      { env: { NOEMA_HOME: home } }
    )
    expect(result.stderr).not.toContain("    at ")
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("It is 42.\n")
    expect(toolNames(0)).toEqual([
      "calculator",
      "current_time",
      "read_file",
      "calc__add",
      "calc__fail",
      "calc__crash",
      "calc__picture",
      "calc__pid"
    ])
    const second = messagesOf(1)
    expect(second.find((message) => message.tool_call_id === "call_add")).toMatchObject({
      role: "tool",
      content: "42"
    })
    const pid = Number(second.find((message) => message.tool_call_id === "call_pid")?.content)
    expect(pid).toBeGreaterThan(0)
    expect(isAlive(pid)).toBe(false)
  })

  it("sends a server's error result back to the model", async () => {
    const file = config(calcServer)
    server.enqueue(
      {
        type: "tool-calls",
        calls: [{ id: "call_fail", name: "calc__fail", arguments: '{"reason":"why not"}' }]
      },
      { type: "text", text: "It failed." }
    )
    const result = await runCli(
      ["ask", "--base-url", server.url, "--api-key", "test", "--no-tools", "--mcp", file, "--yes", "try it"],
      { env: { NOEMA_HOME: home } }
    )
    expect(result.code).toBe(0)
    const second = messagesOf(1)
    expect(second.at(-1)?.content).toContain("failed on purpose: why not")
    expect(toolNames(0)).not.toContain("calculator")
  })

  it("refuses a bad config file in one line naming the file and key, exit 2", async () => {
    const file = config({ mcpServers: { calc: { command: "x", args: "--flag" } } })
    const result = await runCli(["ask", "--base-url", server.url, "--api-key", "test", "--mcp", file, "hi"], {
      env: { NOEMA_HOME: home }
    })
    expect(result.code).toBe(2)
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
    expect(result.stderr).toContain(`noema: ${file}: mcpServers.calc.args: `)
    expect(server.requests).toHaveLength(0)
  })

  it("reports a server that fails to start in one line, exit 1", async () => {
    const file = config({ mcpServers: { ghost: { command: "/nonexistent/mcp-server" } } })
    const result = await runCli(["ask", "--base-url", server.url, "--api-key", "test", "--mcp", file, "hi"], {
      env: { NOEMA_HOME: home }
    })
    expect(result.code).toBe(1)
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
    expect(result.stderr).toMatch(
      /^noema: MCP server "ghost" \(\/nonexistent\/mcp-server\) failed to start: /
    )
    expect(server.requests).toHaveLength(0)
  })
})

describe("noema chat --mcp", () => {
  it("lists the MCP tools with /tools", async () => {
    const file = config(calcServer)
    const result = await runCli(["chat", "--mcp", file], {
      env: { NOEMA_HOME: home },
      stdin: "/tools\n/exit\n"
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("calculator")
    expect(result.stdout).toMatch(/calc__add\s+Adds two numbers/)
    expect(result.stdout).toMatch(/calc__fail\s+Always fails/)
  })
})
