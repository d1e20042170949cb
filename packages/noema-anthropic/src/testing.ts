/**
 * `@noema/anthropic/testing`: a local server speaking Anthropic's wire format, for tests.
 */
export * as AnthropicTestServer from "./AnthropicTestServer.js"
