/**
 * Listening: how a supervisor waits for one round of its subtasks.
 *
 * It hears its subscription's `RESOURCE_PUT`s under its task and, for each URN it still waits
 * for, asks whether that subtask is now stored done or failed. The round ends when:
 * - every subtask it waits for is settled (`heard`);
 * - the subtasks' fiber returned (`returned`): the backstop for a subtask that could not store
 *   its outcome (a write the policy denied), of which no event will ever tell;
 * - nothing it waits for was heard of for `stallTimeout` (`stalled`, naming those still
 *   awaited): the timeout restarts at every event that names one of them.
 *
 * The three are raced once per round, not once per event: the listening loop pulls what the
 * subscription has buffered (a batch at a time) and takes no fiber, timer or stream element of
 * its own for an event; the stall timer sleeps until the last event heard plus the timeout,
 * and sleeps again for what is left when an event came in the meantime.
 */
import type { ResourceEvents } from "@noema/resources"
import { type Array as Arr, Duration, Effect, Fiber, Pull } from "effect"

export type Ending =
  | { readonly kind: "heard" }
  | { readonly kind: "returned" }
  | { readonly kind: "stalled"; readonly waitingFor: ReadonlyArray<string> }

export interface Round<E> {
  /** The subscription's batches of events under the supervised task. */
  readonly pull: Pull.Pull<Arr.NonEmptyReadonlyArray<ResourceEvents.Delivered>, E>
  /** The subtasks' URNs not settled yet; emptied as they settle. */
  readonly waiting: Set<string>
  /** Whether the subtask at `urn` is stored done or failed (what its PUT event announced). */
  readonly settled: (urn: string) => Effect.Effect<boolean>
  /** The fiber running the subtasks. */
  readonly children: Fiber.Fiber<unknown, unknown>
  readonly stallTimeout: Duration.Input
}

/** Listens until every awaited subtask settled, their fiber returned, or they stalled. */
export const listen = <E>(round: Round<E>): Effect.Effect<Ending, E> =>
  Effect.clockWith((clock) => {
    let heardAt = clock.currentTimeMillisUnsafe()
    const heard = () => {
      heardAt = clock.currentTimeMillisUnsafe()
    }
    return Effect.raceAllFirst<Effect.Effect<Ending, E>>([
      settle(round, heard),
      returned(round.children),
      stall(round, () => heardAt)
    ])
  })

/** Pulls batches and settles the URNs they name until none is awaited. */
const settle = <E>(round: Round<E>, heard: () => void): Effect.Effect<Ending, E> =>
  Effect.gen(function* () {
    while (round.waiting.size > 0) {
      const batch = yield* round.pull
      const named = awaitedIn(round.waiting, batch)
      if (named.length === 0) continue
      heard()
      for (const urn of named) if (yield* round.settled(urn)) round.waiting.delete(urn)
    }
    return { kind: "heard" } as const
  }).pipe(
    // The subscription ended (its scope closing): nothing more will be heard, the others decide.
    Pull.catchDone(() => Effect.never)
  )

/** The awaited URNs a batch names, each once, in the order heard. */
const awaitedIn = (
  waiting: ReadonlySet<string>,
  batch: ReadonlyArray<ResourceEvents.Delivered>
): Array<string> => {
  const named: Array<string> = []
  for (const event of batch)
    for (const urn of event.resources) if (waiting.has(urn) && !named.includes(urn)) named.push(urn)
  return named
}

const returned = (children: Fiber.Fiber<unknown, unknown>): Effect.Effect<Ending> =>
  Effect.as(Fiber.await(children), { kind: "returned" } as const)

/** Sleeps until `stallTimeout` after the last event heard, then names what is still awaited. */
const stall = <E>(round: Round<E>, heardAt: () => number): Effect.Effect<Ending> =>
  Effect.clockWith((clock) =>
    Effect.gen(function* () {
      const timeout = Duration.toMillis(Duration.fromInputUnsafe(round.stallTimeout))
      for (;;) {
        const left = heardAt() + timeout - clock.currentTimeMillisUnsafe()
        if (left <= 0) return { kind: "stalled", waitingFor: [...round.waiting] } as const
        yield* Effect.sleep(Duration.millis(left))
      }
    })
  )
