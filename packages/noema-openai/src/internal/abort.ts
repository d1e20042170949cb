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
 * knows. An SDK built elsewhere (`fromClient` with the caller's own) is given
 * the signal as the SDK's `signal` option, as before.
 */
import type OpenAI from "openai"

type Fetch = NonNullable<ConstructorParameters<typeof OpenAI>[0]>["fetch"] & {}
type FetchOptions = NonNullable<OpenAI.RequestOptions["fetchOptions"]>

const callerSignal: unique symbol = Symbol("@noema/openai/callerSignal")

/** `fetchOptions` carrying the caller's signal to `joiningFetch`. */
type CallerFetchOptions = FetchOptions & { readonly [callerSignal]?: AbortSignal }

/** SDKs whose `fetch` is a `joiningFetch`: their requests carry the signal in `fetchOptions`. */
const joining = new WeakSet<OpenAI>()

/**
 * `fetch` aborting its request when either the SDK's signal or the caller's
 * (from `fetchOptions`) aborts; without a caller's signal it is `fetch` itself.
 */
export const joiningFetch =
  (fetch: Fetch): Fetch =>
  (input, init) => {
    const caller = (init as CallerFetchOptions | undefined)?.[callerSignal]
    if (caller === undefined) return fetch(input, init)
    const own = init?.signal ?? undefined
    const controller = new AbortController()
    const abort = () => controller.abort(caller.aborted ? caller.reason : own?.reason)
    // A listener added to a signal already aborted would never run. No `{ once: true }`: a
    // signal aborts once, and listener options cost an allocation per request.
    if (caller.aborted || own?.aborted === true) abort()
    else {
      caller.addEventListener("abort", abort)
      own?.addEventListener("abort", abort)
    }
    return fetch(input, { ...init, signal: controller.signal })
  }

/** Records that `sdk` was built with a `joiningFetch`. */
export const markJoining = (sdk: OpenAI): OpenAI => {
  joining.add(sdk)
  return sdk
}

/** The request options that make one request of `sdk` abort with a signal. */
export type AbortOptions = (signal: AbortSignal) => OpenAI.RequestOptions

const throughFetch: AbortOptions = (signal) => {
  const fetchOptions: CallerFetchOptions = { [callerSignal]: signal }
  return { fetchOptions }
}

const throughSdk: AbortOptions = (signal) => ({ signal })

/** How requests of `sdk` are given their signal (decided once per model, not per request). */
export const abortOptionsFor = (sdk: OpenAI): AbortOptions => (joining.has(sdk) ? throughFetch : throughSdk)
