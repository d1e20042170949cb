/**
 * OpenAiEmbedder: core's `Embedder` over OpenAI's `/embeddings` endpoint (and
 * the same endpoint on compatible servers).
 *
 * Many texts are sent in batches (OpenAI accepts at most 2048 inputs a
 * request); vectors come back in input order whatever order the server lists
 * them in. Failures carry the same reasons, and retries the same policy, as
 * the chat model's.
 */
import { Embedder, ProviderFailure, Retry } from "@noema/core"
import { Clock, type Config, Effect, Exit, Layer, Schema } from "effect"
import { abortOptionsFor } from "./internal/abort.js"
import { requestIdOf, toReason } from "./internal/errors.js"
import * as OpenAiClient from "./OpenAiClient.js"

export interface Options extends OpenAiClient.Options {
  /** E.g. `"text-embedding-3-small"`, or a local embedding model's name. */
  readonly model: string
  /** Ask for shorter vectors (models that support it, e.g. `text-embedding-3-*`). */
  readonly dimensions?: number
  /** Texts per request. Default 512; OpenAI's limit is 2048. */
  readonly batchSize?: number
  /** Batches in flight at once. Default 2. */
  readonly concurrency?: number
}

const Maybe = <S extends Schema.Top>(schema: S) => Schema.optional(Schema.NullOr(schema))

const isVector = (input: unknown): input is ReadonlyArray<number> =>
  Array.isArray(input) && input.every((value) => typeof value === "number")

/** Checked as one value: element-by-element schema decoding cost 3x more on a full batch. */
const VectorWire = Schema.declare(isVector, { expected: "an array of numbers" })

const EmbeddingsWire = Schema.Struct({
  data: Schema.Array(Schema.Struct({ index: Maybe(Schema.Number), embedding: VectorWire })),
  usage: Maybe(Schema.Struct({ prompt_tokens: Maybe(Schema.Number) }))
})

const decodeEmbeddings = Schema.decodeUnknownExit(EmbeddingsWire)

interface Batch {
  readonly vectors: ReadonlyArray<Embedder.Vector>
  readonly inputTokens: number | undefined
}

/** The batch's vectors in input order, or why the response cannot be trusted. */
const toBatch = (body: unknown, expected: number): Batch | ProviderFailure.MalformedResponse => {
  const exit = decodeEmbeddings(body)
  if (Exit.isFailure(exit)) {
    return new ProviderFailure.MalformedResponse(
      `not an embeddings list: ${String(exit.cause).split("\n", 1)[0]}`
    )
  }
  const { data, usage } = exit.value
  if (data.length !== expected) {
    return new ProviderFailure.MalformedResponse(`expected ${expected} embeddings, got ${data.length}`)
  }
  const vectors: Array<Embedder.Vector | undefined> = new Array(expected)
  for (let position = 0; position < data.length; position++) {
    const item = data[position] as (typeof data)[number]
    const index = item.index ?? position
    if (!Number.isInteger(index) || index < 0 || index >= expected || vectors[index] !== undefined) {
      return new ProviderFailure.MalformedResponse(`embedding index ${index} is out of range or repeated`)
    }
    vectors[index] = item.embedding
  }
  return {
    vectors: vectors as Array<Embedder.Vector>,
    inputTokens: typeof usage?.prompt_tokens === "number" ? usage.prompt_tokens : undefined
  }
}

/** An embedder over an existing client (shares its SDK, credentials and retry policy). */
export const fromClient = (
  client: OpenAiClient.Client,
  options: Omit<Options, keyof OpenAiClient.Options>
): Embedder.Service => {
  const { sdk, provider, scrub } = client
  const { model, dimensions } = options
  const abortWith = abortOptionsFor(sdk)
  const batchSize = Math.max(1, Math.min(2048, Math.floor(options.batchSize ?? 512)))
  const concurrency = Math.max(1, Math.floor(options.concurrency ?? 2))

  const failure = (cause: unknown, now: number): Embedder.EmbedderError => {
    const requestId = requestIdOf(cause, undefined)
    return new Embedder.EmbedderError({
      provider,
      model,
      reason: toReason(cause, { scrub, now, phase: "request" }),
      ...(requestId !== undefined && { requestId })
    })
  }

  const requestBatch = (texts: ReadonlyArray<string>): Effect.Effect<Batch, Embedder.EmbedderError> =>
    Effect.tryPromise({
      try: (signal) =>
        sdk.embeddings.create(
          { model, input: [...texts], ...(dimensions !== undefined && { dimensions }) },
          abortWith(signal)
        ),
      catch: (cause) => cause
    }).pipe(
      Effect.flatMap((body) => {
        const batch = toBatch(body, texts.length)
        return batch instanceof ProviderFailure.MalformedResponse ? Effect.fail(batch) : Effect.succeed(batch)
      }),
      Effect.catch((cause) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(failure(cause, now)))
      )
    )

  // Core's retry policy reads only the ModelError reason, so it applies to embedder failures as is.
  const withRetry = (texts: ReadonlyArray<string>) => Retry.effect(requestBatch(texts), client.retry)

  return Embedder.make({
    provider,
    model,
    ...(dimensions !== undefined && { dimensions }),
    embed: (texts) => {
      const batches: Array<ReadonlyArray<string>> = []
      for (let start = 0; start < texts.length; start += batchSize) {
        batches.push(texts.slice(start, start + batchSize))
      }
      return Effect.forEach(batches, withRetry, { concurrency }).pipe(
        Effect.map((results) => {
          let inputTokens: number | undefined = 0
          for (const result of results) {
            inputTokens =
              inputTokens === undefined || result.inputTokens === undefined
                ? undefined
                : inputTokens + result.inputTokens
          }
          return {
            vectors: results.flatMap((result) => result.vectors),
            ...(inputTokens !== undefined && { usage: { inputTokens } })
          }
        })
      )
    }
  })
}

/** An embedder from options, reading what they leave out from the environment (see `OpenAiClient.make`). */
export const make = (options: Options): Effect.Effect<Embedder.Service, Config.ConfigError> =>
  Effect.map(OpenAiClient.make(options), (client) => fromClient(client, options))

/** The `Embedder` service; fails to build with a `ConfigError` when no API key is configured. */
export const layer = (options: Options): Layer.Layer<Embedder.Embedder, Config.ConfigError> =>
  Layer.effect(Embedder.Embedder, make(options))
