/**
 * @noema/core: the contracts every noema package builds on.
 */
export * as Agent from "./Agent.js"
export * as Approval from "./Approval.js"
export * as ChatModel from "./ChatModel.js"
export * as ConversationContext from "./ConversationContext.js"
export * as Embedder from "./Embedder.js"
export * as Message from "./Message.js"
export * as ModelError from "./ModelError.js"
export * as Printable from "./Printable.js"
export * as ProviderStream from "./ProviderStream.js"
export * as Retry from "./Retry.js"
export * as StructuredOutput from "./StructuredOutput.js"
export * as TokenCounter from "./TokenCounter.js"
export * as Tool from "./Tool.js"
export * as Tracing from "./Tracing.js"
export * as Transaction from "./Transaction.js"
