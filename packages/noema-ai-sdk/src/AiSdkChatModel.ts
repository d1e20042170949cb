/**
 * AiSdkChatModel: any AI SDK language model (`@ai-sdk/provider`'s
 * `LanguageModelV3`, or the `v4` that the provider packages of `ai` 7 build)
 * as core's `ChatModel`: Gemini, Bedrock, Vertex, Mistral, Groq and the rest,
 * through the provider packages users already have.
 *
 * `stream` calls `doStream` and maps its parts to core chunks; `complete`
 * calls `doGenerate` and maps its content the same way. The model's own
 * failures (`APICallError` with its status and `isRetryable`, stream errors)
 * become typed `ChatModelError`s; retries are core's (the AI SDK retries in
 * `generateText`, not in the models, so nothing is retried twice).
 * Interrupting either aborts the request through the call's `abortSignal`.
 */
import type { LanguageModelV3, LanguageModelV4 } from "@ai-sdk/provider"
import { ChatModel, ProviderFailure, ProviderRequest, ProviderStream, type Retry } from "@noema/core"
import { Layer } from "effect"
import { requestIdFrom, requestIdOf, toReason } from "./internal/errors.js"
import { generateChunks, PartTranslator, partsOf, StreamErrorPart } from "./internal/parts.js"
import { toCallOptions, toV3CallOptions } from "./internal/prompt.js"

/** A language model of the spec this bridge speaks. */
export type LanguageModel = LanguageModelV3 | LanguageModelV4

export interface Options {
  /** The name in errors and `ChatModel.provider`. Default: the model's (e.g. `"google.generative-ai"`). */
  readonly provider?: string
  /** Retries of retryable failures (core's policy). Default: 3 attempts; `{ maxAttempts: 1 }` for none. */
  readonly retry?: Retry.Options
  readonly capabilities?: ChatModel.Capabilities
}

const generate = (model: LanguageModel, request: ChatModel.ChatRequest, signal: AbortSignal) =>
  model.specificationVersion === "v3"
    ? model.doGenerate(toV3CallOptions(toCallOptions(request, signal)))
    : model.doGenerate(toCallOptions(request, signal))

/** A stream's error part carries the provider's error. */
const unwrap = (cause: unknown): unknown => (cause instanceof StreamErrorPart ? cause.error : cause)

const streamOf = (model: LanguageModel, request: ChatModel.ChatRequest, signal: AbortSignal) =>
  model.specificationVersion === "v3"
    ? model.doStream(toV3CallOptions(toCallOptions(request, signal)))
    : model.doStream(toCallOptions(request, signal))

/** The bridge: a ChatModel over `model`. */
export const make = (model: LanguageModel, options: Options = {}): ChatModel.Service => {
  const provider = options.provider ?? model.provider
  const modelId = model.modelId

  const fail = ProviderFailure.make({
    provider,
    model: modelId,
    toReason: (cause, now, phase) => toReason(unwrap(cause), now, phase),
    requestIdOf: (cause, fallback) => requestIdOf(unwrap(cause), fallback)
  })

  /** `doGenerate`'s content as chunks, folded as core folds a stream (`ChatModel.make` makes the call ids unique). */
  const complete: ChatModel.Service["complete"] = (request) =>
    ProviderRequest.make(fail, () => ({
      start: (signal) => Promise.resolve(generate(model, request, signal)),
      // A result of the wrong shape (a provider outside the spec) throws here, so the call fails, not hangs.
      decode: (result) => {
        const accumulator = new ChatModel.ResponseAccumulator()
        for (const chunk of generateChunks(result)) accumulator.add(chunk)
        return accumulator.build()
      }
    }))

  const stream: ChatModel.Service["stream"] = (request) =>
    ProviderStream.make(() => {
      let requestId: string | undefined
      return {
        start: (signal) =>
          Promise.resolve(streamOf(model, request, signal)).then((result) => {
            requestId = requestIdFrom(result.response?.headers)
            return partsOf(result.stream)
          }),
        translator: new PartTranslator(),
        fail: (cause, phase) => fail(cause, phase, requestId)
      }
    })

  return ChatModel.make({
    provider,
    model: modelId,
    complete,
    stream,
    retry: options.retry ?? { maxAttempts: 3 },
    capabilities: options.capabilities
  })
}

/** The `ChatModel` service over `model`. */
export const layer = (model: LanguageModel, options: Options = {}): Layer.Layer<ChatModel.ChatModel> =>
  Layer.succeed(ChatModel.ChatModel, make(model, options))
