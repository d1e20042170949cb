/**
 * `--provider` / `NOEMA_PROVIDER`: the configuration it selects, and
 * `noema ask` / `noema chat --provider anthropic` run through the CLI binary
 * against the local Anthropic wire-format server.
 */
import { AnthropicTestServer } from "@noema/anthropic/testing"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { UsageError } from "../src/CliArguments.js"
import * as CliConfig from "../src/CliConfig.js"
import { makeHome, removeHome, runCli } from "./support/cli.js"

describe("provider configuration", () => {
  it("is OpenAI's API unless --provider or NOEMA_PROVIDER says anthropic; any other name is refused", () => {
    expect(CliConfig.resolveModel({}, { OPENAI_API_KEY: "sk-1" })).toMatchObject({ provider: "openai" })
    expect(CliConfig.resolveModel({ provider: "anthropic" }, { ANTHROPIC_API_KEY: "k" })).toMatchObject({
      provider: "anthropic"
    })
    expect(
      CliConfig.resolveModel({ provider: "openai" }, { NOEMA_PROVIDER: "anthropic", OPENAI_API_KEY: "sk-1" })
    ).toMatchObject({ provider: "openai" })
    expect(() => CliConfig.resolveModel({ provider: "gemini" }, {})).toThrow(UsageError)
    expect(() => CliConfig.resolveModel({}, { NOEMA_PROVIDER: "gemini" })).toThrow(/NOEMA_PROVIDER: "gemini"/)
  })

  it("reads Anthropic's key, base URL and default model, never OpenAI's", () => {
    const env = {
      NOEMA_PROVIDER: "anthropic",
      ANTHROPIC_API_KEY: "sk-ant-1",
      ANTHROPIC_BASE_URL: "http://claude.local:1",
      OPENAI_API_KEY: "sk-openai",
      OPENAI_BASE_URL: "http://openai.local:1/v1"
    }
    expect(CliConfig.resolveModel({}, env)).toMatchObject({
      kind: "openai",
      provider: "anthropic",
      model: "claude-sonnet-5-5",
      apiKey: "sk-ant-1",
      baseUrl: "http://claude.local:1"
    })
    // --base-url and NOEMA_BASE_URL apply to every provider.
    expect(CliConfig.resolveModel({ baseUrl: "http://flag:2" }, env)).toMatchObject({
      baseUrl: "http://flag:2"
    })
    expect(CliConfig.resolveModel({ provider: "anthropic" }, { ANTHROPIC_API_KEY: "k" })).toMatchObject({
      baseUrl: "https://api.anthropic.com"
    })
    expect(() => CliConfig.resolveModel({ provider: "anthropic" }, { OPENAI_API_KEY: "sk-openai" })).toThrow(
      /the anthropic provider needs ANTHROPIC_API_KEY/
    )
  })

  it("refuses a --model that names no server instead of running the offline model; NOEMA_MODEL alone stays offline", () => {
    expect(() => CliConfig.resolveModel({ model: "gpt-4o" }, {})).toThrow(
      /^--model gpt-4o names no model server: give --base-url \(or NOEMA_BASE_URL\), or OPENAI_API_KEY/
    )
    expect(CliConfig.resolveModel({}, { NOEMA_MODEL: "gpt-4o" })).toMatchObject({ kind: "offline" })
    expect(CliConfig.resolveModel({ model: "offline" }, {})).toMatchObject({
      kind: "offline",
      reason: "requested"
    })
    expect(CliConfig.offlineNoticeFor({ model: "gpt-4o" }, {})).toBeUndefined()
  })

  it("names the provider in the model's description", () => {
    const claude = CliConfig.resolveModel({ provider: "anthropic" }, { ANTHROPIC_API_KEY: "k" })
    expect(CliConfig.describeModel(claude)).toBe("claude-sonnet-5-5 at https://api.anthropic.com (Anthropic)")
    const gpt = CliConfig.resolveModel({}, { OPENAI_API_KEY: "sk-1" })
    expect(CliConfig.describeModel(gpt)).toBe("gpt-4o-mini at https://api.openai.com/v1")
  })
})

describe("noema --provider anthropic", () => {
  let server: AnthropicTestServer.TestServer
  let home: string
  beforeAll(async () => {
    server = await AnthropicTestServer.start()
  })
  afterAll(() => server.close())
  beforeEach(() => {
    home = makeHome()
  })
  afterEach(() => {
    server.reset()
    removeHome(home)
  })

  it("ask streams Claude's answer from the Messages API", async () => {
    server.enqueue({ type: "text", text: "Hello from Claude!" })
    const result = await runCli(
      [
        "ask",
        "--provider",
        "anthropic",
        "--base-url",
        server.url,
        "--api-key",
        "sk-ant-test",
        "--no-tools",
        "Hi"
      ],
      { env: { NOEMA_HOME: home } }
    )
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("Hello from Claude!\n")
    expect(server.requests[0]?.path).toBe("/v1/messages")
    expect(server.requests[0]?.body).toMatchObject({ model: "claude-sonnet-5-5", stream: true })
    expect(server.requests[0]?.headers.authorization).toBe("Bearer sk-ant-test")
  })

  it("chat takes the provider, key and address from NOEMA_PROVIDER, ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL", async () => {
    server.enqueue({ type: "text", text: "First." }, { type: "text", text: "Second." })
    const result = await runCli(["chat", "--no-tools", "--model", "claude-haiku-4-5"], {
      env: {
        NOEMA_HOME: home,
        NOEMA_PROVIDER: "anthropic",
        ANTHROPIC_API_KEY: "sk-ant-env",
        ANTHROPIC_BASE_URL: server.url
      },
      stdin: "one\ntwo\n/exit\n"
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("First.\nSecond.\n")
    expect(server.requests).toHaveLength(2)
    expect(server.requests[1]?.body).toMatchObject({
      model: "claude-haiku-4-5",
      messages: [
        { role: "user", content: "one" },
        { role: "assistant", content: [{ type: "text", text: "First." }] },
        { role: "user", content: "two" }
      ]
    })
  })

  it("a rejected key is explained in Anthropic's terms", async () => {
    server.enqueue({ type: "error", status: 401, message: "invalid x-api-key" })
    const result = await runCli(
      ["ask", "--provider", "anthropic", "--base-url", server.url, "--api-key", "bad", "--no-tools", "Hi"],
      { env: { NOEMA_HOME: home } }
    )
    expect(result.code).not.toBe(0)
    expect(result.stderr).toMatch(/^noema: anthropic rejected the credentials .*ANTHROPIC_API_KEY/)
  })
})
