/**
 * Translation between core's normalised chat request/response and OpenAI's
 * Chat Completions wire format. Responses are checked field by field
 * (`wire.ts`) for only what noema uses, tolerating what compatible servers
 * leave out or send as `null`, so a server's quirks become either a sensible
 * default or an `InvalidOutput` failure, never an exception from deep inside
 * the adapter.
 */
import { type ChatModel, type Message, ProviderFailure } from "@noema/core"
import type OpenAI from "openai"
import {
  type ChunkWire,
  type CompletionWire,
  chunkProblem,
  completionProblem,
  type MessageWire,
  type ToolCallWire,
  type UsageWire
} from "./wire.js"

type Params = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming
type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam
type UserPart =
  | OpenAI.Chat.Completions.ChatCompletionContentPartText
  | OpenAI.Chat.Completions.ChatCompletionContentPartImage

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

/** Images OpenAI can fetch or read inline: `image_url` takes http(s) URLs and `data:` URIs. */
export const isSendableImage = (file: Message.FilePart): boolean =>
  file.mediaType.startsWith("image/") &&
  (file.uri.startsWith("https://") || file.uri.startsWith("http://") || file.uri.startsWith("data:"))

/** How a file the model cannot be sent appears in the text: its name, type and where it is. */
export const fileReference = (file: Message.FilePart): string => {
  const where = file.uri.startsWith("data:") ? "inline data, not sent" : file.uri
  return `[file${file.name === undefined ? "" : ` "${file.name}"`} (${file.mediaType}): ${where}]`
}

/** Text with a file reference appended on a line of its own. */
const appendReference = (text: string, file: Message.FilePart): string =>
  `${text}${text.length > 0 && !text.endsWith("\n") ? "\n" : ""}${fileReference(file)}`

/**
 * A message's text for the wire: text parts joined, files as references,
 * reasoning left out (the model's own thinking is never sent back as its answer).
 */
export const textForWire = (content: ReadonlyArray<Message.ContentPart>): string => {
  let text = ""
  for (const part of content) {
    if (part.type === "text") text += part.text
    else if (part.type === "file") text = appendReference(text, part)
  }
  return text
}

/** A user's parts: a string unless there is an image to send (compatible servers often take only strings). */
const userContent = (content: ReadonlyArray<Message.UserContentPart>): string | Array<UserPart> => {
  if (!content.some((part) => part.type === "file" && isSendableImage(part))) return textForWire(content)
  const parts: Array<UserPart> = []
  for (const part of content) {
    if (part.type === "text") parts.push({ type: "text", text: part.text })
    else if (isSendableImage(part)) parts.push({ type: "image_url", image_url: { url: part.uri } })
    else parts.push({ type: "text", text: fileReference(part) })
  }
  return parts
}

const toMessageParam = (message: Message.Message): MessageParam => {
  switch (message.role) {
    case "system":
      return { role: "system", content: message.content }
    case "user":
      return {
        role: "user",
        content: typeof message.content === "string" ? message.content : userContent(message.content)
      }
    case "assistant": {
      const toolCalls = message.toolCalls ?? []
      const text = typeof message.content === "string" ? message.content : textForWire(message.content)
      return {
        role: "assistant",
        // OpenAI wants `null`, not "", next to tool calls; some compatible servers reject "".
        content: text === "" && toolCalls.length > 0 ? null : text,
        ...(toolCalls.length > 0 && {
          tool_calls: toolCalls.map((call) => ({
            id: call.id,
            type: "function" as const,
            function: { name: call.name, arguments: call.arguments }
          }))
        }),
        ...(message.refusal !== undefined && { refusal: message.refusal })
      }
    }
    case "tool":
      return { role: "tool", tool_call_id: message.toolCallId, content: message.content }
  }
}

const toToolChoice = (choice: ChatModel.ToolChoice): NonNullable<Params["tool_choice"]> =>
  typeof choice === "string" ? choice : { type: "function", function: { name: choice.tool } }

const toResponseFormat = (format: ChatModel.ResponseFormat): NonNullable<Params["response_format"]> => {
  switch (format.type) {
    case "text":
      return { type: "text" }
    case "json":
      return { type: "json_object" }
    case "json-schema":
      return {
        type: "json_schema",
        json_schema: {
          name: format.name,
          schema: { ...format.schema },
          ...(format.description !== undefined && { description: format.description }),
          ...(format.strict !== undefined && { strict: format.strict })
        }
      }
  }
}

/**
 * The request body. `providerOptions.openai` (and `providerOptions[provider]` for a
 * compatible server registered under its own name) is merged last, so it can set
 * anything the normalised request has no field for, or override what it has.
 */
