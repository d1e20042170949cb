/**
 * The fetch of the SDKs noema builds joins the caller's abort signal to the
 * SDK's own, so the SDK is never given a signal to compose (`AbortSignal.any`
 * per request cost 7% of the bench's `http.concurrent50`).
 */

import { setTimeout as sleep } from "node:timers/promises"
import { assert, describe, it } from "@effect/vitest"
import { ChatModel, Message } from "@noema/core"
import { ConfigProvider, Effect, Fiber, Redacted, Stream } from "effect"
import OpenAI from "openai"
import { afterAll, afterEach, beforeAll, vi } from "vitest"
import { OpenAiChatModel, OpenAiEmbedder } from "../src/index.js"
import { abortOptionsFor, joiningFetch, markJoining } from "../src/internal/abort.js"
import { OpenAiTestServer } from "../src/testing.js"

let server: OpenAiTestServer.TestServer
beforeAll(async () => {
  server = await OpenAiTestServer.start()
})
afterAll(() => server.close())
afterEach(() => {
  server.reset()
  vi.restoreAllMocks()
})

type Fetch = Parameters<typeof joiningFetch>[0]
type Init = Parameters<Fetch>[1]

/** A fetch that records the init it was called with and answers at once. */
const recordingFetch = () => {
  const calls: Array<Init> = []
  const fetch: Fetch = async (_input, init) => {
    calls.push(init)
    return new Response("{}")
  }
  return { calls, fetch }
}

/** The `init` a request of `sdk`'s options would give `joiningFetch`, with the SDK's own signal. */
const initWith = (caller: AbortSignal, own: AbortSignal): Init => {
  const init: Init = { signal: own, method: "POST" }
  return Object.assign(init, abortOptionsFor(markJoining(new OpenAI({ apiKey: "k" })))(caller).fetchOptions)
}

describe("joiningFetch", () => {
  it("aborts the request when the caller's signal aborts", async () => {
    const { calls, fetch } = recordingFetch()
    const caller = new AbortController()
    await joiningFetch(fetch)("http://x", initWith(caller.signal, new AbortController().signal))
    const signal = calls[0]?.signal
    assert.ok(signal !== undefined && signal !== null)
    assert.isFalse(signal.aborted)
    caller.abort()
    assert.isTrue(signal.aborted)
  })

  it("aborts the request when the SDK's own signal aborts (its timeout, a stream left early)", async () => {
    const { calls, fetch } = recordingFetch()
    const own = new AbortController()
    await joiningFetch(fetch)("http://x", initWith(new AbortController().signal, own.signal))
    own.abort()
    assert.isTrue(calls[0]?.signal?.aborted)
  })

  it("sends an already aborted request when the caller aborted before the SDK reached fetch", async () => {
    const { calls, fetch } = recordingFetch()
    const caller = new AbortController()
    caller.abort()
    await joiningFetch(fetch)("http://x", initWith(caller.signal, new AbortController().signal))
    assert.isTrue(calls[0]?.signal?.aborted)
  })

  it("given the caller's controller, sends the caller's signal itself (no second controller)", async () => {
    const { calls, fetch } = recordingFetch()
    const caller = new AbortController()
    const init: Init = { signal: new AbortController().signal, method: "POST" }
    Object.assign(
      init,
      abortOptionsFor(markJoining(new OpenAI({ apiKey: "k" })))(caller.signal, caller).fetchOptions
    )
    await joiningFetch(fetch)("http://x", init)
    assert.strictEqual(calls[0]?.signal, caller.signal)
    assert.strictEqual(calls[0], init, "the SDK's init is used, not copied")
  })

  it("given the caller's controller, the SDK's own signal (its timeout) aborts it", async () => {
    const { calls, fetch } = recordingFetch()
    const caller = new AbortController()
    const own = new AbortController()
    const init: Init = { signal: own.signal, method: "POST" }
    Object.assign(
      init,
      abortOptionsFor(markJoining(new OpenAI({ apiKey: "k" })))(caller.signal, caller).fetchOptions
    )
    await joiningFetch(fetch)("http://x", init)
    const reason = new Error("timed out")
    own.abort(reason)
    assert.isTrue(calls[0]?.signal?.aborted)
    assert.strictEqual(calls[0]?.signal?.reason, reason)
  })

  it("given the caller's controller and an SDK signal already aborted, sends an aborted request", async () => {
    const { calls, fetch } = recordingFetch()
    const caller = new AbortController()
    const own = new AbortController()
    own.abort()
    const init: Init = { signal: own.signal, method: "POST" }
    Object.assign(
      init,
      abortOptionsFor(markJoining(new OpenAI({ apiKey: "k" })))(caller.signal, caller).fetchOptions
    )
    await joiningFetch(fetch)("http://x", init)
    assert.isTrue(calls[0]?.signal?.aborted)
  })

  it("passes a request without a caller's signal on untouched", async () => {
    const { calls, fetch } = recordingFetch()
    const init: Init = { method: "POST", signal: new AbortController().signal }
    await joiningFetch(fetch)("http://x", init)
    assert.strictEqual(calls[0], init)
  })

  it("gives an SDK it did not build the signal as the SDK's own option", () => {
    const signal = new AbortController().signal
    assert.deepStrictEqual(abortOptionsFor(new OpenAI({ apiKey: "k" }))(signal), { signal })
  })
})

