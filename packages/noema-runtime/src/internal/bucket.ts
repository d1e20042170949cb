/**
 * The context bucket: queued items by priority, first in first out within one.
 *
 * An item leaves only when the turn that carried it is committed. Until then
 * it is marked with the cycle that took it; a cycle that is rolled back
 * releases its items, which are then where they always were: in front of
 * everything that arrived after them.
 */
import type { ContextItem, ContextPriority } from "../ContextItem.js"
import { priorities } from "../ContextItem.js"

interface Entry {
  readonly item: ContextItem
  /** The cycle carrying it, or undefined while it waits. */
  cycle: number | undefined
}

export class Bucket {
  readonly #queues: Record<ContextPriority, Array<Entry>> = {
    Interruption: [],
    ForNextTurn: [],
    InTheEnd: []
  }

  add(item: ContextItem): void {
    this.#queues[item.priority].push({ item, cycle: undefined })
  }

  /** Whether an item of one of `which` priorities waits (is not carried by a cycle). */
  hasWaiting(which: ReadonlyArray<ContextPriority> = priorities): boolean {
    return which.some((priority) => this.#queues[priority].some((entry) => entry.cycle === undefined))
  }

  /** The waiting items of `which` priorities (not carried by a cycle), in priority then arrival order. */
  waiting(which: ReadonlyArray<ContextPriority> = priorities): Array<ContextItem> {
    return priorities.flatMap((priority) =>
      which.includes(priority)
        ? this.#queues[priority].flatMap((entry) => (entry.cycle === undefined ? [entry.item] : []))
        : []
    )
  }

  /**
   * The waiting items of `which` priorities that pass `only`, in priority then
   * arrival order, now carried by `cycle`.
   */
  take(
    cycle: number,
    which: ReadonlyArray<ContextPriority>,
    only: (item: ContextItem) => boolean = () => true
  ): Array<ContextItem> {
    const taken: Array<ContextItem> = []
    for (const priority of priorities) {
      if (!which.includes(priority)) continue
      for (const entry of this.#queues[priority]) {
        if (entry.cycle !== undefined || !only(entry.item)) continue
        entry.cycle = cycle
        taken.push(entry.item)
      }
    }
    return taken
  }

  /** A waiting item leaves without a cycle (it can no longer apply). */
  remove(item: ContextItem): void {
    this.#queues[item.priority] = this.#queues[item.priority].filter(
      (entry) => entry.item !== item || entry.cycle !== undefined
    )
  }

  /** The items of `cycle` whose turn was committed leave; `keep` says which of them (default all). */
  commit(cycle: number, keep: (item: ContextItem) => boolean = () => true): Array<ContextItem> {
    const left: Array<ContextItem> = []
    for (const priority of priorities) {
      this.#queues[priority] = this.#queues[priority].filter((entry) => {
        if (entry.cycle !== cycle) return true
        if (keep(entry.item)) {
          left.push(entry.item)
          return false
        }
        entry.cycle = undefined
        return true
      })
    }
    return left
  }

  /** The items of `cycle` wait again, where they were. */
  release(cycle: number): void {
    for (const priority of priorities) {
      for (const entry of this.#queues[priority]) if (entry.cycle === cycle) entry.cycle = undefined
    }
  }

  /** The items of `cycle` are dropped (its turn failed); they are returned to be reported. */
  drop(cycle: number): Array<ContextItem> {
    return this.commit(cycle)
  }

  /** Everything still queued, in priority then arrival order. */
  remaining(): Array<ContextItem> {
    return priorities.flatMap((priority) => this.#queues[priority].map((entry) => entry.item))
  }
}
