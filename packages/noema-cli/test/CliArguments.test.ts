import { assert, describe, it } from "@effect/vitest"
import { parseCommand, UsageError } from "../src/CliArguments.js"

describe("CliArguments", () => {
  it("parses chat options, flags over nothing", () => {
    assert.deepStrictEqual(
      parseCommand([
        "chat",
        "-m",
        "gpt-4.1",
        "--base-url",
        "http://x/v1",
        "--no-tools",
        "-s",
        "abc",
        "--provider",
        "anthropic"
      ]),
      {
        type: "chat",
        model: {
          model: "gpt-4.1",
          baseUrl: "http://x/v1",
          apiKey: undefined,
          maxRetryWait: undefined,
          contextBudget: undefined,
          api: undefined,
          provider: "anthropic"
        },
        tools: false,
        mcp: undefined,
        approveAll: false,
        system: undefined,
        session: "abc",
        database: undefined
      }
    )
  })

  it("joins the words of a question, and reads stdin for none or -", () => {
    const command = parseCommand(["ask", "--json", "what", "is", "2+2?"])
    assert.deepInclude(command, { type: "ask", question: "what is 2+2?", json: true, tools: true })
    assert.deepInclude(parseCommand(["ask"]), { question: undefined })
    assert.deepInclude(parseCommand(["ask", "-"]), { question: undefined })
    assert.deepInclude(parseCommand(["ask", "--", "--not-a-flag"]), { question: "--not-a-flag" })
  })

  it("takes an MCP servers file for chat and ask", () => {
    assert.deepInclude(parseCommand(["chat", "--mcp", "mcp.json"]), { type: "chat", mcp: "mcp.json" })
    assert.deepInclude(parseCommand(["ask", "--mcp", "mcp.json", "hi"]), { type: "ask", mcp: "mcp.json" })
    assert.throws(() => parseCommand(["ask", "--mcp"]), /--mcp needs a value/)
  })

  it("takes --yes / -y: run every tool call without asking", () => {
    assert.deepInclude(parseCommand(["chat", "--yes"]), { approveAll: true })
    assert.deepInclude(parseCommand(["ask", "-y", "hi"]), { approveAll: true })
    assert.deepInclude(parseCommand(["ask", "hi"]), { approveAll: false })
  })

  it("parses the sessions actions", () => {
    assert.deepStrictEqual(parseCommand(["sessions"]), {
      type: "sessions-list",
      json: false,
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "list", "--json"]), {
      type: "sessions-list",
      json: true,
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "show", "ab12"]), {
      type: "sessions-show",
      id: "ab12",
      json: false,
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "delete", "ab12"]), {
      type: "sessions-delete",
      id: "ab12",
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "export", "ab12", "-f", "markdown"]), {
      type: "sessions-export",
      id: "ab12",
      format: "markdown",
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "export", "ab12"]), {
      type: "sessions-export",
      id: "ab12",
      format: "json",
      database: undefined
    })
  })

  it("takes --database on every command that touches sessions", () => {
    const url = "postgres://noema:pw@db:5432/noema"
    assert.deepInclude(parseCommand(["chat", "--database", url]), { type: "chat", database: url })
    assert.deepInclude(parseCommand(["ask", "--database=/tmp/x.db", "hi"]), {
      type: "ask",
      database: "/tmp/x.db"
    })
    assert.deepInclude(parseCommand(["sessions", "--database", url]), {
      type: "sessions-list",
      database: url
    })
    assert.deepInclude(parseCommand(["sessions", "show", "ab", "--database", url]), { database: url })
    assert.throws(() => parseCommand(["sessions", "--database"]), /--database needs a value/)
  })

  it("parses export --all and import", () => {
    assert.deepStrictEqual(parseCommand(["sessions", "export", "--all"]), {
      type: "sessions-export-all",
      database: undefined
    })
    assert.deepStrictEqual(parseCommand(["sessions", "import", "backup.jsonl", "--database", "pg.db"]), {
      type: "sessions-import",
      file: "backup.jsonl",
      database: "pg.db"
    })
    assert.deepStrictEqual(parseCommand(["sessions", "import"]), {
      type: "sessions-import",
      file: undefined,
      database: undefined
    })
    assert.throws(() => parseCommand(["sessions", "export", "--all", "ab12"]), /unexpected argument "ab12"/)
    assert.throws(() => parseCommand(["sessions", "export", "--all", "-f", "markdown"]), /JSON lines only/)
    assert.throws(() => parseCommand(["sessions", "list", "--all"]), /--all only applies to export/)
    assert.throws(() => parseCommand(["sessions", "import", "a", "b"]), /unexpected argument "b"/)
  })

  it("answers help and version before anything else", () => {
    assert.deepStrictEqual(parseCommand([]), { type: "help", topic: "main" })
    assert.deepStrictEqual(parseCommand(["chat", "--model", "x", "--help"]), { type: "help", topic: "chat" })
    assert.deepStrictEqual(parseCommand(["ask", "-h"]), { type: "help", topic: "ask" })
    assert.deepStrictEqual(parseCommand(["sessions", "show", "--version"]), { type: "version" })
  })

  it("rejects unknown flags and commands with a UsageError", () => {
    assert.throws(() => parseCommand(["chat", "--frob"]), UsageError)
    assert.throws(() => parseCommand(["frob"]), UsageError)
    assert.throws(() => parseCommand(["-x"]), UsageError)
  })
})