export const toParams = (model: string, provider: string, request: ChatModel.ChatRequest): Params => {
  const messages: Array<MessageParam> = []
  for (const message of request.messages) messages.push(toMessageParam(message))
  const tools = request.tools ?? []
  // OpenAI rejects tool_choice and parallel_tool_calls when no tools are sent.
  const hasTools = tools.length > 0
  const params: Params = {
    model,
    messages,
    ...(hasTools && {
      tools: tools.map((tool) => ({
        type: "function" as const,
        function: {
          name: tool.name,
          description: tool.description,
          parameters: { ...tool.parameters },
          ...(tool.strict !== undefined && { strict: tool.strict })
        }
      }))
    }),
    ...(hasTools && request.toolChoice !== undefined && { tool_choice: toToolChoice(request.toolChoice) }),
    ...(hasTools &&
      request.parallelToolCalls !== undefined && { parallel_tool_calls: request.parallelToolCalls }),
    ...(request.temperature !== undefined && { temperature: request.temperature }),
    ...(request.topP !== undefined && { top_p: request.topP }),
    ...(request.maxTokens !== undefined && { max_completion_tokens: request.maxTokens }),
    ...(request.stop !== undefined && request.stop.length > 0 && { stop: [...request.stop] }),
    ...(request.seed !== undefined && { seed: request.seed }),
    ...(request.responseFormat !== undefined && { response_format: toResponseFormat(request.responseFormat) })
  }
  const own = request.providerOptions?.openai
  const named = provider === "openai" ? undefined : request.providerOptions?.[provider]
  if (own === undefined && named === undefined) return params
  // Provider options are free-form by design: the SDK's types cannot describe them.
  const merged: { [key: string]: unknown } = { ...params, ...own, ...named }
  // Whether to stream is decided by calling `complete` or `stream`, never by an option:
  // a streamed body behind `complete` would be left unread.
  delete merged.stream
  return merged as unknown as Params
}

// ---------------------------------------------------------------------------
// Response
// ---------------------------------------------------------------------------

const toFinishReason = (reason: string | null | undefined, hasToolCalls: boolean): ChatModel.FinishReason => {
  switch (reason) {
    case "stop":
    case null:
    case undefined:
      // Some compatible servers answer tool calls with "stop"; what they did matters more.
      return hasToolCalls ? "tool-calls" : "stop"
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      return "tool-calls"
    case "content_filter":
      return "content-filter"
    default:
      return "other"
  }
}

export const toUsage = (usage: UsageWire | null | undefined): ChatModel.Usage | undefined => {
  if (usage === null || usage === undefined) return undefined
  if (typeof usage.prompt_tokens !== "number" && typeof usage.completion_tokens !== "number") return undefined
  const inputTokens = usage.prompt_tokens ?? 0
  const outputTokens = usage.completion_tokens ?? 0
  const cached = usage.prompt_tokens_details?.cached_tokens
  const reasoning = usage.completion_tokens_details?.reasoning_tokens
  // Field by field, not through spreads: once per model call, on the hot path.
  const result: Mutable<ChatModel.Usage> = {
    inputTokens,
    outputTokens,
    totalTokens: usage.total_tokens ?? inputTokens + outputTokens
  }
  if (typeof cached === "number") result.cachedInputTokens = cached
  if (typeof reasoning === "number") result.reasoningTokens = reasoning
  return result
}

type Mutable<A> = { -readonly [K in keyof A]: A[K] }

const isFunctionCall = (call: ToolCallWire): boolean =>
  call.type === undefined || call.type === null || call.type === "function"

/** A non-streamed `chat.completion` as core's response; a `MalformedResponse` when it is not one. */
export const fromCompletion = (body: unknown): ChatModel.ChatResponse | ProviderFailure.MalformedResponse => {
  const problem = completionProblem(body)
  if (problem !== undefined) {
    return new ProviderFailure.MalformedResponse(
      typeof body === "string"
        ? "expected a JSON chat completion, got text"
        : `not a chat completion: ${problem}`
    )
  }
  const completion = body as CompletionWire
  const choice = completion.choices.find((candidate) => (candidate.index ?? 0) === 0)
  if (choice === undefined) return new ProviderFailure.MalformedResponse("the completion has no choices")
  // Empty or repeated ids are made unique by core's `ChatModel.make`, for every provider alike.
  const toolCalls = (choice.message.tool_calls ?? []).filter(isFunctionCall).map((call) => ({
    id: call.id ?? "",
    name: call.function?.name ?? "",
    arguments: call.function?.arguments ?? ""
  }))
  const usage = toUsage(completion.usage)
  const message = choice.message
  const refusal = message.refusal
  const reasoning = reasoningOf(message)
  const raw = choice.finish_reason
  // Field by field, not through spreads: once per model call, on the hot path.
  const response: Mutable<ChatModel.ChatResponse> = {
    text: message.content ?? "",
    toolCalls,
    finishReason: toFinishReason(raw, toolCalls.length > 0)
  }
  if (reasoning !== undefined) response.reasoning = reasoning
  if (typeof raw === "string") response.rawFinishReason = raw
  if (usage !== undefined) response.usage = usage
  if (refusal !== undefined && refusal !== null) response.refusal = refusal
  if (typeof completion.id === "string" && completion.id.length > 0) response.id = completion.id
  if (typeof completion.model === "string" && completion.model.length > 0) response.model = completion.model
  return response
}

