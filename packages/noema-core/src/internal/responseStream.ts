/**
 * The stream side of `ChatModel`, shared by every provider: the normaliser
 * `ChatModel.make` puts on every stream (complete tool calls with ids unique
 * within the response, a `finish` even when the provider forgot one), the
 * accumulator that folds chunks into a response, and the conversions between
 * responses, streams and assistant messages. Re-exported by `ChatModel`.
 *
 * These run on every streamed call (the bench measures them): they copy a
 * batch only when they must and allocate per tool call, not per chunk.
 */
import { Array as Arr, Cause, Effect, Pull, Stream } from "effect"
import type { ChatResponse, FinishReason, StreamChunk, Usage } from "../ChatModel.js"
import type { AssistantMessage, ContentPart, ProviderMetadata, ReasoningPart, ToolCall } from "../Message.js"
import * as Messages from "../Message.js"

// ---------------------------------------------------------------------------
// Normaliser
// ---------------------------------------------------------------------------

interface PartialCall {
  id: string | undefined
  name: string | undefined
  arguments: string
}

interface StreamState {
  readonly calls: Array<PartialCall | undefined>
  finished: boolean
}

/**
 * The ids the calls go out with: the provider's, unless it sent none, an
 * empty one, or one an earlier call of the response already has. Parallel
 * calls must never share an id: the tool results are matched to calls by it.
 */
const callIds = (calls: ReadonlyArray<PartialCall | undefined>): Array<string | undefined> => {
  const ids: Array<string | undefined> = new Array(calls.length)
  let taken: Set<string> | undefined
  for (let index = 0; index < calls.length; index++) {
    const call = calls[index]
    if (call === undefined) continue
    const base = call.id !== undefined && call.id.length > 0 ? call.id : `call_${index}`
    let id = base
    if (index > 0) {
      // Only a response with several calls pays for the set.
      if (taken === undefined) {
        taken = new Set()
        for (let before = 0; before < index; before++) {
          const earlier = ids[before]
          if (earlier !== undefined) taken.add(earlier)
        }
      }
      for (let suffix = 2; taken.has(id); suffix++) id = `${base}_${suffix}`
      taken.add(id)
    }
    ids[index] = id
  }
  return ids
}

const completedCalls = (calls: ReadonlyArray<PartialCall | undefined>): Array<StreamChunk> => {
  const chunks: Array<StreamChunk> = []
  if (calls.length === 0) return chunks
  const ids = callIds(calls)
  for (let index = 0; index < calls.length; index++) {
    const call = calls[index]
    if (call === undefined) continue
    chunks.push({
      type: "tool-call",
      toolCall: { id: ids[index] as string, name: call.name ?? "", arguments: call.arguments }
    })
  }
  return chunks
}

/**
 * A complete response whose tool calls all have ids unique within it (the
 * same response when they already do, as nearly all do).
 */
export const withUniqueToolCallIds = (response: ChatResponse): ChatResponse => {
  const calls = response.toolCalls
  if (calls.length === 0) return response
  const ids = callIds(calls.map((call) => ({ id: call.id, name: call.name, arguments: call.arguments })))
  if (calls.every((call, index) => call.id === ids[index])) return response
  return { ...response, toolCalls: calls.map((call, index) => ({ ...call, id: ids[index] as string })) }
}

/** True when `call` is one the state already holds (the same id, once made unique, name and arguments). */
const isKnown = (state: StreamState, call: ToolCall): boolean => {
  const ids = callIds(state.calls)
  return state.calls.some(
    (known, index) =>
      known !== undefined &&
      ids[index] === call.id &&
      (known.name ?? "") === call.name &&
      known.arguments === call.arguments
  )
}

/** What a batch of chunks becomes: deltas recorded, complete calls added before `finish`. */
const normaliseBatch = (
  state: StreamState,
  chunks: Arr.NonEmptyReadonlyArray<StreamChunk>
): ReadonlyArray<StreamChunk> => {
  let out: Array<StreamChunk> | undefined
  for (let i = 0; i < chunks.length; i++) {
    const chunk = chunks[i] as StreamChunk
    if (chunk.type === "tool-call-delta") {
      const call = state.calls[chunk.index]
      if (call === undefined) {
        state.calls[chunk.index] = { id: chunk.id, name: chunk.name, arguments: chunk.argumentsDelta }
      } else {
        // An empty id is no id: some servers send "" and the real one later, or never.
        if ((call.id === undefined || call.id === "") && chunk.id !== undefined) call.id = chunk.id
        if (call.name === undefined && chunk.name !== undefined) call.name = chunk.name
        call.arguments += chunk.argumentsDelta
      }
    } else if (chunk.type === "finish") {
      // Copy lazily: most batches have no finish chunk and pass through untouched.
      out ??= chunks.slice(0, i) as Array<StreamChunk>
      if (state.finished) continue
      state.finished = true
      out.push(...completedCalls(state.calls), chunk)
      continue
    } else if (chunk.type === "tool-call") {
      // A provider that reassembles calls itself (or an already normalised
      // stream): hold the call back so every model emits complete calls at
      // the same point, right before finish, and never twice.
      out ??= chunks.slice(0, i) as Array<StreamChunk>
      if (!isKnown(state, chunk.toolCall)) {
        const { id, name, arguments: args } = chunk.toolCall
        state.calls.push({ id, name, arguments: args })
      }
      continue
    }
    out?.push(chunk)
  }
  return out ?? chunks
}

