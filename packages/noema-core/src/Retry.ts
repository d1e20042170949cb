/**
 * Retry: the policy for retrying failed model calls.
 *
 * It reads only a failure's `ModelError` reason, so chat models, embedders and
 * anything else that fails with a reason share it: exponential backoff with
 * jitter, capped, never shorter than a rate limit's `retry-after`, and only
 * for reasons that say `isRetryable`. `chatModel` applies it to a whole
 * `ChatModel` (what `ChatModel.make` does with its `retry` option); `effect`
 * to any one call. A retry is never silent unless the caller wants it so:
 * `onRetry` hears of each one before its wait, and `maxTotalDelay` caps the
 * waiting (a provider asking for longer fails at once instead).
 */
import { Channel, Duration, Effect, Schedule, Stream } from "effect"
import type { ChatRequest, ChatResponse, Service, StreamChunk } from "./ChatModel.js"
import type * as ModelError from "./ModelError.js"
import { Attributes, EventNames } from "./Tracing.js"

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

export interface Options {
  /** Total attempts including the first; 1 disables retries. Default 3. */
  readonly maxAttempts?: number
  /** First backoff delay; doubles each attempt, with jitter. Default 500 ms. */
  readonly baseDelay?: Duration.Input
  /** Upper bound for one delay (a provider's retry-after above it is still honoured). Default 30 s. */
  readonly maxDelay?: Duration.Input
  /**
   * Upper bound for all the waits of one call together. A wait that would go
   * beyond it (e.g. a `retry-after` longer than the cap) is not made: the call
   * fails at once with the failure that asked for it. Default: no bound.
   */
  readonly maxTotalDelay?: Duration.Input
  /** Told of each retry before its wait (e.g. to show it); it should not fail or take long. */
  readonly onRetry?: (info: RetryInfo) => Effect.Effect<void>
}

/**
 * The retry settings an adapter's client takes, flat beside its other options
 * (`maxAttempts`, `retryBaseDelay`, `retryMaxDelay`); `fromClientOptions` reads
 * them as the policy's `Options`.
 */
export interface ClientOptions {
  /** Total attempts for retryable failures, including the first; 1 disables retries. Default 3. */
  readonly maxAttempts?: number
  /** First retry delay (doubling, with jitter); a server's `retry-after` wins when longer. Default 500 ms. */
  readonly retryBaseDelay?: Duration.Input
  /** Upper bound for one computed retry delay. Default 30 s. */
  readonly retryMaxDelay?: Duration.Input
}

/** A client's retry settings as the policy's options. */
export const fromClientOptions = (options: ClientOptions): Options => ({
  maxAttempts: options.maxAttempts ?? defaults.maxAttempts,
  ...(options.retryBaseDelay !== undefined && { baseDelay: options.retryBaseDelay }),
  ...(options.retryMaxDelay !== undefined && { maxDelay: options.retryMaxDelay })
})

/** What `onRetry` hears: the failure being retried and the wait before the next attempt. */
export interface RetryInfo {
  readonly error: Failure
  /** The attempt about to be made after the wait: 2 for the first retry. */
  readonly attempt: number
  /** Attempts in all, the first included. */
  readonly maxAttempts: number
  readonly delay: Duration.Duration
}

/** What the policy reads of a failure: its reason. */
export interface Failure {
  readonly reason: ModelError.Reason
}

const defaults = { maxAttempts: 3, baseDelay: Duration.millis(500), maxDelay: Duration.seconds(30) }

// ---------------------------------------------------------------------------
// What the provider asked for
// ---------------------------------------------------------------------------

/**
 * The wait a provider asked for in its response headers, in milliseconds:
 * `retry-after-ms` (OpenAI's), else `retry-after` as seconds or as an HTTP
 * date (relative to `now`, epoch milliseconds). `header` reads one header by
 * its lower-case name, so any SDK's header shape fits. What adapters put in
 * `RateLimited.retryAfterMillis`, which the policy below honours.
 */
