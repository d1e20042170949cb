/**
 * OpenAiTestServer driven by the official `openai` SDK, proving the wire format is
 * one the SDK accepts (and fails on in the ways real servers make it fail).
 */
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { OpenAiTestServer } from "../src/testing.js"

let server: OpenAiTestServer.TestServer
let client: OpenAI

beforeAll(async () => {
  server = await OpenAiTestServer.start()
  client = new OpenAI({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
})
afterAll(() => server.close())
afterEach(() => server.reset())

const messages = [{ role: "user" as const, content: "Hi" }]

const collectContent = async (
  stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>
): Promise<{ content: string; chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> }> => {
  const chunks: Array<OpenAI.Chat.Completions.ChatCompletionChunk> = []
  let content = ""
  for await (const chunk of stream) {
    chunks.push(chunk)
    content += chunk.choices[0]?.delta.content ?? ""
  }
  return { content, chunks }
}

describe("OpenAiTestServer", () => {
  it("listens on a random local port and exposes a /v1 base URL", () => {
    expect(server.url).toBe(`http://127.0.0.1:${server.port}/v1`)
    expect(server.port).toBeGreaterThan(0)
  })

  it("answers a non-streamed chat completion", async () => {
    server.enqueue({ type: "text", text: "Hello there.", usage: { promptTokens: 7, completionTokens: 3 } })
    const completion = await client.chat.completions.create({ model: "gpt-test", messages })
    expect(completion.object).toBe("chat.completion")
    expect(completion.id).toMatch(/^chatcmpl-/)
    expect(completion.model).toBe("gpt-test")
    expect(completion.choices[0]?.index).toBe(0)
    expect(completion.choices[0]?.message).toMatchObject({ role: "assistant", content: "Hello there." })
    expect(completion.choices[0]?.finish_reason).toBe("stop")
    expect(completion.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })
  })

  it("exposes x-request-id and content-type headers", async () => {
    server.enqueue({ type: "text", text: "ok" })
    const { response, request_id } = await client.chat.completions
      .create({ model: "gpt-test", messages })
      .withResponse()
    expect(response.headers.get("content-type")).toBe("application/json")
    expect(request_id).toMatch(/^req_/)
  })

  it("streams text as deltas, with a usage-only chunk when asked", async () => {
    const text = "The quick brown fox jumps over the extraordinarily lazy dog."
    server.enqueue({ type: "text", text, usage: { promptTokens: 5, completionTokens: 12 } })
    const stream = await client.chat.completions.create({
      model: "gpt-test",
      messages,
      stream: true,
      stream_options: { include_usage: true }
    })
    const { content, chunks } = await collectContent(stream)
    expect(content).toBe(text)
    expect(chunks[0]?.choices[0]?.delta).toMatchObject({ role: "assistant", content: "" })
    // Several content deltas, not the whole text at once.
    expect(chunks.filter((c) => (c.choices[0]?.delta.content ?? "") !== "").length).toBeGreaterThan(5)
    const last = chunks.at(-1)
    expect(last?.choices).toEqual([])
    expect(last?.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 12, total_tokens: 17 })
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("stop")
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.model === "gpt-test")).toBe(true)
  })

  it("omits the usage chunk without include_usage and honours explicit chunks and finishReason", async () => {
    server.enqueue({ type: "text", text: "abc", chunks: ["a", "b", "c"], finishReason: "length" })
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    const { content, chunks } = await collectContent(stream)
    expect(content).toBe("abc")
    expect(chunks.map((c) => c.choices[0]?.delta.content)).toEqual(["", "a", "b", "c", undefined])
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("length")
    expect(chunks.every((c) => c.usage === undefined || c.usage === null)).toBe(true)
  })

  it("frames SSE exactly as data: <json>\\n\\n and ends with [DONE]", async () => {
    server.enqueue({ type: "text", text: "Hi", chunks: ["Hi"] })
    const response = await fetch(`${server.url}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages, stream: true })
    })
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const body = await response.text()
    const frames = body.split("\n\n")
    expect(frames.at(-1)).toBe("")
    expect(frames.at(-2)).toBe("data: [DONE]")
    for (const frame of frames.slice(0, -2)) {
      expect(frame.startsWith("data: {")).toBe(true)
      expect(() => JSON.parse(frame.slice(6))).not.toThrow()
    }
  })

  it("streams interleaved parallel tool calls that reassemble by index", async () => {
    const calls = [
      { name: "get_weather", arguments: '{"city":"Paris","unit":"celsius"}' },
      { id: "call_custom", name: "get_time", arguments: '{"timezone":"Europe/Paris"}' }
    ]
    server.enqueue({ type: "tool-calls", calls })
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    const assembled = new Map<number, { id?: string; name?: string; arguments: string }>()
    const order: Array<number> = []
    let finishReason: string | null | undefined
    for await (const chunk of stream) {
      const choice = chunk.choices[0]
      finishReason = choice?.finish_reason ?? finishReason
      for (const delta of choice?.delta.tool_calls ?? []) {
        order.push(delta.index)
        const call = assembled.get(delta.index) ?? { arguments: "" }
        if (delta.id !== undefined) call.id = delta.id
        if (delta.function?.name !== undefined) call.name = delta.function.name
        call.arguments += delta.function?.arguments ?? ""
        assembled.set(delta.index, call)
      }
    }
    expect(finishReason).toBe("tool_calls")
    expect(assembled.get(0)).toEqual({ id: "call_0", name: "get_weather", arguments: calls[0]?.arguments })
    expect(assembled.get(1)).toEqual({ id: "call_custom", name: "get_time", arguments: calls[1]?.arguments })
    // Interleaved: call 1 starts before call 0 has finished.
    expect(order.indexOf(1)).toBeLessThan(order.lastIndexOf(0))
  })

  it("tool calls also reassemble through the SDK's stream helper and as JSON", async () => {
    const calls = [
      { name: "a", arguments: '{"x":1,"y":[1,2,3]}' },
      { name: "b", arguments: '{"query":"interleaving"}' }
    ]
    server.enqueue({ type: "tool-calls", calls, text: "Let me check." }, { type: "tool-calls", calls })
    const final = await client.chat.completions.stream({ model: "gpt-test", messages }).finalChatCompletion()
    expect(final.choices[0]?.message.content).toBe("Let me check.")
    expect(
      final.choices[0]?.message.tool_calls?.map((c) => (c.type === "function" ? c.function : undefined))
    ).toEqual(calls)
    const json = await client.chat.completions.create({ model: "gpt-test", messages })
    expect(json.choices[0]?.finish_reason).toBe("tool_calls")
    expect(json.choices[0]?.message.content).toBeNull()
    expect(json.choices[0]?.message.tool_calls).toEqual([
      { id: "call_2", type: "function", function: calls[0] },
      { id: "call_3", type: "function", function: calls[1] }
    ])
  })

  it("returns refusals as message.refusal and as refusal deltas", async () => {
    const refusal = "I can't help with that request."
    server.enqueue({ type: "refusal", refusal }, { type: "refusal", refusal })
    const json = await client.chat.completions.create({ model: "gpt-test", messages })
    expect(json.choices[0]?.message).toMatchObject({ content: null, refusal })
    expect(json.choices[0]?.finish_reason).toBe("stop")
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    let streamed = ""
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.refusal ?? ""
    expect(streamed).toBe(refusal)
  })

  it("surfaces a 429 with retry-after as the SDK's RateLimitError", async () => {
    server.enqueue({
      type: "error",
      status: 429,
      message: "Slow down",
      headers: { "retry-after": "2", "retry-after-ms": "2000" }
    })
    const error = await client.chat.completions
      .create({ model: "gpt-test", messages })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.RateLimitError)
    const rateLimit = error as InstanceType<typeof OpenAI.RateLimitError>
    expect(rateLimit.status).toBe(429)
    expect(rateLimit.headers.get("retry-after")).toBe("2")
    expect(rateLimit.headers.get("retry-after-ms")).toBe("2000")
    expect(rateLimit.message).toBe("429 Slow down")
    expect(rateLimit.code).toBe("rate_limit_exceeded")
    expect(rateLimit.requestID).toMatch(/^req_/)
  })

  it("surfaces 401 as AuthenticationError, 400 as BadRequestError, 503 as InternalServerError", async () => {
    server.enqueue(
      { type: "error", status: 401 },
      { type: "error", status: 400, message: "bad param", code: "invalid_value" },
      { type: "error", status: 503 }
    )
    const streaming = await client.chat.completions
      .create({ model: "gpt-test", messages, stream: true })
      .catch((e: unknown) => e)
    expect(streaming).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((streaming as InstanceType<typeof OpenAI.APIError>).code).toBe("invalid_api_key")
    const bad = await client.chat.completions.create({ model: "gpt-test", messages }).catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError)
    expect(bad).toMatchObject({ type: "invalid_request_error", code: "invalid_value", param: null })
    const unavailable = await client.chat.completions
      .create({ model: "gpt-test", messages })
      .catch((e: unknown) => e)
    expect(unavailable).toBeInstanceOf(OpenAI.InternalServerError)
    expect((unavailable as InstanceType<typeof OpenAI.APIError>).status).toBe(503)
  })

  it("makes the SDK fail on a malformed JSON body and on malformed SSE", async () => {
    server.enqueue(
      { type: "raw", body: '{"id": "chatcmpl-1", "choices": [' },
      { type: "raw", headers: { "content-type": "text/event-stream" }, body: "data: {not json\n\n" }
    )
    // The SDK logs the unparsable SSE line through its logger before throwing; keep test output clean.
    const quiet = new OpenAI({ apiKey: "test", baseURL: server.url, maxRetries: 0, logLevel: "off" })
    await expect(quiet.chat.completions.create({ model: "gpt-test", messages })).rejects.toThrow()
    const stream = await quiet.chat.completions.create({ model: "gpt-test", messages, stream: true })
    await expect(collectContent(stream)).rejects.toThrow(/malformed/)
  })

  it("fails stream iteration after some deltas when the connection drops", async () => {
    server.enqueue({ type: "drop", afterChunks: 3, text: "one two three four five six" })
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    const seen: Array<string> = []
    const error = await (async () => {
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta.content ?? "")
    })().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Error)
    expect(seen.join("")).toBe("one two three ")
    expect(server.requests[0]?.clientClosedEarly).toBe(false)
  })

  it("drops a non-streamed request before answering", async () => {
    server.enqueue({ type: "drop", afterChunks: 0 })
    await expect(client.chat.completions.create({ model: "gpt-test", messages })).rejects.toBeInstanceOf(
      OpenAI.APIConnectionError
    )
  })

  it("hangs until the client aborts, and records the early close", async () => {
    server.enqueue({ type: "hang" })
    const controller = new AbortController()
    const pending = client.chat.completions
      .create({ model: "gpt-test", messages }, { signal: controller.signal })
      .catch((e: unknown) => e)
    await server.waitForRequests(1)
    expect(server.requests[0]?.clientClosedEarly).toBe(false)
    controller.abort()
    await server.waitForClose(0)
    expect(server.requests[0]?.clientClosedEarly).toBe(true)
    expect(await pending).toBeInstanceOf(OpenAI.APIUserAbortError)
  })

  it("records a stream the client abandons midway as closed early", async () => {
    server.enqueue({ type: "text", text: "a b c d e f g h", chunkDelayMs: 30 })
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) break
    }
    await server.waitForClose(0)
    expect(server.requests[0]?.clientClosedEarly).toBe(true)
  })

  it("rejects waitForClose when the response completed normally", async () => {
    server.enqueue({ type: "text", text: "done" })
    await client.chat.completions.create({ model: "gpt-test", messages })
    await expect(server.waitForClose(0, 200)).rejects.toThrow(/completed/)
    expect(server.requests[0]?.clientClosedEarly).toBe(false)
  })

  it("returns deterministic embeddings as floats and as base64 (the SDK's default)", async () => {
    server.enqueue({ type: "embeddings" }, { type: "embeddings" }, { type: "embeddings", dimensions: 4 })
    const expected = ["alpha", "beta"].map((t) => OpenAiTestServer.deterministicEmbedding(t))
    const floats = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: ["alpha", "beta"],
      encoding_format: "float"
    })
    expect(floats.data.map((d) => d.embedding)).toEqual(expected)
    expect(floats.data.map((d) => d.index)).toEqual([0, 1])
    expect(floats.model).toBe("text-embedding-3-small")
    expect(floats.usage.total_tokens).toBe(floats.usage.prompt_tokens)

    const decoded = await client.embeddings.create({
      model: "text-embedding-3-small",
      input: ["alpha", "beta"]
    })
    expect(server.requests[1]?.body).toMatchObject({ encoding_format: "base64" })
    expect(decoded.data.map((d) => d.embedding)).toEqual(expected)

    const single = await client.embeddings.create({ model: "text-embedding-3-small", input: "alpha" })
    expect(single.data).toHaveLength(1)
    expect(single.data[0]?.embedding).toEqual(OpenAiTestServer.deterministicEmbedding("alpha", 4))
    const norm = Math.hypot(...expected[0]!)
    expect(norm).toBeCloseTo(1, 5)
    expect(expected[0]).not.toEqual(expected[1])
  })

  it("returns scripted embedding vectors, float32-rounded through base64", async () => {
    server.enqueue({ type: "embeddings", vectors: [[0.5, -0.25, 1]], usage: { promptTokens: 3 } })
    const result = await client.embeddings.create({ model: "e", input: "x" })
    expect(result.data[0]?.embedding).toEqual([0.5, -0.25, 1])
    expect(result.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 })
  })

  it("answers a chat reply on the embeddings route with a clear 500", async () => {
    server.enqueue({ type: "text", text: "nope" })
    await expect(client.embeddings.create({ model: "e", input: "x" })).rejects.toThrow(/cannot answer/)
  })

  it("records requests with parsed bodies and lower-cased headers", async () => {
    server.enqueue({ type: "text", text: "one" }, { type: "text", text: "two" })
    await client.chat.completions.create({ model: "gpt-a", messages, temperature: 0 })
    const stream = await client.chat.completions.create({ model: "gpt-b", messages, stream: true })
    await collectContent(stream)
    await server.waitForRequests(2)
    const [first, second] = server.requests
    expect(first).toMatchObject({
      index: 0,
      method: "POST",
      path: "/v1/chat/completions",
      stream: false,
      body: { model: "gpt-a", messages, temperature: 0 }
    })
    expect(first?.headers.authorization).toBe("Bearer test")
    expect(first?.headers["content-type"]).toBe("application/json")
    expect(second).toMatchObject({ index: 1, stream: true, body: { model: "gpt-b", stream: true } })
  })

  it("records non-JSON bodies as raw strings", async () => {
    server.enqueue({ type: "text", text: "ok" })
    await fetch(`${server.url}/chat/completions`, { method: "POST", body: "not json" })
    expect(server.requests[0]?.body).toBe("not json")
  })

  it("uses the fallback when the queue is empty, and a 500 without one", async () => {
    const missing = await client.chat.completions
      .create({ model: "gpt-test", messages })
      .catch((e: unknown) => e)
    expect(missing).toBeInstanceOf(OpenAI.InternalServerError)
    expect((missing as Error).message).toContain("no scripted reply for request #0")

    server.setFallback((request) => ({ type: "text", text: `echo ${request.index}` }))
    server.enqueue({ type: "text", text: "queued" })
    const texts: Array<string | null | undefined> = []
    for (let i = 0; i < 3; i++) {
      const c = await client.chat.completions.create({ model: "gpt-test", messages })
      texts.push(c.choices[0]?.message.content)
    }
    expect(texts).toEqual(["queued", "echo 2", "echo 3"])

    server.reset()
    expect(server.requests).toEqual([])
    const afterReset = await client.chat.completions
      .create({ model: "gpt-test", messages })
      .catch((e: unknown) => e)
    expect((afterReset as Error).message).toContain("no scripted reply for request #0")
  })

  it("reset clears queued replies", async () => {
    server.enqueue({ type: "text", text: "stale" })
    server.reset()
    server.enqueue({ type: "text", text: "fresh" })
    const c = await client.chat.completions.create({ model: "gpt-test", messages })
    expect(c.choices[0]?.message.content).toBe("fresh")
  })

  it("honours delayMs, firstChunkDelayMs and chunkDelayMs", async () => {
    server.enqueue(
      // A generous delay: "fast" must overtake "slow" even on a loaded machine.
      { type: "text", text: "slow", delayMs: 1_000 },
      { type: "text", text: "fast" },
      { type: "text", text: "a b c", firstChunkDelayMs: 60, chunkDelayMs: 20 }
    )
    const finished: Array<string> = []
    const slow = client.chat.completions
      .create({ model: "gpt-test", messages })
      .then((c) => finished.push(c.choices[0]?.message.content ?? ""))
    await server.waitForRequests(1)
    const fast = client.chat.completions
      .create({ model: "gpt-test", messages })
      .then((c) => finished.push(c.choices[0]?.message.content ?? ""))
    await Promise.all([slow, fast])
    expect(finished).toEqual(["fast", "slow"])

    const started = Date.now()
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true })
    const { content } = await collectContent(stream)
    expect(content).toBe("a b c")
    expect(Date.now() - started).toBeGreaterThanOrEqual(100)
  })

  it("serves GET /v1/models and a 404 error body for unknown routes", async () => {
    const models = await client.models.list()
    expect(models.data.map((m) => m.id)).toContain("gpt-4o-mini")
    const missing = await client.completions.create({ model: "m", prompt: "x" }).catch((e: unknown) => e)
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError)
    expect((missing as Error).message).toContain("POST /v1/completions")
    expect(server.requests.map((r) => r.path)).toEqual(["/v1/models", "/v1/completions"])
  })

  it("serves sequential requests on kept-alive sockets and still closes promptly", async () => {
    const local = await OpenAiTestServer.start()
    const localClient = new OpenAI({ apiKey: "test", baseURL: local.url, maxRetries: 0 })
    local.setFallback({ type: "text", text: "ok" })
    for (let i = 0; i < 5; i++) await localClient.chat.completions.create({ model: "m", messages })
    local.enqueue({ type: "hang" })
    const hanging = localClient.chat.completions.create({ model: "m", messages }).catch((e: unknown) => e)
    await local.waitForRequests(6)
    const waiting = local.waitForClose(5).catch((e: unknown) => e)
    await local.close()
    expect(await hanging).toBeInstanceOf(OpenAI.APIConnectionError)
    expect(await waiting).toBeInstanceOf(Error)
    expect(local.requests[5]?.clientClosedEarly).toBe(false)
  })

  it("scoped starts the server and closes it with the scope", async () => {
    const url = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function* () {
          const scopedServer = yield* OpenAiTestServer.scoped()
          scopedServer.enqueue({ type: "text", text: "from effect" })
          const c = yield* Effect.promise(() =>
            new OpenAI({ apiKey: "test", baseURL: scopedServer.url, maxRetries: 0 }).chat.completions.create({
              model: "m",
              messages
            })
          )
          expect(c.choices[0]?.message.content).toBe("from effect")
          return scopedServer.url
        })
      )
    )
    await expect(fetch(`${url}/models`)).rejects.toThrow()
  })
})
