/**
 * Http: one turn over HTTP against the local OpenAI wire-format server
 * (`@noema/openai/testing`, run in its own process), every contender getting
 * the same scripted answer: the `openai` SDK alone (the floor), the same with
 * an abort signal (a reference: noema must pass one), noema's OpenAI adapter
 * inside a SimpleAgent, and the AI SDK's `@ai-sdk/openai` chat model with
 * `generateText`. Beside them, noema's session turn with and without its
 * turns' traces kept (`TraceStore.layerRecording` into a SQLite file): what
 * keeping traces locally costs a turn.
 *
 * Each contender keeps one client for the whole run (keep-alive connections),
 * as a real application does, and the contenders take turns in rounds.
 */
import { type ChildProcess, fork } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createOpenAI } from "@ai-sdk/openai"
import type { ChatModel } from "@noema/core"
import { Agent, ConversationContext, Message } from "@noema/core"
import { generateText } from "ai"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import OpenAI from "openai"
import type { Contender, LatencyOptions, ThroughputContender, ThroughputOptions } from "./Harness.ts"
import { allocation, check, interleavedLatency, latency, now, throughput } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

const answer = "The weather in Paris is sunny with a light breeze, 21 degrees."
const question = "What is the weather in Paris?"
const modelName = "gpt-4o-mini"
const apiKey = "bench-no-key"

export interface Server {
  readonly url: string
  reset(): Promise<void>
  close(): Promise<void>
}

/**
 * A wire-format server in its own process (`ServerProcess.ts` speaks OpenAI's,
 * `AnthropicServerProcess.ts` Anthropic's), answering every request with `text`.
 */
export const startServer = (
  script: URL = new URL("./ServerProcess.ts", import.meta.url),
  text: string = answer
): Promise<Server> =>
  new Promise((resolve, reject) => {
    const child: ChildProcess = fork(script, [text], {
      stdio: ["ignore", "inherit", "inherit", "ipc"]
    })
    const timer = setTimeout(() => {
      child.kill()
      reject(new Error("The test server did not start within 15 s"))
    }, 15_000)
    child.once("error", reject)
    child.once("exit", (code) => reject(new Error(`The test server exited early (code ${code})`)))
    child.once("message", (message) => {
      clearTimeout(timer)
      const { url } = message as { url: string }
      const exited = new Promise<void>((done) => child.once("exit", () => done()))
      resolve({
        url,
        reset: () =>
          new Promise((done, fail) => {
            // Bounded: a server process that died must fail the run, not stall it.
            const timeout = setTimeout(
              () => fail(new Error("the test server did not answer a reset within 10 s")),
              10_000
            )
            child.once("message", () => {
              clearTimeout(timeout)
              done()
            })
            child.send("reset")
          }),
        close: async () => {
          if (child.exitCode === null) child.send("close")
          const forced = setTimeout(() => child.kill("SIGKILL"), 5_000)
          await exited
          clearTimeout(forced)
        }
      })
    })
  })

export interface HttpOptions {
  readonly latency: LatencyOptions
  readonly throughput: ThroughputOptions
}

export const run = async (noema: Availability, options: HttpOptions): Promise<Record<string, number>> => {
  const server = await startServer()
  try {
    return await measure(server, noema, options)
  } finally {
    await server.close()
  }
}

