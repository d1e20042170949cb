/**
 * `@noema/openai/testing`: test doubles for code that talks to OpenAI-compatible servers.
 */
export * as OpenAiTestServer from "./OpenAiTestServer.js"
export * as ResponsesStreams from "./ResponsesStreams.js"
