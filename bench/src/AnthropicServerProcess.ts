/**
 * AnthropicServerProcess: the local Anthropic wire-format server
 * (`@noema/anthropic/testing`) in its own process, forked by `Providers.ts`
 * through `Http.startServer`; the protocol with the parent is `ServerChild`'s.
 */
import { AnthropicTestServer } from "@noema/anthropic/testing"
import { serve } from "./ServerChild.ts"

// The answer every contender gets, streamed or not, comes from the parent.
serve(await AnthropicTestServer.start({ host: "127.0.0.1" }), {
  type: "text",
  text: process.argv[2] ?? "Hello.",
  usage: { inputTokens: 14, outputTokens: 16 }
} satisfies AnthropicTestServer.TextReply)
