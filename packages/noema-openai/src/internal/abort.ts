/**
 * How noema's abort signal reaches a request of the `openai` SDK.
 *
 * Given a caller's `signal`, the SDK joins it to its own (its timeout, a stream
 * the caller stops reading) with `AbortSignal.any`, whose dependent signals are
 * weakly held and cost about 6 µs and 2 KiB per request (bench
 * `http.concurrent50`: raw SDK 7,060 turns/s, with a signal 6,583/s). noema
 * always has a signal (interrupting a call aborts its request), so the SDKs
 * `OpenAiClient` builds get a `fetch` that joins the two itself: one
 * controller, a listener on each signal. The caller's signal travels to that
 * `fetch` under a key of the request's `fetchOptions` that only this module
 * knows. When the caller's controller comes with it (`ProviderRequest`'s, which
 * is the request's alone) the join needs no controller of its own: the request
 * carries the caller's signal and the SDK's aborts the caller's controller. An
 * SDK built elsewhere (`fromClient` with the caller's own) is given the signal
 * as the SDK's `signal` option, as before.
 */
import type OpenAI from "openai"

type Fetch = NonNullable<ConstructorParameters<typeof OpenAI>[0]>["fetch"] & {}
type FetchOptions = NonNullable<OpenAI.RequestOptions["fetchOptions"]>

const callerSignal: unique symbol = Symbol("@noema/openai/callerSignal")
const callerController: unique symbol = Symbol("@noema/openai/callerController")

/** `fetchOptions` carrying the caller's signal, or its controller, to `joiningFetch`. */
type CallerFetchOptions = FetchOptions & {
  readonly [callerSignal]?: AbortSignal
  readonly [callerController]?: AbortController
}

/** SDKs whose `fetch` is a `joiningFetch`: their requests carry the signal in `fetchOptions`. */
const joining = new WeakSet<OpenAI>()

/**
 * `fetch` aborting its request when either the SDK's signal or the caller's
 * (from `fetchOptions`) aborts; without a caller's signal it is `fetch` itself.
 * The `init` is the SDK's, made for this call alone, so its signal is replaced
 * in place rather than in a copy.
 */
export const joiningFetch =
  (fetch: Fetch): Fetch =>
  (input, init) => {
    const options = init as (CallerFetchOptions & { signal?: AbortSignal | null }) | undefined
    const controller = options?.[callerController]
    if (controller !== undefined) {
      join(options?.signal ?? undefined, controller)
      ;(options as { signal?: AbortSignal | null }).signal = controller.signal
      return fetch(input, init)
    }
    const caller = options?.[callerSignal]
    if (caller === undefined) return fetch(input, init)
    const joined = new AbortController()
    join(caller, joined)
    join(options?.signal ?? undefined, joined)
    ;(options as { signal?: AbortSignal | null }).signal = joined.signal
    return fetch(input, init)
  }

/** Aborts `controller` with `signal`'s reason when `signal` aborts (at once when it has). */
const join = (signal: AbortSignal | undefined, controller: AbortController): void => {
  if (signal === undefined || controller.signal.aborted) return
  // A listener added to a signal already aborted would never run. No `{ once: true }`: a
  // signal aborts once, and listener options cost an allocation per request.
  if (signal.aborted) controller.abort(signal.reason)
  else signal.addEventListener("abort", () => controller.abort(signal.reason))
}

/** Records that `sdk` was built with a `joiningFetch`. */
export const markJoining = (sdk: OpenAI): OpenAI => {
  joining.add(sdk)
  return sdk
}

/**
 * The request options that make one request of `sdk` abort with a signal; given the signal's
 * controller (one of the request's own, which the SDK's signal may then abort too), the join
 * reuses it.
 */
export type AbortOptions = (signal: AbortSignal, controller?: AbortController) => OpenAI.RequestOptions

const throughFetch: AbortOptions = (signal, controller) => {
  const fetchOptions: CallerFetchOptions =
    controller === undefined ? { [callerSignal]: signal } : { [callerController]: controller }
  return { fetchOptions }
}

const throughSdk: AbortOptions = (signal) => ({ signal })

/** How requests of `sdk` are given their signal (decided once per model, not per request). */
export const abortOptionsFor = (sdk: OpenAI): AbortOptions => (joining.has(sdk) ? throughFetch : throughSdk)
