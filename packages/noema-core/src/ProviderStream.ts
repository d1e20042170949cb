/**
 * ProviderStream: one streamed exchange with a provider's SDK as a core
 * stream. The SDK's events (any async iterable: an SSE iterator, a
 * `ReadableStream`) are read one pull at a time and turned into `ChatModel`
 * chunks by a translator in the same step, so events that yield no chunk
 * (pings, metadata) cost no round trip through the stream.
 *
 * What every adapter needs, said once: the request starts when the stream is
 * run (once per run); closing the stream's scope before the answer was read
 * to the end (interruption, a failure, a consumer that stopped early) aborts
 * the request, even while it still waits for headers; a stream that ends
 * before the translator saw the provider say it finished was cut off and
 * fails (`Incomplete`); everything thrown goes through the adapter's `fail`,
 * which types it. A response read to the end is left alone.
 */
import { Array as Arr, Cause, Channel, Effect, Scope, Stream } from "effect"
import type { ChatModelError, StreamChunk } from "./ChatModel.js"
import { abandon } from "./internal/abandon.js"

/** Where a failure happened: before the response started, or while its stream was read. */
export type Phase = "request" | "stream"

/** Turns a provider's event into core chunks (stateful, one per stream); may throw. */
export interface Translator {
  translate(event: unknown): ReadonlyArray<StreamChunk>
  /** The provider said the answer ended (a stream that stops before was cut short). */
  readonly isFinished: boolean
}

export interface Options {
  /** Sends the request; resolves once the response has started. */
  readonly start: (signal: AbortSignal) => PromiseLike<AsyncIterable<unknown>>
  readonly translator: Translator
  /** The typed failure for anything thrown (by the SDK, the translator, or `Incomplete`). */
  readonly fail: (cause: unknown, phase: Phase) => Effect.Effect<never, ChatModelError>
}

/** Passed to `fail` when the events ended before the provider said it was finished. */
export class Incomplete extends Error {
  override readonly name = "Incomplete"
}

type Chunks = Arr.NonEmptyReadonlyArray<StreamChunk>
type Resume = (effect: Effect.Effect<Chunks, ChatModelError | Cause.Done>) => void

class Exchange {
  private readonly controller = new AbortController()
  private iterator: AsyncIterator<unknown> | undefined
  private readToEnd = false

  constructor(private readonly options: Options) {}

  /**
   * One pull. Interrupted while it waits on the provider, it aborts the request at once (its
   * canceller runs first, before the rest of the interrupted fiber unwinds): a pull is only
   * interrupted when the stream is abandoned, and the request is what should stop first.
   */
  readonly pull: Effect.Effect<Chunks, ChatModelError | Cause.Done> = Effect.callback((resume) => {
    this.pullOnce(resume)
    return this.close
  })

  private pullOnce(resume: Resume): void {
    if (this.iterator !== undefined) {
      this.next(this.iterator, resume)
      return
    }
    let started: PromiseLike<AsyncIterable<unknown>>
    try {
      started = this.options.start(this.controller.signal)
    } catch (cause) {
      resume(this.options.fail(cause, "request"))
      return
    }
    started.then(
      (source) => {
        const iterator = source[Symbol.asyncIterator]()
        this.iterator = iterator
        this.next(iterator, resume)
      },
      (cause) => resume(this.options.fail(cause, "request"))
    )
  }

  private next(iterator: AsyncIterator<unknown>, resume: Resume): void {
    iterator.next().then(
      (result) => {
        if (result.done === true) {
          this.readToEnd = true
          return resume(
            this.options.translator.isFinished
              ? Cause.done()
              : this.options.fail(new Incomplete("the stream ended before a finish reason"), "stream")
          )
        }
        let chunks: ReadonlyArray<StreamChunk>
        try {
          chunks = this.options.translator.translate(result.value)
        } catch (cause) {
          return resume(this.options.fail(cause, "stream"))
        }
        if (Arr.isReadonlyArrayNonEmpty(chunks)) resume(Effect.succeed(chunks))
        else this.next(iterator, resume)
      },
      (cause) => resume(this.options.fail(cause, "stream"))
    )
  }

  /** Aborts the request unless its answer was read to the end (once: the pull's canceller and the scope's finalizer both call it). */
  readonly close = Effect.sync(() => {
    if (this.readToEnd || this.controller.signal.aborted) return
    abandon(this.controller)
    // Lets the SDK's iterator run its own cleanup; it settles once the aborted read does.
    this.iterator?.return?.().catch(ignore)
  })
}

const ignore = (): void => undefined

/** A stream over one exchange, started when the stream is run (once per run). */
export const make = (options: () => Options): Stream.Stream<StreamChunk, ChatModelError> =>
  Stream.fromChannel(
    Channel.fromTransform((_, scope) =>
      Effect.suspend(() => {
        const exchange = new Exchange(options())
        return Effect.as(Scope.addFinalizer(scope, exchange.close), exchange.pull)
      })
    )
  )
