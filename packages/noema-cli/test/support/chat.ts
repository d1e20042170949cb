/**
 * What the CLI tests read in the requests a local OpenAI wire-format server received.
 */
import type { OpenAiTestServer } from "@noema/openai/testing"

/** The parts of a chat completions request body the tests look at. */
export interface ChatBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
  readonly tools?: ReadonlyArray<{
    readonly function: { readonly name: string; readonly parameters: unknown }
  }>
  readonly response_format?: { readonly type: string; readonly json_schema?: { readonly name: string } }
}

/** A message's text: the string itself, or its text parts joined. */
export const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content.map((part) => (part as { text?: string }).text ?? "").join("")
      : ""

/** The name of the JSON Schema the request asks the answer to follow, if any. */
export const schemaNameOf = (request: OpenAiTestServer.RecordedRequest): string | undefined =>
  (request.body as ChatBody).response_format?.json_schema?.name
