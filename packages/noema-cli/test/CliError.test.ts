import { ChatModel, ModelError } from "@noema/core"
import { SessionStore } from "@noema/session"
import { describe, expect, it } from "vitest"
import * as CliError from "../src/CliError.js"

describe("CliError.describe", () => {
  const unknownModel = ChatModel.error(
    "openai",
    new ModelError.InvalidRequest({ message: "The model `gpt-9` does not exist", status: 404 }),
    "gpt-9"
  )
  const baseUrl = "http://127.0.0.1:1234/v1"

  it("names the flag for an unknown model on the command line", () => {
    const text = CliError.describe(unknownModel, { baseUrl })
    expect(text).toMatch(/check the model name \(--model \/ NOEMA_MODEL\)$/)
  })

  it("names the slash command for an unknown model inside chat", () => {
    const text = CliError.describe(unknownModel, { baseUrl, inChat: true })
    expect(text).toMatch(/check the model name \(\/model NAME switches it\)$/)
    expect(text).not.toMatch(/--model/)
  })

  it("names /sessions for an unknown session inside chat, the shell command outside", () => {
    const missing = new SessionStore.SessionNotFoundError({ sessionId: "zzzz" })
    expect(CliError.describe(missing, { inChat: true })).toMatch(/\/sessions lists them\)$/)
    expect(CliError.describe(missing)).toMatch(/see noema sessions list\)$/)
  })

  it("names a model server without the credentials in its URL, and escapes control characters", () => {
    const unreachable = ChatModel.error(
      "openai",
      ModelError.network("connect", "Connection error. (ECONNREFUSED)"),
      "m"
    )
    const text = CliError.describe(unreachable, {
      baseUrl: "http://user:hunter2@10.0.0.5:8080/v1?token=t0k&model=x"
    })
    expect(text).toMatch(
      /^cannot reach the model server at http:\/\/user:\*\*\*@10\.0\.0\.5:8080\/v1\?token=\*\*\*&model=x /
    )
    expect(text).not.toMatch(/hunter2|t0k/)
    const hostile = CliError.describe(new Error("bad \u001b]0;title\u0007 name \u202e"))
    expect(hostile).toBe("bad \\x1b]0;title\\x07 name \\u202e")
  })

  it("tells a refused connection, a timeout and an answer cut short apart by the failure's kind, not its words", () => {
    const described = (reason: ModelError.Network) =>
      CliError.describe(ChatModel.error("anthropic", reason, "m"), { baseUrl: "http://127.0.0.1:9/v1" })
    // Words that would have misled a reading of the message text.
    expect(described(ModelError.network("connect", "socket timed out while connecting"))).toMatch(
      /^cannot reach the model server at http:\/\/127\.0\.0\.1:9\/v1 .*is it running\?/
    )
    expect(described(ModelError.network("timeout", "connection failed after 60 s"))).toMatch(
      /did not answer in time/
    )
    expect(described(ModelError.network("cut-short", "upstream request timed out"))).toMatch(
      /stopped before the answer was complete/
    )
    expect(
      described(new ModelError.Network({ message: "connection failed: recorded before kinds" }))
    ).toMatch(/stopped before the answer was complete/)
  })
})
