/**
 * AiSdkEmbedder: any AI SDK embedding model (`EmbeddingModelV3` or `v4`) as
 * core's `Embedder`, e.g. for resources' vector index.
 *
 * Texts are sent in batches no larger than the model accepts
 * (`maxEmbeddingsPerCall`), in parallel when the model allows it, and the
 * vectors come back in input order. Failures are typed like the chat
 * bridge's (`EmbedderError` with the same reasons) and retried by core's
 * policy, batch by batch. Interrupting aborts the requests in flight.
 */
import type { EmbeddingModelV3, EmbeddingModelV4 } from "@ai-sdk/provider"
import { Embedder, Retry } from "@noema/core"
import { Clock, Effect, Layer } from "effect"
import { requestIdOf, toReason } from "./internal/errors.js"

export type EmbeddingModel = EmbeddingModelV3 | EmbeddingModelV4

export interface Options {
  /** The name in errors and `Embedder.provider`. Default: the model's. */
  readonly provider?: string
  /** Vector size, when known up front. */
  readonly dimensions?: number
  /** Texts per call, at most the model's `maxEmbeddingsPerCall`. Default: the model's, else 512. */
  readonly batchSize?: number
  /** Calls in flight when the model supports parallel calls. Default 2. */
  readonly concurrency?: number
  /** Retries of retryable failures, per batch. Default: 3 attempts. */
  readonly retry?: Retry.Options
}

const defaultBatchSize = 512

/** One batch: the model's vectors and token count, or a typed failure. */
const embedBatch = (
  model: EmbeddingModel,
  provider: string,
  values: ReadonlyArray<string>
): Effect.Effect<Embedder.EmbedResult, Embedder.EmbedderError> =>
  Effect.callback<Embedder.EmbedResult, Embedder.EmbedderError>((resume) => {
    const controller = new AbortController()
    const failed = (cause: unknown) => {
      const requestId = requestIdOf(cause, undefined)
      resume(
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          Effect.fail(
            new Embedder.EmbedderError({
              provider,
              model: model.modelId,
              reason: toReason(cause, now, "request"),
              ...(requestId !== undefined && { requestId })
            })
          )
        )
      )
    }
    try {
      Promise.resolve(model.doEmbed({ values: [...values], abortSignal: controller.signal })).then(
        (result) =>
          resume(
            Effect.succeed({
              vectors: result.embeddings,
              ...(result.usage !== undefined && { usage: { inputTokens: result.usage.tokens } })
            })
          ),
        failed
      )
    } catch (cause) {
      failed(cause)
    }
    return Effect.sync(() => controller.abort())
  })

const batches = <A>(items: ReadonlyArray<A>, size: number): Array<ReadonlyArray<A>> => {
  const out: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size))
  return out
}

/** The bridge: an Embedder over `model` (reads its batch limit and parallelism once). */
export const make = (model: EmbeddingModel, options: Options = {}): Effect.Effect<Embedder.Service> =>
  Effect.promise(async () => {
    const limit = await model.maxEmbeddingsPerCall
    const parallel = await model.supportsParallelCalls
    return { limit, parallel }
  }).pipe(
    Effect.map(({ limit, parallel }) => {
      const provider = options.provider ?? model.provider
      const size = Math.max(
        1,
        Math.min(options.batchSize ?? limit ?? defaultBatchSize, limit ?? Number.MAX_SAFE_INTEGER)
      )
      const concurrency = parallel ? (options.concurrency ?? 2) : 1
      const retry = options.retry ?? { maxAttempts: 3 }
      return Embedder.make({
        provider,
        model: model.modelId,
        ...(options.dimensions !== undefined && { dimensions: options.dimensions }),
        embed: (texts) =>
          Effect.forEach(
            batches(texts, size),
            (batch) => Retry.effect(embedBatch(model, provider, batch), retry),
            {
              concurrency
            }
          ).pipe(
            Effect.map((results) => {
              const tokens = results.every((result) => result.usage !== undefined)
                ? results.reduce((sum, result) => sum + (result.usage?.inputTokens ?? 0), 0)
                : undefined
              return {
                vectors: results.flatMap((result) => result.vectors),
                ...(tokens !== undefined && { usage: { inputTokens: tokens } })
              }
            })
          )
      })
    })
  )

/** The `Embedder` service over `model`. */
export const layer = (model: EmbeddingModel, options: Options = {}): Layer.Layer<Embedder.Embedder> =>
  Layer.effect(Embedder.Embedder, make(model, options))
