import { assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import * as Terminal from "../src/Terminal.js"

const call = (name: string, args: string): Message.ToolCall => ({ id: "c1", name, arguments: args })
const result = (content: string, isError = false) =>
  Message.toolResult({ toolCallId: "c1", name: "calculator", content, isError })

describe("Terminal", () => {
  it("uses colour only on a TTY without NO_COLOR and not on a dumb terminal", () => {
    assert.isTrue(Terminal.colorEnabled({ isTTY: true }, {}))
    assert.isFalse(Terminal.colorEnabled({ isTTY: false }, {}))
    assert.isFalse(Terminal.colorEnabled({}, {}))
    assert.isFalse(Terminal.colorEnabled({ isTTY: true }, { NO_COLOR: "1" }))
    assert.isTrue(Terminal.colorEnabled({ isTTY: true }, { NO_COLOR: "" }))
    assert.isFalse(Terminal.colorEnabled({ isTTY: true }, { TERM: "dumb" }))
    assert.strictEqual(Terminal.style(false).dim("x"), "x")
    assert.strictEqual(Terminal.style(true).dim("x"), "\u001b[2mx\u001b[22m")
  })

  it("draws one compact line per tool call", () => {
    assert.strictEqual(
      Terminal.toolLine(call("calculator", '{"expression":"2+2"}'), result("4")),
      "  ⚙ calculator(2+2) → 4"
    )
    assert.strictEqual(
      Terminal.toolLine(call("current_time", ""), result("2025-01-01T00:00:00Z (Wednesday, UTC)")),
      "  ⚙ current_time() → 2025-01-01T00:00:00Z (Wednesday, UTC)"
    )
    assert.strictEqual(
      Terminal.toolLine(call("search", '{"query":"cats","limit":3}'), result("found")),
      "  ⚙ search(query=cats, limit=3) → found"
    )
    assert.strictEqual(
      Terminal.toolLine(call("read_file", '{"path":"a.txt"}'), result("one\ntwo\nthree\n")),
      "  ⚙ read_file(a.txt) → 3 lines, 14 chars"
    )
    assert.strictEqual(
      Terminal.toolLine(
        call("calculator", '{"expression":"1/0"}'),
        result("Cannot evaluate: division by zero", true)
      ),
      "  ⚙ calculator(1/0) ✗ Cannot evaluate: division by zero"
    )
    assert.strictEqual(Terminal.toolLine(call("x", "not json"), result("ok")), "  ⚙ x(not json) → ok")
    const long = Terminal.toolLine(
      call("calculator", JSON.stringify({ expression: `${"1+".repeat(100)}1` })),
      result("101")
    )
    assert.isBelow(long.length, 100)
    assert.include(long, "…")
  })

  it("replays a conversation compactly, without system messages", () => {
    const lines = Terminal.transcript(
      [
        Message.system("be nice"),
        Message.user("what is 2+2?"),
        Message.assistant("", { toolCalls: [call("calculator", '{"expression":"2+2"}')] }),
        result("4"),
        Message.assistant("2 + 2 = 4"),
        Message.user("thanks"),
        Message.assistant("one\ntwo\nthree")
      ],
      { maxLines: 2 }
    )
    assert.deepStrictEqual(lines, [
      "› what is 2+2?",
      "  ⚙ calculator(2+2) → 4",
      "2 + 2 = 4",
      "",
      "› thanks",
      "one\ntwo\n… (1 more lines)"
    ])
  })

  it("lists sessions as a table with the current one marked", () => {
    const rows = Terminal.sessionTable(
      [
        { id: "aaaa", title: "First", createdAt: 0, updatedAt: 0, messageCount: 4, metadata: {} },
        { id: "bbbb", createdAt: 0, updatedAt: 0, messageCount: 0, metadata: {} }
      ],
      { current: "bbbb" }
    )
    assert.strictEqual(rows.length, 3)
    assert.match(rows[0] ?? "", /^ {2}ID +UPDATED +MSGS +TITLE$/)
    assert.match(rows[1] ?? "", /^ {2}aaaa +\d{4}-\d\d-\d\d \d\d:\d\d +4 {2}First$/)
    assert.match(rows[2] ?? "", /^\* bbbb .* {2}\(untitled\)$/)
    assert.deepStrictEqual(Terminal.sessionTable([]), ["No sessions yet. Start one with: noema chat"])
  })
  it("shows control and bidirectional characters as visible escapes, keeping newlines and tabs", () => {
    const hostile = "Hi\u001b]0;pwned\u0007 there\u001b[2J!\r\n\tok\u0008\u009b2J\u202e\u2066"
    assert.strictEqual(
      Terminal.sanitize(hostile),
      "Hi\\x1b]0;pwned\\x07 there\\x1b[2J!\n\tok\\x08\\x9b2J\\u202e\\u2066"
    )
    assert.strictEqual(Terminal.sanitize("plain text\n"), "plain text\n")
    assert.strictEqual(Terminal.sanitize("a lone\rreturn"), "a lone\\x0dreturn")
    const tool = Message.toolResult({ toolCallId: "c1", name: "calculator", content: "4\u001b[2J" })
    assert.strictEqual(
      Terminal.toolLine(call("calculator\u001b]0;x\u0007", "{}"), tool),
      "  ⚙ calculator\\x1b]0;x\\x07() → 4\\x1b[2J"
    )
    const lines = Terminal.transcript([Message.user("a\u001b[2J"), Message.assistant("b\u202ec")])
    assert.deepStrictEqual(lines, ["› a\\x1b[2J", "b\\u202ec"])
    const table = Terminal.sessionTable([
      {
        id: "s1",
        title: "\u001b]0;pwned\u0007Title",
        createdAt: 0,
        updatedAt: 0,
        messageCount: 2,
        metadata: {}
      }
    ])
    assert.isTrue(table[1]?.endsWith("  \\x1b]0;pwned\\x07Title"))
    // Nothing that reaches the screen steers it.
    for (const shown of [Terminal.sanitize(hostile), ...lines, ...table])
      for (const character of ["\u001b", "\u0007", "\u009b", "\u202e", "\u2066"])
        assert.notInclude(shown, character)
  })

  it("shows a name exactly on one line, and prose collapsed and cut", () => {
    assert.strictEqual(Terminal.inline("ok.md\n\u2713 verified"), "ok.md\\x0a\u2713 verified")
    assert.strictEqual(Terminal.inline("report\u202egpj.md"), "report\\u202egpj.md")
    assert.strictEqual(Terminal.oneLine("two\n  lines\u001b[31m", 80), "two lines\\x1b[31m")
    assert.strictEqual(Terminal.oneLine("abcdef", 4), "abc…")
  })

  it("keeps a CRLF cut between streamed pieces a newline", () => {
    const sanitizer = new Terminal.StreamSanitizer()
    const pieces = ["He\u001b]0;pw", "ned\u0007llo\r", "\nnext", " end\r"]
    const shown = pieces.map((piece) => sanitizer.push(piece))
    assert.deepStrictEqual(shown, ["He\\x1b]0;pw", "ned\\x07llo", "\nnext", " end"])
    assert.strictEqual(sanitizer.flush(), "\\x0d")
  })
})
