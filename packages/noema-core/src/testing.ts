/**
 * @noema/core/testing: helpers for testing agents and adapters without a network.
 */
export * as ChatModelConformance from "./ChatModelConformance.js"
export * as ScriptedChatModel from "./ScriptedChatModel.js"
export * as ScriptedHttpServer from "./ScriptedHttpServer.js"