/**
 * The reasoning a message or delta carries, under either name servers use (the
 * first that is non-empty: a server may send one as "" beside the other);
 * `undefined` when none.
 */
const reasoningOf = (message: MessageWire): string | undefined => {
  const named = message.reasoning_content
  if (typeof named === "string" && named.length > 0) return named
  const text = message.reasoning
  return typeof text === "string" && text.length > 0 ? text : undefined
}

/**
 * Turns SSE chunks into core stream chunks, one at a time. Stateful (one per
 * stream): it remembers whether the response id and model were sent and
 * whether tool calls were seen, and numbers tool calls from servers that omit
 * `index`.
 */
export class ChunkTranslator {
  /** Sent once each, from the first chunk where each is non-empty (Azure opens with an empty one). */
  private idSent = false
  private modelSent = false
  private sawToolCalls = false
  private finished = false
  /** For servers that omit `index`: the index of the call being streamed (a new id starts the next). */
  private unindexedCall = -1

  /** True once the server sent a finish reason: a stream that ends before that was cut off. */
  get isFinished(): boolean {
    return this.finished
  }

  /**
   * Numbers a call from a server that sends no `index` (Ollama, Gemini): a
   * fragment with an id or a name starts a new call (Gemini sends each call
   * whole, sometimes with an empty id), one with neither continues the
   * current call. Calls listed side by side in one chunk are separate calls.
   */
  private indexOf(id: string | null | undefined, name: string | null | undefined, position: number): number {
    if (
      (typeof id === "string" && id.length > 0) ||
      (typeof name === "string" && name.length > 0) ||
      position > 0 ||
      this.unindexedCall < 0
    ) {
      this.unindexedCall++
    }
    return this.unindexedCall
  }

  /** The id and model not sent yet, from this chunk, when it has non-empty ones. */
  private metadata(chunk: ChunkWire, out: Array<ChatModel.StreamChunk>): void {
    const id = !this.idSent && typeof chunk.id === "string" && chunk.id.length > 0 ? chunk.id : undefined
    const model =
      !this.modelSent && typeof chunk.model === "string" && chunk.model.length > 0 ? chunk.model : undefined
    if (id === undefined && model === undefined) return
    if (id !== undefined) this.idSent = true
    if (model !== undefined) this.modelSent = true
    out.push({
      type: "response-metadata",
      ...(id !== undefined && { id }),
      ...(model !== undefined && { model })
    })
  }

  /** Throws `MalformedResponse` for a chunk of the wrong shape. */
  translate(raw: unknown): Array<ChatModel.StreamChunk> {
    const problem = chunkProblem(raw)
    if (problem !== undefined)
      throw new ProviderFailure.MalformedResponse(`not a chat completion chunk: ${problem}`)
    const chunk = raw as ChunkWire
    const out: Array<ChatModel.StreamChunk> = []
    if (!(this.idSent && this.modelSent)) this.metadata(chunk, out)
    for (const choice of chunk.choices ?? []) {
      if ((choice.index ?? 0) !== 0) continue
      const delta = choice.delta
      if (delta !== null && delta !== undefined) {
        const reasoning = reasoningOf(delta)
        if (reasoning !== undefined) out.push({ type: "reasoning-delta", delta: reasoning })
        if (typeof delta.content === "string" && delta.content.length > 0) {
          out.push({ type: "text-delta", delta: delta.content })
        }
        if (typeof delta.refusal === "string" && delta.refusal.length > 0) {
          out.push({ type: "refusal-delta", delta: delta.refusal })
        }
        const calls = delta.tool_calls ?? []
        for (let position = 0; position < calls.length; position++) {
          const call = calls[position] as (typeof calls)[number]
          if (!isFunctionCall(call)) continue
          this.sawToolCalls = true
          const name = call.function?.name
          out.push({
            type: "tool-call-delta",
            index: call.index ?? this.indexOf(call.id, name, position),
            ...(typeof call.id === "string" && call.id.length > 0 && { id: call.id }),
            ...(typeof name === "string" && name.length > 0 && { name }),
            argumentsDelta: call.function?.arguments ?? ""
          })
        }
      }
      if (typeof choice.finish_reason === "string") {
        this.finished = true
        out.push({
          type: "finish",
          finishReason: toFinishReason(choice.finish_reason, this.sawToolCalls),
          rawFinishReason: choice.finish_reason
        })
      }
    }
    // With `include_usage`, the last chunk has empty `choices` and the totals.
    const usage = toUsage(chunk.usage)
    if (usage !== undefined) out.push({ type: "usage", usage })
    return out
  }
}
