/**
 * StatementCounts: every statement node:sqlite runs in this process, counted and timed by its
 * text (whitespace folded), while `counting` is on. For the by-hand probes (`RunsProbe.ts`,
 * `PlannerProbe.ts`): it wraps `StatementSync`'s `all`, `run`, `get` and `iterate` for good.
 */
import { StatementSync } from "node:sqlite"
import { now } from "./Harness.ts"

export interface StatementCounts {
  /** Counts while true. */
  counting: boolean
  /** Calls counted, by statement text. */
  readonly counts: Map<string, number>
  /** Microseconds spent in node:sqlite, by statement text. */
  readonly micros: Map<string, number>
}

/**
 * Starts counting's wrappers; `onCall`, if given, sees each counted call's text and parameters
 * before it runs (a probe's trace).
 */
export const install = (onCall?: (text: string, args: ReadonlyArray<unknown>) => void): StatementCounts => {
  const state: StatementCounts = { counting: false, counts: new Map(), micros: new Map() }
  for (const method of ["all", "run", "get", "iterate"] as const) {
    const original = StatementSync.prototype[method] as (...args: Array<unknown>) => unknown
    Object.defineProperty(StatementSync.prototype, method, {
      value: function (this: StatementSync, ...args: Array<unknown>) {
        if (!state.counting) return original.apply(this, args)
        const text = this.sourceSQL.replace(/\s+/g, " ").trim()
        state.counts.set(text, (state.counts.get(text) ?? 0) + 1)
        onCall?.(text, args)
        const started = now()
        try {
          return original.apply(this, args)
        } finally {
          state.micros.set(text, (state.micros.get(text) ?? 0) + (now() - started) * 1000)
        }
      }
    })
  }
  return state
}
