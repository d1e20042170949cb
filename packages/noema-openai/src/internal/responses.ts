/**
 * Translation between core's normalised chat request/response and OpenAI's
 * Responses API (`POST /v1/responses`).
 *
 * Request: system messages become `instructions` (joined, in order) when they
 * lead the conversation, and `system` input items otherwise; user and
 * assistant text become message items; an assistant's tool calls become
 * `function_call` items and tool results `function_call_output` items (linked
 * by `call_id`); tools are flat `function` tools; a JSON Schema response
 * format is `text.format`. The response is read item by item (`message`
 * output text and refusals, `function_call`s, `reasoning` summaries), and the
 * stream event by event. Responses are stateless here (`store: false`): the
 * session, not OpenAI, keeps the conversation.
 */
import { type ChatModel, type Message, ProviderFailure } from "@noema/core"
import type OpenAI from "openai"
import { fileReference, isSendableImage, textForWire } from "./chat.js"

type Params = OpenAI.Responses.ResponseCreateParamsNonStreaming
type InputItem = OpenAI.Responses.ResponseInputItem
type InputContent = OpenAI.Responses.ResponseInputMessageContentList[number]

// ---------------------------------------------------------------------------
// Request
// ---------------------------------------------------------------------------

const userContent = (content: Message.UserMessage["content"]): string | Array<InputContent> => {
  if (typeof content === "string") return content
  if (!content.some((part) => part.type === "file" && isSendableImage(part))) return textForWire(content)
  const parts: Array<InputContent> = []
  for (const part of content) {
    if (part.type === "text") parts.push({ type: "input_text", text: part.text })
    else if (isSendableImage(part)) parts.push({ type: "input_image", image_url: part.uri, detail: "auto" })
    else parts.push({ type: "input_text", text: fileReference(part) })
  }
  return parts
}

const toItems = (message: Message.Message): Array<InputItem> => {
  switch (message.role) {
    case "system":
      return [{ role: "system", content: message.content }]
    case "user":
      return [{ role: "user", content: userContent(message.content) }]
    case "assistant": {
      const items: Array<InputItem> = []
      const text = typeof message.content === "string" ? message.content : textForWire(message.content)
      if (text.length > 0) items.push({ role: "assistant", content: text })
      for (const call of message.toolCalls ?? []) {
        items.push({ type: "function_call", call_id: call.id, name: call.name, arguments: call.arguments })
      }
      return items
    }
    case "tool":
      return [{ type: "function_call_output", call_id: message.toolCallId, output: message.content }]
  }
}

const toToolChoice = (choice: ChatModel.ToolChoice): NonNullable<Params["tool_choice"]> =>
  typeof choice === "string" ? choice : { type: "function", name: choice.tool }

const toTextFormat = (format: ChatModel.ResponseFormat): NonNullable<Params["text"]> => {
  switch (format.type) {
    case "text":
      return { format: { type: "text" } }
    case "json":
      return { format: { type: "json_object" } }
    case "json-schema":
      return {
        format: {
          type: "json_schema",
          name: format.name,
          schema: { ...format.schema },
          ...(format.description !== undefined && { description: format.description }),
          ...(format.strict !== undefined && { strict: format.strict })
        }
      }
  }
}

/** The request body; `providerOptions.openai` is merged last, as for Chat Completions. */
export const toResponsesParams = (model: string, request: ChatModel.ChatRequest): Params => {
  const messages = Array.from(request.messages)
  // Leading system messages are the instructions; later ones stay where they are.
  let lead = 0
  while (lead < messages.length && messages[lead]?.role === "system") lead++
  const instructions = messages
    .slice(0, lead)
    .map((message) => (message as Message.SystemMessage).content)
    .join("\n\n")
  const input = messages.slice(lead).flatMap(toItems)
  const tools = request.tools ?? []
  const hasTools = tools.length > 0
  const params: Params = {
    model,
    input,
    store: false,
    ...(instructions.length > 0 && { instructions }),
    ...(hasTools && {
      tools: tools.map((tool) => ({
        type: "function" as const,
        name: tool.name,
        description: tool.description,
        parameters: { ...tool.parameters },
        strict: tool.strict ?? false
      }))
    }),
    ...(hasTools && request.toolChoice !== undefined && { tool_choice: toToolChoice(request.toolChoice) }),
    ...(hasTools &&
      request.parallelToolCalls !== undefined && { parallel_tool_calls: request.parallelToolCalls }),
    ...(request.temperature !== undefined && { temperature: request.temperature }),
    ...(request.topP !== undefined && { top_p: request.topP }),
    ...(request.maxTokens !== undefined && { max_output_tokens: request.maxTokens }),
    ...(request.responseFormat !== undefined && { text: toTextFormat(request.responseFormat) })
  }
  const own = request.providerOptions?.openai
  if (own === undefined) return params
  const merged: { [key: string]: unknown } = { ...params, ...own }
  delete merged.stream
  return merged as unknown as Params
}

