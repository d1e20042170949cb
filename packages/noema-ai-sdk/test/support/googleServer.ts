/**
 * A local server for `@ai-sdk/google` (`baseURL` = `url`): `:generateContent`
 * answers with a JSON body, `:streamGenerateContent?alt=sse` replays lines as
 * SSE `data:` frames byte for byte, both from a queue of replies; requests
 * are recorded (core's `ScriptedHttpServer`). Only what the bridge's tests need.
 */
import { ScriptedHttpServer } from "@noema/core/testing"

export type Reply =
  | { readonly type: "sse"; readonly lines: ReadonlyArray<string> }
  | { readonly type: "json"; readonly body: string }
  | {
      readonly type: "error"
      readonly status: number
      readonly body: unknown
      readonly headers?: Record<string, string>
    }

/** `url` is the `baseURL` for `createGoogleGenerativeAI`, e.g. `http://127.0.0.1:4100/v1beta`. */
export type GoogleServer = ScriptedHttpServer.Server<Reply>

const wire: ScriptedHttpServer.Wire<Reply> = {
  name: "GoogleServer",
  basePath: "/v1beta",
  requestIdHeader: "x-goog-request-id",
  scriptFailure: (message) => ({
    type: "error",
    status: 500,
    body: { error: { code: 500, message, status: "INTERNAL" } }
  }),
  answer: (exchange) => {
    const reply = exchange.next()
    switch (reply.type) {
      case "sse":
        return exchange.stream(reply.lines.map((line) => `data: ${line}\r\n\r\n`))
      case "json":
        return exchange.sendRaw(200, reply.body)
      case "error":
        return exchange.sendJson(reply.status, reply.body, reply.headers)
    }
  }
}

export const start = (): Promise<GoogleServer> => ScriptedHttpServer.start(wire)
