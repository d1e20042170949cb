/**
 * Embedder: turns texts into vectors, for similarity search.
 *
 * One call embeds many texts (providers batch), and the vectors come back in
 * input order. Failures carry the same reasons as chat models, so retry logic
 * and error reporting are shared.
 */
import { Context, Effect, Schema } from "effect"
import * as ModelError from "./ModelError.js"

export type Vector = ReadonlyArray<number>

export interface EmbedResult {
  readonly vectors: ReadonlyArray<Vector>
  readonly usage?: { readonly inputTokens: number }
}

export class EmbedderError extends Schema.TaggedError<EmbedderError>()("EmbedderError", ModelError.fields) {
  get isRetryable(): boolean {
    return this.reason.isRetryable
  }
  override get message(): string {
    return ModelError.describe(this)
  }
}

export interface Service {
  readonly provider: string
  readonly model: string
  /** Vector size, when known up front. */
  readonly dimensions?: number
  readonly embed: (texts: ReadonlyArray<string>) => Effect.Effect<EmbedResult, EmbedderError>
}

export class Embedder extends Context.Service<Embedder, Service>()("@noema/core/Embedder") {}

/** Builds an Embedder; checks that the provider returned one vector per text. */
export const make = (options: Service): Service => ({
  ...options,
  embed: (texts) =>
    texts.length === 0
      ? Effect.succeed({ vectors: [] })
      : Effect.flatMap(options.embed(texts), (result) =>
          result.vectors.length === texts.length
            ? Effect.succeed(result)
            : Effect.fail(
                new EmbedderError({
                  provider: options.provider,
                  model: options.model,
                  reason: new ModelError.InvalidOutput({
                    message: `expected ${texts.length} vectors, got ${result.vectors.length}`
                  })
                })
              )
        )
})

/** Cosine similarity of two vectors of the same length (0 when either is all zeros). */
export const cosineSimilarity = (left: Vector, right: Vector): number => {
  if (left.length !== right.length) {
    throw new RangeError(`Vectors differ in length: ${left.length} and ${right.length}`)
  }
  let dot = 0
  let leftNorm = 0
  let rightNorm = 0
  for (let i = 0; i < left.length; i++) {
    const a = left[i] as number
    const b = right[i] as number
    dot += a * b
    leftNorm += a * a
    rightNorm += b * b
  }
  return leftNorm === 0 || rightNorm === 0 ? 0 : dot / Math.sqrt(leftNorm * rightNorm)
}

/** Indices of `candidates` ordered from most to least similar to `query`, with scores. */
export const rank = (
  query: Vector,
  candidates: ReadonlyArray<Vector>
): Array<{ readonly index: number; readonly score: number }> =>
  candidates
    .map((candidate, index) => ({ index, score: cosineSimilarity(query, candidate) }))
    .sort((a, b) => b.score - a.score)
