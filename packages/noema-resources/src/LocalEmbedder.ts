/**
 * LocalEmbedder: an `Embedder` that needs no model, no download and no network.
 *
 * What it is: feature hashing. A text is lowercased and split into words
 * (letters and digits of any script); its features are the words, the pairs
 * of neighbouring words, and the character trigrams of each word (with word
 * boundaries marked, so "plan" and "planner" share "pla", "lan"). Each feature
 * is hashed (FNV-1a) into one of `dimensions` buckets with a sign taken from
 * another bit of the hash, weighted (words 1, word pairs 0.5, trigrams 0.25)
 * with sublinear counts, and the vector is L2-normalised. Cosine similarity of
 * two such vectors measures how much vocabulary and spelling the texts share.
 *
 * What it is not: semantic. "car" and "automobile" are unrelated to it. It is
 * deterministic (the same text always gives the same vector, on every machine)
 * and fast, which makes it the offline default and a good fixture for tests;
 * for meaning, use a real embedding model (e.g. `OpenAiEmbedder`).
 */

import { Embedder } from "@noema/core"
import { Effect } from "effect"

export const provider = "local"
export const model = "hash-v1"
export const defaultDimensions = 384

const fnv1a = (text: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash >>> 0
}

const wordPattern = /[\p{L}\p{N}]+/gu

/** By the feature's first letter: w(ord) 1, b(igram) 0.5, t(rigram) 0.25. */
const weights: Record<number, number> = { 119: 1, 98: 0.5, 116: 0.25 }

/** The vector of one text (L2-normalised; all zeros for a text without words). */
export const embedText = (text: string, dimensions: number = defaultDimensions): Float32Array => {
  const counts = new Map<string, number>()
  const add = (feature: string) => counts.set(feature, (counts.get(feature) ?? 0) + 1)
  const words = text.toLowerCase().normalize("NFKC").match(wordPattern) ?? []
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    add(`w:${word}`)
    if (i > 0) add(`b:${words[i - 1]} ${word}`)
    const marked = `^${word}$`
    for (let j = 0; j + 3 <= marked.length; j++) add(`t:${marked.slice(j, j + 3)}`)
  }
  const vector = new Float32Array(dimensions)
  for (const [feature, count] of counts) {
    const hash = fnv1a(feature)
    const bucket = hash % dimensions
    const sign = hash >>> 31 === 0 ? 1 : -1
    // Sublinear counts: a word said ten times is not ten times the evidence.
    const weight = weights[feature.charCodeAt(0)] ?? 1
    vector[bucket] = (vector[bucket] as number) + sign * weight * (1 + Math.log(count))
  }
  let norm = 0
  for (let i = 0; i < dimensions; i++) norm += (vector[i] as number) ** 2
  if (norm > 0) {
    const scale = 1 / Math.sqrt(norm)
    for (let i = 0; i < dimensions; i++) vector[i] = (vector[i] as number) * scale
  }
  return vector
}

/** A plain copy: `Array.from` walks a typed array through its iterator, about 9x slower here. */
const toArray = (vector: Float32Array): Array<number> => {
  const out = new Array<number>(vector.length)
  for (let i = 0; i < vector.length; i++) out[i] = vector[i] as number
  return out
}

/** The local embedder as core's `Embedder` service. */
export const make = (options: { readonly dimensions?: number } = {}): Embedder.Service => {
  const dimensions = options.dimensions ?? defaultDimensions
  if (!Number.isInteger(dimensions) || dimensions < 8 || dimensions > 65_536)
    throw new RangeError(
      `LocalEmbedder: dimensions must be a whole number from 8 to 65536, got ${dimensions}`
    )
  return Embedder.make({
    provider,
    model,
    dimensions,
    embed: (texts) =>
      Effect.sync(() => ({ vectors: texts.map((text) => toArray(embedText(text, dimensions))) }))
  })
}
