/**
 * @noema/openai: noema's ChatModel and Embedder over OpenAI and any
 * OpenAI-compatible server (Ollama, vLLM, llama.cpp server, LM Studio).
 */
export * as OpenAiChatModel from "./OpenAiChatModel.js"
export * as OpenAiClient from "./OpenAiClient.js"
export * as OpenAiEmbedder from "./OpenAiEmbedder.js"
export * as OpenAiTokens from "./OpenAiTokens.js"