export const retryAfterMillis = (
  header: (name: string) => string | null | undefined,
  now: number
): number | undefined => {
  const milliseconds = header("retry-after-ms")
  if (milliseconds !== null && milliseconds !== undefined && milliseconds.trim() !== "") {
    const value = Number(milliseconds)
    if (Number.isFinite(value) && value >= 0) return Math.ceil(value)
  }
  const retryAfter = header("retry-after")
  if (retryAfter === null || retryAfter === undefined || retryAfter.trim() === "") return undefined
  const seconds = Number(retryAfter)
  if (Number.isFinite(seconds)) return seconds >= 0 ? Math.ceil(seconds * 1000) : undefined
  const date = Date.parse(retryAfter)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

// ---------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------

/** The delay the provider asked for, if the failure was a rate limit that said so. */
const requestedDelay = (failure: Failure): Duration.Duration | undefined =>
  failure.reason._tag === "RateLimited" && failure.reason.retryAfterMillis !== undefined
    ? Duration.millis(failure.reason.retryAfterMillis)
    : undefined

/**
 * The schedule: exponential backoff with jitter, capped, but never shorter
 * than a rate limit's `retry-after`. Its input is the failure, so it can read
 * what the provider asked for. It does not stop by itself: pair it with
 * `maxAttempts` and `isRetryable` (as `effect` and `chatModel` do).
 */
export const schedule = <E extends Failure = Failure>(
  options: Options = {}
): Schedule.Schedule<Duration.Duration, E> => {
  const baseDelay = Duration.fromInputUnsafe(options.baseDelay ?? defaults.baseDelay)
  const maxDelay = Duration.fromInputUnsafe(options.maxDelay ?? defaults.maxDelay)
  return Schedule.exponential(baseDelay, 2).pipe(
    Schedule.jittered,
    Schedule.setInputType<E>(),
    Schedule.modifyDelay(({ input, duration }) => {
      const capped = Duration.min(duration, maxDelay)
      const asked = requestedDelay(input)
      return Effect.succeed(asked !== undefined ? Duration.max(capped, asked) : capped)
    })
  )
}

/**
 * Waits before the next attempt after `error`, as the policy says: tells
 * `onRetry`, then sleeps; fails with `error` instead when the wait would take
 * the call beyond `maxTotalDelay`. One per call, as the policy has state.
 */
type Wait<E> = (error: E) => Effect.Effect<void, E>

const makeWait = <E extends Failure>(options: Options): Effect.Effect<Wait<E>> => {
  const maxAttempts = options.maxAttempts ?? defaults.maxAttempts
  const cap =
    options.maxTotalDelay === undefined ? undefined : Duration.fromInputUnsafe(options.maxTotalDelay)
  const onRetry = options.onRetry
  return Effect.map(Schedule.toStep(schedule<E>(options)), (step) => {
    let total = Duration.zero
    let attempt = 1
    return (error) =>
      Effect.flatMap(
        // The schedule never ends by itself (attempts are counted here), so its end is a defect.
        Effect.orDie(
          Effect.clockWith((clock) => Effect.flatMap(clock.currentTimeMillis, (now) => step(now, error)))
        ),
        ([, delay]) => {
          const after = Duration.sum(total, delay)
          if (cap !== undefined && Duration.isGreaterThan(after, cap)) return Effect.fail(error)
          total = after
          attempt++
          const sleep = Effect.andThen(noteOnSpan(error, attempt, delay), Effect.sleep(delay))
          return onRetry === undefined
            ? sleep
            : Effect.andThen(onRetry({ error, attempt, maxAttempts, delay }), sleep)
        }
      )
  })
}

/**
 * The retry as an event of the span it happens in (the model call's), so a trace shows
 * each failed attempt: the failure's reason and message, the attempt to come, the wait.
 */
const noteOnSpan = (error: Failure, attempt: number, delay: Duration.Duration): Effect.Effect<void> =>
  Effect.flatMap(Effect.option(Effect.currentSpan), (span) =>
    span._tag === "None"
      ? Effect.void
      : Effect.clockWith((clock) =>
          Effect.sync(() =>
            span.value.event(EventNames.retry, clock.currentTimeNanosUnsafe(), {
              [Attributes.errorType]: error.reason._tag,
              "error.message": error.reason.message,
              [Attributes.retryAttempt]: attempt,
              [Attributes.retryDelay]: Duration.toMillis(delay)
            })
          )
        )
  )

/** Retries one call's retryable failures with the policy (at most `maxAttempts` attempts in all). */
export const effect = <A, E extends Failure, R>(
  call: Effect.Effect<A, E, R>,
  options: Options = {}
): Effect.Effect<A, E, R> => {
  const times = (options.maxAttempts ?? defaults.maxAttempts) - 1
  if (times <= 0) return call
  const again = (wait: Wait<E>, error: E, left: number): Effect.Effect<A, E, R> =>
    Effect.andThen(
      wait(error),
      Effect.catch(call, (next) =>
        next.reason.isRetryable && left > 1 ? again(wait, next, left - 1) : Effect.fail(next)
      )
    )
  return Effect.catch(call, (error) =>
    error.reason.isRetryable
      ? Effect.flatMap(makeWait<E>(options), (wait) => again(wait, error, times))
      : Effect.fail(error)
  )
}

// ---------------------------------------------------------------------------
// Chat models
// ---------------------------------------------------------------------------

/**
 * `Stream.suspend` without what it records for `Stream.concat` (a WeakMap
 * entry per run, which showed in the profile of every streamed call).
 */
const suspendStream = <A, E, R>(evaluate: () => Stream.Stream<A, E, R>): Stream.Stream<A, E, R> =>
  Stream.fromChannel(Channel.suspend(() => Stream.toChannel(evaluate())))

type ChatFailure = Effect.Error<ReturnType<Service["complete"]>>

type RetryStep = Wait<ChatFailure>

/**
 * A chat model whose retryable failures are retried. A stream is retried only
 * while it has emitted nothing: once text reached the caller, replaying it
 * would duplicate output.
 *
 * The policy's step (its clock and attempt count) is set up on the first
 * failure, not before each call: nearly every call succeeds, and setting it
 * up front cost about 9 µs per streamed call.
 */
export const chatModel = (model: Service, options: Options = {}): Service => {
  const times = (options.maxAttempts ?? defaults.maxAttempts) - 1
  if (times <= 0) return model
  const makeStep: Effect.Effect<RetryStep> = makeWait<ChatFailure>(options)

  /** Waits, then calls again; `left` counts the retries still allowed, this one included. */
  const retryComplete = (
    request: ChatRequest,
    step: RetryStep,
    error: ChatFailure,
    left: number
  ): Effect.Effect<ChatResponse, ChatFailure> =>
    Effect.andThen(
      step(error),
      Effect.catch(model.complete(request), (next) =>
        next.isRetryable && left > 1 ? retryComplete(request, step, next, left - 1) : Effect.fail(next)
      )
    )

  const streamAttempt = (
    request: ChatRequest,
    step: RetryStep | undefined,
    left: number
  ): Stream.Stream<StreamChunk, ChatFailure> =>
    suspendStream(() => {
      let emitted = false
      return model.stream(request).pipe(
        Stream.mapArray((chunks) => {
          emitted = true
          return chunks
        }),
        Stream.catch((error) =>
          error.isRetryable && !emitted && left > 0
            ? Stream.unwrap(
                Effect.flatMap(step === undefined ? makeStep : Effect.succeed(step), (next) =>
                  Effect.as(next(error), streamAttempt(request, next, left - 1))
                )
              )
            : Stream.fail(error)
        )
      )
    })

  return {
    ...model,
    complete: (request) =>
      Effect.catch(model.complete(request), (error) =>
        error.isRetryable
          ? Effect.flatMap(makeStep, (step) => retryComplete(request, step, error, times))
          : Effect.fail(error)
      ),
    stream: (request) => streamAttempt(request, undefined, times)
  }
}
