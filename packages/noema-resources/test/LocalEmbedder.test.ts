import { describe, expect, it } from "vitest"
import * as LocalEmbedder from "../src/LocalEmbedder.js"

/**
 * hash-v1 as it was first written (a string per feature occurrence, counted in a Map): the
 * vectors a model named "local/hash-v1" gives must never change, since indexes keep them.
 */
const reference = (text: string, dimensions = 384): Float32Array => {
  const fnv1a = (feature: string) => {
    let hash = 0x811c9dc5
    for (let i = 0; i < feature.length; i++) {
      hash ^= feature.charCodeAt(i)
      hash = Math.imul(hash, 0x01000193)
    }
    return hash >>> 0
  }
  const weights: Record<number, number> = { 119: 1, 98: 0.5, 116: 0.25 }
  const counts = new Map<string, number>()
  const add = (feature: string) => counts.set(feature, (counts.get(feature) ?? 0) + 1)
  const words =
    text
      .toLowerCase()
      .normalize("NFKC")
      .match(/[\p{L}\p{N}]+/gu) ?? []
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
    vector[bucket] =
      (vector[bucket] as number) + sign * (weights[feature.charCodeAt(0)] ?? 1) * (1 + Math.log(count))
  }
  let norm = 0
  for (let i = 0; i < dimensions; i++) norm += (vector[i] as number) ** 2
  if (norm > 0) {
    const scale = 1 / Math.sqrt(norm)
    for (let i = 0; i < dimensions; i++) vector[i] = (vector[i] as number) * scale
  }
  return vector
}

const texts = [
  "",
  "   ...   ",
  "a",
  "plan the trip",
  "the the the the the: a word said again and again, the pair said again: the the",
  "**Purpose:** find the facts\n\n**Instructions:** Do Step 1.1.\n\n**Evaluation:** Step 1.1 is done",
  "Überraschung! ÄÖÜ straße STRASSE ﬁnd the ﬁle (NFKC folds ligatures)",
  "東京の天気は晴れです 東京 東京",
  "emoji 😀 surrogate 𝒳𝒴𝒵 pairs 𝒳𝒴𝒵 and digits 12345 12345",
  "aa aaa aaaa aaaaa ab ba abab baba",
  Array.from({ length: 300 }, (_, i) => `word${i % 37} w${i % 11}`).join(" "),
  // More features than the table every embedding shares: counted in a table of its own.
  Array.from({ length: 4000 }, (_, i) => `term${i % 1500} ß${i % 7}`).join(" "),
  // The shared table again after it: nothing of the texts before is counted in.
  "plan the trip"
]

describe("LocalEmbedder.embedText", () => {
  it("gives each text a vector of its own: writing one changes no other, whatever its size", () => {
    // Sizes that fill a shared allocation exactly, leave part of it, or need more than it holds.
    for (const dimensions of [8, 384, 1000, 4000]) {
      const vectors = texts.map((text) => LocalEmbedder.embedText(text, dimensions))
      for (const vector of vectors) {
        expect(vector.length).toBe(dimensions)
        vector.fill(7)
      }
      const after = LocalEmbedder.embedText("plan the trip", dimensions)
      expect(Array.from(after)).toEqual(Array.from(reference("plan the trip", dimensions)))
      for (const vector of vectors) expect(vector.every((value) => value === 7)).toBe(true)
    }
  })

  for (const text of texts)
    it(`gives hash-v1's vector, bit for bit: ${JSON.stringify(text.slice(0, 40))}`, () => {
      for (const dimensions of [8, 384, 1000])
        expect(Array.from(LocalEmbedder.embedText(text, dimensions))).toEqual(
          Array.from(reference(text, dimensions))
        )
    })
})
