/**
 * OpenAiChatModel: core's `ChatModel` over OpenAI's Chat Completions API, and
 * so over any server that speaks it (Ollama, vLLM, llama.cpp server, LM Studio).
 *
 * `complete` sends one non-streamed request; `stream` asks for SSE with usage
 * included and turns each chunk into core stream chunks (tool-call fragments
 * are reassembled by core's `ChatModel.make`). Every failure is a typed
 * `ChatModelError`; retries are core's, configured on the client. Interrupting
 * either aborts the HTTP request, so the server sees the connection close.
 */
import { ChatModel } from "@noema/core"
import { Array as Arr, Clock, type Config, Effect, Layer, Stream } from "effect"
import { ChunkTranslator, fromCompletion, toParams } from "./internal/chat.js"
import { IncompleteStream, MalformedResponse, type Phase, toReason } from "./internal/errors.js"
import * as OpenAiClient from "./OpenAiClient.js"

export interface Options extends OpenAiClient.Options {
  /** The model to ask, e.g. `"gpt-4.1-mini"`, or a local model's name (`"llama3.2"`). */
  readonly model: string
}

const identity = (cause: unknown): unknown => cause

/** The SDK's SSE chunks as core chunks; a stream that stops before its finish reason was cut off. */
async function* translate(
  source: AsyncIterable<unknown>,
  translator: ChunkTranslator
): AsyncGenerator<Arr.NonEmptyReadonlyArray<ChatModel.StreamChunk>> {
  for await (const raw of source) {
    const chunks = translator.translate(raw)
    if (Arr.isArrayNonEmpty(chunks)) yield chunks
  }
  if (!translator.isFinished) throw new IncompleteStream("the stream ended before a finish reason")
}

/** A chat model over an existing client (shares its SDK, credentials and retry policy). */
export const fromClient = (
  client: OpenAiClient.Client,
  options: { readonly model: string }
): ChatModel.Service => {
  const { sdk, provider, scrub } = client
  const { model } = options

  const failure = (cause: unknown, phase: Phase, now: number): ChatModel.ChatModelError =>
    ChatModel.error(provider, toReason(cause, { scrub, now, phase }), model)

  const failWith =
    (phase: Phase) =>
    (cause: unknown): Effect.Effect<never, ChatModel.ChatModelError> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(failure(cause, phase, now)))

  const complete: ChatModel.Service["complete"] = (request) =>
    Effect.suspend(() => {
      const params = toParams(model, provider, request)
      return Effect.tryPromise({
        try: (signal) => sdk.chat.completions.create(params, { signal }),
        catch: identity
      })
    }).pipe(
      Effect.catch(failWith("request")),
      Effect.flatMap((body) => {
        const response = fromCompletion(body)
        return response instanceof MalformedResponse
          ? failWith("request")(response)
          : Effect.succeed(response)
      })
    )

  const stream: ChatModel.Service["stream"] = (request) =>
    Stream.unwrap(
      Effect.gen(function* () {
        const params = toParams(model, provider, request)
        // One controller for the whole exchange: closing the stream's scope (completion,
        // failure or interruption) aborts the request even while it waits for headers.
        const controller = new AbortController()
        yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
        const now = yield* Clock.currentTimeMillis
        const source = yield* Effect.tryPromise({
          try: () =>
            sdk.chat.completions.create(
              {
                ...params,
                stream: true,
                // `stream_options: null` in provider options drops it for servers that reject it.
                stream_options: "stream_options" in params ? params.stream_options : { include_usage: true }
              },
              { signal: controller.signal }
            ),
          catch: identity
        }).pipe(Effect.catch(failWith("request")))
        return Stream.fromAsyncIterable(translate(source, new ChunkTranslator()), identity).pipe(
          Stream.flattenArray,
          Stream.mapError((cause) => failure(cause, "stream", now))
        )
      })
    )

  return ChatModel.make({ provider, model, complete, stream, retry: client.retry })
}

/** A chat model from options, reading what they leave out from the environment (see `OpenAiClient.make`). */
export const make = (options: Options): Effect.Effect<ChatModel.Service, Config.ConfigError> =>
  Effect.map(OpenAiClient.make(options), (client) => fromClient(client, options))

/** The `ChatModel` service; fails to build with a `ConfigError` when no API key is configured. */
export const layer = (options: Options): Layer.Layer<ChatModel.ChatModel, Config.ConfigError> =>
  Layer.effect(ChatModel.ChatModel, make(options))
