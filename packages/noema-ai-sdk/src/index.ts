/**
 * @noema/ai-sdk: any AI SDK provider (`@ai-sdk/provider` language and
 * embedding models) as noema's ChatModel and Embedder.
 */
export * as AiSdkChatModel from "./AiSdkChatModel.js"
export * as AiSdkEmbedder from "./AiSdkEmbedder.js"
