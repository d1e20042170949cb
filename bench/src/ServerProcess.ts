/**
 * ServerProcess: the local OpenAI wire-format server, run in its own process
 * (forked by `Http.ts`), as a real model server would be; the protocol with
 * the parent is `ServerChild`'s.
 */
import { OpenAiTestServer } from "@noema/openai/testing"
import { serve } from "./ServerChild.ts"

// The answer every contender gets, streamed or not, comes from the parent.
serve(await OpenAiTestServer.start({ host: "127.0.0.1" }), {
  type: "text",
  text: process.argv[2] ?? "Hello.",
  usage: { promptTokens: 14, completionTokens: 16 }
} satisfies OpenAiTestServer.TextReply)
