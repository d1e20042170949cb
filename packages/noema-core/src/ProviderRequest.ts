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
  /** Sends the request; resolves with the answer's body. */
  readonly start: (signal: AbortSignal) => PromiseLike<Body>
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
  // the whole of a turn's work on noema's side, and each Effect step costs per turn.
  Effect.callback<ChatResponse, ChatModelError>((resume) => {
    const controller = new AbortController()
    const failed = (cause: unknown) => resume(fail(cause, "request"))
    try {
      const { start, decode, requestIdOf } = exchange()
      start(controller.signal).then((body) => {
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
    // Runs only when the effect is interrupted while the request is in flight.
    return Effect.sync(() => abandon(controller))
  })
