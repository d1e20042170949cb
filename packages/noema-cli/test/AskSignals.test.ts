/**
 * `noema ask` killed mid-answer: SIGTERM (`timeout`, `kill`) and SIGHUP (a
 * closed terminal) cancel the turn as Ctrl-C does (nothing saved, exit status
 * 128 + the signal's number), and even a SIGKILL leaves no empty session,
 * since a new session reaches the store only with its first turn.
 */
import * as os from "node:os"
import { OpenAiTestServer } from "@noema/openai/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let server: OpenAiTestServer.TestServer
let home: string

beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => {
  server.reset()
  removeHome(home)
})

const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
  id: "chatcmpl-slow",
  object: "chat.completion.chunk",
  created: 0,
  model: "test-model",
  choices: [{ index: 0, delta, finish_reason: finishReason }]
})

/** A slow answer: its first words arrive at once, the rest would take far longer than any test. */
const slowAnswer = (): OpenAiTestServer.SseReply => ({
  type: "sse",
  events: [chunk({ role: "assistant", content: "one " }), chunk({ content: "two" }, "stop")],
  chunkDelayMs: 60_000
})

/** Runs `noema ask` and sends it `signal` once the first words of the answer reached its stdout. */
const askAndKill = (signal: NodeJS.Signals) =>
  runCli(["ask", "--base-url", server.url, "--api-key", "test", "count for me"], {
    env: { NOEMA_HOME: home },
    onStart: (child) => {
      child.stdout?.once("data", () => child.kill(signal))
    }
  })

const listed = async (): Promise<ReadonlyArray<unknown>> => {
  const result = await runCli(["sessions", "list", "--json"], { env: { NOEMA_HOME: home } })
  expect(result.code).toBe(0)
  return JSON.parse(result.stdout) as ReadonlyArray<unknown>
}

describe("noema ask, killed mid-answer", () => {
  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    it(`cancels the turn on ${signal}: exit ${128 + os.constants.signals[signal]}, nothing saved, no session`, async () => {
      home = makeHome()
      server.enqueue(slowAnswer())
      const result = await askAndKill(signal)
      expect(result.signal).toBeNull()
      expect(result.code).toBe(128 + os.constants.signals[signal])
      expect(result.stdout).toMatch(/^one /)
      expect(result.stderr).toBe("noema: cancelled; nothing was saved\n")
      // The request to the model was aborted, not left running.
      await server.waitForClose(0)
      expect(await listed()).toEqual([])
    })
  }

  it("leaves no empty session even when killed outright (SIGKILL)", async () => {
    home = makeHome()
    server.enqueue(slowAnswer())
    const result = await askAndKill("SIGKILL")
    expect(result.signal).toBe("SIGKILL")
    expect(await listed()).toEqual([])
  })

  it("still saves a turn that completes, as one session", async () => {
    home = makeHome()
    server.enqueue({ type: "text", text: "done" })
    const result = await runCli(["ask", "--base-url", server.url, "--api-key", "test", "finish"], {
      env: { NOEMA_HOME: home }
    })
    expect(result.code).toBe(0)
    const sessions = (await listed()) as ReadonlyArray<{ title?: string; messageCount: number }>
    expect(sessions).toHaveLength(1)
    expect(sessions[0]?.title).toBe("finish")
    expect(sessions[0]?.messageCount).toBe(2)
  })
})
