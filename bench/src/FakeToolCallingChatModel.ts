/**
 * FakeToolCallingChatModel: LangChain's counterpart of the scripted models the
 * other contenders use, for `createReactAgent`.
 *
 * `@langchain/core/utils/testing` has fake chat models, but none that answers a
 * tool result differently from a question, which the two-step tool loop needs.
 * This one asks for `toolCall` when the conversation does not end with a tool
 * result, and answers `text` otherwise. `bindTools` binds the tool definitions
 * the way provider models do (a config binding), so LangGraph runs its usual
 * path.
 */
import type { BaseChatModelParams, BindToolsInput } from "@langchain/core/language_models/chat_models"
import { BaseChatModel } from "@langchain/core/language_models/chat_models"
import type { BaseMessage } from "@langchain/core/messages"
import { AIMessage } from "@langchain/core/messages"
import type { ChatResult } from "@langchain/core/outputs"
import { convertToOpenAITool } from "@langchain/core/utils/function_calling"

export interface Script {
  readonly text: string
  /** Asked for on the first step; without it the model always answers `text`. */
  readonly toolCall?: { readonly name: string; readonly args: Record<string, unknown> }
}

export class FakeToolCallingChatModel extends BaseChatModel {
  readonly script: Script
  calls = 0

  constructor(script: Script, fields: BaseChatModelParams = {}) {
    super(fields)
    this.script = script
  }

  _llmType(): string {
    return "fake-tool-calling"
  }

  override bindTools(tools: Array<BindToolsInput>) {
    // What provider models do: tool definitions in the provider's format, bound as call options.
    const definitions = tools.map((tool) => convertToOpenAITool(tool))
    return this.withConfig({ tools: definitions } as Partial<this["ParsedCallOptions"]>)
  }

  async _generate(messages: Array<BaseMessage>): Promise<ChatResult> {
    const id = this.calls++
    const last = messages.at(-1)
    const toolCall = this.script.toolCall
    const message =
      toolCall !== undefined && last?.type !== "tool"
        ? new AIMessage({
            content: "",
            tool_calls: [{ id: `call_${id}`, name: toolCall.name, args: toolCall.args, type: "tool_call" }]
          })
        : new AIMessage(this.script.text)
    return { generations: [{ message, text: typeof message.content === "string" ? message.content : "" }] }
  }
}
