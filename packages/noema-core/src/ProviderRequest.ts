/**
 * ProviderRequest: one non-streamed exchange with a provider's SDK as a core
 * effect, the counterpart of `ProviderStream` for `complete`.
 *
 * What every adapter needs, said once: the request is sent when the effect
 * runs; interrupting it while the request is in flight aborts the request;
 * an answer of the wrong shape (the decoder throws, or returns a
 * `MalformedResponse`) fails with the body's request id; everything thrown
 * goes through the adapter's `fail`, which types it.
 */
import { Effect } from "effect"
import type { ChatModelError, ChatResponse } from "./ChatModel.js"
import { abandon } from "./internal/abandon.js"
import { type Fail, MalformedResponse } from "./ProviderFailure.js"

/** One exchange's parts, made when the effect runs (so what throws while making them is typed too). */
export interface Exchange<Body> {
  /**
   * Sends the request; resolves with the answer's body. `signal` aborts when the effect is
   * interrupted while the request is in flight; it is `controller`'s, which is this exchange's
   * alone, so an adapter may abort it too (to join an SDK's own signal to it without a second
   * controller).
   */
  readonly start: (signal: AbortSignal, controller: AbortController) => PromiseLike<Body>
  /** The response in a body; throws, or returns a `MalformedResponse`, when the body is not one. */
  readonly decode: (body: Body) => ChatResponse | MalformedResponse
  /** The request id a body carries, for a failure to decode it. */
  readonly requestIdOf?: (body: Body) => string | undefined
}

/** One exchange, sent when the effect runs (once per run); everything thrown goes through `fail`. */
export const make = <Body>(
  fail: Fail,
  exchange: () => Exchange<Body>
): Effect.Effect<ChatResponse, ChatModelError> =>
  // One callback for the whole exchange (not suspend + tryPromise + catch + flatMap): it is
  // the whole of a turn's work on noema's side, and each Effect step costs per turn. The
  // controller is ours, not the callback's (Effect's is out of reach): an adapter whose SDK
  // has a signal of its own joins it to this one by aborting this controller, where it would
  // otherwise need a second controller, signal and listener (about 0.9 KiB) per request,
  // kept while the request is in flight.
  Effect.callback<ChatResponse, ChatModelError>((resume) => {
    const controller = new AbortController()
    const failed = (cause: unknown) => resume(fail(cause, "request"))
    try {
      const { start, decode, requestIdOf } = exchange()
      start(controller.signal, controller).then((body) => {
        let response: ChatResponse | MalformedResponse
        try {
          response = decode(body)
        } catch (cause) {
          return resume(fail(cause, "request", requestIdOf?.(body)))
        }
        resume(
          response instanceof MalformedResponse
            ? fail(response, "request", requestIdOf?.(body))
            : Effect.succeed(response)
        )
      }, failed)
    } catch (cause) {
      failed(cause)
    }
    // Runs only when the effect is interrupted while the request is in flight: nobody waits for
    // the abort's errors, so they are made without stack traces (`internal/abandon.ts`).
    return Effect.sync(() => abandon(controller))
  })
