/**
 * Compaction through the CLI, end to end against the local wire-format server:
 * `--context-budget` makes `noema ask --session` / `noema chat` summarise older
 * turns before a turn, `/compact` does it on demand, and `sessions show` still
 * has every original message.
 */
import { describe, expect, it } from "vitest"
import { runCli, useServerAndHome } from "./support/cli.js"

const suite = useServerAndHome()

interface RequestMessage {
  readonly role: string
  readonly content?: string | null
}

const messagesOf = (index: number): ReadonlyArray<RequestMessage> => {
  const request = suite.server.requests[index]
  if (request === undefined) throw new Error(`the server got no request #${index}`)
  return (request.body as { messages: ReadonlyArray<RequestMessage> }).messages
}

const cli = (args: ReadonlyArray<string>, options: { stdin?: string } = {}) =>
  runCli(args, {
    env: { NOEMA_HOME: suite.home },
    ...(options.stdin !== undefined && { stdin: options.stdin })
  })

const model = (budget: number) => [
  "--base-url",
  suite.server.url,
  "--api-key",
  "test",
  "--model",
  "gpt-4o-mini",
  "--no-tools",
  "--context-budget",
  String(budget)
]

/** A long answer, so a few turns pass a small budget. */
const long = (topic: string) => `${topic}: ${"a detailed and rather long explanation ".repeat(12)}`

describe("compaction in the CLI", () => {
  it("ask --session compacts older turns before the turn, and sessions show keeps every message", async () => {
    suite.server.enqueue({ type: "text", text: long("Rome") }, { type: "text", text: long("Paris") })
    const first = await cli(["ask", ...model(0), "--json", "Tell me about Rome."])
    expect(first.code).toBe(0)
    const sessionId = (JSON.parse(first.stdout) as { sessionId: string }).sessionId
    expect((await cli(["ask", ...model(0), "--session", sessionId, "And Paris?"])).code).toBe(0)

    // Now over a 150-token budget: the summariser is asked first, then the turn goes out.
    suite.server.enqueue({ type: "text", text: "The user asked about Rome; the assistant explained it." })
    suite.server.enqueue({ type: "text", text: "Berlin is the capital of Germany." })
    const third = await cli(["ask", ...model(150), "--session", sessionId, "And Berlin?"])
    expect(third.code).toBe(0)
    expect(third.stdout).toBe("Berlin is the capital of Germany.\n")
    expect(third.stderr).toMatch(
      /\(compacted: 2 earlier messages summarised, [\d,]+ -> [\d,]+ tokens; the originals stay saved\)/
    )

    const summariser = messagesOf(2)
    expect(summariser.at(-1)?.content).toContain("User: Tell me about Rome.")
    expect(summariser.at(-1)?.content).not.toContain("And Paris?")
    // The turn: the session's prompt, the summary, the kept turn (Paris), the question.
    const turn = messagesOf(3)
    expect(turn.map((message) => message.role)).toEqual(["system", "system", "user", "assistant", "user"])
    expect(turn[1]?.content).toContain("Summary of the earlier conversation (2 messages")
    expect(turn[1]?.content).toContain("the assistant explained it")
    expect(turn[2]?.content).toBe("And Paris?")

    const show = await cli(["sessions", "show", sessionId])
    expect(show.code).toBe(0)
    expect(show.stdout).toContain("Tell me about Rome.")
    expect(show.stdout).toContain("here the 2 messages before were summarised for the model")
    expect(show.stdout).toContain("And Berlin?")
  })

  it("/compact in chat summarises on demand; 0 turns automatic compaction off", async () => {
    suite.server.enqueue(
      { type: "text", text: long("One") },
      { type: "text", text: long("Two") },
      { type: "text", text: "Summary: turn one was about one." },
      { type: "text", text: "Three." }
    )
    const result = await cli(["chat", ...model(0)], { stdin: "one\ntwo\n/compact\nthree\n/exit\n" })
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/\(compacted: 2 earlier messages summarised, [\d,]+ -> [\d,]+ tokens;/)
    expect(result.stdout).not.toContain("(estimated)")
    // Budget 0: no compaction before turns (it would have been a fifth request).
    expect(suite.server.requests).toHaveLength(4)
    const turn = messagesOf(3)
    expect(turn.map((message) => message.role)).toEqual(["system", "system", "user", "assistant", "user"])
    expect(turn[1]?.content).toContain("Summary: turn one was about one.")
  })

  it("refuses a budget that is not a number of tokens", async () => {
    const result = await cli(["ask", "--context-budget", "lots", "hello"])
    expect(result.code).toBe(2)
    expect(result.stderr).toContain('--context-budget: "lots" is not a number of tokens')
  })
})
