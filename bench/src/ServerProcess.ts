/**
 * ServerProcess: the local OpenAI wire-format server, run in its own process
 * (forked by `Http.ts`), as a real model server would be. The server's own
 * work (parsing requests, writing JSON and SSE) then runs beside the client on
 * the other core instead of inside the event loop being measured.
 *
 * Protocol over the IPC channel: the child sends `{ url }` once listening;
 * `"reset"` forgets recorded requests (answered with `"reset"`); `"close"`
 * closes the server and exits. Losing the parent also exits.
 */
import { OpenAiTestServer } from "@noema/openai/testing"

// The answer every contender gets, streamed or not, comes from the parent.
const reply: OpenAiTestServer.TextReply = {
  type: "text",
  text: process.argv[2] ?? "Hello.",
  usage: { promptTokens: 14, completionTokens: 16 }
}

const main = async (): Promise<void> => {
  const server = await OpenAiTestServer.start({ host: "127.0.0.1" })
  server.setFallback(reply)
  const stop = async (): Promise<void> => {
    await server.close()
    process.exit(0)
  }
  process.on("message", (message) => {
    if (message === "reset") {
      // Recorded requests would otherwise pile up over hundreds of thousands of turns.
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
