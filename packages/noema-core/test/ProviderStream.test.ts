import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { ChatModel, ModelError, ProviderStream } from "../src/index.js"

/** A translator of `{ text }` and `{ done: true }` events, as an adapter's would be. */
const translator = (): ProviderStream.Translator => {
  let finished = false
  return {
    get isFinished() {
      return finished
    },
    translate: (event) => {
      const value = event as { readonly text?: string; readonly done?: boolean; readonly bad?: boolean }
      if (value.bad === true) throw new SyntaxError("not an event")
      if (value.done === true) {
        finished = true
        return [{ type: "finish", finishReason: "stop" }]
      }
      return value.text === undefined ? [] : [{ type: "text-delta", delta: value.text }]
    }
  }
}

const fail = (cause: unknown, phase: ProviderStream.Phase) =>
  Effect.fail(
    ChatModel.error(
      "test",
      cause instanceof ProviderStream.Incomplete
        ? new ModelError.Network({ message: `${phase}: ${cause.message}` })
        : new ModelError.InvalidOutput({ message: `${phase}: ${String(cause)}` })
    )
  )

/** A source that records whether its request was aborted. */
const source = (events: ReadonlyArray<unknown>, hangAfter = false) => {
  const seen = { aborted: false, started: 0, reason: undefined as unknown }
  const start = (signal: AbortSignal) => {
    seen.started++
    signal.addEventListener("abort", () => {
      seen.aborted = true
      seen.reason = signal.reason
    })
    return Promise.resolve({
      async *[Symbol.asyncIterator]() {
        for (const event of events) yield event
        if (hangAfter) await new Promise((resolve) => signal.addEventListener("abort", resolve))
      }
    })
  }
  return { seen, stream: ProviderStream.make(() => ({ start, translator: translator(), fail })) }
}

describe("ProviderStream", () => {
  it.effect("translates events, skips those without chunks, and leaves a finished request alone", () =>
    Effect.gen(function* () {
      const { seen, stream } = source([{ text: "a" }, { ping: true }, { text: "b" }, { done: true }])
      const chunks = yield* Stream.runCollect(stream)
      assert.deepStrictEqual(
        chunks.map((chunk) => chunk.type),
        ["text-delta", "text-delta", "finish"]
      )
      assert.isFalse(seen.aborted)
      assert.strictEqual(seen.started, 1)
    })
  )

  it.effect("fails as the adapter says when the events end before the provider finished", () =>
    Effect.gen(function* () {
      const { stream } = source([{ text: "cut" }])
      const error = yield* Effect.flip(Stream.runCollect(stream))
      assert.strictEqual(error.reason._tag, "Network")
      assert.include(error.message, "stream: the stream ended")
    })
  )

  it.effect("types what the translator throws", () =>
    Effect.gen(function* () {
      const { stream } = source([{ bad: true }])
      const error = yield* Effect.flip(Stream.runCollect(stream))
      assert.strictEqual(error.reason._tag, "InvalidOutput")
    })
  )

  it.live("aborts the request when the consumer stops early or is interrupted", () =>
    Effect.gen(function* () {
      const early = source([{ text: "a" }, { text: "b" }, { done: true }])
      yield* Stream.runCollect(Stream.take(early.stream, 1))
      assert.isTrue(early.seen.aborted)
      const hanging = source([{ text: "a" }], true)
      const fiber = yield* Effect.forkChild(Stream.runDrain(hanging.stream))
      // Bounded by iterations, not time: a busy machine only makes it loop longer.
      for (let i = 0; i < 2000 && hanging.seen.started === 0; i++) yield* Effect.sleep("5 millis")
      yield* Fiber.interrupt(fiber)
      assert.isTrue(hanging.seen.aborted)
    })
  )

  it.live("an interrupt aborts the request first, before the consumer's own finalizers run", () =>
    Effect.gen(function* () {
      // What an interrupted turn waits for is the request stopping: the bookkeeping around it
      // (a consumer's finalizers, what it keeps of the turn) comes after.
      const hanging = source([{ text: "a" }], true)
      const order: Array<string> = []
      const consumer = hanging.stream.pipe(
        Stream.ensuring(Effect.sync(() => order.push(hanging.seen.aborted ? "after abort" : "before abort"))),
        Stream.runDrain
      )
      const fiber = yield* Effect.forkChild(consumer)
      for (let i = 0; i < 2000 && hanging.seen.started === 0; i++) yield* Effect.sleep("5 millis")
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(order, ["after abort"])
    })
  )

  it.live(
    "an abandoned request's abort errors are made without stack frames, and the limit is restored",
    () =>
      Effect.gen(function* () {
        // The SDK's abort errors are never read (the caller has gone), but Node formats their
        // stacks before closing the socket: ten frames of Effect's run loop, the costliest part
        // of an interrupt's abort.
        const limit = Error.stackTraceLimit
        const hanging = source([{ text: "a" }], true)
        const fiber = yield* Effect.forkChild(Stream.runDrain(hanging.stream))
        for (let i = 0; i < 2000 && hanging.seen.started === 0; i++) yield* Effect.sleep("5 millis")
        yield* Fiber.interrupt(fiber)
        assert.isTrue(hanging.seen.aborted)
        assert.instanceOf(hanging.seen.reason, Error)
        assert.notInclude((hanging.seen.reason as Error).stack ?? "", "\n    at ")
        assert.strictEqual(Error.stackTraceLimit, limit)
        // Errors made afterwards have their frames again.
        assert.include(new Error("after").stack ?? "", "\n    at ")
      })
  )
})
