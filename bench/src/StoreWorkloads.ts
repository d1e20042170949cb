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
import { execFile as execFileCallback, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import type { Message } from "@noema/core"
import { Effect, Exit, Scope } from "effect"
import { history, turn } from "./Conversation.ts"
import { check, median, now } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

type SessionPackage = NonNullable<Availability["session"]>
type StoreService = SessionPackage["SessionStore"]["SessionStore"]["Service"]

/** Runs `use` on the backend's store at `target`, closing it afterwards. */
export type WithStore = <A>(target: string, use: (store: StoreService) => Promise<A>) => Promise<A>

/** Runs `use` on the store `open` makes, and closes it (its scope) afterwards. */
export const withScoped = async <S, A>(
  open: Effect.Effect<S, unknown, Scope.Scope>,
  use: (store: S) => Promise<A>
): Promise<A> => {
  const scope = Effect.runSync(Scope.make())
  try {
    return await use(await Effect.runPromise(Scope.provide(open, scope)))
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** A new session on `store`, opened as an application does (`Session.create`). */
export const createSession = (session: SessionPackage, store: StoreService) =>
  Effect.runPromise(
    session.Session.create({ title: "bench" }).pipe(
      Effect.provideService(session.SessionStore.SessionStore, store)
    )
  )

/**
 * A turn as a raw reference writes it: each message stamped (an id, a time) and serialised,
 * laid out flat as the multi-row insert's parameters (session, seq, JSON, time per message).
 */
export const rawParameters = (
  sessionId: string,
  first: number,
  messages: ReadonlyArray<Message.Message>,
  now: number
): Array<string | number> => {
  const parameters: Array<string | number> = []
  for (let index = 0; index < messages.length; index++) {
    const message = messages[index] as Message.Message
    const stamped = { ...message, id: message.id ?? crypto.randomUUID(), createdAt: message.createdAt ?? now }
    parameters.push(sessionId, first + index, JSON.stringify(stamped), stamped.createdAt)
  }
  return parameters
}

/** `count` operations back to back, per second. */
export const perSecond = async (operation: () => Promise<void>, count: number): Promise<number> => {
  const start = now()
  for (let i = 0; i < count; i++) await operation()
  return count / ((now() - start) / 1000)
}

/**
 * Rounds of noema's `measure` and the reference's, alternating who goes first so the disk's and
 * the machine's moods hit both; at least one round, then as many as fit twice `budgetMs`.
 */
export const alternating = async (
  rounds: number,
  budgetMs: number,
  measure: () => Promise<number>,
  reference: () => Promise<number>
): Promise<{ readonly rates: Array<number>; readonly referenceRates: Array<number> }> => {
  const rates: Array<number> = []
  const referenceRates: Array<number> = []
  const started = now()
  for (let round = 0; round < rounds; round++) {
    if (round >= 1 && now() - started > budgetMs * 2) break
    if (round % 2 === 0) {
      rates.push(await measure())
      referenceRates.push(await reference())
    } else {
      referenceRates.push(await reference())
      rates.push(await measure())
    }
  }
  return { rates, referenceRates }
}

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

const execFile = promisify(execFileCallback)

export const loadSize = 100_000
const appendBatch = 1_000
export const concurrentProcesses = 8

/**
 * Writes a session of `loadSize` messages, then loads it in `runs` fresh processes: median time
 * and heap growth, under `keys`; with `keys.raw`, each run followed by the reference's.
 */
export const loads = async (
  withStore: WithStore,
  target: string,
  runs: number,
  keys: {
    readonly ms: string
    readonly heapMb: string
    /** The reference's figures (`RawLoadProcess.ts`, plain `node:sqlite`), in runs alternating with noema's: SQLite only. */
    readonly raw?: { readonly ms: string; readonly heapMb: string }
  }
): Promise<Record<string, number>> => {
  const id = await withStore(target, async (store) => {
    const info = await Effect.runPromise(store.create({ title: "100k" }))
    const messages = history(loadSize, true)
    for (let offset = 0; offset < messages.length; offset += appendBatch) {
      await Effect.runPromise(store.append(info.id, offset, messages.slice(offset, offset + appendBatch)))
    }
    return info.id
  })
  const contenders = [{ script: "./LoadProcess.ts", keys, times: [] as number[], heaps: [] as number[] }]
  if (keys.raw !== undefined) {
    contenders.push({ script: "./RawLoadProcess.ts", keys: keys.raw, times: [], heaps: [] })
  }
  for (let run = 0; run < runs; run++) {
    for (const contender of contenders) {
      const result = loadOnce(fileURLToPath(new URL(contender.script, import.meta.url)), target, id)
      contender.times.push(result.ms)
      contender.heaps.push(result.heapMb)
    }
  }
  return Object.fromEntries(
    contenders.flatMap(({ keys, times, heaps }) => [
      [keys.ms, median(times)],
      [keys.heapMb, median(heaps)]
    ])
  )
}

/** One fresh process loading the session `id` at `target` with `script`: its time and heap growth. */
const loadOnce = (script: string, target: string, id: string): { ms: number; heapMb: number } => {
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
  return result
}

/** Whether a stored message is the one the writer committed at that place. */
const sameAs = (message: Message.Message, expected: Message.Message): boolean =>
  message.role === expected.role &&
  message.content === expected.content &&
  JSON.stringify(message.role === "assistant" ? message.toolCalls : undefined) ===
    JSON.stringify(expected.role === "assistant" ? expected.toolCalls : undefined) &&
  (message.role !== "tool" || (expected.role === "tool" && message.toolCallId === expected.toolCallId))

/**
 * 8 processes committing `turnsPerProcess` turns each at once: all their turns per second and the
 * messages lost or interleaved, under `keys`; any lost or interleaved message fails the run.
 */
export const concurrent = async (
  withStore: WithStore,
  target: string,
  turnsPerProcess: number,
  keys: { readonly label: string; readonly turnsPerSecond: string; readonly damaged: string }
): Promise<Record<string, number>> => {
  // The store is opened (migrated) first, so the processes race on commits, not on the schema.
  await withStore(target, async () => undefined)
  const directory = mkdtempSync(join(tmpdir(), "noema-bench-go-"))
  const goFile = join(directory, "go")
  try {
    const script = fileURLToPath(new URL("./CommitProcess.ts", import.meta.url))
    const ids = Array.from({ length: concurrentProcesses }, (_, index) => `writer-${index}`)
    // A process that fails rejects with its exit code and what it wrote on stderr.
    const results = ids.map(async (id) => {
      const { stdout } = await execFile(process.execPath, [
        script,
        target,
        id,
        String(turnsPerProcess),
        goFile
      ])
      return JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as { turns: number; ms: number }
    })
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
    process.stderr.write(
      `  ${keys.label}: ${turns} turns from ${concurrentProcesses} processes in ${wallMs.toFixed(0)} ms, none lost or interleaved\n`
    )
    return { [keys.turnsPerSecond]: turns / (wallMs / 1000), [keys.damaged]: damaged }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}
