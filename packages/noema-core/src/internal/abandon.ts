/**
 * Abandoning a provider's request: its `AbortController` aborted without stack
 * traces on the errors the abort makes.
 *
 * When noema aborts a request, whoever waited for it has gone (the call was
 * interrupted, or its stream stopped): the errors the SDK and Node's fetch
 * build for the abort (the signal's `AbortError`, undici's aborted-request
 * errors) only settle promises nobody reads. Yet each captures the stack it is
 * made on, and Node's streams read `err.stack` when they are destroyed with it,
 * so the stack is formatted too, before the socket is closed. Aborted from an
 * interrupted fiber, that stack is ten frames of Effect's run loop: measured by
 * the bench's `runtime.interrupt`, formatting them cost more than the rest of the
 * abort (about 100 to 200 us between `abort()` and the socket's close). Made
 * without frames, those errors cost almost nothing; nothing reported loses one.
 */

/** Whether `Error.stackTraceLimit` may be set here (frozen intrinsics forbid it). */
const canLimitStacks = (() => {
  const descriptor = Object.getOwnPropertyDescriptor(Error, "stackTraceLimit")
  return descriptor === undefined || descriptor.writable === true || descriptor.set !== undefined
})()

/** Aborts `controller` with stack traces off for the errors it makes; the limit is restored at once. */
export const abandon = (controller: AbortController): void => {
  if (!canLimitStacks) {
    controller.abort()
    return
  }
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  try {
    controller.abort()
  } finally {
    Error.stackTraceLimit = limit
  }
}
