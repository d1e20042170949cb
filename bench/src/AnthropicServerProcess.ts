/**
 * AnthropicServerProcess: the local Anthropic wire-format server
 * (`@noema/anthropic/testing`) in its own process, forked by `Providers.ts`
 * through `Http.startServer`, with the same IPC protocol as `ServerProcess.ts`
 * (`{ url }` once listening, `"reset"`, `"close"`).
 */
import { AnthropicTestServer } from "@noema/anthropic/testing"

// The answer every contender gets, streamed or not, comes from the parent.
const reply: AnthropicTestServer.TextReply = {
  type: "text",
  text: process.argv[2] ?? "Hello.",
  usage: { inputTokens: 14, outputTokens: 16 }
}

const main = async (): Promise<void> => {
  const server = await AnthropicTestServer.start({ host: "127.0.0.1" })
  server.setFallback(reply)
  const stop = async (): Promise<void> => {
    await server.close()
    process.exit(0)
  }
  process.on("message", (message) => {
    if (message === "reset") {
      // Recorded requests would otherwise pile up over the run.
      server.reset()
      server.setFallback(reply)
      process.send?.("reset")
    } else if (message === "close") {
      void stop()
    }
  })
  process.on("disconnect", () => void stop())
  process.send?.({ url: server.url })
}

await main()
