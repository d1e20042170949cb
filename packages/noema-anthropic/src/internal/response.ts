/**
 * Anthropic's answers as core's: a whole `message` (for `complete`) and the
 * SSE events of a streamed one (for `stream`), read field by field for only
 * what noema uses, so a malformed answer is an `InvalidOutput` failure and
 * never an exception from deep inside the adapter.
 *
 * Content blocks map one to one: `text` to text, `thinking` to reasoning whose
 * part ends with `{ anthropic: { signature } }`, `redacted_thinking` to an
 * empty reasoning part carrying `{ anthropic: { redactedData } }`, `tool_use`
 * to a tool call (its index among the response's calls; input deltas are
 * argument deltas). The tool that carries structured output is read as the
 * answer's text instead. Blocks noema does not know (server tools) are
 * skipped. The stop reason is mapped, and kept raw; a refusal's explanation
 * (`stop_details`) is the refusal text. Usage counts cache reads and writes
 * into `inputTokens`, as core's usage does (Anthropic counts them apart).
 */
import { type ChatModel, Message, ProviderFailure } from "@noema/core"

type Fields = { readonly [key: string]: unknown }

const isObject = (value: unknown): value is Fields =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const stringOf = (value: unknown): string | undefined => (typeof value === "string" ? value : undefined)

const numberOf = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) ? value : undefined

/** An object field, or a `MalformedResponse` naming it. */
const objectAt = (owner: Fields, key: string, what: string): Fields => {
  const value = owner[key]
  if (!isObject(value)) throw new ProviderFailure.MalformedResponse(`${what}.${key} must be an object`)
  return value
}

// ---------------------------------------------------------------------------
// Stop reasons and usage
// ---------------------------------------------------------------------------

export const toFinishReason = (reason: string, outputTool: boolean): ChatModel.FinishReason => {
  switch (reason) {
    case "end_turn":
    case "stop_sequence":
      return "stop"
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length"
    case "tool_use":
      // The forced output tool is how structured output answers: the answer is complete.
      return outputTool ? "stop" : "tool-calls"
    case "refusal":
      return "content-filter"
    default:
      // `pause_turn` (a server tool paused the turn) and whatever comes next.
      return "other"
  }
}

/** The counts of a `usage` object so far (a message delta repeats or updates them). */
interface UsageCounts {
  input: number
  cacheRead: number | undefined
  cacheWrite: number | undefined
  output: number
}

const readUsage = (usage: unknown, into: UsageCounts): void => {
  if (!isObject(usage)) return
  const input = numberOf(usage.input_tokens)
  const read = numberOf(usage.cache_read_input_tokens)
  const write = numberOf(usage.cache_creation_input_tokens)
  const output = numberOf(usage.output_tokens)
  if (input !== undefined) into.input = input
  if (read !== undefined) into.cacheRead = read
  if (write !== undefined) into.cacheWrite = write
  if (output !== undefined) into.output = output
}

const toUsage = (counts: UsageCounts): ChatModel.Usage => {
  const inputTokens = counts.input + (counts.cacheRead ?? 0) + (counts.cacheWrite ?? 0)
  return {
    inputTokens,
    outputTokens: counts.output,
    totalTokens: inputTokens + counts.output,
    ...(counts.cacheRead !== undefined && { cachedInputTokens: counts.cacheRead }),
    ...(counts.cacheWrite !== undefined && { cacheWriteInputTokens: counts.cacheWrite })
  }
}

const emptyUsage = (): UsageCounts => ({ input: 0, cacheRead: undefined, cacheWrite: undefined, output: 0 })

/** The refusal text of `stop_details` (Anthropic's explanation of a refusal), if any. */
const refusalOf = (details: unknown): string | undefined =>
  isObject(details) ? stringOf(details.explanation) : undefined

const stopSequenceMetadata = (sequence: unknown): ChatModel.ChatResponse["providerMetadata"] =>
  typeof sequence === "string" ? { anthropic: { stopSequence: sequence } } : undefined

// ---------------------------------------------------------------------------
// A whole message
// ---------------------------------------------------------------------------

