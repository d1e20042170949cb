/**
 * Runtime: an agent that reacts to what happens while it works.
 *
 * Three operations drive it: `start`, `stop`, `receiveTrigger(trigger)`.
 * Each trigger goes to every submind (`Submind.onTrigger`, in registration
 * order), which may turn it into context items with a priority. The items wait
 * in the runtime's bucket (internal, not configurable):
 *
 * - idle + an item: a cycle (one turn of the agent on the session) starts at
 *   once, carrying every waiting `Interruption` and `ForNextTurn` item (or, if
 *   only `InTheEnd` items wait, those);
 * - running + `Interruption`: the running turn is interrupted (and waited for),
 *   then a new cycle starts with that item first (an `Interruption` without
 *   messages, such as a person's cancel, only stops the turn);
 * - running + `ForNextTurn`: injected at the next model-call boundary, after
 *   every result of the tool calls already requested (the agent's steering);
 * - running + `InTheEnd`: injected when the agent's loop would finish.
 *
 * An item leaves the bucket only when the turn that carried it is committed
 * with its messages (an item an agent took through steering and left out
 * waits again).
 *
 * An interrupted turn keeps what was seen (`onInterrupt: "keep-seen"`: the
 * input, complete messages, streamed text marked interrupted, an "interrupted;
 * may have partially run" result for a started tool call); its items that were
 * not stored go back to the front. A turn that fails is rolled back and its
 * items are dropped, reported in a `cycle-failed` event (retrying them would
 * fail the same way). When it failed because another process wrote to the
 * session first (`SessionConflictError`), the runtime reloads the session
 * before going on: the one place such a conflict is handled.
 *
 * Decisions on tool calls the session has waiting for approval are triggers
 * too (`TriggerEvent.decide`, mapped by the built-in `approvalDecisions`
 * submind to items carrying `decisions`). Each is checked when it arrives:
 * its call must wait in the session, not be decided already, and not be
 * answered first by a message waiting ahead of it or by a running turn with
 * new input (`DecisionRefused` otherwise). It waits in the bucket by its
 * priority; when it is first in line, the cycle goes on with the stopped turn
 * (`Session.resumeStream`) with every decision waiting, and messages waiting
 * behind join it as they would any turn. A decision applies once: its cycle
 * records it in the session however it ends (see `internal/decisions`).
 *
 * `stop` cancels the running cycle (`running: "cancel"`, the default: as an
 * interruption) or lets it finish (`"finish"`), waits for the hooks already
 * told (each bounded by the hook timeout), then reports every item still
 * queued, in its result and a `stopped` event: nothing is lost silently. A
 * trigger whose subminds are still mapping it when `stop` begins is refused
 * (`RuntimeNotRunning`), so no item is queued after the report.
 *
 * What happens is published as `RuntimeEvent`s (`events`), for UIs and logs;
 * observing drives nothing.
 */
import type { Agent, ChatModel, Message } from "@noema/core"
import { type Session, SessionStore } from "@noema/session"
import {
  Cause,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  FiberSet,
  PubSub,
  Queue,
  Result,
  Schema,
  Scope,
  Stream
} from "effect"
import * as ContextItem from "./ContextItem.js"
import { Bucket } from "./internal/bucket.js"
import * as Decisions from "./internal/decisions.js"
import type * as Submind from "./Submind.js"
import type * as TriggerEvent from "./TriggerEvent.js"

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

