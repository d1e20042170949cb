/**
 * floatVectors: an embedder whose vectors are `Float32Array`s before they become core's plain
 * number lists (`LocalEmbedder`) may hand them as they are to a vector index, which keeps
 * `Float32Array`s: the list and the index's copy of it are then not made (each exact, so the
 * vector is the same bit for bit). The offer is tied to the `embed` function itself (a hidden
 * property), so a wrapper that replaces `embed` (a user's, counting or caching) is always the
 * one called.
 */
const floats: unique symbol = Symbol("@noema/resources/floatVectors")

/** The vectors of `texts`, fresh (the caller may change them), as `embed` would give them. */
export type FloatEmbed = (texts: ReadonlyArray<string>) => Array<Float32Array>

export const offerFloatVectors = (embed: object, embedFloats: FloatEmbed): void => {
  Object.defineProperty(embed, floats, { value: embedFloats })
}

export const floatVectorsOf = (embed: unknown): FloatEmbed | undefined =>
  typeof embed === "function" ? (embed as { readonly [floats]?: FloatEmbed })[floats] : undefined