const measure = async (
  server: Server,
  noema: Availability,
  options: HttpOptions
): Promise<Record<string, number>> => {
  const reset = () => server.reset()

  // The floor: the official SDK alone. Retries and logging off, as noema's client sets them: the
  // SDK caches one logger per level for the process, so clients of different levels called in
  // turn rebuild it for each other (a cost of interleaving, not of either side).
  const sdkOptions = { apiKey, baseURL: server.url, maxRetries: 0, logLevel: "off" } as const
  const raw = new OpenAI(sdkOptions)
  const messages = [{ role: "user" as const, content: question }]
  const rawTurn = () => raw.chat.completions.create({ model: modelName, messages })
  // A reference, not a contender: the floor plus the one thing noema must add, an abort signal
  // on every request (so interrupting a turn aborts it), showing how much of the gap is the signal.
  const rawWithSignal = new OpenAI(sdkOptions)
  const rawSignalTurn = () =>
    rawWithSignal.chat.completions.create(
      { model: modelName, messages },
      { signal: new AbortController().signal }
    )
  /** Time to the first text delta of the raw SDK's stream (`signal`: with a fresh AbortSignal, as noema passes one). */
  const rawFirstTokenWith = async (signal: boolean): Promise<number> => {
    const client = signal ? rawWithSignal : raw
    const start = now()
    let first: number | undefined
    const stream = await client.chat.completions.create(
      {
        model: modelName,
        messages,
        stream: true,
        stream_options: { include_usage: true }
      },
      signal ? { signal: new AbortController().signal } : undefined
    )
    // The rest of the stream is read too, so the connection goes back to the pool.
    for await (const chunk of stream) {
      if (first === undefined && (chunk.choices[0]?.delta.content ?? "") !== "") first = now()
    }
    check(first !== undefined, "raw stream had a text delta")
    return ((first as number) - start) * 1000
  }
  const rawFirstToken = () => rawFirstTokenWith(false)
  const rawSignalFirstToken = () => rawFirstTokenWith(true)

  const aiModel = createOpenAI({ apiKey, baseURL: server.url }).chat(modelName)
  const aiTurn = () => generateText({ model: aiModel, prompt: question, maxRetries: 0 })

  check((await rawTurn()).choices[0]?.message.content === answer, "raw SDK answer")
  check((await rawSignalTurn()).choices[0]?.message.content === answer, "raw SDK with a signal answer")
  check((await aiTurn()).text === answer, "AI SDK answer")
  check((await rawFirstToken()) > 0, "raw SDK first token")
  check((await rawSignalFirstToken()) > 0, "raw SDK with a signal first token")

  let noemaTurn: (() => Promise<unknown>) | undefined
  let noemaFirstToken: (() => Promise<number>) | undefined
  let sessionTurns: SessionTurns | undefined
  if (noema.openai !== undefined && noema.agents !== undefined) {
    const model: ChatModel.Service = await Effect.runPromise(
      noema.openai.OpenAiChatModel.make({
        model: modelName,
        baseURL: server.url,
        apiKey: Redacted.make(apiKey)
      })
    )
    const agent = noema.agents.SimpleAgent.make()
    const context = ConversationContext.of(Message.user(question))
    noemaTurn = () => Agent.run(agent, context, model)
    noemaFirstToken = async () => {
      const start = now()
      let first: number | undefined
      for await (const event of Agent.runStream(agent, context, model)) {
        if (first === undefined && event.type === "text-delta" && event.delta !== "") first = now()
      }
      check(first !== undefined, "noema stream had a text delta")
      return ((first as number) - start) * 1000
    }
    const messages = (await noemaTurn()) as ReadonlyArray<Message.Message>
    check(
      messages.length === 1 && Message.text(messages[0] as Message.Message) === answer,
      "noema answer over HTTP"
    )
    check((await noemaFirstToken()) > 0, "noema first token")
    if (noema.session !== undefined) sessionTurns = await makeSessionTurns(noema, model, agent)
  }

  const turns: Array<Contender> = [
    { figure: "http.turn.raw_us", operation: rawTurn, beforeSample: reset },
    { figure: "http.turn.raw_signal_us", operation: rawSignalTurn, beforeSample: reset },
    ...(noemaTurn === undefined
      ? []
      : [{ figure: "http.turn.noema_us", operation: noemaTurn, beforeSample: reset }]),
    { figure: "http.turn.aisdk_us", operation: aiTurn, beforeSample: reset }
  ]
  const firstTokens: Array<Contender> = [
    { figure: "http.ttft.raw_us", operation: rawFirstToken, selfTimed: true, beforeSample: reset },
    // References, not contenders: the floor with the signal noema must pass (see http.turn.raw_signal_us).
    {
      figure: "http.ttft.raw_signal_us",
      operation: rawSignalFirstToken,
      selfTimed: true,
      beforeSample: reset
    },
    ...(noemaFirstToken === undefined
      ? []
      : [{ figure: "http.ttft.noema_us", operation: noemaFirstToken, selfTimed: true, beforeSample: reset }])
  ]
  const concurrent: Array<ThroughputContender> = [
    ...(noemaTurn === undefined
      ? []
      : [{ figure: "http.concurrent50.noema_per_s", operation: noemaTurn, beforeSample: reset }]),
    { figure: "http.concurrent50.raw_per_s", operation: rawTurn, beforeSample: reset },
    { figure: "http.concurrent50.raw_signal_per_s", operation: rawSignalTurn, beforeSample: reset }
  ]
  try {
    const turnFigures = {
      ...(await interleavedLatency(turns, options.latency)),
      // In batches, not call by call: a kept trace is written after its turn, so its cost falls
      // on the turns that follow, which must be its own side's.
      ...(sessionTurns === undefined
        ? {}
        : await latency(sessionContenders(sessionTurns, reset), options.latency))
    }
    const figure = (name: string) => turnFigures[name]?.toFixed(0) ?? "n/a"
    process.stderr.write(
      `  http.turn: raw SDK ${figure("http.turn.raw_us")} us, raw SDK + AbortSignal ` +
        `${figure("http.turn.raw_signal_us")} us, noema ${figure("http.turn.noema_us")} us; ` +
        `a session's turn ${figure("http.turn.session_us")} us, its trace kept ${figure("http.turn.session_traced_us")} us\n`
    )
    return {
      ...turnFigures,
      ...(await interleavedLatency(firstTokens, options.latency)),
      ...(await throughput(concurrent, options.throughput)),
      ...allocatedKib(await allocation(concurrent, options.throughput))
    }
  } finally {
    await sessionTurns?.close()
  }
}

