import { assert, describe, it } from "@effect/vitest"
import { Message } from "@noema/core"
import * as Session from "../src/Session.js"

const info = {
  id: "s1",
  title: "Pictures",
  createdAt: 1_760_000_000_000,
  updatedAt: 1_760_000_000_000,
  messageCount: 2,
  metadata: {}
}

describe("Session.exportMarkdown with content parts", () => {
  it("shows the answer, folds the reasoning away and lists files", () => {
    const markdown = Session.exportMarkdown(info, [
      Message.user([
        Message.textPart("What is this?"),
        Message.filePart({
          uri: "https://example.com/cat.png",
          mediaType: "image/png",
          name: "cat.png",
          size: 2048
        }),
        Message.filePart({ uri: "data:text/plain;base64,aGk=", mediaType: "text/plain", name: "note.txt" })
      ]),
      Message.assistant([Message.reasoningPart("Whiskers, so a cat."), Message.textPart("A cat.")])
    ])
    assert.include(
      markdown,
      "## User\n\nWhat is this?\n\nAttached file: [cat.png](<https://example.com/cat.png>), image/png, 2048 bytes"
    )
    assert.include(markdown, "Attached file: `note.txt` (inline), text/plain")
    assert.include(
      markdown,
      "<details><summary>Reasoning</summary>\n\nWhiskers, so a cat.\n\n</details>\n\nA cat."
    )
    assert.notInclude(markdown, "[object Object]")
  })
})
