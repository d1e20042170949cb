/**
 * ResourceProcessor: a document split into chunk resources under it, so a
 * search finds the passage that answers, not a whole document.
 *
 * The split is deterministic, in characters (no tokenizer needed, the same on
 * every machine): each chunk holds at most `size` characters of the document,
 * cut at the last whitespace before the limit when there is one (a word longer
 * than `size` is cut where the limit falls); the next chunk starts `overlap`
 * characters before the previous one ended, moved forward to the start of a
 * word, so a sentence cut at a boundary is whole in one of the two. Chunks are
 * trimmed and never empty. Chunk `n` (from 1) is named `chunk-<n>` under the
 * document, with `position: n` and `source` the document's URN, so putting the
 * same text again gives the same chunks at the same URNs.
 *
 * `ResourceIndex` runs it on every document it puts (unless told not to):
 * the chunks are put as the same actor (authorized, embedded, published) and
 * those of an earlier, longer version are deleted.
 */
import { Schema } from "effect"
import * as Resource from "./Resource.js"

export interface Options {
  /** The most characters a chunk holds; default 1000. */
  readonly size?: number
  /** Characters a chunk shares with the one before it; default 200, less than `size`. */
  readonly overlap?: number
}

export const defaultSize = 1000
export const defaultOverlap = 200

export class ChunkingError extends Schema.TaggedError<ChunkingError>()("ChunkingError", {
  message: Schema.String
}) {}

/** The options with their defaults, or why they cannot split anything. */
export const checkOptions = (options: Options = {}): Required<Options> | ChunkingError => {
  const size = options.size ?? defaultSize
  const overlap = options.overlap ?? Math.min(defaultOverlap, Math.floor(size / 5))
  if (!Number.isInteger(size) || size < 1)
    return new ChunkingError({
      message: `chunk size must be a whole number of characters, at least 1; got ${size}`
    })
  if (!Number.isInteger(overlap) || overlap < 0 || overlap >= size)
    return new ChunkingError({
      message: `chunk overlap must be a whole number from 0 to less than the size (${size}); got ${overlap}`
    })
  return { size, overlap }
}

const isSpace = (character: string | undefined) => character !== undefined && /\s/.test(character)

/** Where the chunk starting at `start` ends: at `start + size`, or the last whitespace before it. */
const endOf = (text: string, start: number, size: number): number => {
  const limit = Math.min(start + size, text.length)
  if (limit === text.length || isSpace(text[limit])) return limit
  for (let at = limit - 1; at > start; at--) if (isSpace(text[at])) return at
  return limit
}

/** Where the next chunk starts: `overlap` before `end`, moved forward to a word's start (and past `start`). */
const nextStart = (text: string, start: number, end: number, overlap: number): number => {
  let at = Math.max(end - overlap, start + 1)
  while (at < end && !isSpace(text[at - 1])) at++
  return at
}

/** The passages of `text`, in order (see the header); none for a text of whitespace. */
export const split = (text: string, options: Required<Options>): Array<string> => {
  const passages: Array<string> = []
  let start = 0
  while (start < text.length) {
    while (start < text.length && isSpace(text[start])) start++
    if (start >= text.length) break
    const end = endOf(text, start, options.size)
    const passage = text.slice(start, end).trim()
    if (passage.length > 0) passages.push(passage)
    if (end >= text.length) break
    start = nextStart(text, start, end, options.overlap)
  }
  return passages
}

/** The chunk resources of a document, `chunk-1`, `chunk-2`... under it. */
export const chunks = (document: Resource.Document, options: Required<Options>): Array<Resource.Chunk> =>
  split(document.text, options).map((text, i) =>
    Resource.make("chunk", {
      name: `chunk-${i + 1}`,
      parent: document.meta.urn,
      text,
      source: document.meta.urn,
      position: i + 1
    })
  )

/** Whether `resource` is a chunk this processor made (`chunk-<n>`): one it may replace or delete. */
export const isChunkOf = (resource: Resource.Resource): boolean =>
  resource.meta.type === "chunk" && /^chunk-[1-9][0-9]*$/.test(resource.meta.name)
