/**
 * HttpProbe: where `http.concurrent50`'s difference comes from, one question at a time,
 * against the same server as the suite (`ServerProcess.ts`, its own process). Not part of
 * `npm run bench`; run by hand (bench/README.md, "Where the time goes: http").
 *
 *   node src/HttpProbe.ts gc <side> <turns>          one side alone, 50 in flight: turns/s,
 *                                                    the client's CPU a turn, collections per
 *                                                    1,000 turns (add --trace-gc or --cpu-prof)
 *   node src/HttpProbe.ts cpu <rounds>               the sides in one process, interleaved rounds
 *                                                    of 500 turns: medians of CPU, KiB allocated
 *                                                    and GC time a turn, and of CPU over raw's
 *   node --expose-gc src/HttpProbe.ts held <side> <calls> [prefix]
 *                                                    bytes kept alive per call in flight: <calls>
 *                                                    calls pending on a server that holds every
 *                                                    answer (heap snapshots before and during
 *                                                    to `<prefix>-before|during.heapsnapshot`)
 *
 * Sides: `raw` (the `openai` SDK alone), `client` (the SDK noema's `OpenAiClient` builds, called
 * directly: noema's transport without noema, so `complete` over it is what noema adds to the same
 * exchange), `complete` (noema's `OpenAiChatModel.complete` run with `Effect.runPromise`), `noema`
 * (`Agent.run` of a `SimpleAgent`, as the suite).
 */
import * as http from "node:http"
import { setTimeout as sleep } from "node:timers/promises"
import * as v8 from "node:v8"
import { SimpleAgent } from "@noema/agents"
import { Agent, ConversationContext, Message } from "@noema/core"
import { OpenAiChatModel, OpenAiClient } from "@noema/openai"
import { Effect, Redacted } from "effect"
import OpenAI from "openai"
import { startServer } from "./Http.ts"

const sides = ["raw", "client", "complete", "noema"] as const
type Side = (typeof sides)[number]
const modelName = "gpt-4o-mini"
const question = "What is the weather in Paris?"
const concurrency = 50

const turnOf = async (side: Side, baseURL: string): Promise<() => Promise<unknown>> => {
  if (side === "raw") {
    const raw = new OpenAI({ apiKey: "bench-no-key", baseURL, maxRetries: 0, logLevel: "off" })
    const messages = [{ role: "user" as const, content: question }]
    return () => raw.chat.completions.create({ model: modelName, messages })
  }
  if (side === "client") {
    const { sdk } = await Effect.runPromise(
      OpenAiClient.make({ baseURL, apiKey: Redacted.make("bench-no-key") })
    )
    const messages = [{ role: "user" as const, content: question }]
    return () => sdk.chat.completions.create({ model: modelName, messages })
  }
  const model = await Effect.runPromise(
    OpenAiChatModel.make({ model: modelName, baseURL, apiKey: Redacted.make("bench-no-key") })
  )
  const context = ConversationContext.of(Message.user(question))
  if (side === "complete") return () => Effect.runPromise(model.complete({ messages: context }))
  const agent = SimpleAgent.make()
  return () => Agent.run(agent, context, model)
}

