/**
 * Runtime: how fast the event-driven runtime reacts.
 *
 * - `runtime.interrupt_us`: from an `Interruption` trigger (`receiveTrigger`) to
 *   the moment the local OpenAI wire-format server, in its own process
 *   (`InterruptServerProcess.ts`), sees the running turn's streaming request
 *   closed by the client (the real `OpenAiChatModel` over the `openai` SDK);
 *   both ends read the machine's monotonic clock. Beside it,
 *   `runtime.interrupt_raw_us`: the raw SDK's own `AbortController.abort()` on a
 *   streaming request to the same server, the floor.
 * - `runtime.triggers_per_s`: `user.message` triggers sent back to back to a
 *   running runtime with an instant scripted model, until every one is in the
 *   session; `runtime.triggers_lost` counts those neither stored nor reported
 *   by `stop` (must be 0; any fails the run).
 */
import { type ChildProcess, fork } from "node:child_process"
import type { ChatModel } from "@noema/core"
import { Effect, Fiber, Redacted, Stream } from "effect"
import OpenAI from "openai"
import { check, median, now } from "./Harness.ts"

export interface RuntimeOptions {
  /** Interruptions timed (each a turn interrupted and a new one run). */
  readonly interrupts: number
  /** Triggers sent in the throughput run. */
  readonly triggers: number
}