describe("the SDK built by OpenAiClient", () => {
  const noEnvironment = ConfigProvider.fromEnv({ env: {} })
  const options = { apiKey: Redacted.make("sk-test-0123456789abcdefghij"), maxAttempts: 1 } as const
  const request: ChatModel.ChatRequest = { messages: [Message.user("Hi")] }

  it.live("composes no AbortSignal per request, streamed, not, or embeddings", () =>
    Effect.gen(function* () {
      server.setFallback({ type: "text", text: "ok" })
      const model = yield* OpenAiChatModel.make({ ...options, model: "gpt-test", baseURL: server.url })
      const embedder = yield* OpenAiEmbedder.make({
        ...options,
        model: "text-embedding-3-small",
        baseURL: server.url
      })
      const any = vi.spyOn(AbortSignal, "any")
      assert.equal((yield* model.complete(request)).text, "ok")
      assert.equal((yield* ChatModel.collect(model.stream(request))).text, "ok")
      server.setFallback({ type: "embeddings" })
      yield* embedder.embed(["one"])
      assert.equal(server.requests.length, 3)
      assert.equal(any.mock.calls.length, 0, "AbortSignal.any was called")
    }).pipe(Effect.provideService(ConfigProvider.ConfigProvider, noEnvironment))
  )

  it.live(
    "interrupting a completion in flight closes its connection (the request's signal is ProviderRequest's)",
    () =>
      Effect.gen(function* () {
        server.enqueue({ type: "text", text: "late", delayMs: 5_000 })
        const model = yield* OpenAiChatModel.make({ ...options, model: "gpt-test", baseURL: server.url })
        const fiber = yield* Effect.forkChild(model.complete(request))
        for (let i = 0; i < 500 && server.requests.length === 0; i++) yield* Effect.promise(() => sleep(10))
        yield* Fiber.interrupt(fiber)
        yield* Effect.promise(() => server.waitForClose(0))
      }).pipe(Effect.provideService(ConfigProvider.ConfigProvider, noEnvironment))
  )

  it.live("still aborts a stream its consumer leaves early", () =>
    Effect.gen(function* () {
      server.enqueue({ type: "text", text: "one two three four five six seven eight", chunkDelayMs: 40 })
      const model = yield* OpenAiChatModel.make({ ...options, model: "gpt-test", baseURL: server.url })
      const first = yield* Stream.runCollect(Stream.take(model.stream(request), 1))
      assert.equal(first.length, 1)
      yield* Effect.promise(() => server.waitForClose(0))
    }).pipe(Effect.provideService(ConfigProvider.ConfigProvider, noEnvironment))
  )
})
