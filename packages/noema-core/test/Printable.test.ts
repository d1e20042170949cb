import { assert, describe, it } from "@effect/vitest"
import { Printable } from "../src/index.js"

describe("Printable.escapeControls", () => {
  it("shows C0, DEL, C1 and bidirectional controls as visible escapes, and nothing else changes", () => {
    assert.strictEqual(
      Printable.escapeControls("a\u001b]0;pwned\u0007b\r\n\tc\u007f\u009b2J"),
      "a\\x1b]0;pwned\\x07b\\x0d\\x0a\\x09c\\x7f\\x9b2J"
    )
    assert.strictEqual(
      Printable.escapeControls("x\u202eexe.txt\u2066\u2069\u200e\u200f\u061c\u202a"),
      "x\\u202eexe.txt\\u2066\\u2069\\u200e\\u200f\\u061c\\u202a"
    )
    assert.strictEqual(Printable.escapeControls("héllo — 数字 ✓ 👍 עברית"), "héllo — 数字 ✓ 👍 עברית")
    assert.strictEqual(Printable.escapeControls("one\ntwo\tthree\r", "\n\t"), "one\ntwo\tthree\\x0d")
  })

  it("finds the first unsafe character and names its code point", () => {
    assert.deepStrictEqual(Printable.firstControl("report\u202egpj.md"), { index: 6, codePoint: "U+202E" })
    assert.deepStrictEqual(Printable.firstControl("a\nb"), { index: 1, codePoint: "U+000A" })
    assert.strictEqual(Printable.firstControl("notes/été.md"), undefined)
  })
})

describe("Printable.redactUrl", () => {
  it("hides the user part and secret-named parameters, keeps the rest as written", () => {
    assert.strictEqual(Printable.redactUrl("http://user:secret@host:8080/v1"), "http://user:***@host:8080/v1")
    assert.strictEqual(Printable.redactUrl("https://tok3n@host/v1"), "https://***@host/v1")
    assert.strictEqual(Printable.redactUrl("http://u:p@ss@host/v1"), "http://u:***@host/v1")
    assert.strictEqual(
      Printable.redactUrl(
        "http://host/v1?api-key=k1&apikey=k2&access_token=t&x=1&Password=p&client_secret=s"
      ),
      "http://host/v1?api-key=***&apikey=***&access_token=***&x=1&Password=***&client_secret=***"
    )
    assert.strictEqual(
      Printable.redactUrl("https://host/cb#access_token=t&state=1"),
      "https://host/cb#access_token=***&state=1"
    )
    assert.strictEqual(Printable.redactUrl("http://localhost:11434/v1"), "http://localhost:11434/v1")
    assert.strictEqual(Printable.redactUrl("http://host/a@b?q=1"), "http://host/a@b?q=1")
  })

  it("redacts every URL inside a text", () => {
    assert.strictEqual(
      Printable.redactUrls(
        "Request cannot be constructed from a URL that includes credentials: http://user:secret@127.0.0.1:9/v1/chat/completions?api_key=tok (see https://docs.example/x)"
      ),
      "Request cannot be constructed from a URL that includes credentials: http://user:***@127.0.0.1:9/v1/chat/completions?api_key=*** (see https://docs.example/x)"
    )
  })
})