/**
 * `http.concurrent50.<side>_per_s` as `http.alloc.<side>_kib`: KiB allocated per turn with 50
 * in flight. A busy machine moves the times of the rows above by tens of percent; this hardly,
 * so it shows what noema adds to a turn's work where the times cannot.
 */
const allocatedKib = (bytes: Record<string, number>): Record<string, number> =>
  Object.fromEntries(
    Object.entries(bytes).map(([figure, value]) => [
      figure.replace("http.concurrent50.", "http.alloc.").replace("_per_s", "_kib"),
      value / 1024
    ])
  )

/** The session's turn with and without its trace kept, sharing one preparation (the harness runs it once). */
const sessionContenders = (turns: SessionTurns, reset: () => Promise<void>): Array<Contender> => {
  const prepare = async () => {
    await reset()
    await turns.fresh()
  }
  return [
    { figure: "http.turn.session_us", operation: turns.plain, beforeSample: prepare },
    { figure: "http.turn.session_traced_us", operation: turns.traced, beforeSample: prepare }
  ]
}

interface SessionTurns {
  /** A new session's turn (in memory), no tracer installed. */
  readonly plain: () => Promise<unknown>
  /** The same, its trace kept in a SQLite file (written after the turn, on a fiber of its own). */
  readonly traced: () => Promise<unknown>
  /** A new memory store for the sessions (untimed, before a sample), so they do not pile up. */
  readonly fresh: () => Promise<void>
  readonly close: () => Promise<void>
}

/**
 * A session's turn, both ways. The sessions live in memory on both sides, so the difference is
 * the tracing alone: spans opened and recorded, and the trace's write (the default retention,
 * 1,000 turns, pruned at each write) competing for the same process.
 */
const makeSessionTurns = async (
  noema: Availability,
  model: ChatModel.Service,
  agent: import("@noema/core").Agent.Agent<never>
): Promise<SessionTurns> => {
  const { MemoryStore, Session, SessionStore, TraceStore } = noema.session as typeof import("@noema/session")
  const { Database } = await import("@noema/sql")
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-bench-traces-"))
  const traced = ManagedRuntime.make(
    Layer.unwrap(Effect.map(TraceStore.fromDatabase, (store) => TraceStore.layerRecording(store))).pipe(
      Layer.provideMerge(Database.layer({ kind: "sqlite", filename: path.join(directory, "traces.db") }))
    )
  )
  let store = await Effect.runPromise(MemoryStore.make())
  const turn = () =>
    Effect.flatMap(Session.create(), (session) => session.turn(agent, model, question)).pipe(
      Effect.provideService(SessionStore.SessionStore, store)
    )
  const turns: SessionTurns = {
    plain: () => Effect.runPromise(turn()),
    traced: () => traced.runPromise(turn()),
    fresh: async () => {
      store = await Effect.runPromise(MemoryStore.make())
    },
    close: async () => {
      await traced.dispose()
      fs.rmSync(directory, { recursive: true, force: true })
    }
  }
  for (const [name, run] of [
    ["plain", turns.plain],
    ["traced", turns.traced]
  ] as const) {
    const messages = (await run()) as ReadonlyArray<Message.Message>
    check(Message.text(messages.at(-1) as Message.Message) === answer, `a session's turn over HTTP (${name})`)
  }
  // The traced side really keeps traces: the write after the turn has happened.
  const kept = await traced.runPromise(
    Effect.flatMap(TraceStore.fromDatabase, (store) => store.list()).pipe(
      Effect.repeat({ until: (page) => page.total > 0, times: 200 })
    )
  )
  check(kept.total > 0, "the traced turn's trace was kept")
  return turns
}
