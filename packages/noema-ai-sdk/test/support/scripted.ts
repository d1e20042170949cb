/**
 * Language models from the AI SDK's own mock (`ai/test`), scripted to answer a
 * scenario the way a provider package would: stream parts for `doStream`,
 * content for `doGenerate`, `APICallError`s for failures.
 */
import {
  APICallError,
  type LanguageModelV3Content,
  type LanguageModelV3FinishReason,
  type LanguageModelV3StreamPart,
  type LanguageModelV3Usage
} from "@ai-sdk/provider"
import { MockLanguageModelV3 } from "ai/test"

export const usage = (
  input: number,
  output: number,
  extra: Partial<LanguageModelV3Usage["inputTokens"]> = {}
): LanguageModelV3Usage => ({
  inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined, ...extra },
  outputTokens: { total: output, text: output, reasoning: undefined }
})

/** Words of `text`, each a delta (several deltas for any text of more than one word). */
export const pieces = (text: string): Array<string> => text.match(/\S+\s*|\s+/g) ?? []

/** The parts as a stream, one per read; then the end, or `failWith` (as a dropped connection errors a body). */
export const readable = <A>(parts: ReadonlyArray<A>, failWith?: unknown): ReadableStream<A> => {
  let next = 0
  return new ReadableStream<A>({
    pull(controller) {
      if (next < parts.length) controller.enqueue(parts[next++] as A)
      else if (failWith === undefined) controller.close()
      else controller.error(failWith)
    }
  })
}

export interface Answer {
  readonly parts: ReadonlyArray<LanguageModelV3StreamPart>
  readonly content: ReadonlyArray<LanguageModelV3Content>
  readonly finishReason: LanguageModelV3FinishReason
  readonly usage: LanguageModelV3Usage
  readonly headers?: Record<string, string>
}

export const textAnswer = (text: string, tokens = usage(3, 5)): Answer => ({
  parts: [
    { type: "stream-start", warnings: [] },
    { type: "response-metadata", id: "resp_1", modelId: "mock-model-1" },
    { type: "text-start", id: "t" },
    ...pieces(text).map((delta) => ({ type: "text-delta" as const, id: "t", delta })),
    { type: "text-end", id: "t" },
    { type: "finish", finishReason: { unified: "stop", raw: "STOP" }, usage: tokens }
  ],
  content: [{ type: "text", text }],
  finishReason: { unified: "stop", raw: "STOP" },
  usage: tokens
})

export const toolCallsAnswer = (
  calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>
): Answer => ({
  parts: [
    ...calls.flatMap(
      (call): Array<LanguageModelV3StreamPart> => [
        { type: "tool-input-start", id: call.id, toolName: call.name },
        ...(call.arguments.match(/.{1,6}/gs) ?? []).map((delta) => ({
          type: "tool-input-delta" as const,
          id: call.id,
          delta
        })),
        { type: "tool-input-end", id: call.id },
        { type: "tool-call", toolCallId: call.id, toolName: call.name, input: call.arguments }
      ]
    ),
    { type: "finish", finishReason: { unified: "tool-calls", raw: "tool_use" }, usage: usage(4, 9) }
  ],
  content: calls.map((call) => ({
    type: "tool-call",
    toolCallId: call.id,
    toolName: call.name,
    input: call.arguments
  })),
  finishReason: { unified: "tool-calls", raw: "tool_use" },
  usage: usage(4, 9)
})

export const apiCallError = (
  statusCode: number,
  headers: Record<string, string> = {},
  message = `status ${statusCode}`
) =>
  new APICallError({
    message,
    url: "https://provider.test/v1/chat",
    requestBodyValues: {},
    statusCode,
    responseHeaders: headers,
    responseBody: JSON.stringify({ error: { message } }),
    isRetryable: statusCode === 429 || statusCode >= 500
  })

/** A mock model answering every call with `answer`, or failing with `failure` (thrown by the call). */
export const mockModel = (answer: Answer | { readonly failure: unknown }) =>
  new MockLanguageModelV3({
    provider: "mock.provider",
    modelId: "mock-model",
    doStream: async () => {
      if ("failure" in answer) throw answer.failure
      return { stream: readable(answer.parts), response: { headers: answer.headers ?? {} } }
    },
    doGenerate: async () => {
      if ("failure" in answer) throw answer.failure
      return {
        content: [...answer.content],
        finishReason: answer.finishReason,
        usage: answer.usage,
        response: { id: "resp_1", modelId: "mock-model-1", headers: answer.headers ?? {} },
        warnings: []
      }
    }
  })
