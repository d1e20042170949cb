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
import { ChatModel, ProviderStream } from "@noema/core"
import { Clock, type Config, Effect, Layer } from "effect"
import type OpenAI from "openai"
import { ChunkTranslator, fromCompletion, toParams } from "./internal/chat.js"
import { MalformedResponse, requestIdOf, toReason } from "./internal/errors.js"
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
  const { model } = options

  /**
   * Anything the SDK throws as a typed failure, with the request id when there is one
   * (`requestId`: a streamed response's, for failures met while reading it); the clock
   * reads a `retry-after` given as a date.
   */
  const fail = (
    cause: unknown,
    phase: ProviderStream.Phase,
    requestId?: string
  ): Effect.Effect<never, ChatModel.ChatModelError> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.fail(
        ChatModel.error(
          provider,
          toReason(cause, { scrub, now, phase }),
          model,
          requestIdOf(cause, requestId)
        )
      )
    )

  // One callback for the whole exchange (not suspend + tryPromise + catch + flatMap): it is
  // the whole of a turn's work on noema's side, and each Effect step costs per turn.
  const responses = options.api === "responses"

  const complete: ChatModel.Service["complete"] = (request) =>
    Effect.callback<ChatModel.ChatResponse, ChatModel.ChatModelError>((resume) => {
      const controller = new AbortController()
      const failed = (cause: unknown) => resume(fail(cause, "request"))
      try {
        const sent: Promise<unknown> = responses
          ? sdk.responses.create(toResponsesParams(model, request), { signal: controller.signal })
          : sdk.chat.completions.create(toParams(model, provider, request), { signal: controller.signal })
        sent.then((body) => {
          const response = responses ? fromResponse(body) : fromCompletion(body)
          resume(
            response instanceof MalformedResponse
              ? fail(response, "request", bodyRequestId(body))
              : Effect.succeed(response)
          )
        }, failed)
      } catch (cause) {
        failed(cause)
      }
      // Runs only when the effect is interrupted while the request is in flight.
      return Effect.sync(() => controller.abort())
    })

  const stream: ChatModel.Service["stream"] = (request) =>
    ProviderStream.make(() => {
      // The response's request id, once its headers are in: failures while reading the body carry it.
      let requestId: string | undefined
      return {
        start: (signal) => {
          if (responses) {
            return sdk.responses
              .create({ ...toResponsesParams(model, request), stream: true }, { signal })
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
            .create(streamed, { signal })
            .withResponse()
            .then((answer) => {
              requestId = answer.request_id ?? undefined
              // Read as a stream, a page has no events and would look like a connection cut short.
              const type = answer.response.headers.get("content-type") ?? ""
              if (/^text\/html\b/i.test(type)) {
                throw new MalformedResponse(
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

  return ChatModel.make({
    provider,
    model,
    complete,
    stream,
    retry: client.retry,
    ...(options.capabilities !== undefined && { capabilities: options.capabilities })
  })
}

/** The request id the SDK attaches to a parsed JSON body (not enumerable, so never part of the data). */
const bodyRequestId = (body: unknown): string | undefined => {
  if (typeof body !== "object" || body === null) return undefined
  const id = (body as { readonly _request_id?: unknown })._request_id
  return typeof id === "string" && id.length > 0 ? id : undefined
}

/** A chat model from options, reading what they leave out from the environment (see `OpenAiClient.make`). */
export const make = (options: Options): Effect.Effect<ChatModel.Service, Config.ConfigError> =>
  Effect.map(OpenAiClient.make(options), (client) => fromClient(client, options))

/** The `ChatModel` service; fails to build with a `ConfigError` when no API key is configured. */
export const layer = (options: Options): Layer.Layer<ChatModel.ChatModel, Config.ConfigError> =>
  Layer.effect(ChatModel.ChatModel, make(options))
