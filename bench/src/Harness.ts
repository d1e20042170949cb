/**
 * Harness: how every figure is measured.
 *
 * Contenders that are compared run interleaved in rounds (A, B, C, then B, C, A,
 * ...) so machine noise, GC of earlier rounds and the neighbours' load hit them
 * equally. One sample is a batch of sequential operations, so a sample of a
 * microsecond operation is long enough for the clock, and the garbage an
 * operation leaves behind is paid for inside the batch that made it. A figure is
 * the median of its samples, after a warm-up that lets the JIT settle. Every
 * loop is bounded by a count and by a time budget.
 */

import * as v8 from "node:v8"

export interface Contender {
  /** The figure this contender produces, e.g. `inproc.plain.noema_us`. */
  readonly figure: string
  /** One operation. */
  readonly operation: () => Promise<unknown>
  /**
   * The operation resolves to its own measurement in microseconds (e.g. time
   * to first token), which is used instead of its duration.
   */
  readonly selfTimed?: boolean
  /** Runs untimed before each sample (e.g. a fresh mock model so recorded calls don't pile up). */
  readonly beforeSample?: () => void | Promise<void>
}

export interface LatencyOptions {
  /** Warm-up per contender before the first round, in milliseconds (at least `minimumWarmup` operations). */
  readonly warmupMs: number
  readonly minimumWarmup?: number
  /** How long one sample should take; the batch size is calibrated to it. */
  readonly sampleMs: number
  readonly maximumBatch?: number
  readonly rounds: number
  /** Rounds stop early once this budget is spent (but not before `minimumRounds`). */
  readonly budgetMs: number
  readonly minimumRounds?: number
}

export const now = (): number => performance.now()

export const median = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 === 1
    ? (sorted[middle] as number)
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

/** Runs `count` operations back to back; microseconds per operation (or the mean of their own measurements). */
const batch = async (contender: Contender, count: number): Promise<number> => {
  let measured = 0
  const start = now()
  for (let i = 0; i < count; i++) {
    const result = await contender.operation()
    if (contender.selfTimed === true) measured += result as number
  }
  const elapsedUs = (now() - start) * 1000
  return (contender.selfTimed === true ? measured : elapsedUs) / count
}

const warm = async (contender: Contender, options: LatencyOptions): Promise<number> => {
  await contender.beforeSample?.()
  const minimum = options.minimumWarmup ?? 20
  const start = now()
  let operations = 0
  // Bounded by count and by time: a slow contender ends its warm-up after ten budgets.
  while (operations < 1_000_000) {
    const elapsed = now() - start
    if (elapsed >= options.warmupMs && operations >= minimum) break
    if (elapsed >= options.warmupMs * 10 && operations >= 1) break
    await contender.operation()
    operations++
  }
  const perOperationMs = (now() - start) / operations
  const size = Math.round(options.sampleMs / Math.max(perOperationMs, 1e-6))
  return Math.min(Math.max(1, size), options.maximumBatch ?? 100_000)
}

/**
 * Samples every contender once per round, rotating who goes first so no
 * "first in the round" effect favours one; stops after `rounds`, or once the
 * time budget is spent (but never before `minimumRounds`). Median per figure.
 */
const rounds = async <C extends { readonly figure: string }>(
  contenders: ReadonlyArray<C>,
  options: { readonly rounds: number; readonly budgetMs: number; readonly minimumRounds?: number },
  sample: (contender: C, index: number) => Promise<number>
): Promise<Record<string, number>> => {
  const samples: Array<Array<number>> = contenders.map(() => [])
  const start = now()
  const minimumRounds = options.minimumRounds ?? 3
  for (let round = 0; round < options.rounds; round++) {
    if (round >= minimumRounds && now() - start > options.budgetMs) break
    for (let k = 0; k < contenders.length; k++) {
      const index = (round + k) % contenders.length
      ;(samples[index] as Array<number>).push(await sample(contenders[index] as C, index))
    }
  }
  const result: Record<string, number> = {}
  contenders.forEach((contender, index) => {
    result[contender.figure] = median(samples[index] as Array<number>)
  })
  return result
}

/** Median microseconds per operation of each contender, measured in interleaved rounds. */
export const latency = async (
  contenders: ReadonlyArray<Contender>,
  options: LatencyOptions
): Promise<Record<string, number>> => {
  const batches: Array<number> = []
  for (const contender of contenders) batches.push(await warm(contender, options))
  return rounds(contenders, options, async (contender, index) => {
    await contender.beforeSample?.()
    return batch(contender, batches[index] as number)
  })
}

/**
 * Median microseconds per operation of contenders compared with each other,
 * interleaved call by call: a sample runs the same number of operations of
 * each, one of each in turn (A B C A B C ..., the order rotated every round),
 * so a burst of load from the rest of the machine, or a collection, falls on
 * all of them alike instead of on whichever batch it met. A sample is still a
 * batch per contender (the mean of its calls in that window, garbage
 * included); the figure is the median over rounds.
 */