export type RuntimeEvent =
  | { readonly type: "started" }
  /** A trigger arrived; `items` is what the subminds made of it. */
  | {
      readonly type: "trigger"
      readonly trigger: TriggerEvent.TriggerEvent
      readonly items: ReadonlyArray<ContextItem.ContextItem>
      /** Whether a cycle was running (its items then wait, or join it, or interrupt it). */
      readonly running: boolean
    }
  | { readonly type: "cycle-started"; readonly cycle: Submind.Cycle }
  /** An event of the cycle's turn (the agent's events, `compacted`, `committed`). */
  | { readonly type: "turn"; readonly cycle: number; readonly event: Session.TurnEvent }
  /** Items joined the running turn at a model-call boundary (or at its end, for `InTheEnd`). */
  | {
      readonly type: "injected"
      readonly cycle: number
      readonly items: ReadonlyArray<ContextItem.ContextItem>
    }
  | {
      readonly type: "cycle-completed"
      readonly cycle: Submind.Cycle
      readonly committed: ReadonlyArray<Message.Message>
    }
  /** The turn was interrupted; `kept` is what was stored of it (what was seen), maybe nothing. */
  | {
      readonly type: "cycle-interrupted"
      readonly cycle: Submind.Cycle
      readonly kept: ReadonlyArray<Message.Message>
    }
  /** The turn failed and nothing of it was stored; its items are dropped (listed here). */
  | {
      readonly type: "cycle-failed"
      readonly cycle: Submind.Cycle
      readonly error: unknown
      readonly dropped: ReadonlyArray<ContextItem.ContextItem>
    }
  /**
   * A decision taken in can no longer apply when its turn would come (a message that
   * arrived later with a higher priority went first, or its call no longer waits); it is dropped.
   */
  | {
      readonly type: "decision-refused"
      readonly item: ContextItem.ContextItem
      readonly error: DecisionRefused
    }
  | { readonly type: "hook-failed"; readonly submind: string; readonly hook: string; readonly reason: string }
  | { readonly type: "idle" }
  | { readonly type: "stopped"; readonly unprocessed: ReadonlyArray<ContextItem.ContextItem> }

export interface StopReport {
  /** Items still queued when the runtime stopped (never run, or returned by a cancelled cycle). */
  readonly unprocessed: ReadonlyArray<ContextItem.ContextItem>
}

export class RuntimeNotRunning extends Schema.TaggedError<RuntimeNotRunning>()("RuntimeNotRunning", {
  state: Schema.Literals(["new", "stopped"])
}) {
  override get message(): string {
    return this.state === "new" ? "the runtime has not been started" : "the runtime has stopped"
  }
}

const refusalText: Record<Decisions.RefusalReason, string> = {
  "not-waiting": "does not wait for approval",
  "already-decided": "is already decided",
  superseded:
    "is answered by a message that goes first (a new message instead of a decision rejects what waits)"
}

/** A decision on a tool call that cannot apply (see the module comment); nothing of its trigger is queued. */
export class DecisionRefused extends Schema.TaggedError<DecisionRefused>()("DecisionRefused", {
  toolCallId: Schema.String,
  reason: Schema.Literals(["not-waiting", "already-decided", "superseded"])
}) {
  override get message(): string {
    return `tool call ${this.toolCallId} ${refusalText[this.reason]}`
  }
}

export interface Runtime {
  readonly start: Effect.Effect<void>
  /** Stops the runtime (see the module comment); stopping twice reports nothing the second time. */
  readonly stop: (options?: { readonly running?: "cancel" | "finish" }) => Effect.Effect<StopReport>
  readonly receiveTrigger: (
    trigger: TriggerEvent.TriggerEvent
  ) => Effect.Effect<void, RuntimeNotRunning | DecisionRefused>
  /** Everything that happens from the moment the stream is run (start it before `start` to see it all). */
  readonly events: Stream.Stream<RuntimeEvent>
  /** The events from the moment this returns (it subscribes at once), for as long as the scope lasts. */
  readonly subscribe: Effect.Effect<Stream.Stream<RuntimeEvent>, never, Scope.Scope>
}

/** What the agent is made from: the runtime's steering, to give to it (`ToolAgent`, `PlanAgent`: see `RuntimeBuilder`). */
export type AgentFactory = (
  steering: (input: { readonly final: boolean }) => Effect.Effect<ReadonlyArray<Message.Message>>
) => Agent.Agent

