/**
 * AnthropicChatModel: core's `ChatModel` over Anthropic's Messages API (Claude),
 * through the official `@anthropic-ai/sdk`.
 *
 * `complete` sends one request; `stream` reads the SSE events and turns each
 * into core chunks (tool-call argument deltas are reassembled by core's
 * `ChatModel.make`). Extended thinking, when asked for, comes back as
 * reasoning parts that keep Anthropic's signatures, so a tool loop with
 * thinking sends them back unchanged. Every failure is a typed
 * `ChatModelError` with Anthropic's request id; retries (429 with
 * `retry-after`, 529 overloaded, 5xx, dropped connections) are core's,
 * configured on the client. Interrupting either aborts the HTTP request.
 */
import { ChatModel, ProviderFailure, ProviderRequest, ProviderStream } from "@noema/core"
import type { Config } from "effect"
import * as AnthropicClient from "./AnthropicClient.js"
import { requestIdOf, toReason } from "./internal/errors.js"
import { type Settings, toParams } from "./internal/request.js"
import { EventTranslator, fromMessage } from "./internal/response.js"

export interface ModelOptions {
  /** The model to ask, e.g. `"claude-sonnet-5-5"`. */
  readonly model: string
  /** `max_tokens` for requests that set no `maxTokens` (Anthropic requires a limit). Default 4096. */
  readonly maxTokens?: number
  /**
   * Extended thinking: with a budget of tokens (below `maxTokens`), or
   * `"adaptive"` (the model decides how much to think; what newer models
   * prefer). Its reasoning comes back as reasoning parts signed by Anthropic.
   */
  readonly thinking?: { readonly budgetTokens: number } | "adaptive"
  /**
   * Marks the system prompt and the tool definitions as cache breakpoints
   * (`cache_control`), so a conversation's fixed prefix is read from Anthropic's
   * prompt cache. Off by default; `providerOptions.anthropic.promptCaching`
   * overrides it for one request.
   */
  readonly promptCaching?: boolean
  readonly capabilities?: ChatModel.Capabilities
}

export interface Options extends AnthropicClient.Options, ModelOptions {}

export const defaultMaxTokens = 4096

/** A chat model over an existing client (shares its SDK, credentials and retry policy). */
export const fromClient = (client: AnthropicClient.Client, options: ModelOptions): ChatModel.Service => {
  const { sdk, provider, scrub } = client
  const { model, capabilities } = options
  const settings: Settings = {
    model,
    provider,
    maxTokens: options.maxTokens ?? defaultMaxTokens,
    thinking: options.thinking,
    promptCaching: options.promptCaching ?? false
  }

  /** Anything thrown as a typed failure, with the request id (a streamed response's, for failures met reading it). */
  const fail = ProviderFailure.make({
    provider,
    model,
    toReason: (cause, now, phase) => toReason(cause, { scrub, now, phase }),
    requestIdOf
  })

  const complete: ChatModel.Service["complete"] = (request) =>
    ProviderRequest.make(fail, () => {
      const { params, outputTool } = toParams(settings, request)
      return {
        start: (signal) => sdk.messages.create(params, { signal }),
        decode: (body) => fromMessage(body, outputTool),
        requestIdOf: ProviderFailure.bodyRequestId
      }
    })

  const stream: ChatModel.Service["stream"] = (request) =>
    ProviderStream.make(() => {
      // The response's request id, once its headers are in: failures while reading the body carry it.
      let requestId: string | undefined
      const { params, outputTool } = toParams(settings, request)
      return {
        start: (signal) =>
          sdk.messages
            .create({ ...params, stream: true }, { signal })
            .withResponse()
            .then((answer) => {
              requestId = answer.request_id ?? undefined
              return answer.data
            }),
        translator: new EventTranslator(outputTool),
        fail: (cause, phase) => fail(cause, phase, requestId)
      }
    })

  return ChatModel.make({ provider, model, complete, stream, retry: client.retry, capabilities })
}

/**
 * `make(options)`: a chat model from options, reading what they leave out from the
 * environment (see `AnthropicClient.make`). `layer(options)`: the `ChatModel` service.
 * Both fail with a `ConfigError` when no API key is configured.
 */
export const { make, layer } = ChatModel.overClient<Options, AnthropicClient.Client, Config.ConfigError>(
  AnthropicClient.make,
  fromClient
)
