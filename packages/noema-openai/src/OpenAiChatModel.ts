/**
 * OpenAiChatModel: core's `ChatModel` over OpenAI's Chat Completions API, and
 * so over any server that speaks it (Ollama, vLLM, llama.cpp server, LM Studio),
 * or (`api: "responses"`) over OpenAI's Responses API.
 *
 * `complete` sends one non-streamed request; `stream` asks for SSE with usage
 * included and turns each chunk into core stream chunks (tool-call fragments
 * are reassembled by core's `ChatModel.make`). Every failure is a typed
 * `ChatModelError`; retries are core's, configured on the client. Interrupting
 * either aborts the HTTP request, so the server sees the connection close.
 */
import { ChatModel, ProviderFailure, ProviderRequest, ProviderStream } from "@noema/core"
import type { Config } from "effect"
import type OpenAI from "openai"
import { abortOptionsFor } from "./internal/abort.js"
import { ChunkTranslator, fromCompletion, toParams } from "./internal/chat.js"
import { requestIdOf, toReason } from "./internal/errors.js"
import { fromResponse, ResponsesTranslator, toResponsesParams } from "./internal/responses.js"
import * as OpenAiClient from "./OpenAiClient.js"

export interface Options extends OpenAiClient.Options {
  /** The model to ask, e.g. `"gpt-4.1-mini"`, or a local model's name (`"llama3.2"`). */
  readonly model: string
  /**
   * What the server behind the client can do; e.g. `{ jsonSchema: false }` for an
   * OpenAI-compatible server that ignores `response_format: json_schema`, so
   * structured output's `"auto"` mode uses a forced tool call instead.
   */
  readonly capabilities?: ChatModel.Capabilities
  /**
   * Which API to speak: `"chat"` (Chat Completions, the default, what compatible
   * servers speak) or `"responses"` (OpenAI's Responses API, `POST /v1/responses`).
   */
  readonly api?: "chat" | "responses"
}

type StreamingParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming

/** A chat model over an existing client (shares its SDK, credentials and retry policy). */
export const fromClient = (
  client: OpenAiClient.Client,
  options: {
    readonly model: string
    readonly capabilities?: ChatModel.Capabilities
    readonly api?: "chat" | "responses"
  }
): ChatModel.Service => {
  const { sdk, provider, scrub } = client
  const { model, capabilities } = options
  const abortWith = abortOptionsFor(sdk)

  /**
   * Anything the SDK throws as a typed failure, with the request id when there is one
   * (a streamed response's, for failures met while reading it).
   */
  const fail = ProviderFailure.make({
    provider,
    model,
    toReason: (cause, now, phase) => toReason(cause, { scrub, now, phase }),
    requestIdOf
  })

  const responses = options.api === "responses"

  const complete: ChatModel.Service["complete"] = (request) =>
    ProviderRequest.make<unknown>(fail, () =>
      responses
        ? {
            start: (signal, controller) =>
              sdk.responses.create(toResponsesParams(model, request), abortWith(signal, controller)),
            decode: fromResponse,
            requestIdOf: ProviderFailure.bodyRequestId
          }
        : {
            start: (signal, controller) =>
              sdk.chat.completions.create(toParams(model, provider, request), abortWith(signal, controller)),
            decode: fromCompletion,
            requestIdOf: ProviderFailure.bodyRequestId
          }
    )

  const stream: ChatModel.Service["stream"] = (request) =>
    ProviderStream.make(() => {
      // The response's request id, once its headers are in: failures while reading the body carry it.
      let requestId: string | undefined
      return {
        start: (signal) => {
          if (responses) {
            return sdk.responses
              .create({ ...toResponsesParams(model, request), stream: true }, abortWith(signal))
              .withResponse()
              .then((answer) => {
                requestId = answer.request_id ?? undefined
                return answer.data
              })
          }
          const params = toParams(model, provider, request)
          const streamed: StreamingParams = {
            ...params,
            stream: true,
            // `stream_options: null` in provider options drops it for servers that reject it.
            stream_options: "stream_options" in params ? params.stream_options : { include_usage: true }
          }
          return sdk.chat.completions
            .create(streamed, abortWith(signal))
            .withResponse()
            .then((answer) => {
              requestId = answer.request_id ?? undefined
              // Read as a stream, a page has no events and would look like a connection cut short.
              const type = answer.response.headers.get("content-type") ?? ""
              if (/^text\/html\b/i.test(type)) {
                throw new ProviderFailure.MalformedResponse(
                  `the server answered with an HTML page (${type.split(";")[0]}), not an event stream`
                )
              }
              return answer.data
            })
        },
        translator: responses ? new ResponsesTranslator() : new ChunkTranslator(),
        fail: (cause, phase) => fail(cause, phase, requestId)
      }
    })

  return ChatModel.make({ provider, model, complete, stream, retry: client.retry, capabilities })
}

/**
 * `make(options)`: a chat model from options, reading what they leave out from the
 * environment (see `OpenAiClient.make`). `layer(options)`: the `ChatModel` service.
 * Both fail with a `ConfigError` when no API key is configured.
 */
export const { make, layer } = ChatModel.overClient<Options, OpenAiClient.Client, Config.ConfigError>(
  OpenAiClient.make,
  fromClient
)