/** A non-streamed `message` as core's response; a `MalformedResponse` when it is not one. */
export const fromMessage = (body: unknown, outputTool: string | undefined): ChatModel.ChatResponse => {
  if (!isObject(body) || body.type !== "message") {
    throw new ProviderFailure.MalformedResponse("expected a JSON object of type message")
  }
  const content = body.content
  if (!Array.isArray(content)) throw new ProviderFailure.MalformedResponse("message.content must be an array")
  let text = ""
  const reasoningParts: Array<Message.ReasoningPart> = []
  const toolCalls: Array<{ id: string; name: string; arguments: string }> = []
  let answeredByOutputTool = false
  for (const block of content) {
    if (!isObject(block))
      throw new ProviderFailure.MalformedResponse("message.content holds a block that is not an object")
    switch (block.type) {
      case "text":
        text += stringOf(block.text) ?? ""
        break
      case "thinking": {
        const signature = stringOf(block.signature)
        const thinking = stringOf(block.thinking) ?? ""
        reasoningParts.push(
          signature === undefined
            ? Message.reasoningPart(thinking)
            : Message.reasoningPart(thinking, { anthropic: { signature } })
        )
        break
      }
      case "redacted_thinking":
        reasoningParts.push(
          Message.reasoningPart("", { anthropic: { redactedData: stringOf(block.data) ?? "" } })
        )
        break
      case "tool_use": {
        const name = stringOf(block.name) ?? ""
        const input = JSON.stringify(block.input ?? {})
        if (outputTool !== undefined && name === outputTool) {
          answeredByOutputTool = true
          text += input
        } else {
          toolCalls.push({ id: stringOf(block.id) ?? "", name, arguments: input })
        }
        break
      }
    }
  }
  const raw = stringOf(body.stop_reason)
  const counts = emptyUsage()
  readUsage(body.usage, counts)
  const refusal = raw === "refusal" ? refusalOf(body.stop_details) : undefined
  const reasoning = reasoningParts.map((part) => part.text).join("")
  const providerMetadata = stopSequenceMetadata(body.stop_sequence)
  return {
    text,
    ...(reasoning.length > 0 && { reasoning }),
    ...(reasoningParts.length > 0 && { reasoningParts }),
    toolCalls,
    finishReason: raw === undefined ? "stop" : toFinishReason(raw, answeredByOutputTool),
    ...(raw !== undefined && { rawFinishReason: raw }),
    usage: toUsage(counts),
    ...(refusal !== undefined && { refusal }),
    ...(typeof body.id === "string" && body.id.length > 0 && { id: body.id }),
    ...(typeof body.model === "string" && body.model.length > 0 && { model: body.model }),
    ...(providerMetadata !== undefined && { providerMetadata })
  }
}

// ---------------------------------------------------------------------------
// A streamed message
// ---------------------------------------------------------------------------

/** What a content block being streamed is, by its index in the message. */
type OpenBlock =
  | { readonly kind: "text" }
  | { readonly kind: "output" }
  | { readonly kind: "thinking"; signature: string | undefined }
  /** `arguments`: how much argument text was sent, to tell a call without any. */
  | { readonly kind: "tool"; readonly index: number; arguments: number }
  | { readonly kind: "other" }

/**
 * Turns SSE events into core chunks, one at a time. Stateful (one per stream):
 * it numbers the tool calls, remembers which block is which and what usage
 * was reported. `ping`s and events it does not know yield nothing.
 */
export class EventTranslator {
  private readonly blocks = new Map<number, OpenBlock>()
  private readonly usage = emptyUsage()
  private toolCalls = 0
  private answeredByOutputTool = false
  private finished = false

  constructor(private readonly outputTool: string | undefined) {}

  /** True once Anthropic gave the stop reason: a stream that ends before was cut off. */
  get isFinished(): boolean {
    return this.finished
  }

  /** Throws `MalformedResponse` for an event of the wrong shape. */
  translate(raw: unknown): Array<ChatModel.StreamChunk> {
    const chunks = this.chunksOf(raw)
    const held = this.held
    if (held === undefined || chunks.length === 0) return chunks
    this.held = undefined
    held.push(...chunks)
    return held
  }

  /**
   * The response's id and model, held back until the next event that has chunks of its own:
   * sent alone, they would cost the first token a trip through every stream layer.
   */
  private held: Array<ChatModel.StreamChunk> | undefined

  private chunksOf(raw: unknown): Array<ChatModel.StreamChunk> {
    if (!isObject(raw) || typeof raw.type !== "string") {
      throw new ProviderFailure.MalformedResponse("an event without a type")
    }
    switch (raw.type) {
      case "message_start":
        this.held = this.start(objectAt(raw, "message", "message_start"))
        return []
      case "content_block_start":
        return this.blockStart(this.indexOf(raw), objectAt(raw, "content_block", "content_block_start"))
      case "content_block_delta":
        return this.blockDelta(this.indexOf(raw), objectAt(raw, "delta", "content_block_delta"))
      case "content_block_stop":
        return this.blockStop(this.indexOf(raw))
      case "message_delta":
        return this.messageDelta(objectAt(raw, "delta", "message_delta"), raw.usage)
      default:
        // `ping`, `message_stop`, and event types added after this adapter.
        return []
    }
  }

  private indexOf(event: Fields): number {
    const index = numberOf(event.index)
    if (index === undefined)
      throw new ProviderFailure.MalformedResponse(`${String(event.type)}.index must be a number`)
    return index
  }

