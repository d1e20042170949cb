/**
 * StoreWorkloads: the loading and concurrency workloads, the same for every
 * backend (SQLite's `Store.ts` and PostgreSQL's `StorePostgres.ts` give the
 * target: a file path or a URL, which `LoadProcess.ts` and `CommitProcess.ts`
 * both accept).
 *
 * - loading: a session of 100,000 messages is written, then opened and read
 *   in fresh processes: median time and heap growth;
 * - concurrency: 8 processes, started together, each commit turns to their
 *   own session; then every session is checked for lost or interleaved
 *   messages (any fails the run).
 */
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import type { Message } from "@noema/core"
import { Effect } from "effect"
import { history, turn } from "./Conversation.ts"
import { check, median } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

type StoreService = NonNullable<Availability["session"]>["SessionStore"]["SessionStore"]["Service"]

/** Runs `use` on the backend's store at `target`, closing it afterwards. */
export type WithStore = <A>(target: string, use: (store: StoreService) => Promise<A>) => Promise<A>

/** How much each store suite does; one shape for every backend. */
export interface Options {
  readonly warmupCommits: number
  /** Commits timed one by one for the latency figure. */
  readonly latencyCommits: number
  /** Commits per sample of the sustained figure. */
  readonly sustainedCommits: number
  readonly sustainedRounds: number
  /** Fresh processes loading the 100k session. */
  readonly loadRuns: number
  /** Turns each of the 8 concurrent processes commits. */
  readonly concurrentTurns: number
  readonly budgetMs: number
}

export const loadSize = 100_000
const appendBatch = 1_000
export const concurrentProcesses = 8

/** Writes a session of `loadSize` messages, then loads it in `runs` fresh processes. */
export const loads = async (
  withStore: WithStore,
  target: string,
  runs: number
): Promise<{ readonly ms: number; readonly heapMb: number }> => {
  const id = await withStore(target, async (store) => {
    const info = await Effect.runPromise(store.create({ title: "100k" }))
    const messages = history(loadSize, true)
    for (let offset = 0; offset < messages.length; offset += appendBatch) {
      await Effect.runPromise(store.append(info.id, offset, messages.slice(offset, offset + appendBatch)))
    }
    return info.id
  })
  const script = fileURLToPath(new URL("./LoadProcess.ts", import.meta.url))
  const times: Array<number> = []
  const heaps: Array<number> = []
  for (let run = 0; run < runs; run++) {
    const child = spawnSync(process.execPath, ["--expose-gc", script, target, id], {
      encoding: "utf8",
      timeout: 120_000
    })
    check(child.status === 0, `the load process exited with ${child.status}: ${child.stderr}`)
    const result = JSON.parse(child.stdout.trim().split("\n").at(-1) ?? "{}") as {
      ms: number
      heapMb: number
      messages: number
    }
    check(result.messages === loadSize, `the load read ${result.messages} of ${loadSize} messages`)
    times.push(result.ms)
    heaps.push(result.heapMb)
  }
  return { ms: median(times), heapMb: median(heaps) }
}

/** Whether a stored message is the one the writer committed at that place. */
const sameAs = (message: Message.Message, expected: Message.Message): boolean =>
  message.role === expected.role &&
  message.content === expected.content &&
  JSON.stringify(message.role === "assistant" ? message.toolCalls : undefined) ===
    JSON.stringify(expected.role === "assistant" ? expected.toolCalls : undefined) &&
  (message.role !== "tool" || (expected.role === "tool" && message.toolCallId === expected.toolCallId))

/** 8 processes committing `turnsPerProcess` turns each at once; fails the run on any lost or interleaved message. */
export const concurrent = async (
  withStore: WithStore,
  target: string,
  turnsPerProcess: number
): Promise<{ readonly turns: number; readonly wallMs: number; readonly damaged: number }> => {
  // The store is opened (migrated) first, so the processes race on commits, not on the schema.
  await withStore(target, async () => undefined)
  const directory = mkdtempSync(join(tmpdir(), "noema-bench-go-"))
  const goFile = join(directory, "go")
  try {
    const script = fileURLToPath(new URL("./CommitProcess.ts", import.meta.url))
    const ids = Array.from({ length: concurrentProcesses }, (_, index) => `writer-${index}`)
    const results = ids.map(
      (id) =>
        new Promise<{ turns: number; ms: number }>((resolve, reject) => {
          const child = spawn(process.execPath, [script, target, id, String(turnsPerProcess), goFile], {
            stdio: ["ignore", "pipe", "pipe"]
          })
          let stdout = ""
          let stderr = ""
          child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
            stdout += chunk
          })
          child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
            stderr += chunk
          })
          child.on("close", (code) =>
            code === 0
              ? resolve(JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}"))
              : reject(new Error(`commit process ${id} exited with ${code}: ${stderr}`))
          )
        })
    )
    // Every process waits for the go file once its session exists, so they all start together.
    await withStore(target, async (store) => {
      for (;;) {
        const created = await Effect.runPromise(store.list())
        if (created.length === concurrentProcesses) return
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
    })
    writeFileSync(goFile, "")
    const finished = await Promise.all(results)
    const wallMs = Math.max(...finished.map((result) => result.ms))
    const turns = finished.reduce((sum, result) => sum + result.turns, 0)

    // Every turn of every session is whole and in its place: none lost, none interleaved.
    let damaged = 0
    await withStore(target, async (store) => {
      for (const id of ids) {
        const { messages } = await Effect.runPromise(store.load(id))
        if (messages.length !== turnsPerProcess * 4) damaged++
        messages.forEach((message, index) => {
          if (!sameAs(message, turn(Math.floor(index / 4))[index % 4] as Message.Message)) damaged++
        })
      }
    })
    check(
      damaged === 0,
      `${damaged} lost or interleaved messages with ${concurrentProcesses} concurrent writers`
    )
    return { turns, wallMs, damaged }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
