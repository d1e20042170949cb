/**
 * Core's normalised request as an Anthropic Messages API body.
 *
 * Leading system messages become `system` (later ones stay in place as system
 * messages); a tool message becomes a `tool_result` block, and the results of
 * one turn's calls share one user message, as Anthropic asks; an assistant's
 * reasoning parts that Anthropic signed go back as `thinking` (or
 * `redacted_thinking`) blocks before its text and tool calls, unchanged, and
 * reasoning from any other provider is left out (Anthropic refuses unsigned
 * thinking). Structured output (`responseFormat`) is one tool the model is
 * forced to call (offered, not forced, with thinking on, which Anthropic
 * requires), whose input is the answer. Prompt caching, when asked for,
 * marks the system prompt and the tool definitions as cache breakpoints.
 * `providerOptions[provider]` is merged into the body last.
 */

import type Anthropic from "@anthropic-ai/sdk"
import type { ChatModel, Message } from "@noema/core"

type Params = Anthropic.Messages.MessageCreateParamsNonStreaming
type MessageParam = Anthropic.Messages.MessageParam
type Block = Anthropic.Messages.ContentBlockParam
type TextBlock = Anthropic.Messages.TextBlockParam
type ToolParam = Anthropic.Messages.Tool

/** How one request is sent, besides its messages: what `AnthropicChatModel`'s options say. */
export interface Settings {
  readonly model: string
  readonly provider: string
  /** `max_tokens` when the request sets none (Anthropic requires one). */
  readonly maxTokens: number
  readonly thinking: { readonly budgetTokens: number } | "adaptive" | undefined
  readonly promptCaching: boolean
}

/** The body, and the name of the tool that carries structured output (its input is the answer). */
export interface Translated {
  readonly params: Params
  readonly outputTool: string | undefined
}

const ephemeral: Anthropic.Messages.CacheControlEphemeral = { type: "ephemeral" }

/** Anthropic's reasoning metadata on a part, under the key `anthropic` (also what `@ai-sdk/anthropic` uses). */
const anthropicMetadata = (part: Message.ReasoningPart): Readonly<Record<string, unknown>> | undefined =>
  part.providerMetadata?.anthropic

// ---------------------------------------------------------------------------
// Content
// ---------------------------------------------------------------------------

const imageTypes: ReadonlyArray<string> = ["image/jpeg", "image/png", "image/gif", "image/webp"]

/** `data:<type>;base64,<data>` split, or undefined for any other URI. */
const base64Of = (uri: string): { readonly mediaType: string; readonly data: string } | undefined => {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(uri)
  return match === null ? undefined : { mediaType: match[1] as string, data: match[2] as string }
}

const isWebUrl = (uri: string): boolean => uri.startsWith("https://") || uri.startsWith("http://")

/** How a file the model cannot be sent appears in the text: its name, type and where it is. */
const fileReference = (file: Message.FilePart): string => {
  const where = file.uri.startsWith("data:") ? "inline data, not sent" : file.uri
  return `[file${file.name === undefined ? "" : ` "${file.name}"`} (${file.mediaType}): ${where}]`
}

/** Images (JPEG, PNG, GIF, WebP) and PDFs by URL or inline; any other file as a text reference. */
const fileBlock = (file: Message.FilePart): Block => {
  const inline = base64Of(file.uri)
  if (imageTypes.includes(file.mediaType)) {
    if (isWebUrl(file.uri)) return { type: "image", source: { type: "url", url: file.uri } }
    if (inline !== undefined && imageTypes.includes(inline.mediaType)) {
      const media_type = inline.mediaType as Anthropic.Messages.Base64ImageSource["media_type"]
      return { type: "image", source: { type: "base64", media_type, data: inline.data } }
    }
  }
  if (file.mediaType === "application/pdf") {
    if (isWebUrl(file.uri)) return { type: "document", source: { type: "url", url: file.uri } }
    if (inline !== undefined) {
      return {
        type: "document",
        source: { type: "base64", media_type: "application/pdf", data: inline.data }
      }
    }
  }
  return { type: "text", text: fileReference(file) }
}

/** A user's content: a string stays one; parts become text, image and document blocks. */
const userContent = (content: Message.UserMessage["content"]): string | Array<Block> =>
  typeof content === "string"
    ? content
    : content.map(
        (part): Block => (part.type === "text" ? { type: "text", text: part.text } : fileBlock(part))
      )

/** Tool-call arguments as the object Anthropic wants; text that is not a JSON object (a model's slip) as `{}`. */
const inputOf = (text: string): Record<string, unknown> => {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {}
  } catch {
    return {}
  }
}

/** Signed reasoning first (Anthropic wants thinking before the rest), then text and files, then tool calls. */
const assistantContent = (message: Message.AssistantMessage): Array<Block> => {
  const blocks: Array<Block> = []
  const parts = typeof message.content === "string" ? [] : message.content
  for (const part of parts) {
    if (part.type !== "reasoning") continue
    const metadata = anthropicMetadata(part)
    if (typeof metadata?.signature === "string") {
      blocks.push({ type: "thinking", thinking: part.text, signature: metadata.signature })
    } else if (typeof metadata?.redactedData === "string") {
      blocks.push({ type: "redacted_thinking", data: metadata.redactedData })
    }
  }
  if (typeof message.content === "string") {
    if (message.content.length > 0) blocks.push({ type: "text", text: message.content })
  } else {
    for (const part of message.content) {
      if (part.type === "text" && part.text.length > 0) blocks.push({ type: "text", text: part.text })
      else if (part.type === "file") blocks.push({ type: "text", text: fileReference(part) })
    }
  }
  for (const call of message.toolCalls ?? []) {
    blocks.push({ type: "tool_use", id: call.id, name: call.name, input: inputOf(call.arguments) })
  }
  return blocks
}

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

