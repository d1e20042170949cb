/**
 * InterruptServerProcess: the local OpenAI wire-format server for
 * `runtime.interrupt`, in its own process, as a model server would be: a
 * client's abort reaches it through the socket, and its close handler runs
 * beside the client's event loop, not inside it.
 *
 * A request whose last message starts with "go" streams a long answer slowly
 * (it is the one to interrupt); any other is answered "ok" at once.
 * Protocol over IPC: the child sends `{ url }` once listening; `{ watch: i }`
 * asks it to report when request `i` is closed by the client, acknowledged
 * `{ watching: i }` at once (the timing starts after it, so the watch is never
 * handled inside the timed window nor after the close it waits for) and answered
 * `{ closedAt }` with `process.hrtime.bigint()` as a string (CLOCK_MONOTONIC,
 * the same clock in every process of the machine); `"reset"`; `"close"`.
 */
import { OpenAiTestServer } from "@noema/openai/testing"

const main = async (): Promise<void> => {
  const server = await OpenAiTestServer.start({ host: "127.0.0.1" })
  const reply: OpenAiTestServer.Reply = (request) => {
    const messages = (request.body as { messages?: ReadonlyArray<{ content?: unknown }> }).messages ?? []
    const last = messages.at(-1)?.content
    return typeof last === "string" && last.startsWith("go")
      ? { type: "text", text: "a never ending answer ".repeat(50), chunkDelayMs: 1_000 }
      : { type: "text", text: "ok" }
  }
  server.setFallback(reply)
  process.on("message", (message: unknown) => {
    if (message === "reset") {
      server.reset()
      server.setFallback(reply)
      process.send?.("reset")
    } else if (message === "close") {
      void server.close().then(() => process.exit(0))
    } else if (typeof message === "object" && message !== null && "watch" in message) {
      const index = (message as { watch: number }).watch
      void server.waitForClose(index, 30_000).then(() => {
        process.send?.({ closedAt: process.hrtime.bigint().toString() })
      })
      process.send?.({ watching: index })
    }
  })
  process.on("disconnect", () => void server.close().then(() => process.exit(0)))
  process.send?.({ url: server.url })
}

await main()
