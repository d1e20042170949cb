/**
 * Frame: what runs a command until it ends or a signal stops it.
 */

import type { Exit } from "effect"
import { Effect, Fiber } from "effect"

/**
 * Runs `effect` until it ends or one of `signals` arrives (Ctrl-C, `kill`, a closed terminal),
 * which interrupts it: its finalizers run. The exit, and the first signal received, if any (an
 * interrupted command exits with 128 + its number).
 */
export const runInterruptible = async <A, E>(
  effect: Effect.Effect<A, E>,
  signals: ReadonlyArray<NodeJS.Signals> = ["SIGINT", "SIGTERM", "SIGHUP"]
): Promise<{ readonly exit: Exit.Exit<A, E>; readonly signalled: NodeJS.Signals | undefined }> => {
  const fiber = Effect.runFork(effect)
  let signalled: NodeJS.Signals | undefined
  const onSignal = (signal: NodeJS.Signals) => {
    signalled ??= signal
    Effect.runFork(Fiber.interrupt(fiber))
  }
  for (const signal of signals) process.on(signal, onSignal)
  try {
    return { exit: await Effect.runPromise(Fiber.await(fiber)), signalled }
  } finally {
    for (const signal of signals) process.off(signal, onSignal)
  }
}