/** Leading system messages as `system` blocks; the rest as Anthropic messages (tool results grouped). */
const translateMessages = (
  messages: Iterable<Message.Message>
): { readonly system: Array<TextBlock>; readonly messages: Array<MessageParam> } => {
  const system: Array<TextBlock> = []
  const out: Array<MessageParam> = []
  /** The user message collecting the current turn's tool results, while they keep coming. */
  let results: Array<Block> | undefined
  for (const message of messages) {
    if (message.role !== "tool") results = undefined
    switch (message.role) {
      case "system":
        if (out.length === 0) system.push({ type: "text", text: message.content })
        else out.push({ role: "system", content: message.content })
        break
      case "user":
        out.push({ role: "user", content: userContent(message.content) })
        break
      case "assistant": {
        const content = assistantContent(message)
        // Anthropic refuses an empty assistant turn; an empty one said nothing to keep.
        if (content.length > 0) out.push({ role: "assistant", content })
        break
      }
      case "tool": {
        const block: Block = {
          type: "tool_result",
          tool_use_id: message.toolCallId,
          content: message.content,
          ...(message.isError && { is_error: true })
        }
        if (results === undefined) {
          results = [block]
          out.push({ role: "user", content: results })
        } else {
          results.push(block)
        }
        break
      }
    }
  }
  return { system, messages: out }
}

// ---------------------------------------------------------------------------
// Tools and output
// ---------------------------------------------------------------------------

const toToolChoice = (
  choice: ChatModel.ToolChoice | undefined,
  parallel: boolean | undefined
): Anthropic.Messages.ToolChoice | undefined => {
  const disable = parallel === false ? { disable_parallel_tool_use: true } : {}
  if (choice === undefined) return parallel === false ? { type: "auto", ...disable } : undefined
  if (choice === "none") return { type: "none" }
  if (choice === "auto") return { type: "auto", ...disable }
  if (choice === "required") return { type: "any", ...disable }
  return { type: "tool", name: choice.tool, ...disable }
}

const toTool = (tool: ChatModel.ToolDefinition): ToolParam => ({
  name: tool.name,
  description: tool.description,
  input_schema: { type: "object", ...tool.parameters },
  ...(tool.strict !== undefined && { strict: tool.strict })
})

/** The forced tool that carries structured output, when the request asks for JSON. */
const outputToolOf = (format: ChatModel.ResponseFormat | undefined): ToolParam | undefined => {
  if (format === undefined || format.type === "text") return undefined
  if (format.type === "json") {
    return { name: "json", description: "Respond with a JSON object.", input_schema: { type: "object" } }
  }
  return {
    name: format.name,
    description: format.description ?? "Respond with an object that matches this schema.",
    input_schema: { type: "object", ...format.schema },
    ...(format.strict !== undefined && { strict: format.strict })
  }
}

/** `tools` with the last one marked as a cache breakpoint (the prefix up to it is cached). */
const withCacheBreakpoint = <A extends { readonly cache_control?: unknown }>(items: Array<A>): Array<A> => {
  const last = items.length - 1
  return items.map((item, index) => (index === last ? { ...item, cache_control: ephemeral } : item))
}

// ---------------------------------------------------------------------------
// Body
// ---------------------------------------------------------------------------

type Options = { readonly [option: string]: unknown }

/** `promptCaching` under the provider's options overrides the model's setting for one request. */
const cachingOf = (settings: Settings, own: Options | undefined): boolean =>
  typeof own?.promptCaching === "boolean" ? own.promptCaching : settings.promptCaching

export const toParams = (settings: Settings, request: ChatModel.ChatRequest): Translated => {
  const own = request.providerOptions?.[settings.provider]
  const caching = cachingOf(settings, own)
  const { system, messages } = translateMessages(request.messages)
  const output = outputToolOf(request.responseFormat)
  const declared = (request.tools ?? []).map(toTool)
  const tools = output === undefined ? declared : [...declared, output]
  const toolChoice =
    output === undefined
      ? toToolChoice(request.toolChoice, request.parallelToolCalls)
      : settings.thinking === undefined
        ? ({ type: "tool", name: output.name } as const)
        : // Anthropic refuses a forced tool with thinking on: the output tool is offered, not forced.
          ({ type: "auto" } as const)
  const params: Params = {
    model: settings.model,
    max_tokens: request.maxTokens ?? settings.maxTokens,
    messages,
    ...(system.length > 0 && { system: caching ? withCacheBreakpoint(system) : system }),
    ...(tools.length > 0 && { tools: caching ? withCacheBreakpoint(tools) : tools }),
    ...(tools.length > 0 && toolChoice !== undefined && { tool_choice: toolChoice }),
    ...(request.temperature !== undefined && { temperature: request.temperature }),
    ...(request.topP !== undefined && { top_p: request.topP }),
    ...(request.stop !== undefined && request.stop.length > 0 && { stop_sequences: [...request.stop] }),
    ...(settings.thinking !== undefined && {
      thinking:
        settings.thinking === "adaptive"
          ? { type: "adaptive" }
          : { type: "enabled", budget_tokens: settings.thinking.budgetTokens }
    })
  }
  if (own === undefined) return { params, outputTool: output?.name }
  // Provider options are free-form by design: the SDK's types cannot describe them.
  const merged: { [key: string]: unknown } = { ...params, ...own }
  // Whether to stream is decided by calling `complete` or `stream`; caching is read above.
  delete merged.stream
  delete merged.promptCaching
  return { params: merged as unknown as Params, outputTool: output?.name }
}
