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
 * added in, so the float sums are always the same). Looked up by their parts (a word; a pair as
 * its two words' numbers among the distinct words; a trigram's three code units), by small
 * integers where they fit, not by a string built for each occurrence: that string and its
 * hashing were most of an embedding's cost.
 */
const featuresOf = (words: ReadonlyArray<string>): Array<Feature> => {
  const order: Array<Feature> = []
  // Each distinct word's feature and its number (the order it first occurs in).
  const byWord = new Map<string, Feature>()
  const wordNumbers = new Map<string, number>()
  const byPair = new Map<number, Feature>()
  const byTrigram = new Map<number, Feature>()
  const wordBasis = fnvOver(fnvBasis, "w:")
  const pairBasis = fnvOver(fnvBasis, "b:")
  const trigramBasis = fnvOver(fnvBasis, "t:")
  const small = smallUnits(words)
  const fresh = (hash: number, weight: number): Feature => {
    const feature = { hash: hash >>> 0, weight, count: 1 }
    order.push(feature)
    return feature
  }
  let previousNumber = -1
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    const known = byWord.get(word)
    let number: number
    if (known !== undefined) {
      known.count++
      number = wordNumbers.get(word) as number
    } else {
      byWord.set(word, fresh(fnvOver(wordBasis, word), 1))
      number = wordNumbers.size
      wordNumbers.set(word, number)
    }
    if (i > 0) {
      // At most `words.length` distinct words: the pair's key is unique.
      const key = previousNumber * words.length + number
      const pair = byPair.get(key)
      if (pair !== undefined) pair.count++
      else byPair.set(key, fresh(fnvOver(fnvChar(fnvOver(pairBasis, words[i - 1] as string), 32), word), 0.5))
    }
    previousNumber = number
    // The trigrams of the word marked with its boundaries, `^word$` (code units, as `slice` cuts).
    const last = word.length + 1
    let a = 94
    let b = word.length > 0 ? word.charCodeAt(0) : 36
    for (let j = 2; j <= last; j++) {
      const c = j === last ? 36 : word.charCodeAt(j - 1)
      const key = small ? (a << 20) | (b << 10) | c : (a * 65536 + b) * 65536 + c
      const trigram = byTrigram.get(key)
      if (trigram !== undefined) trigram.count++
      else byTrigram.set(key, fresh(fnvChar(fnvChar(fnvChar(trigramBasis, a), b), c), 0.25))
      a = b
      b = c
    }
  }
  return order
}

/**
 * Whether every code unit of the words is below 1024, so that a trigram's three fit one small
 * integer key (10 bits each): a small integer is a map key without a number allocated for it.
 */
const smallUnits = (words: ReadonlyArray<string>): boolean => {
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    for (let j = 0; j < word.length; j++) if (word.charCodeAt(j) >= 1024) return false
  }
  return true
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
