/**
 * Core's normalised request as the call options of an AI SDK language model.
 *
 * Messages map to the spec's prompt: system, user text and files, assistant
 * reasoning (whose `providerMetadata`, e.g. Anthropic's signature, goes back
 * as the part's `providerOptions`: the AI SDK's own convention), text and
 * tool calls (arguments parsed to the object the spec wants), and tool
 * results (the results of one turn's calls in one tool message). Tools,
 * tool choice, JSON output (with its schema) and the sampling options pass
 * through; `providerOptions` passes through as it is, since noema keys it by
 * provider just as the AI SDK does. The spec has no parallel-tool-calls
 * setting; a provider takes it from its own provider options.
 *
 * The prompt is built in the newest spec's shape (`v4`); for a `v3` model,
 * file parts are given the older shape of their data (the only difference
 * in what this bridge sends).
 */
import type {
  JSONObject,
  LanguageModelV3CallOptions,
  LanguageModelV3Message,
  LanguageModelV4CallOptions,
  LanguageModelV4FilePart,
  LanguageModelV4Message,
  SharedV4ProviderOptions
} from "@ai-sdk/provider"
import type { ChatModel, Message } from "@noema/core"

type AssistantPart = Extract<LanguageModelV4Message, { role: "assistant" }>["content"][number]
type ToolResultPart = Extract<LanguageModelV4Message, { role: "tool" }>["content"][number]

/** A file by URL, or its bytes (base64) for a `data:` URI. */
const filePart = (file: Message.FilePart): LanguageModelV4FilePart => {
  const inline = /^data:[^;,]+;base64,(.*)$/s.exec(file.uri)
  return {
    type: "file",
    mediaType: file.mediaType,
    data:
      inline === null ? { type: "url", url: new URL(file.uri) } : { type: "data", data: inline[1] as string },
    ...(file.name !== undefined && { filename: file.name })
  }
}

/** Whether a file can go to the model: a URL or inline data (a `file:` path or an artifact URN cannot). */
const isSendable = (file: Message.FilePart): boolean =>
  file.uri.startsWith("https://") || file.uri.startsWith("http://") || file.uri.startsWith("data:")

const fileReference = (file: Message.FilePart): string =>
  `[file${file.name === undefined ? "" : ` "${file.name}"`} (${file.mediaType}): ${file.uri}]`

const contentParts = (content: ReadonlyArray<Message.UserContentPart>) =>
  content.map((part) =>
    part.type === "text"
      ? { type: "text" as const, text: part.text }
      : isSendable(part)
        ? filePart(part)
        : { type: "text" as const, text: fileReference(part) }
  )

/** Tool-call arguments as the object the spec's `input` is; text that is not JSON as `{}`. */
const inputOf = (text: string): unknown => {
  try {
    return text.length === 0 ? {} : JSON.parse(text)
  } catch {
    return {}
  }
}

const assistantParts = (message: Message.AssistantMessage): Array<AssistantPart> => {
  const out: Array<AssistantPart> = []
  if (typeof message.content === "string") {
    if (message.content.length > 0) out.push({ type: "text", text: message.content })
  } else {
    for (const part of message.content) {
      if (part.type === "reasoning") {
        out.push({
          type: "reasoning",
          text: part.text,
          ...(part.providerMetadata !== undefined && {
            providerOptions: part.providerMetadata as SharedV4ProviderOptions
          })
        })
      } else if (part.type === "text") {
        if (part.text.length > 0) out.push({ type: "text", text: part.text })
      } else {
        out.push(isSendable(part) ? filePart(part) : { type: "text", text: fileReference(part) })
      }
    }
  }
  for (const call of message.toolCalls ?? []) {
    out.push({ type: "tool-call", toolCallId: call.id, toolName: call.name, input: inputOf(call.arguments) })
  }
  return out
}

export const toPrompt = (messages: Iterable<Message.Message>): Array<LanguageModelV4Message> => {
  const prompt: Array<LanguageModelV4Message> = []
  /** The tool message collecting the current turn's results, while they keep coming. */
  let results: Array<ToolResultPart> | undefined
  for (const message of messages) {
    if (message.role !== "tool") results = undefined
    switch (message.role) {
      case "system":
        prompt.push({ role: "system", content: message.content })
        break
      case "user":
        prompt.push({
          role: "user",
          content:
            typeof message.content === "string"
              ? [{ type: "text", text: message.content }]
              : contentParts(message.content)
        })
        break
      case "assistant": {
        const content = assistantParts(message)
        if (content.length > 0) prompt.push({ role: "assistant", content })
        break
      }
      case "tool": {
        const part: ToolResultPart = {
          type: "tool-result",
          toolCallId: message.toolCallId,
          toolName: message.name,
          output: message.isError
            ? { type: "error-text", value: message.content }
            : { type: "text", value: message.content }
        }
        if (results === undefined) {
          results = [part]
          prompt.push({ role: "tool", content: results })
        } else {
          results.push(part)
        }
        break
      }
    }
  }
  return prompt
}