export const interleavedLatency = async (
  contenders: ReadonlyArray<Contender>,
  options: LatencyOptions
): Promise<Record<string, number>> => {
  let perRoundMs = 0
  for (const contender of contenders) perRoundMs += options.sampleMs / (await warm(contender, options))
  const calls = Math.min(
    Math.max(1, Math.round(options.sampleMs / Math.max(perRoundMs, 1e-6))),
    options.maximumBatch ?? 100_000
  )
  const samples: Array<Array<number>> = contenders.map(() => [])
  const start = now()
  const minimumRounds = options.minimumRounds ?? 3
  for (let round = 0; round < options.rounds; round++) {
    if (round >= minimumRounds && now() - start > options.budgetMs) break
    // Contenders that share a preparation (e.g. one server's reset) have it once per round.
    for (const prepare of new Set(contenders.map((contender) => contender.beforeSample))) await prepare?.()
    const totals = contenders.map(() => 0)
    for (let call = 0; call < calls; call++) {
      for (let k = 0; k < contenders.length; k++) {
        const index = (round + k) % contenders.length
        const contender = contenders[index] as Contender
        const begin = now()
        const result = await contender.operation()
        totals[index] =
          (totals[index] as number) +
          (contender.selfTimed === true ? (result as number) : (now() - begin) * 1000)
      }
    }
    totals.forEach((total, index) => {
      ;(samples[index] as Array<number>).push(total / calls)
    })
  }
  const result: Record<string, number> = {}
  contenders.forEach((contender, index) => {
    result[contender.figure] = median(samples[index] as Array<number>)
  })
  return result
}

export interface ThroughputContender {
  readonly figure: string
  /** One unit of work (e.g. a turn); many run at once. */
  readonly operation: () => Promise<unknown>
  readonly beforeSample?: () => void | Promise<void>
}

export interface ThroughputOptions {
  /** Operations in flight at any time. */
  readonly concurrency: number
  /** Operations per sample. */
  readonly total: number
  readonly warmupTotal: number
  readonly rounds: number
  readonly budgetMs: number
  readonly minimumRounds?: number
}

/** Runs `total` operations with `concurrency` in flight; operations per second. */
const saturate = async (operation: () => Promise<unknown>, concurrency: number, total: number) => {
  let started = 0
  const worker = async () => {
    while (started < total) {
      started++
      await operation()
    }
  }
  const begin = now()
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, worker))
  return total / ((now() - begin) / 1000)
}

/** Median operations per second of each contender, measured in interleaved rounds. */
export const throughput = async (
  contenders: ReadonlyArray<ThroughputContender>,
  options: ThroughputOptions
): Promise<Record<string, number>> => {
  for (const contender of contenders) {
    await contender.beforeSample?.()
    await saturate(contender.operation, options.concurrency, options.warmupTotal)
  }
  return rounds(contenders, options, async (contender) => {
    await contender.beforeSample?.()
    return saturate(contender.operation, options.concurrency, options.total)
  })
}

/**
 * Median bytes allocated per operation of each contender, run as `throughput` runs it
 * (the same concurrency, so what an operation holds while it waits is counted), in
 * interleaved rounds: the bytes the collections of a sample freed plus the heap's growth
 * over it, divided by its operations. Unlike a time, this barely moves when the machine
 * is busy, so a difference between contenders is their own.
 */
export const allocation = async (
  contenders: ReadonlyArray<ThroughputContender>,
  options: ThroughputOptions
): Promise<Record<string, number>> =>
  rounds(contenders, options, async (contender) => {
    await contender.beforeSample?.()
    const profiler = new v8.GCProfiler()
    profiler.start()
    const before = v8.getHeapStatistics().used_heap_size
    await saturate(contender.operation, options.concurrency, options.total)
    const after = v8.getHeapStatistics().used_heap_size
    let freed = 0
    for (const collection of profiler.stop()?.statistics ?? []) {
      freed +=
        collection.beforeGC.heapStatistics.usedHeapSize - collection.afterGC.heapStatistics.usedHeapSize
    }
    return (freed + after - before) / options.total
  })

/** Heap in use after a full collection, in bytes (needs `node --expose-gc`). */
export const settledHeap = (): number => {
  const collect = globalThis.gc
  if (collect === undefined) throw new Error("Run node with --expose-gc: heap figures need global.gc")
  collect()
  collect()
  return process.memoryUsage().heapUsed
}

export const megabytes = (bytes: number): number => bytes / (1024 * 1024)

/** Fails the run loudly when a contender does not do the work it is timed for. */
export const check = (condition: boolean, message: string): void => {
  if (!condition) throw new Error(`Benchmark sanity check failed: ${message}`)
}

/**
 * A PostgreSQL database for a suite: a new one on `NOEMA_TEST_PG_URL`'s server when that is
 * set, else a server started from npm (`durable`: with fsync, for figures about commits);
 * `release` drops it or stops the server.
 */
export const postgresDatabase = async (options: {
  readonly prefix: string
  readonly durable?: boolean
}): Promise<{ readonly url: string; readonly release: () => Promise<void> }> => {
  const { EmbeddedPostgres, TestDatabase } = await import("@noema/testing-postgres")
  if (process.env[TestDatabase.environmentVariable]) {
    const created = await TestDatabase.make({ prefix: options.prefix })
    return { url: created.url, release: created.drop }
  }
  const server = await EmbeddedPostgres.start(options.durable === true ? { durable: true } : {})
  return { url: server.url, release: server.stop }
}