// ---------------------------------------------------------------------------
// Response
// ---------------------------------------------------------------------------

interface UsageWire {
  readonly input_tokens?: number
  readonly output_tokens?: number
  readonly total_tokens?: number
  readonly input_tokens_details?: { readonly cached_tokens?: number } | null
  readonly output_tokens_details?: { readonly reasoning_tokens?: number } | null
}

interface ItemWire {
  readonly type?: string
  readonly id?: string
  readonly call_id?: string
  readonly name?: string
  readonly arguments?: string
  readonly content?: ReadonlyArray<{
    readonly type?: string
    readonly text?: string
    readonly refusal?: string
  }>
  readonly summary?: ReadonlyArray<{ readonly type?: string; readonly text?: string }>
}

interface ResponseWire {
  readonly id?: string
  readonly model?: string
  readonly status?: string
  readonly output?: ReadonlyArray<ItemWire>
  readonly usage?: UsageWire | null
  readonly incomplete_details?: { readonly reason?: string } | null
  readonly error?: { readonly message?: string; readonly code?: string } | null
}

const toUsage = (usage: UsageWire | null | undefined): ChatModel.Usage | undefined => {
  if (usage === null || usage === undefined || typeof usage.input_tokens !== "number") return undefined
  const inputTokens = usage.input_tokens
  const outputTokens = usage.output_tokens ?? 0
  const cached = usage.input_tokens_details?.cached_tokens
  const reasoning = usage.output_tokens_details?.reasoning_tokens
  return {
    inputTokens,
    outputTokens,
    totalTokens: usage.total_tokens ?? inputTokens + outputTokens,
    ...(typeof cached === "number" && { cachedInputTokens: cached }),
    ...(typeof reasoning === "number" && { reasoningTokens: reasoning })
  }
}

/** How the response ended, from its status: incomplete for length or the content filter, else stop or tool calls. */
const finishOf = (
  response: ResponseWire,
  hasToolCalls: boolean
): { reason: ChatModel.FinishReason; raw: string } => {
  if (response.status === "incomplete") {
    const why = response.incomplete_details?.reason ?? "incomplete"
    return {
      reason: why === "max_output_tokens" ? "length" : why === "content_filter" ? "content-filter" : "other",
      raw: why
    }
  }
  return { reason: hasToolCalls ? "tool-calls" : "stop", raw: response.status ?? "completed" }
}

const isObject = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** A non-streamed response as core's; a `MalformedResponse` when it is not one, or it failed. */
export const fromResponse = (body: unknown): ChatModel.ChatResponse | ProviderFailure.MalformedResponse => {
  if (!isObject(body) || !Array.isArray(body.output)) {
    return new ProviderFailure.MalformedResponse(
      typeof body === "string" ? "expected a JSON response, got text" : "not a response: no output list"
    )
  }
  const response = body as ResponseWire
  if (response.status === "failed") {
    return new ProviderFailure.MalformedResponse(
      `the response failed: ${response.error?.message ?? "no reason given"}`
    )
  }
  let text = ""
  let refusal = ""
  let reasoning = ""
  const toolCalls: Array<Message.ToolCall> = []
  for (const item of response.output ?? []) {
    if (item.type === "message") {
      for (const part of item.content ?? []) {
        if (part.type === "output_text") text += part.text ?? ""
        else if (part.type === "refusal") refusal += part.refusal ?? ""
      }
    } else if (item.type === "function_call") {
      toolCalls.push({
        id: item.call_id ?? item.id ?? "",
        name: item.name ?? "",
        arguments: item.arguments ?? ""
      })
    } else if (item.type === "reasoning") {
      for (const part of item.summary ?? []) reasoning += part.text ?? ""
    }
  }
  const usage = toUsage(response.usage)
  const finish = finishOf(response, toolCalls.length > 0)
  return {
    text,
    ...(reasoning.length > 0 && { reasoning }),
    toolCalls,
    finishReason: finish.reason,
    rawFinishReason: finish.raw,
    ...(usage !== undefined && { usage }),
    ...(refusal.length > 0 && { refusal }),
    ...(typeof response.id === "string" && response.id.length > 0 && { id: response.id }),
    ...(typeof response.model === "string" && response.model.length > 0 && { model: response.model })
  }
}