const toToolChoice = (choice: ChatModel.ToolChoice): NonNullable<LanguageModelV4CallOptions["toolChoice"]> =>
  typeof choice === "string" ? { type: choice } : { type: "tool", toolName: choice.tool }

const toResponseFormat = (
  format: ChatModel.ResponseFormat
): NonNullable<LanguageModelV4CallOptions["responseFormat"]> => {
  switch (format.type) {
    case "text":
      return { type: "text" }
    case "json":
      return { type: "json" }
    case "json-schema":
      return {
        type: "json",
        schema: { ...format.schema },
        name: format.name,
        ...(format.description !== undefined && { description: format.description })
      }
  }
}

type FunctionTool = NonNullable<LanguageModelV4CallOptions["tools"]>[number]

/**
 * Each tool definition's spec shape, made once: an agent sends the same tools at every step
 * of its loop. Definitions are readonly, and the spec's tools are only read by providers.
 */
const functionTools = new WeakMap<ChatModel.ToolDefinition, FunctionTool>()

const toFunctionTool = (tool: ChatModel.ToolDefinition): FunctionTool => {
  let converted = functionTools.get(tool)
  if (converted === undefined) {
    converted = {
      type: "function",
      name: tool.name,
      description: tool.description,
      inputSchema: { ...tool.parameters },
      ...(tool.strict !== undefined && { strict: tool.strict })
    }
    functionTools.set(tool, converted)
  }
  return converted
}

/** The call options for a `v4` model. */
export const toCallOptions = (
  request: ChatModel.ChatRequest,
  abortSignal: AbortSignal
): LanguageModelV4CallOptions => {
  const tools = request.tools ?? []
  return {
    prompt: toPrompt(request.messages),
    abortSignal,
    ...(tools.length > 0 && {
      tools: tools.map(toFunctionTool)
    }),
    ...(tools.length > 0 &&
      request.toolChoice !== undefined && { toolChoice: toToolChoice(request.toolChoice) }),
    ...(request.temperature !== undefined && { temperature: request.temperature }),
    ...(request.topP !== undefined && { topP: request.topP }),
    ...(request.maxTokens !== undefined && { maxOutputTokens: request.maxTokens }),
    ...(request.stop !== undefined && request.stop.length > 0 && { stopSequences: [...request.stop] }),
    ...(request.seed !== undefined && { seed: request.seed }),
    ...(request.responseFormat !== undefined && { responseFormat: toResponseFormat(request.responseFormat) }),
    ...(request.providerOptions !== undefined && {
      providerOptions: request.providerOptions as Record<string, JSONObject>
    })
  }
}

const isFilePart = (part: { readonly type: string }): boolean => part.type === "file"

const hasFileParts = (prompt: ReadonlyArray<LanguageModelV4Message>): boolean =>
  prompt.some(
    (message) => (message.role === "user" || message.role === "assistant") && message.content.some(isFilePart)
  )

/**
 * The same options for a `v3` model: file data in the older shape (a URL, or the base64 text).
 * Without file parts the two specs' options are the same, and are passed as they are.
 */
export const toV3CallOptions = (options: LanguageModelV4CallOptions): LanguageModelV3CallOptions =>
  hasFileParts(options.prompt) ? withV3Files(options) : (options as unknown as LanguageModelV3CallOptions)

const withV3Files = (options: LanguageModelV4CallOptions): LanguageModelV3CallOptions => ({
  ...options,
  prompt: options.prompt.map(
    (message) =>
      (message.role === "user" || message.role === "assistant"
        ? {
            ...message,
            content: message.content.map((part) =>
              part.type === "file" && (part.data.type === "url" || part.data.type === "data")
                ? { ...part, data: part.data.type === "url" ? part.data.url : part.data.data }
                : part
            )
          }
        : message) as LanguageModelV3Message
  ),
  // The bridge sends function tools only, whose shape the two specs share.
  ...(options.tools !== undefined && { tools: options.tools as LanguageModelV3CallOptions["tools"] & {} })
})