/**
 * Adds complete `tool-call` chunks (reassembled from deltas by index, however
 * interleaved, each with an id unique within the response) right before
 * `finish`, and a `finish` when the provider ended without one (but not when
 * it failed). Normalising twice changes nothing.
 *
 * One pull-level layer (not map + concat): it sits on every streamed call,
 * and each stream layer costs per batch and per run.
 */
export const normaliseStream = <E, R>(
  stream: Stream.Stream<StreamChunk, E, R>
): Stream.Stream<StreamChunk, E, R> =>
  Stream.transformPull(stream, (pull) =>
    Effect.sync(() => {
      const state: StreamState = { calls: [], finished: false }
      let ended = false
      const end = (): Pull.Pull<Arr.NonEmptyReadonlyArray<StreamChunk>, E> => {
        const alreadyFinished = ended || state.finished
        ended = true
        if (alreadyFinished) return Cause.done()
        const calls = completedCalls(state.calls)
        calls.push({ type: "finish", finishReason: calls.length > 0 ? "tool-calls" : "stop" })
        return Effect.succeed(calls as Arr.NonEmptyArray<StreamChunk>)
      }
      const next: Pull.Pull<Arr.NonEmptyReadonlyArray<StreamChunk>, E> = Effect.suspend(() =>
        ended
          ? Cause.done()
          : Pull.catchDone(
              Effect.flatMap(pull, (chunks) => {
                const out = normaliseBatch(state, chunks)
                return Arr.isReadonlyArrayNonEmpty(out) ? Effect.succeed(out) : next
              }),
              end
            )
      )
      return next
    })
  )

// ---------------------------------------------------------------------------
// Accumulator
// ---------------------------------------------------------------------------

/** Folds a stream into a complete response (what `complete` returns). */
export const collect = <E, R>(stream: Stream.Stream<StreamChunk, E, R>): Effect.Effect<ChatResponse, E, R> =>
  fold(normaliseStream(stream))

/** Folds a stream that is already normalised (as every `make`-built model's is). */
export const fold = <E, R>(stream: Stream.Stream<StreamChunk, E, R>): Effect.Effect<ChatResponse, E, R> =>
  Stream.runFold(
    stream,
    () => new ResponseAccumulator(),
    (accumulator, chunk) => accumulator.add(chunk)
  ).pipe(Effect.map((accumulator) => accumulator.build()))

/**
 * Folds stream chunks into the response they amount to: text, reasoning,
 * refusal, complete tool calls, finish reason, usage, and the response's id
 * and model (each from the first chunk that has a non-empty one: Azure opens
 * with a content-filter chunk whose id and model are empty). `collect` uses
 * it; so can anyone who consumes a stream chunk by chunk and needs the
 * response, or the assistant message (`message()`), at the end.
 */
export class ResponseAccumulator {
  private text = ""
  private reasoning: string | undefined
  /** The reasoning parts ended so far, and where in `reasoning` the current one starts. */
  private reasoningParts: Array<ReasoningPart> | undefined
  private reasoningPartStart = 0
  private providerMetadata: ProviderMetadata | undefined
  private refusal: string | undefined
  private readonly toolCalls: Array<ToolCall> = []
  private finishReason: FinishReason = "stop"
  private rawFinishReason: string | undefined
  private usage: Usage | undefined
  private id: string | undefined
  private model: string | undefined
  add(chunk: StreamChunk): this {
    switch (chunk.type) {
      case "text-delta":
        this.text += chunk.delta
        break
      case "reasoning-delta":
        this.reasoning = this.reasoning === undefined ? chunk.delta : this.reasoning + chunk.delta
        break
      case "reasoning-end": {
        const all = this.reasoning ?? ""
        const text = all.slice(this.reasoningPartStart)
        this.reasoningParts ??= []
        // An empty part is kept only for what the provider attached to it (redacted thinking).
        if (text.length > 0 || chunk.providerMetadata !== undefined) {
          this.reasoningParts.push(Messages.reasoningPart(text, chunk.providerMetadata))
        }
        this.reasoningPartStart = all.length
        break
      }
      case "refusal-delta":
        this.refusal = (this.refusal ?? "") + chunk.delta
        break
      case "tool-call":
        this.toolCalls.push(chunk.toolCall)
        break
      case "finish":
        this.finishReason = chunk.finishReason
        this.rawFinishReason = chunk.rawFinishReason
        break
      case "usage":
        this.usage = chunk.usage
        break
      case "response-metadata":
        if (this.id === undefined && chunk.id !== undefined && chunk.id.length > 0) this.id = chunk.id
        if (this.model === undefined && chunk.model !== undefined && chunk.model.length > 0) {
          this.model = chunk.model
        }
        if (chunk.providerMetadata !== undefined) {
          this.providerMetadata = { ...this.providerMetadata, ...chunk.providerMetadata }
        }
        break
      case "tool-call-delta":
        break
    }
    return this
  }
  build(): ChatResponse {
    const reasoningParts = this.builtReasoningParts()
    return {
      text: this.text,
      ...(this.reasoning !== undefined && this.reasoning.length > 0 && { reasoning: this.reasoning }),
      ...(reasoningParts !== undefined && { reasoningParts }),
      toolCalls: this.toolCalls,
      finishReason: this.finishReason,
      ...(this.rawFinishReason !== undefined && { rawFinishReason: this.rawFinishReason }),
      ...(this.usage !== undefined && { usage: this.usage }),
      ...(this.refusal !== undefined && { refusal: this.refusal }),
      ...(this.id !== undefined && { id: this.id }),
      ...(this.model !== undefined && { model: this.model }),
      ...(this.providerMetadata !== undefined && { providerMetadata: this.providerMetadata })
    }
  }
  /** The parts ended so far, and the reasoning after the last of them as one more part. */
  private builtReasoningParts(): ReadonlyArray<ReasoningPart> | undefined {
    const parts = this.reasoningParts
    if (parts === undefined) return undefined
    const rest = (this.reasoning ?? "").slice(this.reasoningPartStart)
    if (rest.length > 0) return [...parts, Messages.reasoningPart(rest)]
    return parts.length === 0 ? undefined : parts.slice()
  }
  /** The assistant message the chunks so far amount to (`toMessage(build())`). */
  message(): AssistantMessage {
    return toMessage(this.build())
  }
}

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