/** `total` turns, `concurrency` at a time, as the suite's `saturate`. */
const saturate = async (turn: () => Promise<unknown>, total: number): Promise<void> => {
  let started = 0
  const worker = async () => {
    while (started < total) {
      started++
      await turn()
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}

const median = (values: ReadonlyArray<number>): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number

const sideOf = (value: string | undefined): Side => {
  if (sides.includes(value as Side)) return value as Side
  throw new Error(`side must be one of ${sides.join(", ")}, not ${value}`)
}

const countOf = (value: string | undefined): number => {
  const count = Number(value)
  if (!Number.isInteger(count) || count <= 0) throw new Error(`expected a positive count, not ${value}`)
  return count
}

/** One side alone: its rate, its CPU a turn and its collections (by kind) per 1,000 turns. */
const gc = async (side: Side, turns: number) => {
  const server = await startServer()
  try {
    const turn = await turnOf(side, server.url)
    await saturate(turn, 2_000)
    await server.reset()
    // --trace-gc prints both processes' collections: this line tells the client's apart.
    process.stderr.write(`=== measuring in process ${process.pid}\n`)
    const profiler = new v8.GCProfiler()
    profiler.start()
    const cpu = process.cpuUsage()
    const start = performance.now()
    for (let done = 0; done < turns; done += 500) {
      await saturate(turn, 500)
      await server.reset()
    }
    const seconds = (performance.now() - start) / 1000
    const used = process.cpuUsage(cpu)
    const kinds: Record<string, { count: number; pauseMs: number }> = {}
    for (const collection of profiler.stop()?.statistics ?? []) {
      const kind = kinds[collection.gcType] ?? { count: 0, pauseMs: 0 }
      kinds[collection.gcType] = kind
      kind.count += 1000 / turns
      kind.pauseMs += collection.cost / 1000 / (turns / 1000)
    }
    console.log(
      JSON.stringify({
        side,
        turns,
        per_s: Math.round(turns / seconds),
        cpu_us_per_turn: (used.user + used.system) / turns,
        per_1000_turns: kinds
      })
    )
  } finally {
    await server.close()
  }
}

/** The sides in one process, interleaved rounds of 500 turns (the order rotated each round). */
const cpu = async (rounds: number) => {
  const server = await startServer()
  try {
    const turns = new Map<Side, () => Promise<unknown>>()
    for (const side of sides) turns.set(side, await turnOf(side, server.url))
    for (const turn of turns.values()) await saturate(turn, 1_000)
    const samples = new Map(
      sides.map((side) => [
        side,
        { cpu: [] as Array<number>, kib: [] as Array<number>, gc: [] as Array<number> }
      ])
    )
    for (let round = 0; round < rounds; round++) {
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(round + k) % sides.length] as Side
        await server.reset()
        const profiler = new v8.GCProfiler()
        profiler.start()
        const heap = v8.getHeapStatistics().used_heap_size
        const used = process.cpuUsage()
        await saturate(turns.get(side) as () => Promise<unknown>, 500)
        const cpuUs = process.cpuUsage(used)
        const grown = v8.getHeapStatistics().used_heap_size - heap
        let freed = 0
        let pauseUs = 0
        for (const collection of profiler.stop()?.statistics ?? []) {
          freed +=
            collection.beforeGC.heapStatistics.usedHeapSize - collection.afterGC.heapStatistics.usedHeapSize
          pauseUs += collection.cost
        }
        const sample = samples.get(side)
        sample?.cpu.push((cpuUs.user + cpuUs.system) / 500)
        sample?.kib.push((freed + grown) / 500 / 1024)
        sample?.gc.push(pauseUs / 500)
      }
    }
    const raw = samples.get("raw")?.cpu ?? []
    const figures = Object.fromEntries(
      sides.map((side) => {
        const sample = samples.get(side) ?? { cpu: [], kib: [], gc: [] }
        return [
          side,
          {
            cpu_us: median(sample.cpu),
            kib: median(sample.kib),
            gc_us: median(sample.gc),
            cpu_over_raw: median(sample.cpu.map((value, i) => value / (raw[i] as number)))
          }
        ]
      })
    )
    console.log(JSON.stringify({ rounds, per_turn: figures }))
  } finally {
    await server.close()
  }
}

/** Bytes kept alive per call in flight: `calls` calls waiting on a server that holds its answers. */
const held = async (side: Side, calls: number, prefix: string | undefined) => {
  const collect = globalThis.gc
  if (collect === undefined) throw new Error("run node with --expose-gc")
  const waiting: Array<http.ServerResponse> = []
  const server = http.createServer((request, response) => {
    request.resume()
    waiting.push(response)
  })
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
  const { port } = server.address() as { port: number }
  const turn = await turnOf(side, `http://127.0.0.1:${port}/v1`)
  const answer = JSON.stringify({
    id: "chatcmpl-held",
    object: "chat.completion",
    created: 1,
    model: modelName,
    choices: [{ index: 0, message: { role: "assistant", content: "Sunny." }, finish_reason: "stop" }],
    usage: { prompt_tokens: 14, completion_tokens: 2, total_tokens: 16 }
  })
  const allWaiting = async () => {
    for (let i = 0; i < 3_000 && waiting.length < calls; i++) await sleep(5)
    if (waiting.length < calls) throw new Error(`only ${waiting.length} of ${calls} requests arrived`)
  }
  const answerAll = () => {
    for (const response of waiting.splice(0)) {
      response.writeHead(200, { "content-type": "application/json" }).end(answer)
    }
  }
  const settledHeap = async () => {
    for (let i = 0; i < 5; i++) {
      await sleep(20)
      collect()
    }
    return process.memoryUsage().heapUsed
  }
  try {
    // A first batch answered, so what the first calls build once is in both measurements.
    const first = Array.from({ length: calls }, turn)
    await allWaiting()
    answerAll()
    await Promise.all(first)
    const before = await settledHeap()
    if (prefix !== undefined) v8.writeHeapSnapshot(`${prefix}-before.heapsnapshot`)
    const pending = Array.from({ length: calls }, turn)
    await allWaiting()
    const during = await settledHeap()
    if (prefix !== undefined) v8.writeHeapSnapshot(`${prefix}-during.heapsnapshot`)
    answerAll()
    await Promise.all(pending)
    console.log(
      JSON.stringify({ side, calls, retained_bytes_per_call: Math.round((during - before) / calls) })
    )
  } finally {
    server.closeAllConnections()
    server.close()
  }
}

const [mode, first, second, third] = process.argv.slice(2)
if (mode === "gc") await gc(sideOf(first), countOf(second))
else if (mode === "cpu") await cpu(countOf(first))
else if (mode === "held") await held(sideOf(first), countOf(second), third)
else throw new Error("usage: HttpProbe.ts gc <side> <turns> | cpu <rounds> | held <side> <calls> [prefix]")
