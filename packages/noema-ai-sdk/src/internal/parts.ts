/**
 * An AI SDK model's output as core's stream chunks: the parts of `doStream`
 * one at a time, and the content of `doGenerate` all at once (through the
 * same mapping, so `complete` and `stream` cannot disagree).
 *
 * Text and reasoning deltas pass through; a reasoning part's provider
 * metadata (from its start, deltas and end, merged per provider) ends it as a
 * `reasoning-end`, so signatures round-trip. Tool input deltas become
 * tool-call deltas numbered in order of their first appearance; a complete
 * `tool-call` fills in a call that streamed no input (or was never streamed).
 * Calls the provider executed itself (server-side tools) are not noema's to
 * run and are left out. `finish` carries the unified reason, the raw one and
 * the usage (cache reads and writes, reasoning tokens); provider metadata of
 * the finish is kept on the response. An `error` part is thrown, for the
 * adapter to type it.
 */
import type {
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3Usage,
  LanguageModelV4GenerateResult,
  LanguageModelV4StreamPart,
  SharedV3ProviderMetadata
} from "@ai-sdk/provider"
import type { ChatModel, Message } from "@noema/core"

type Part = LanguageModelV3StreamPart | LanguageModelV4StreamPart
type GenerateResult = LanguageModelV3GenerateResult | LanguageModelV4GenerateResult
type Metadata = Message.ProviderMetadata

/** Thrown for an `error` part, carrying what the provider put in it. */
export class StreamErrorPart extends Error {
  override readonly name = "StreamErrorPart"
  constructor(readonly error: unknown) {
    super("error part")
  }
}

export const toFinishReason = (unified: string): ChatModel.FinishReason => {
  switch (unified) {
    case "stop":
    case "length":
    case "tool-calls":
    case "content-filter":
      return unified
    default:
      // `error`, `interrupted` (v4) and `other`.
      return "other"
  }
}

export const toUsage = (usage: LanguageModelV3Usage): ChatModel.Usage | undefined => {
  const input = usage.inputTokens
  const output = usage.outputTokens
  const inputTokens =
    input.total ??
    (input.noCache === undefined && input.cacheRead === undefined && input.cacheWrite === undefined
      ? undefined
      : (input.noCache ?? 0) + (input.cacheRead ?? 0) + (input.cacheWrite ?? 0))
  if (inputTokens === undefined && output.total === undefined) return undefined
  const outputTokens = output.total ?? 0
  const total = (inputTokens ?? 0) + outputTokens
  return {
    inputTokens: inputTokens ?? 0,
    outputTokens,
    totalTokens: total,
    ...(input.cacheRead !== undefined && { cachedInputTokens: input.cacheRead }),
    ...(input.cacheWrite !== undefined && { cacheWriteInputTokens: input.cacheWrite }),
    ...(output.reasoning !== undefined && { reasoningTokens: output.reasoning })
  }
}

/**
 * The AI SDK's metadata as plain JSON (its objects may hold `undefined`, which
 * JSON and noema's messages do not): what a message can store and send back.
 * Copied as `JSON.parse(JSON.stringify(...))` would, without the text in
 * between: it runs on every streamed answer's finish (3 µs a call that way).
 */
const toMetadata = (metadata: SharedV3ProviderMetadata | undefined): Metadata | undefined =>
  metadata === undefined ? undefined : (plainJson(metadata) as Metadata)

const plainJson = (value: unknown): unknown => {
  if (typeof value !== "object" || value === null) {
    return typeof value === "number" && !Number.isFinite(value) ? null : value
  }
  const json = (value as { readonly toJSON?: unknown }).toJSON
  if (typeof json === "function") return plainJson(json.call(value))
  if (Array.isArray(value)) {
    // `Array.from`, not `map`, which skips holes (JSON writes them as `null`).
    return Array.from(value, (item) =>
      item === undefined || typeof item === "function" || typeof item === "symbol" ? null : plainJson(item)
    )
  }
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(value)) {
    const item = (value as Record<string, unknown>)[key]
    if (item !== undefined && typeof item !== "function" && typeof item !== "symbol")
      out[key] = plainJson(item)
  }
  return out
}

/** `right` over `left`, provider by provider, field by field. */
const mergeMetadata = (left: Metadata | undefined, right: Metadata | undefined): Metadata | undefined => {
  if (right === undefined) return left
  if (left === undefined) return right
  const out: Record<string, Metadata[string]> = { ...left }
  for (const provider of Object.keys(right)) out[provider] = { ...left[provider], ...right[provider] }
  return out
}

const finishChunks = (
  finishReason: { readonly unified: string; readonly raw: string | undefined },
  usage: LanguageModelV3Usage,
  providerMetadata: Metadata | undefined
): Array<ChatModel.StreamChunk> => {
  const out: Array<ChatModel.StreamChunk> = []
  if (providerMetadata !== undefined) out.push({ type: "response-metadata", providerMetadata })
  out.push({
    type: "finish",
    finishReason: toFinishReason(finishReason.unified),
    ...(finishReason.raw !== undefined && { rawFinishReason: finishReason.raw })
  })
  const converted = toUsage(usage)
  if (converted !== undefined) out.push({ type: "usage", usage: converted })
  return out
}

/**
 * The parts of `doStream`'s stream, read through its reader: one promise per part. Its own
 * async iterator (what `for await` uses) chains every read behind the previous one through an
 * async function, two promise hops more per part, and core pulls one part at a time anyway.
 * A stream outside the spec that has no reader is iterated as it is.
 */