/** A complete response replayed as stream chunks (for providers without streaming). */
export const responseToStream = (response: ChatResponse): Stream.Stream<StreamChunk> => {
  const chunks: Array<StreamChunk> = []
  if (response.id !== undefined || response.model !== undefined || response.providerMetadata !== undefined) {
    chunks.push({
      type: "response-metadata",
      ...(response.id !== undefined && { id: response.id }),
      ...(response.model !== undefined && { model: response.model }),
      ...(response.providerMetadata !== undefined && { providerMetadata: response.providerMetadata })
    })
  }
  if (response.reasoningParts !== undefined) {
    for (const part of response.reasoningParts) {
      if (part.text.length > 0) chunks.push({ type: "reasoning-delta", delta: part.text })
      chunks.push(
        part.providerMetadata === undefined
          ? { type: "reasoning-end" }
          : { type: "reasoning-end", providerMetadata: part.providerMetadata }
      )
    }
  } else if (response.reasoning !== undefined && response.reasoning.length > 0) {
    chunks.push({ type: "reasoning-delta", delta: response.reasoning })
  }
  if (response.text.length > 0) chunks.push({ type: "text-delta", delta: response.text })
  if (response.refusal !== undefined) chunks.push({ type: "refusal-delta", delta: response.refusal })
  for (const call of response.toolCalls) chunks.push({ type: "tool-call", toolCall: call })
  chunks.push({
    type: "finish",
    finishReason: response.finishReason,
    ...(response.rawFinishReason !== undefined && { rawFinishReason: response.rawFinishReason })
  })
  if (response.usage !== undefined) chunks.push({ type: "usage", usage: response.usage })
  return Stream.fromArray(chunks)
}

/**
 * The assistant message a response amounts to: its text (a plain string), or,
 * when the model reasoned, its reasoning parts (one, or as the provider divided
 * and signed them) followed by the text; with its tool calls, refusal, finish
 * reason (normalised and raw) and usage.
 */
export const toMessage = (response: ChatResponse, model?: string): AssistantMessage => {
  const reasoning = response.reasoning
  let content: string | ReadonlyArray<ContentPart> = response.text
  if (response.reasoningParts !== undefined && response.reasoningParts.length > 0) {
    content =
      response.text.length > 0
        ? [...response.reasoningParts, Messages.textPart(response.text)]
        : response.reasoningParts
  } else if (reasoning !== undefined && reasoning.length > 0) {
    content =
      response.text.length > 0
        ? [Messages.reasoningPart(reasoning), Messages.textPart(response.text)]
        : [Messages.reasoningPart(reasoning)]
  }
  // Built field by field rather than through spreads: one per model call, on the hot path.
  const message: Mutable<AssistantMessage> = { role: "assistant", content }
  if (response.toolCalls.length > 0) message.toolCalls = response.toolCalls
  if (response.refusal !== undefined) message.refusal = response.refusal
  message.finishReason = response.finishReason
  if (response.rawFinishReason !== undefined) message.rawFinishReason = response.rawFinishReason
  if (response.usage !== undefined) message.usage = response.usage
  // The model the provider says answered, else the one that was asked.
  const answered = response.model ?? model
  if (answered !== undefined) message.model = answered
  return message
}

type Mutable<A> = { -readonly [K in keyof A]: A[K] }