const waitUntil = async (condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> => {
  const started = now()
  while (!condition()) {
    if (now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setImmediate(resolve))
  }
}

/** The server in its own process, and a way to learn when it saw a request closed. */
const startServer = async () => {
  const child: ChildProcess = fork(new URL("./InterruptServerProcess.ts", import.meta.url), [], {
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
  const messages: Array<unknown> = []
  const waiters: Array<() => void> = []
  child.on("message", (message) => {
    messages.push(message)
    for (const waiter of waiters.splice(0)) waiter()
  })
  const next = async <A>(pick: (message: unknown) => A | undefined): Promise<A> => {
    for (;;) {
      for (let i = 0; i < messages.length; i++) {
        const picked = pick(messages[i])
        if (picked !== undefined) {
          messages.splice(i, 1)
          return picked
        }
      }
      await new Promise<void>((resolve) => waiters.push(resolve))
    }
  }
  const url = await next((message) =>
    typeof message === "object" && message !== null && "url" in message
      ? (message as { url: string }).url
      : undefined
  )
  return {
    url,
    /**
     * Once the server watches request `index`: `at` resolves with the hrtime (ns) at which
     * it saw that request closed by the client.
     */
    closedAt: async (index: number): Promise<{ readonly at: Promise<bigint> }> => {
      child.send({ watch: index })
      await next((message) =>
        typeof message === "object" && message !== null && "watching" in message ? true : undefined
      )
      return {
        at: next((message) =>
          typeof message === "object" && message !== null && "closedAt" in message
            ? BigInt((message as { closedAt: string }).closedAt)
            : undefined
        )
      }
    },
    reset: async () => {
      child.send("reset")
      await next((message) => (message === "reset" ? true : undefined))
    },
    close: () => {
      child.send("close")
    }
  }
}

/** A runtime over a fresh memory session, with the built-in user-messages submind and no tools. */
const makeRuntime = async (model: ChatModel.Service) => {
  const [{ Runtime, Submind }, { MemoryStore, Session, SessionStore }, { ToolAgent }] = await Promise.all([
    import("@noema/runtime"),
    import("@noema/session"),
    import("@noema/agents")
  ])
  const store = await Effect.runPromise(MemoryStore.make())
  const session = await Effect.runPromise(
    Effect.provideService(Session.create(), SessionStore.SessionStore, store)
  )
  const runtime = await Effect.runPromise(
    Runtime.make({
      session,
      model,
      subminds: [Submind.userMessages],
      agent: (steering) => ToolAgent.make({ name: "bench", tools: [], steering })
    })
  )
  return { runtime, session }
}

const microsSince = (start: bigint, end: bigint): number => Number(end - start) / 1000

const interrupts = async (options: RuntimeOptions): Promise<Record<string, number>> => {
  const [{ OpenAiChatModel }, { TriggerEvent }] = await Promise.all([
    import("@noema/openai"),
    import("@noema/runtime")
  ])
  const server = await startServer()
  try {
    // The reference: the raw SDK aborting its own streaming request.
    const client = new OpenAI({ baseURL: server.url, apiKey: "test", maxRetries: 0 })
    const rawInterrupt = async (): Promise<number> => {
      await server.reset()
      const controller = new AbortController()
      const stream = await client.chat.completions.create(
        { model: "bench", messages: [{ role: "user", content: "go" }], stream: true },
        { signal: controller.signal }
      )
      const iterator = stream[Symbol.asyncIterator]()
      // As noema's turn: the first text has arrived (the first chunk carries only the role).
      for (;;) {
        const chunk = await iterator.next()
        check(chunk.done !== true, "the raw SDK's stream ended before its first text")
        if (chunk.done !== true && (chunk.value.choices[0]?.delta?.content ?? "") !== "") break
      }
      const closed = await server.closedAt(0)
      const start = process.hrtime.bigint()
      controller.abort()
      const elapsed = microsSince(start, await closed.at)
      await iterator.next().catch(() => undefined)
      return elapsed
    }

    const model = await Effect.runPromise(
      OpenAiChatModel.make({
        model: "bench",
        baseURL: server.url,
        apiKey: Redacted.make("test"),
        maxAttempts: 1
      })
    )
    const { runtime } = await makeRuntime(model)
    let completed = 0
    let textDeltas = 0
    const events = Effect.runFork(
      Stream.runForEach(runtime.events, (event) =>
        Effect.sync(() => {
          if (event.type === "cycle-completed") completed++
          if (event.type === "turn" && event.event.type === "text-delta") textDeltas++
        })
      )
    )
    await Effect.runPromise(Effect.repeat(Effect.yieldNow, { times: 10 }))
    await Effect.runPromise(runtime.start)
    const noemaInterrupt = async (i: number): Promise<number> => {
      await server.reset()
      const deltasBefore = textDeltas
      const completedBefore = completed
      await Effect.runPromise(runtime.receiveTrigger(TriggerEvent.fromUser(`go ${i}`)))
      // The turn is streaming: its first text has arrived.
      await waitUntil(() => textDeltas > deltasBefore, "the first streamed text")
      const closed = await server.closedAt(0)
      const start = process.hrtime.bigint()
      await Effect.runPromise(runtime.receiveTrigger(TriggerEvent.fromUser(`stop ${i}`, { interrupt: true })))
      const elapsed = microsSince(start, await closed.at)
      await waitUntil(() => completed > completedBefore, "the interrupting turn")
      return elapsed
    }
    // Interleaved one by one, the order swapped every time, so a burst of load from the rest of
    // the machine falls on both sides alike.
    const raw: Array<number> = []
    const timings: Array<number> = []
    for (let i = 0; i < options.interrupts; i++) {
      if (i % 2 === 0) {
        raw.push(await rawInterrupt())
        timings.push(await noemaInterrupt(i))
      } else {
        timings.push(await noemaInterrupt(i))
        raw.push(await rawInterrupt())
      }
    }
    const report = await Effect.runPromise(runtime.stop())
    check(report.unprocessed.length === 0, "every interrupting message was answered")
    await Effect.runPromise(Fiber.interrupt(events))
    process.stderr.write(
      `  runtime.interrupt: noema ${median(timings).toFixed(0)} us, raw SDK abort ${median(raw).toFixed(0)} us\n`
    )
    return { "runtime.interrupt_us": median(timings), "runtime.interrupt_raw_us": median(raw) }
  } finally {
    server.close()
  }
}

const triggers = async (options: RuntimeOptions): Promise<Record<string, number>> => {
  const [{ TriggerEvent }, { ScriptedChatModel }] = await Promise.all([
    import("@noema/runtime"),
    import("@noema/core/testing")
  ])
  const { runtime, session } = await makeRuntime(ScriptedChatModel.make({ fallback: "ok" }))
  await Effect.runPromise(runtime.start)
  const userMessages = () =>
    session
      .context()
      .toArray()
      .filter((message) => message.role === "user").length
  const start = now()
  for (let i = 0; i < options.triggers; i++) {
    await Effect.runPromise(runtime.receiveTrigger(TriggerEvent.fromUser(`message ${i}`)))
  }
  await waitUntil(() => userMessages() === options.triggers, "every trigger in the session", 60_000)
  const seconds = (now() - start) / 1000
  const report = await Effect.runPromise(runtime.stop())
  const stored = new Set(
    session
      .context()
      .toArray()
      .filter((message) => message.role === "user")
      .map((message) => (typeof message.content === "string" ? message.content : ""))
  )
  let lost = 0
  for (let i = 0; i < options.triggers; i++) if (!stored.has(`message ${i}`)) lost++
  lost -= report.unprocessed.length
  check(lost === 0, `${lost} triggers lost`)
  process.stderr.write(`  runtime.triggers: ${(options.triggers / seconds).toFixed(0)}/s, lost ${lost}\n`)
  return { "runtime.triggers_per_s": options.triggers / seconds, "runtime.triggers_lost": lost }
}

export const run = async (options: RuntimeOptions): Promise<Record<string, number>> => ({
  ...(await interrupts(options)),
  ...(await triggers(options))
})
