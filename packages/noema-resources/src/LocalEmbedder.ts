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
import { offerFloatVectors } from "./internal/floatVectors.js"

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

/**
 * The distinct features of one text, in the order they first occur (the order their weights are
 * added in, so the float sums are always the same): each one's hash (FNV-1a of `w:<word>`,
 * `b:<word> <word>` or `t:<trigram>`), weight and count. Looked up by their parts, not by a
 * string built for each occurrence (that string and its hashing were most of an embedding's cost):
 * a word by itself, a pair and a trigram by two integers in an open-addressing table (a pair: its
 * words' feature numbers; a trigram: its first code unit, then the other two), which an embedding
 * reuses rather than building maps and objects for each text.
 */
class Features {
  // Empty until `reset` makes room (the constructor asks it, as every text does).
  hashes = new Uint32Array(0)
  weights = new Float64Array(0)
  counts = new Int32Array(0)
  size = 0
  // The words: open addressing by the word's own feature hash, compared by text. Not a `Map`:
  // its `clear` between texts dropped its table, which grew again entry by entry for every text.
  private wordTexts: Array<string> = []
  private wordSlots = new Int32Array(0)
  private wordStamps = new Int32Array(0)
  private slots = new Int32Array(0)
  private high = new Int32Array(0)
  private low = new Int32Array(0)
  private stamps = new Int32Array(0)
  private stamp = 0
  private mask = 0

  constructor(features: number) {
    this.reset(features)
  }

  /** Empties it for a text of at most `features` features (room made where there is too little). */
  reset(features: number): void {
    this.size = 0
    if (features > this.hashes.length) {
      this.hashes = new Uint32Array(features)
      this.weights = new Float64Array(features)
      this.counts = new Int32Array(features)
    }
    const slots = tableSize(features)
    if (slots > this.slots.length) {
      this.wordTexts = new Array<string>(slots).fill("")
      this.wordSlots = new Int32Array(slots)
      this.wordStamps = new Int32Array(slots)
      this.slots = new Int32Array(slots)
      this.high = new Int32Array(slots)
      this.low = new Int32Array(slots)
      this.stamps = new Int32Array(slots)
      this.mask = slots - 1
      this.stamp = 0
    }
    // A slot is taken only when stamped with this text's stamp: nothing to clear between texts.
    this.stamp++
    if (this.stamp === 0x7fffffff) {
      this.stamps.fill(0)
      this.wordStamps.fill(0)
      this.stamp = 1
    }
  }

  private fresh(hash: number, weight: number): number {
    const at = this.size++
    this.hashes[at] = hash >>> 0
    this.weights[at] = weight
    this.counts[at] = 1
    return at
  }

  /** The word's feature number, counted once more (its feature hashed from `basis`). */
  word(word: string, basis: number): number {
    const hash = fnvOver(basis, word)
    let slot = Math.imul(hash, 0x9e3779b1) & this.mask
    while (this.wordStamps[slot] === this.stamp) {
      if (this.wordTexts[slot] === word) {
        const known = this.wordSlots[slot] as number
        this.counts[known] = (this.counts[known] as number) + 1
        return known
      }
      slot = (slot + 1) & this.mask
    }
    const at = this.fresh(hash, 1)
    this.wordStamps[slot] = this.stamp
    this.wordTexts[slot] = word
    this.wordSlots[slot] = at
    return at
  }

  /**
   * Counts the feature keyed by (`high`, `low`) once more; false when it is new, for the caller
   * to `add` it (its hash is computed only then).
   */
  counted(high: number, low: number): boolean {
    let slot = (Math.imul(high, 0x9e3779b1) ^ Math.imul(low, 0x85ebca6b)) & this.mask
    while (this.stamps[slot] === this.stamp) {
      if (this.high[slot] === high && this.low[slot] === low) {
        const at = this.slots[slot] as number
        this.counts[at] = (this.counts[at] as number) + 1
        return true
      }
      slot = (slot + 1) & this.mask
    }
    this.stamps[slot] = this.stamp
    this.high[slot] = high
    this.low[slot] = low
    this.slots[slot] = this.size
    return false
  }

