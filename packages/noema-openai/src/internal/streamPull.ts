/**
 * One streamed exchange with the server as a Stream: the SDK's SSE events are
 * read one pull at a time and translated into core chunks in the same step.
 *
 * This is `Stream.fromAsyncIterable` over an async generator, written out:
 * that pair cost an unwrapped scope, an Effect and a bookkeeping promise per
 * element, and one more generator layer per event; the model's own stream
 * took 42 µs for a 15-event answer with them and 23 µs without (in process,
 * SDK calls answered at once). Here a pull is one callback that keeps reading
 * until an event yields chunks, so metadata-only or empty events are skipped
 * without a round trip through the stream.
 *
 * Closing the stream's scope before the response was read to the end
 * (interruption, a failure, a consumer that stopped early) aborts the
 * request, even while it still waits for headers. A response read to the end
 * is left alone: aborting it would only build a DOMException per turn.
 */
import type { ChatModel } from "@noema/core"
import { Array as Arr, Cause, Channel, Effect, Scope, Stream } from "effect"
import { IncompleteStream, type Phase } from "./errors.js"

type Chunks = Arr.NonEmptyReadonlyArray<ChatModel.StreamChunk>
type Resume = (effect: Effect.Effect<Chunks, ChatModel.ChatModelError | Cause.Done>) => void

/** Turns a wire event into core stream chunks (stateful, one per stream); throws `MalformedResponse`. */
export interface Translator {
  translate(raw: unknown): ReadonlyArray<ChatModel.StreamChunk>
  /** The wire said the answer ended (a stream that stops before was cut short). */
  readonly isFinished: boolean
}

export interface Options {
  /** Sends the request; resolves once the response headers are in. */
  readonly start: (signal: AbortSignal) => PromiseLike<AsyncIterable<unknown>>
  readonly translator: Translator
  /** The typed failure for anything the SDK throws (or the translator finds malformed). */
  readonly fail: (cause: unknown, phase: Phase) => Effect.Effect<never, ChatModel.ChatModelError>
}

class Exchange {
  private readonly controller = new AbortController()
  private iterator: AsyncIterator<unknown> | undefined
  private readToEnd = false

  constructor(private readonly options: Options) {}

  readonly pull: Effect.Effect<Chunks, ChatModel.ChatModelError | Cause.Done> = Effect.callback((resume) => {
    if (this.iterator !== undefined) return this.next(this.iterator, resume)
    let started: PromiseLike<AsyncIterable<unknown>>
    try {
      started = this.options.start(this.controller.signal)
    } catch (cause) {
      return resume(this.options.fail(cause, "request"))
    }
    started.then(
      (source) => {
        const iterator = source[Symbol.asyncIterator]()
        this.iterator = iterator
        this.next(iterator, resume)
      },
      (cause) => resume(this.options.fail(cause, "request"))
    )
  })

  private next(iterator: AsyncIterator<unknown>, resume: Resume): void {
    iterator.next().then(
      (result) => {
        if (result.done === true) {
          this.readToEnd = true
          return resume(
            this.options.translator.isFinished
              ? Cause.done()
              : this.options.fail(new IncompleteStream("the stream ended before a finish reason"), "stream")
          )
        }
        let chunks: ReadonlyArray<ChatModel.StreamChunk>
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

  readonly close = Effect.sync(() => {
    if (this.readToEnd) return
    this.controller.abort()
    // Lets the SDK's generator run its own cleanup; it settles once the aborted read does.
    this.iterator?.return?.().catch(ignore)
  })
}

const ignore = (): void => undefined

/** A stream over one exchange, started when the stream is run (once per run). */
export const make = (
  options: () => Options
): Stream.Stream<ChatModel.StreamChunk, ChatModel.ChatModelError> =>
  Stream.fromChannel(
    Channel.fromTransform((_, scope) =>
      Effect.suspend(() => {
        const exchange = new Exchange(options())
        return Effect.as(Scope.addFinalizer(scope, exchange.close), exchange.pull)
      })
    )
  )
