/**
 * `noema ask` with the standard OTEL_* variables sends the turn's spans as
 * OTLP/HTTP to the configured endpoint (here a local server that records what
 * it is sent), without the question's text; without them it sends nothing. The
 * turn is kept locally as well (`noema traces`), under the same trace id.
 */
import * as http from "node:http"
import { OpenAiTestServer } from "@noema/openai/testing"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { makeHome, removeHome, runCli } from "./support/cli.js"

let server: OpenAiTestServer.TestServer
let collector: http.Server
let collectorUrl: string
const received: Array<{ readonly path: string; readonly body: string }> = []
let home: string

beforeAll(async () => {
  server = await OpenAiTestServer.start()
  collector = http.createServer((request, response) => {
    let body = ""
    request.setEncoding("utf8").on("data", (chunk: string) => {
      body += chunk
    })
    request.on("end", () => {
      received.push({ path: request.url ?? "", body })
      response.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve))
  const address = collector.address()
  collectorUrl = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`
})
afterAll(async () => {
  await server.close()
  await new Promise((resolve) => collector.close(resolve))
})
afterEach(() => {
  server.reset()
  received.length = 0
  if (home !== undefined) removeHome(home)
})

interface OtlpSpan {
  readonly name: string
  readonly traceId: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
}

const spansOf = (body: string): Array<OtlpSpan> => {
  const parsed = JSON.parse(body) as {
    resourceSpans: ReadonlyArray<{ scopeSpans: ReadonlyArray<{ spans: ReadonlyArray<OtlpSpan> }> }>
  }
  return parsed.resourceSpans.flatMap((resource) => resource.scopeSpans.flatMap((scope) => scope.spans))
}

const question = "Why is the sky blue, asked the user privately?"

const ask = (env: Record<string, string>) => {
  home = makeHome()
  server.enqueue({ type: "text", text: "Rayleigh scattering." })
  return runCli(["ask", "--base-url", server.url, "--api-key", "test-key", question], {
    env: { NOEMA_HOME: home, ...env }
  })
}

describe("noema ask with OTEL_* set", () => {
  it("sends the turn's spans to the OTLP/HTTP endpoint, without the question", async () => {
    const result = await ask({
      OTEL_EXPORTER_OTLP_ENDPOINT: collectorUrl,
      OTEL_SERVICE_NAME: "noema-under-test"
    })
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("Rayleigh scattering.")
    expect(received.map((request) => request.path)).toContain("/v1/traces")
    const bodies = received.map((request) => request.body).join("\n")
    const names = received.flatMap((request) => spansOf(request.body).map((span) => span.name))
    expect(names).toContain("noema.turn")
    expect(names).toContain("noema.session.commit")
    expect(names.some((name) => name.startsWith("chat "))).toBe(true)
    expect(bodies).toContain("noema-under-test")
    expect(bodies).toContain("gen_ai.request.model")
    expect(bodies).not.toContain("privately")
    expect(bodies).not.toContain("test-key")
  })

  it("records the question when NOEMA_TRACE_CONTENT=1", async () => {
    const result = await ask({
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collectorUrl}/custom`,
      NOEMA_TRACE_CONTENT: "1"
    })
    expect(result.code).toBe(0)
    expect(received.map((request) => request.path)).toContain("/custom")
    expect(received.map((request) => request.body).join("\n")).toContain("privately")
  })

  it("sends nothing without OTEL_* variables, or with OTEL_SDK_DISABLED=true", async () => {
    expect((await ask({})).code).toBe(0)
    expect((await ask({ OTEL_EXPORTER_OTLP_ENDPOINT: collectorUrl, OTEL_SDK_DISABLED: "true" })).code).toBe(0)
    expect(received).toEqual([])
  })

  it("keeps the turn locally too, under the same trace id, the tool's arguments and result only there", async () => {
    home = makeHome()
    const env = { NOEMA_HOME: home, NOEMA_MODEL: "offline", OTEL_EXPORTER_OTLP_ENDPOINT: collectorUrl }
    const asked = await runCli(["ask", "what is 2+3*4?"], { env })
    expect(asked.stdout).toBe("2 + 3 * 4 = 14\n")
    const exported = received.flatMap((request) => spansOf(request.body))
    expect(exported.map((span) => span.name)).toContain("execute_tool calculator")
    const bodies = received.map((request) => request.body).join("\n")
    expect(bodies).not.toContain("gen_ai.tool.call.arguments")
    expect(bodies).not.toContain("gen_ai.tool.call.result")
    const listed = await runCli(["traces", "list", "--json"], { env: { NOEMA_HOME: home } })
    const local = (JSON.parse(listed.stdout) as { traces: Array<{ traceId: string }> }).traces
    expect(local.map((trace) => trace.traceId)).toEqual([
      exported.find((span) => span.name === "noema.turn")?.traceId
    ])
    const shown = await runCli(["traces", "show", local[0]?.traceId as string], { env: { NOEMA_HOME: home } })
    expect(shown.stdout).toContain('arguments: {"expression":"2+3*4"}')
  })

  it("refuses an exporter it does not have, in one line", async () => {
    const result = await ask({ OTEL_TRACES_EXPORTER: "zipkin" })
    expect(result.code).not.toBe(0)
    expect(result.stderr.trim()).toBe(
      "noema: OTEL_TRACES_EXPORTER=zipkin is not supported: use otlp, console or none (see noema ask --help)"
    )
  })
})
