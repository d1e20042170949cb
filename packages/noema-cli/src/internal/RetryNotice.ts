/**
 * RetryNotice: what the CLI shows while a model call waits to be retried, so
 * a wait is never silent. One line on stderr (never stdout, which holds only
 * the answer) naming the reason and the attempt; on a terminal it is dim and
 * counts down in place, then is erased when the retry starts; elsewhere it is
 * one plain line per retry.
 */
import type { Retry } from "@noema/core"
import { Duration, Effect } from "effect"
import * as Terminal from "../Terminal.js"

export interface Output {
  write(text: string): unknown
  readonly isTTY?: boolean
}

/** Why the call is retried, in a person's words. */
const reasonText = (tag: string): string => {
  switch (tag) {
    case "RateLimited":
      return "rate limited by the server"
    case "Unavailable":
      return "the model server is unavailable"
    case "Network":
      return "the connection to the model server failed"
    case "InvalidOutput":
      return "the model server sent an answer noema could not read"
    default:
      return "the model call failed"
  }
}

/** `rate limited by the server; retrying in 12 s (attempt 2 of 3)`. */
export const line = (info: Retry.RetryInfo, secondsLeft: number): string =>
  `noema: ${reasonText(info.error.reason._tag)}; retrying in ${secondsLeft} s (attempt ${info.attempt} of ${info.maxAttempts})`

export class RetryNotice {
  readonly #output: Output
  readonly #style: Terminal.Style
  #timers: ReadonlyArray<ReturnType<typeof setTimeout>> = []

  constructor(output: Output, env: Terminal.Environment) {
    this.#output = output
    this.#style = Terminal.styleFor(output, env)
  }

  /** For `Retry.Options.onRetry`. */
  readonly onRetry = (info: Retry.RetryInfo): Effect.Effect<void> => Effect.sync(() => this.#show(info))

  #show(info: Retry.RetryInfo): void {
    this.dispose()
    const until = Date.now() + Duration.toMillis(info.delay)
    const secondsLeft = () => Math.max(0, Math.ceil((until - Date.now()) / 1000))
    if (this.#output.isTTY !== true) {
      this.#output.write(`${line(info, secondsLeft())}\n`)
      return
    }
    const draw = () => this.#output.write(`\r\u001b[K${this.#style.dim(line(info, secondsLeft()))}`)
    draw()
    const tick = setInterval(() => {
      if (secondsLeft() > 0) draw()
    }, 1000)
    // Erased when the wait ends (this timer was set before the retry's own sleep, so it fires first).
    const end = setTimeout(() => this.dispose(), Duration.toMillis(info.delay))
    // The countdown never keeps the process alive.
    tick.unref()
    end.unref()
    this.#timers = [tick, end]
  }

  /** Stops a countdown and erases its line (at the end of the wait, or of the command). */
  dispose(): void {
    if (this.#timers.length === 0) return
    for (const timer of this.#timers) clearTimeout(timer)
    this.#timers = []
    this.#output.write("\r\u001b[K")
  }
}
