import { assert, describe, it } from "@effect/vitest"
import { parseCommand, UsageError } from "../src/CliArguments.js"

describe("CliArguments", () => {
  it("parses chat options, flags over nothing", () => {
    assert.deepStrictEqual(
      parseCommand(["chat", "-m", "gpt-4.1", "--base-url", "http://x/v1", "--no-tools", "-s", "abc"]),
      {
        type: "chat",
        model: { model: "gpt-4.1", baseUrl: "http://x/v1", apiKey: undefined },
        tools: false,
        system: undefined,
        session: "abc"
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

  it("parses the sessions actions", () => {
    assert.deepStrictEqual(parseCommand(["sessions"]), { type: "sessions-list", json: false })
    assert.deepStrictEqual(parseCommand(["sessions", "list", "--json"]), {
      type: "sessions-list",
      json: true
    })
    assert.deepStrictEqual(parseCommand(["sessions", "show", "ab12"]), {
      type: "sessions-show",
      id: "ab12",
      json: false
    })
    assert.deepStrictEqual(parseCommand(["sessions", "delete", "ab12"]), {
      type: "sessions-delete",
      id: "ab12"
    })
    assert.deepStrictEqual(parseCommand(["sessions", "export", "ab12", "-f", "markdown"]), {
      type: "sessions-export",
      id: "ab12",
      format: "markdown"
    })
    assert.deepStrictEqual(parseCommand(["sessions", "export", "ab12"]), {
      type: "sessions-export",
      id: "ab12",
      format: "json"
    })
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
