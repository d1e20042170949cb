/** `--api responses`: the CLI speaks OpenAI's Responses API to the local wire-format server. */

import { ResponsesStreams as Streams } from "@noema/openai/testing"
import { describe, expect, it } from "vitest"
import { runCli, useServerAndHome } from "./support/cli.js"

const suite = useServerAndHome()

describe("noema ask --api responses", () => {
  it("posts to /v1/responses and prints the streamed answer", async () => {
    suite.server.enqueue({ type: "sse", events: Streams.text })
    const result = await runCli(
      ["ask", "--base-url", suite.server.url, "--api-key", "test", "--api", "responses", "--no-tools", "Hi"],
      { env: { NOEMA_HOME: suite.home } }
    )
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("Hello there!\n")
    expect(suite.server.requests[0]?.path).toBe("/v1/responses")
    expect(suite.server.requests[0]?.body).toMatchObject({ model: "gpt-4o-mini", stream: true, store: false })
  })
})
