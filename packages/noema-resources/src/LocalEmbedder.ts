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

const fnvBasis = 0x811c9dc5

/** FNV-1a continued over `text` from `hash`: the hash of a concatenation, without building it. */
const fnvOver = (hash: number, text: string): number => {
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash
}

const fnvChar = (hash: number, code: number): number => Math.imul(hash ^ code, 0x01000193)

const wordPattern = /[\p{L}\p{N}]+/gu

/** A distinct feature: its hash (FNV-1a of `w:<word>`, `b:<word> <word>` or `t:<trigram>`), weight and count. */
interface Feature {
  readonly hash: number
  readonly weight: number
  count: number
}

/**
 * The features of a text, each once, in the order they first occur (the order their weights are
 * added in, so the float sums are always the same). Looked up by their parts (a word, a pair of
 * words, a trigram's three code units), not by a string built for each occurrence: that string
 * and its hashing were most of an embedding's cost.
 */
const featuresOf = (words: ReadonlyArray<string>): Array<Feature> => {
  const order: Array<Feature> = []
  const byWord = new Map<string, Feature>()
  const byPair = new Map<string, Map<string, Feature>>()
  const byTrigram = new Map<number, Feature>()
  const wordBasis = fnvOver(fnvBasis, "w:")
  const pairBasis = fnvOver(fnvBasis, "b:")
  const trigramBasis = fnvOver(fnvBasis, "t:")
  const fresh = (hash: number, weight: number): Feature => {
    const feature = { hash: hash >>> 0, weight, count: 1 }
    order.push(feature)
    return feature
  }
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    const known = byWord.get(word)
    if (known !== undefined) known.count++
    else byWord.set(word, fresh(fnvOver(wordBasis, word), 1))
    if (i > 0) {
      const previous = words[i - 1] as string
      let after = byPair.get(previous)
      if (after === undefined) {
        after = new Map()
        byPair.set(previous, after)
      }
      const pair = after.get(word)
      if (pair !== undefined) pair.count++
      else after.set(word, fresh(fnvOver(fnvChar(fnvOver(pairBasis, previous), 32), word), 0.5))
    }
    // The trigrams of the word marked with its boundaries, `^word$` (code units, as `slice` cuts).
    const last = word.length + 1
    const unit = (at: number) => (at === 0 ? 94 : at === last ? 36 : word.charCodeAt(at - 1))
    for (let j = 0; j + 3 <= last + 1; j++) {
      const a = unit(j)
      const b = unit(j + 1)
      const c = unit(j + 2)
      const key = (a * 65536 + b) * 65536 + c
      const trigram = byTrigram.get(key)
      if (trigram !== undefined) trigram.count++
      else byTrigram.set(key, fresh(fnvChar(fnvChar(fnvChar(trigramBasis, a), b), c), 0.25))
    }
  }
  return order
}

/** The vector of one text (L2-normalised; all zeros for a text without words). */
export const embedText = (text: string, dimensions: number = defaultDimensions): Float32Array => {
  const words = text.toLowerCase().normalize("NFKC").match(wordPattern) ?? []
  const vector = new Float32Array(dimensions)
  for (const { hash, weight, count } of featuresOf(words)) {
    const bucket = hash % dimensions
    const sign = hash >>> 31 === 0 ? 1 : -1
    // Sublinear counts: a word said ten times is not ten times the evidence.
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