  /** The new feature `counted` just made room for. */
  add(hash: number, weight: number): void {
    this.fresh(hash, weight)
  }
}

/** Open-addressing slots for `features` keys: a power of two, at most half full. */
const tableSize = (features: number): number => {
  let size = 64
  while (size < features * 2) size *= 2
  return size
}

/** Texts up to this many features reuse one table; a longer one gets its own, not kept after. */
const sharedFeatures = 1 << 14
const shared = new Features(1024)

const wordBasis = fnvOver(fnvBasis, "w:")
const pairBasis = fnvOver(fnvBasis, "b:")
const trigramBasis = fnvOver(fnvBasis, "t:")

/** The features of the words, counted (see `Features`). */
const featuresOf = (words: ReadonlyArray<string>): Features => {
  // At most: each word, each pair, and a trigram per code unit of each word.
  let most = 2 * words.length
  for (let i = 0; i < words.length; i++) most += (words[i] as string).length
  const features = most <= sharedFeatures ? shared : new Features(most)
  features.reset(most)
  let previous = -1
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    const number = features.word(word, wordBasis)
    if (i > 0 && !features.counted(previous, number))
      features.add(fnvOver(fnvChar(fnvOver(pairBasis, words[i - 1] as string), 32), word), 0.5)
    previous = number
    // The trigrams of the word marked with its boundaries, `^word$` (code units, as `slice` cuts);
    // keyed apart from pairs by a negative first integer.
    const last = word.length + 1
    let a = 94
    let b = word.length > 0 ? word.charCodeAt(0) : 36
    for (let j = 2; j <= last; j++) {
      const c = j === last ? 36 : word.charCodeAt(j - 1)
      if (!features.counted(-1 - a, (b << 16) | c))
        features.add(fnvChar(fnvChar(fnvChar(trigramBasis, a), b), c), 0.25)
      a = b
      b = c
    }
  }
  return features
}

/**
 * A zeroed vector cut from a slab shared with the next few: a `Float32Array` of its own is an
 * `ArrayBuffer` of its own, allocated outside the heap (any over 64 bytes) and tracked by the
 * collector, about a fifth of an embedding's time. A slab holds `slabVectors` vectors, so one
 * kept alive keeps at most that many's memory (a vector index copies what it keeps).
 */
const freshVector = (dimensions: number): Float32Array => {
  if (slabUsed + dimensions > slab.length) {
    slab = new Float32Array(Math.max(dimensions, slabVectors * defaultDimensions))
    slabUsed = 0
  }
  const vector = slab.subarray(slabUsed, slabUsed + dimensions)
  slabUsed += dimensions
  return vector
}
const slabVectors = 8
let slab = new Float32Array(0)
let slabUsed = 0

/** The vector of one text (L2-normalised; all zeros for a text without words). */
export const embedText = (text: string, dimensions: number = defaultDimensions): Float32Array => {
  const words = text.toLowerCase().normalize("NFKC").match(wordPattern) ?? []
  const vector = freshVector(dimensions)
  const { hashes, weights, counts, size } = featuresOf(words)
  for (let i = 0; i < size; i++) {
    const hash = hashes[i] as number
    const bucket = hash % dimensions
    const sign = hash >>> 31 === 0 ? 1 : -1
    const count = counts[i] as number
    // Sublinear counts: a word said ten times is not ten times the evidence. Once (most
    // features): log(1) is exactly 0, so the factor is exactly 1 without the logarithm.
    const factor = count === 1 ? 1 : 1 + Math.log(count)
    vector[bucket] = (vector[bucket] as number) + sign * (weights[i] as number) * factor
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
  const service = Embedder.make({
    provider,
    model,
    dimensions,
    embed: (texts) =>
      Effect.sync(() => ({ vectors: texts.map((text) => toArray(embedText(text, dimensions))) }))
  })
  // A vector index takes them as they are (the same values: `toArray` is exact).
  offerFloatVectors(service.embed, (texts) => texts.map((text) => embedText(text, dimensions)))
  return service
}