export const partsOf = (stream: ReadableStream<unknown> | AsyncIterable<unknown>): AsyncIterable<unknown> => {
  if (!("getReader" in stream)) return stream
  const reader = stream.getReader()
  const iterator: AsyncIterator<unknown> = {
    next: () => reader.read() as Promise<IteratorResult<unknown>>,
    // Core calls it when it abandons the stream (after aborting the request): the provider's cleanup runs.
    return: (value?: unknown) => reader.cancel().then(() => ({ done: true, value }))
  }
  return { [Symbol.asyncIterator]: () => iterator }
}

/** Stateful, one per stream: numbers tool calls, merges reasoning metadata, remembers the finish. */
export class PartTranslator {
  private readonly calls = new Map<string, { readonly index: number; sent: number }>()
  private readonly reasoning = new Map<string, Metadata | undefined>()
  private finished = false

  get isFinished(): boolean {
    return this.finished
  }

  translate(raw: unknown): ReadonlyArray<ChatModel.StreamChunk> {
    const chunks = this.chunksOf(raw as Part)
    const held = this.held
    if (held === undefined || chunks.length === 0) return chunks
    this.held = undefined
    return [held, ...chunks]
  }

  /**
   * The response's id and model, held back until the next part that has chunks of its own:
   * sent alone, they would cost the first token a trip through every stream layer.
   */
  private held: ChatModel.StreamChunk | undefined

  private chunksOf(part: Part): ReadonlyArray<ChatModel.StreamChunk> {
    switch (part.type) {
      case "text-delta":
        return part.delta.length > 0 ? [{ type: "text-delta", delta: part.delta }] : []
      case "reasoning-start":
        this.reasoning.set(part.id, toMetadata(part.providerMetadata))
        return []
      case "reasoning-delta":
        this.reasoning.set(
          part.id,
          mergeMetadata(this.reasoning.get(part.id), toMetadata(part.providerMetadata))
        )
        return part.delta.length > 0 ? [{ type: "reasoning-delta", delta: part.delta }] : []
      case "reasoning-end": {
        const providerMetadata = mergeMetadata(this.reasoning.get(part.id), toMetadata(part.providerMetadata))
        this.reasoning.delete(part.id)
        return [
          providerMetadata === undefined
            ? { type: "reasoning-end" }
            : { type: "reasoning-end", providerMetadata }
        ]
      }
      case "tool-input-start": {
        if (part.providerExecuted === true) return []
        const index = this.calls.size
        this.calls.set(part.id, { index, sent: 0 })
        return [{ type: "tool-call-delta", index, id: part.id, name: part.toolName, argumentsDelta: "" }]
      }
      case "tool-input-delta": {
        const call = this.calls.get(part.id)
        if (call === undefined || part.delta.length === 0) return []
        call.sent += part.delta.length
        return [{ type: "tool-call-delta", index: call.index, argumentsDelta: part.delta }]
      }
      case "tool-call":
        return part.providerExecuted === true ? [] : this.toolCall(part.toolCallId, part.toolName, part.input)
      case "response-metadata":
        if (part.id !== undefined || part.modelId !== undefined) {
          this.held = {
            type: "response-metadata",
            ...(part.id !== undefined && { id: part.id }),
            ...(part.modelId !== undefined && { model: part.modelId })
          }
        }
        return []
      case "finish":
        this.finished = true
        return finishChunks(part.finishReason, part.usage, toMetadata(part.providerMetadata))
      case "error":
        throw new StreamErrorPart(part.error)
      default:
        // Text start and end, sources, files, raw chunks, warnings, provider-executed results.
        return []
    }
  }

  /** A complete call: its input as one delta unless its input was streamed already. */
  private toolCall(id: string, name: string, input: string): Array<ChatModel.StreamChunk> {
    const known = this.calls.get(id)
    if (known !== undefined) {
      if (known.sent > 0) return []
      known.sent = input.length
      return [{ type: "tool-call-delta", index: known.index, argumentsDelta: input }]
    }
    const index = this.calls.size
    this.calls.set(id, { index, sent: input.length })
    return [{ type: "tool-call-delta", index, id, name, argumentsDelta: input }]
  }
}

/**
 * The content of a `doGenerate` result as chunks (whole tool calls as `tool-call` chunks, before
 * the finish), ready to fold with a `ResponseAccumulator`: nothing in them needs reassembling.
 */
export const generateChunks = (result: GenerateResult): Array<ChatModel.StreamChunk> => {
  const out: Array<ChatModel.StreamChunk> = []
  const response = result.response
  if (response?.id !== undefined || response?.modelId !== undefined) {
    out.push({
      type: "response-metadata",
      ...(response.id !== undefined && { id: response.id }),
      ...(response.modelId !== undefined && { model: response.modelId })
    })
  }
  for (const content of result.content) {
    switch (content.type) {
      case "text":
        if (content.text.length > 0) out.push({ type: "text-delta", delta: content.text })
        break
      case "reasoning":
        if (content.text.length > 0) out.push({ type: "reasoning-delta", delta: content.text })
        out.push(
          content.providerMetadata === undefined
            ? { type: "reasoning-end" }
            : { type: "reasoning-end", providerMetadata: toMetadata(content.providerMetadata) as Metadata }
        )
        break
      case "tool-call":
        if (content.providerExecuted !== true) {
          out.push({
            type: "tool-call",
            toolCall: { id: content.toolCallId, name: content.toolName, arguments: content.input }
          })
        }
        break
    }
  }
  out.push(...finishChunks(result.finishReason, result.usage, toMetadata(result.providerMetadata)))
  return out
}