export interface Options {
  readonly session: Session.Session
  readonly model: ChatModel.Service
  /** The agent of every cycle, built with the runtime's steering (see `RuntimeBuilder`). */
  readonly agent: AgentFactory
  readonly subminds: ReadonlyArray<Submind.Submind>
  /** How long a submind's hook may run before it is reported as hanging and abandoned. Default 5 seconds. */
  readonly hookTimeout?: Duration.Input
  /** Options for every turn (compaction, ...); `onInterrupt` is always "keep-seen". */
  readonly turnOptions?: Omit<Session.TurnOptions, "onInterrupt" | "signal">
}

// ---------------------------------------------------------------------------
// The runtime
// ---------------------------------------------------------------------------

const describe = (value: unknown): string => (value instanceof Error ? value.message : String(value))

/**
 * Whether an item is among `stored`: its messages, found by id (the runtime
 * gives every message one), and the results of the calls it decides.
 */
const storedIn = (stored: ReadonlyArray<Message.Message>) => {
  const ids = new Set(stored.flatMap((message) => (message.id === undefined ? [] : [message.id])))
  const answered = new Set(stored.flatMap((message) => (message.role === "tool" ? [message.toolCallId] : [])))
  return (item: ContextItem.ContextItem) =>
    item.messages.every((message) => message.id !== undefined && ids.has(message.id)) &&
    Object.keys(item.decisions ?? {}).every((id) => answered.has(id))
}

/** A decision leaves with the cycle that took it, however the cycle ends: it applies once. */
const leaves = (stored: ReadonlyArray<Message.Message>) => {
  const isStored = storedIn(stored)
  return (item: ContextItem.ContextItem) => ContextItem.hasDecisions(item) || isStored(item)
}

/** Another process wrote to the session first. */
const isConflict = (cause: Cause.Cause<unknown>): boolean => {
  const error = Cause.findError(cause)
  return Result.isSuccess(error) && error.success instanceof SessionStore.SessionConflictError
}

