/**
 * @noema/anthropic: noema's ChatModel over Anthropic's Messages API (Claude),
 * through the official `@anthropic-ai/sdk`.
 */
export * as AnthropicChatModel from "./AnthropicChatModel.js"
export * as AnthropicClient from "./AnthropicClient.js"