  private start(message: Fields): Array<ChatModel.StreamChunk> {
    readUsage(message.usage, this.usage)
    const id = stringOf(message.id)
    const model = stringOf(message.model)
    if ((id === undefined || id === "") && (model === undefined || model === "")) return []
    return [
      {
        type: "response-metadata",
        ...(id !== undefined && id !== "" && { id }),
        ...(model !== undefined && model !== "" && { model })
      }
    ]
  }

  private blockStart(index: number, block: Fields): Array<ChatModel.StreamChunk> {
    switch (block.type) {
      case "text": {
        this.blocks.set(index, { kind: "text" })
        const text = stringOf(block.text) ?? ""
        return text.length > 0 ? [{ type: "text-delta", delta: text }] : []
      }
      case "thinking": {
        this.blocks.set(index, { kind: "thinking", signature: stringOf(block.signature) || undefined })
        const thinking = stringOf(block.thinking) ?? ""
        return thinking.length > 0 ? [{ type: "reasoning-delta", delta: thinking }] : []
      }
      case "redacted_thinking":
        this.blocks.set(index, { kind: "other" })
        return [
          {
            type: "reasoning-end",
            providerMetadata: { anthropic: { redactedData: stringOf(block.data) ?? "" } }
          }
        ]
      case "tool_use": {
        const name = stringOf(block.name) ?? ""
        // The input a block starts with is `{}` when deltas follow; kept in case none do.
        const input =
          isObject(block.input) && Object.keys(block.input).length > 0 ? JSON.stringify(block.input) : ""
        if (this.outputTool !== undefined && name === this.outputTool) {
          this.answeredByOutputTool = true
          this.blocks.set(index, { kind: "output" })
          return input.length > 0 ? [{ type: "text-delta", delta: input }] : []
        }
        const call = this.toolCalls++
        this.blocks.set(index, { kind: "tool", index: call, arguments: input.length })
        const id = stringOf(block.id)
        return [
          {
            type: "tool-call-delta",
            index: call,
            ...(id !== undefined && id.length > 0 && { id }),
            ...(name.length > 0 && { name }),
            argumentsDelta: input
          }
        ]
      }
      default:
        this.blocks.set(index, { kind: "other" })
        return []
    }
  }

  private blockDelta(index: number, delta: Fields): Array<ChatModel.StreamChunk> {
    const block = this.blocks.get(index)
    if (block === undefined)
      throw new ProviderFailure.MalformedResponse(`a delta for block ${index}, which never started`)
    switch (delta.type) {
      case "text_delta": {
        const text = stringOf(delta.text) ?? ""
        return text.length > 0 && block.kind === "text" ? [{ type: "text-delta", delta: text }] : []
      }
      case "thinking_delta": {
        const thinking = stringOf(delta.thinking) ?? ""
        return thinking.length > 0 && block.kind === "thinking"
          ? [{ type: "reasoning-delta", delta: thinking }]
          : []
      }
      case "signature_delta":
        if (block.kind === "thinking")
          block.signature = (block.signature ?? "") + (stringOf(delta.signature) ?? "")
        return []
      case "input_json_delta": {
        const json = stringOf(delta.partial_json) ?? ""
        if (json.length === 0) return []
        if (block.kind === "output") return [{ type: "text-delta", delta: json }]
        if (block.kind !== "tool") return []
        block.arguments += json.length
        return [{ type: "tool-call-delta", index: block.index, argumentsDelta: json }]
      }
      default:
        // `citations_delta` and delta types added after this adapter.
        return []
    }
  }

  private blockStop(index: number): Array<ChatModel.StreamChunk> {
    const block = this.blocks.get(index)
    if (block?.kind === "thinking") {
      return [
        block.signature === undefined
          ? { type: "reasoning-end" }
          : { type: "reasoning-end", providerMetadata: { anthropic: { signature: block.signature } } }
      ]
    }
    // A call without arguments streams none: its input is the empty object, not empty text.
    if (block?.kind === "tool" && block.arguments === 0) {
      return [{ type: "tool-call-delta", index: block.index, argumentsDelta: "{}" }]
    }
    return []
  }

  private messageDelta(delta: Fields, usage: unknown): Array<ChatModel.StreamChunk> {
    readUsage(usage, this.usage)
    const raw = stringOf(delta.stop_reason)
    if (raw === undefined) return []
    this.finished = true
    const out: Array<ChatModel.StreamChunk> = []
    const refusal = raw === "refusal" ? refusalOf(delta.stop_details) : undefined
    if (refusal !== undefined) out.push({ type: "refusal-delta", delta: refusal })
    const providerMetadata = stopSequenceMetadata(delta.stop_sequence)
    if (providerMetadata !== undefined) out.push({ type: "response-metadata", providerMetadata })
    out.push(
      { type: "finish", finishReason: toFinishReason(raw, this.answeredByOutputTool), rawFinishReason: raw },
      { type: "usage", usage: toUsage(this.usage) }
    )
    return out
  }
}