/** A runtime over `options.session`; it does nothing until `start`. Its resources end with `stop`. */
export const make = (options: Options): Effect.Effect<Runtime> =>
  Effect.gen(function* () {
    const { session, model, subminds } = options
    const hookTimeout = Duration.fromInputUnsafe(options.hookTimeout ?? Duration.seconds(5))
    const pubsub = yield* PubSub.unbounded<RuntimeEvent>()
    const publish = (event: RuntimeEvent) => Effect.asVoid(PubSub.publish(pubsub, event))
    const bucket = new Bucket()
    // Sliding, one slot: "something changed"; the loop looks at the bucket itself.
    const wakeups = yield* Queue.sliding<void>(1)
    const wake = Effect.asVoid(Queue.offer(wakeups, undefined))
    const scope = yield* Scope.make()
    // Hooks told beside the cycle; `stop` waits for them (each is bounded by the hook timeout).
    const told = yield* Scope.provide(scope)(FiberSet.make<void>())

    let state: "new" | "running" | "stopped" = "new"
    let cycleNumber = 0
    let current:
      | {
          readonly cycle: Submind.Cycle
          readonly items: Array<ContextItem.ContextItem>
          /** It goes on with a turn that stopped for approval (it brings no new input). */
          readonly resuming: boolean
          fiber: Fiber.Fiber<void, unknown> | undefined
          /** Set when an interruption (or `stop`) came before the turn's fiber existed. */
          interruptRequested: boolean
        }
      | undefined
    let loopFiber: Fiber.Fiber<void> | undefined

    // --- hooks, isolated ------------------------------------------------------

    const guard = <A>(submind: Submind.Submind, hook: string, effect: Effect.Effect<A>, fallback: A) =>
      effect.pipe(
        Effect.timeoutOrElse({
          duration: hookTimeout,
          orElse: () =>
            Effect.as(
              publish({
                type: "hook-failed",
                submind: submind.name,
                hook,
                reason: `did not finish within ${Duration.format(hookTimeout)}`
              }),
              fallback
            )
        }),
        Effect.catchCause((cause) =>
          Effect.as(
            publish({ type: "hook-failed", submind: submind.name, hook, reason: describe(cause) }),
            fallback
          )
        )
      )

    /** Tells every submind (beside the cycle: not awaited). */
    const tell = (hook: string, call: (submind: Submind.Submind) => Effect.Effect<void> | undefined) =>
      Effect.forEach(
        subminds,
        (submind) => {
          const effect = call(submind)
          return effect === undefined
            ? Effect.void
            : FiberSet.run(told)(guard(submind, hook, effect, undefined))
        },
        { discard: true }
      )

    // --- steering: items joining the running turn ------------------------------

    const steering = (input: { readonly final: boolean }) =>
      Effect.suspend(() => {
        const running = current
        if (running === undefined) return Effect.succeed([])
        // Decisions do not join a running turn: they wait for theirs.
        const taken = bucket.take(
          running.cycle.number,
          input.final ? ["ForNextTurn", "InTheEnd"] : ["ForNextTurn"],
          (item) => !ContextItem.hasDecisions(item)
        )
        if (taken.length === 0) return Effect.succeed([])
        running.items.push(...taken)
        return Effect.as(
          publish({ type: "injected", cycle: running.cycle.number, items: taken }),
          taken.flatMap((item) => item.messages)
        )
      })
    const agent = options.agent(steering)

    // --- cycles ----------------------------------------------------------------

    /**
     * The items a cycle starts with: every waiting decision when one is first in
     * line (the cycle goes on with the stopped turn), else every waiting
     * `Interruption` and `ForNextTurn` item (or, if only `InTheEnd` items wait, those).
     */
    const takeInitial = (number: number) => {
      const head = bucket.waiting()[0]
      if (head !== undefined && ContextItem.hasDecisions(head)) {
        return {
          resuming: true,
          items: bucket.take(number, ContextItem.priorities, ContextItem.hasDecisions)
        }
      }
      const items = bucket.hasWaiting(["Interruption", "ForNextTurn"])
        ? bucket.take(number, ["Interruption", "ForNextTurn"])
        : bucket.take(number, ["InTheEnd"])
      return { resuming: false, items }
    }

    /** The cycle's turn: new input, or the stopped turn going on with the decisions (recorded on the results). */
    const turnOf = (resuming: boolean, initial: ReadonlyArray<ContextItem.ContextItem>) => {
      const turnOptions = {
        ...options.turnOptions,
        onInterrupt: "keep-seen",
        checkpointToolCalls: true
      } as const
      return resuming
        ? session.resumeStream(
            Decisions.recording(agent, initial),
            model,
            Decisions.merged(initial),
            turnOptions
          )
        : session.turnStream(
            agent,
            model,
            initial.flatMap((item) => item.messages),
            turnOptions
          )
    }

    /**
     * Drops the waiting decisions that can no longer apply, each reported: all of
     * them when a message is first in line (its turn answers every waiting call),
     * else those whose call no longer waits in the session.
     */
    const refuseStale = Effect.suspend(() => {
      const waiting = bucket.waiting()
      const head = waiting[0]
      if (head === undefined) return Effect.void
      const messageFirst = !ContextItem.hasDecisions(head)
      const calls = new Set(session.pendingApprovals().map((call) => call.id))
      const refused = waiting.flatMap((item) => {
        if (!ContextItem.hasDecisions(item)) return []
        const refusal = messageFirst
          ? { toolCallId: Object.keys(item.decisions ?? {})[0] as string, reason: "superseded" as const }
          : Decisions.stale(item, calls)
        if (refusal === undefined) return []
        bucket.remove(item)
        return [{ item, error: new DecisionRefused(refusal) }]
      })
      return Effect.forEach(
        refused,
        ({ item, error }) => publish({ type: "decision-refused", item, error }),
        { discard: true }
      )
    })

    /** Runs one turn for the waiting items; settles the bucket by how it ended. */
    const runCycle = Effect.gen(function* () {
      const number = ++cycleNumber
      const { resuming, items: initial } = takeInitial(number)
      const running = {
        cycle: { number, items: initial },
        items: [...initial],
        resuming,
        fiber: undefined as Fiber.Fiber<void, unknown> | undefined,
        interruptRequested: false
      }
      current = running
      yield* publish({ type: "cycle-started", cycle: running.cycle })
      yield* tell("onCycleStarted", (submind) => submind.onCycleStarted?.(running.cycle))
      const before = session.context().length
      let committed: ReadonlyArray<Message.Message> | undefined
      const turn = Stream.runForEach(turnOf(resuming, initial), (event) => {
        if (event.type === "committed") committed = event.messages
        return publish({ type: "turn", cycle: number, event })
      })
      const fiber = yield* Effect.forkIn(turn, scope)
      running.fiber = fiber
      // An interruption that arrived while the cycle was starting is not lost.
      if (running.interruptRequested) yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      current = undefined
      const cycle: Submind.Cycle = { number, items: running.items }
      const failure = Exit.isFailure(exit) && !Exit.hasInterrupts(exit) ? exit.cause : undefined
      // The one place a session changed by another process is handled: read it again, so the
      // next cycle (and whoever shows the failure) goes on from what is stored.
      if (failure !== undefined && isConflict(failure)) yield* Effect.ignore(session.reload())
      // Decisions apply once: what the turn did not store of them is recorded now.
      const settled = resuming
        ? yield* Effect.orElseSucceed(Decisions.settle(session, initial), () => [])
        : []
      if (Exit.isSuccess(exit) && committed !== undefined) {
        // Items an agent took through steering but did not put in its turn wait again.
        const stored = [...committed, ...settled]
        bucket.commit(number, leaves(stored))
        yield* publish({ type: "cycle-completed", cycle, committed: stored })
        yield* tell("onCycleCompleted", (submind) => submind.onCycleCompleted?.(cycle, stored))
      } else if (failure !== undefined) {
        const recorded = storedIn(settled)
        const dropped = bucket.drop(number).filter((item) => !recorded(item))
        yield* publish({ type: "cycle-failed", cycle, error: failure, dropped })
      } else {
        // Interrupted: what was kept is in the session; the items it holds leave, the others wait again.
        const kept = session.context().toArray().slice(before)
        bucket.commit(number, leaves(kept))
        yield* publish({ type: "cycle-interrupted", cycle, kept })
        yield* tell("onCycleInterrupted", (submind) => submind.onCycleInterrupted?.(cycle))
      }
    })

    /** Interrupts the running cycle's turn and waits for it, or marks it to be interrupted as soon as it starts. */
    const interruptCurrent = Effect.suspend(() => {
      const running = current
      if (running === undefined) return Effect.void
      running.interruptRequested = true
      return running.fiber === undefined ? Effect.void : Effect.asVoid(Fiber.interrupt(running.fiber))
    })

    /** Runs cycles while items wait, until the runtime stops (it then ends after the cycle it is in). */
    const loop = (ready: Deferred.Deferred<void>) =>
      Effect.gen(function* () {
        for (;;) {
          if (state !== "running") return
          yield* refuseStale
          if (bucket.hasWaiting()) {
            yield* runCycle
            continue
          }
          yield* publish({ type: "idle" })
          yield* Deferred.succeed(ready, undefined)
          yield* tell("onIdle", (submind) => submind.onIdle?.())
          yield* Queue.take(wakeups)
        }
      })

    // --- operations ------------------------------------------------------------

    const start = Effect.suspend(() => {
      if (state !== "new") return Effect.void
      state = "running"
      return Effect.gen(function* () {
        yield* publish({ type: "started" })
        yield* Effect.forEach(
          subminds,
          (submind) =>
            submind.onStarted === undefined
              ? Effect.void
              : guard(submind, "onStarted", submind.onStarted(), undefined),
          { discard: true }
        )
        const ready = yield* Deferred.make<void>()
        loopFiber = yield* Effect.forkIn(loop(ready), scope)
        // Started means listening: the loop is waiting for items.
        yield* Deferred.await(ready)
      })
    })

    const receiveTrigger = (trigger: TriggerEvent.TriggerEvent) =>
      Effect.suspend(() => {
        if (state !== "running") return Effect.fail(new RuntimeNotRunning({ state }))
        return Effect.gen(function* () {
          const items: Array<ContextItem.ContextItem> = []
          for (const submind of subminds) {
            if (submind.onTrigger === undefined) continue
            const made = yield* guard(submind, "onTrigger", submind.onTrigger(trigger), [])
            for (const item of made) {
              if (ContextItem.hasDecisions(item) && item.messages.length > 0) {
                yield* publish({
                  type: "hook-failed",
                  submind: submind.name,
                  hook: "onTrigger",
                  reason: "it made an item with both messages and decisions, which was left out"
                })
                continue
              }
              // Every message gets an id (an item built by hand may lack them): the runtime finds
              // a kept item's messages in the session by id, so an interrupted turn that stored
              // them does not run them again.
              items.push(ContextItem.withMessageIds(item))
            }
          }
          // Stopped while the subminds thought about it: `stop` has already reported what was
          // queued, so these items are not queued and the caller is told the trigger was refused.
          if (state !== "running") return yield* Effect.fail(new RuntimeNotRunning({ state: "stopped" }))
          // Only decisions are ever refused: a trigger without any (a message, an interruption)
          // does not read what waits in the session and the bucket, on the way to its interrupt.
          const refusal = items.some(ContextItem.hasDecisions)
            ? Decisions.refusal(items, {
                waiting: new Set(session.pendingApprovals().map((call) => call.id)),
                decided: Decisions.decidedCalls(bucket.remaining()),
                superseding: current !== undefined && !current.resuming,
                messagesWaiting: bucket
                  .waiting()
                  .flatMap((item) => (item.messages.length > 0 ? [item.priority] : []))
              })
            : undefined
          if (refusal !== undefined) return yield* Effect.fail(new DecisionRefused(refusal))
          // An item without messages or decisions only interrupts: there is nothing to queue.
          for (const item of items) {
            if (item.messages.length > 0 || ContextItem.hasDecisions(item)) bucket.add(item)
          }
          const running = current
          yield* publish({ type: "trigger", trigger, items, running: running !== undefined })
          if (running !== undefined && items.some((item) => item.priority === "Interruption")) {
            yield* interruptCurrent
          }
          yield* wake
        })
      })

    const stop = (stopOptions: { readonly running?: "cancel" | "finish" } = {}) =>
      Effect.suspend(() => {
        if (state === "stopped") return Effect.succeed<StopReport>({ unprocessed: [] })
        const wasRunning = state === "running"
        state = "stopped"
        return Effect.gen(function* () {
          // The loop is never interrupted from outside: it settles the bucket for the cycle it
          // is in (cancelled or finished), sees the runtime stopped, and ends. Interrupting it
          // mid-cycle could leave a turn running unseen, committing items also reported here.
          if (stopOptions.running !== "finish") yield* interruptCurrent
          if (loopFiber !== undefined) {
            yield* wake
            yield* Fiber.await(loopFiber)
          }
          // Hooks already told (the cancelled cycle's `onCycleInterrupted`, say) are heard out
          // before `onStopped`, not cut off by closing the scope.
          yield* FiberSet.awaitEmpty(told)
          const unprocessed = bucket.remaining()
          yield* publish({ type: "stopped", unprocessed })
          if (wasRunning) {
            yield* Effect.forEach(
              subminds,
              (submind) =>
                submind.onStopped === undefined
                  ? Effect.void
                  : guard(submind, "onStopped", submind.onStopped(), undefined),
              { discard: true }
            )
          }
          yield* Scope.close(scope, Exit.void)
          return { unprocessed }
        })
      })

    return {
      start,
      stop,
      receiveTrigger,
      events: Stream.fromPubSub(pubsub),
      subscribe: Effect.map(PubSub.subscribe(pubsub), Stream.fromSubscription)
    } satisfies Runtime
  })
