/**
 * ServerChild: the child's side of a local wire-format test server run in its
 * own process (`ServerProcess.ts` for OpenAI's, `AnthropicServerProcess.ts` for
 * Anthropic's), so the server's own work (parsing requests, writing JSON and
 * SSE) runs beside the client on the other core instead of inside the event
 * loop being measured.
 *
 * Protocol over the IPC channel: the child sends `{ url }` once listening;
 * `"reset"` forgets recorded requests (answered with `"reset"`); `"close"`
 * closes the server and exits. Losing the parent also exits.
 */

/** What both test servers offer: a fallback reply, a reset, a close. */
export interface TestServer<Reply> {
  readonly url: string
  readonly setFallback: (reply: Reply) => void
  readonly reset: () => void
  readonly close: () => Promise<void>
}

/** Serves `reply` (every contender's answer, streamed or not) until the parent says close or goes away. */
export const serve = <Reply>(server: TestServer<Reply>, reply: Reply): void => {
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