// ---------------------------------------------------------------------------
// Stream
// ---------------------------------------------------------------------------

/**
 * Turns Responses stream events into core stream chunks. Function calls are
 * numbered by their output index; their arguments arrive as deltas. The stream
 * is finished by `response.completed` / `response.incomplete` (which carry the
 * usage); `response.failed` and `error` events fail it.
 */
export class ResponsesTranslator {
  private finished = false
  private sawToolCalls = false
  private metadataSent = false

  get isFinished(): boolean {
    return this.finished
  }

  translate(raw: unknown): Array<ChatModel.StreamChunk> {
    if (!isObject(raw) || typeof raw.type !== "string")
      throw new ProviderFailure.MalformedResponse("not a response stream event")
    const event = raw as { readonly type: string; readonly [key: string]: unknown }
    switch (event.type) {
      case "response.created":
      case "response.in_progress": {
        const response = event.response as ResponseWire | undefined
        if (this.metadataSent || response === undefined) return []
        this.metadataSent = true
        return [
          {
            type: "response-metadata",
            ...(typeof response.id === "string" && { id: response.id }),
            ...(typeof response.model === "string" && { model: response.model })
          }
        ]
      }
      case "response.output_text.delta":
        return typeof event.delta === "string" && event.delta.length > 0
          ? [{ type: "text-delta", delta: event.delta }]
          : []
      case "response.refusal.delta":
        return typeof event.delta === "string" && event.delta.length > 0
          ? [{ type: "refusal-delta", delta: event.delta }]
          : []
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_text.delta":
        return typeof event.delta === "string" && event.delta.length > 0
          ? [{ type: "reasoning-delta", delta: event.delta }]
          : []
      case "response.output_item.added": {
        const item = event.item as ItemWire | undefined
        if (item?.type !== "function_call") return []
        this.sawToolCalls = true
        return [
          {
            type: "tool-call-delta",
            index: Number(event.output_index ?? 0),
            ...(typeof item.call_id === "string" && item.call_id.length > 0 && { id: item.call_id }),
            ...(typeof item.name === "string" && item.name.length > 0 && { name: item.name }),
            argumentsDelta: item.arguments ?? ""
          }
        ]
      }
      case "response.function_call_arguments.delta":
        return typeof event.delta === "string"
          ? [{ type: "tool-call-delta", index: Number(event.output_index ?? 0), argumentsDelta: event.delta }]
          : []
      case "response.completed":
      case "response.incomplete": {
        const response = (event.response ?? {}) as ResponseWire
        this.finished = true
        const finish = finishOf(response, this.sawToolCalls)
        const usage = toUsage(response.usage)
        return [
          ...(usage === undefined ? [] : [{ type: "usage" as const, usage }]),
          { type: "finish", finishReason: finish.reason, rawFinishReason: finish.raw }
        ]
      }
      case "response.failed": {
        const response = (event.response ?? {}) as ResponseWire
        throw new ProviderFailure.MalformedResponse(
          `the response failed: ${response.error?.message ?? "no reason given"}`
        )
      }
      case "error":
        throw new ProviderFailure.MalformedResponse(
          `the stream reported an error: ${String(event.message ?? event.code ?? "unknown")}`
        )
      default:
        return []
    }
  }
}
