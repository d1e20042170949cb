import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Redacted } from "effect"
import { UsageError } from "../src/CliArguments.js"
import * as CliConfig from "../src/CliConfig.js"

describe("CliConfig", () => {
  it("uses the offline model when neither an API key nor a base URL is set", () => {
    assert.deepStrictEqual(CliConfig.resolveModel({}, {}), { kind: "offline", reason: "unconfigured" })
    assert.deepStrictEqual(CliConfig.resolveModel({}, { NOEMA_MODEL: "x" }), {
      kind: "offline",
      reason: "unconfigured"
    })
    // A model asked for on the command line is never replaced by the offline one.
    assert.throws(
      () => CliConfig.resolveModel({ model: "gpt-4o" }, { NOEMA_MODEL: "x" }),
      /names no model server/
    )
    assert.deepStrictEqual(CliConfig.resolveModel({}, { OPENAI_API_KEY: "  " }), {
      kind: "offline",
      reason: "unconfigured"
    })
  })

  it("defaults the model name when only a key is set", () => {
    const config = CliConfig.resolveModel({}, { OPENAI_API_KEY: "sk-env" })
    assert.deepStrictEqual(config, {
      kind: "openai",
      model: "gpt-4o-mini",
      baseUrl: undefined,
      apiKey: "sk-env",
      api: "chat",
      provider: "openai",
      sources: { model: "default", baseUrl: "default", apiKey: "environment" }
    })
  })

  it("speaks the Responses API with --api responses or NOEMA_OPENAI_API, and refuses other values", () => {
    const env = { OPENAI_API_KEY: "sk-env" }
    assert.deepInclude(CliConfig.resolveModel({ api: "responses" }, env), { api: "responses" })
    assert.deepInclude(CliConfig.resolveModel({}, { ...env, NOEMA_OPENAI_API: "responses" }), {
      api: "responses"
    })
    assert.deepInclude(CliConfig.resolveModel({ api: "chat" }, { ...env, NOEMA_OPENAI_API: "responses" }), {
      api: "chat"
    })
    assert.throws(
      () => CliConfig.resolveModel({ api: "assistants" }, env),
      /--api: "assistants" is not an API/
    )
  })

  it("takes flags over the environment, one setting at a time", () => {
    const env = {
      OPENAI_API_KEY: "sk-env",
      NOEMA_MODEL: "env-model",
      NOEMA_BASE_URL: "http://env:1/v1",
      OPENAI_BASE_URL: "http://openai-env:1/v1"
    }
    const flags = CliConfig.resolveModel(
      { model: "flag-model", baseUrl: "http://flag:2/v1", apiKey: "sk-flag" },
      env
    )
    assert.deepInclude(flags, { model: "flag-model", baseUrl: "http://flag:2/v1", apiKey: "sk-flag" })
    const mixed = CliConfig.resolveModel({ model: "flag-model" }, env)
    assert.deepInclude(mixed, { model: "flag-model", baseUrl: "http://env:1/v1", apiKey: "sk-env" })
    const onlyEnvironment = CliConfig.resolveModel({}, env)
    assert.deepInclude(onlyEnvironment, { model: "env-model", baseUrl: "http://env:1/v1", apiKey: "sk-env" })
    const openAiBase = CliConfig.resolveModel({}, { OPENAI_BASE_URL: "http://openai-env:1/v1" })
    assert.deepInclude(openAiBase, { baseUrl: "http://openai-env:1/v1", apiKey: undefined })
  })

  it("accepts a base URL without a key (local servers)", () => {
    const config = CliConfig.resolveModel({ baseUrl: "http://localhost:11434/v1", model: "llama3.2" }, {})
    assert.deepInclude(config, { kind: "openai", model: "llama3.2", apiKey: undefined })
  })

  it("describes the model server without the credentials in its URL", () => {
    const config = CliConfig.resolveModel({ baseUrl: "https://me:s3cret@llm.example/v1?api_key=k3y" }, {})
    assert.strictEqual(
      CliConfig.describeModel(config),
      "gpt-4o-mini at https://me:***@llm.example/v1?api_key=***"
    )
    assert.throws(
      () => CliConfig.resolveModel({ baseUrl: "ftp://me:s3cret@llm.example" }, {}),
      /"ftp:\/\/me:\*\*\*@llm\.example" is not an http\(s\) URL/
    )
  })

  it("selects the offline model explicitly with --model offline, even with a key", () => {
    assert.deepStrictEqual(CliConfig.resolveModel({ model: "offline" }, { OPENAI_API_KEY: "sk" }), {
      kind: "offline",
      reason: "requested"
    })
    const configured = CliConfig.resolveModel(
      { baseUrl: "http://localhost:11434/v1" },
      { OPENAI_API_KEY: "sk" }
    )
    const offline = CliConfig.withModel(configured, "offline")
    assert.deepInclude(offline, { kind: "offline", reason: "requested" })
    assert.deepInclude(CliConfig.withModel(configured, "gpt-4.1"), { kind: "openai", model: "gpt-4.1" })
    // `/model offline` then `/model NAME` goes back to the server configured before.
    assert.deepInclude(CliConfig.withModel(offline as CliConfig.ModelConfig, "llama3.2"), {
      kind: "openai",
      model: "llama3.2",
      baseUrl: "http://localhost:11434/v1",
      apiKey: "sk"
    })
    assert.isUndefined(CliConfig.withModel({ kind: "offline", reason: "unconfigured" }, "gpt-4.1"))
  })

  it("keeps its files in NOEMA_HOME, by default ~/.noema", () => {
    assert.deepStrictEqual(CliConfig.paths({}, "/home/ada"), {
      home: "/home/ada/.noema",
      database: "/home/ada/.noema/noema.db",
      history: "/home/ada/.noema/history"
    })
    const custom = CliConfig.paths({ NOEMA_HOME: "/tmp/noema-x" }, "/home/ada")
    assert.strictEqual(custom.database, path.join("/tmp/noema-x", "noema.db"))
  })

  describe("the context budget", () => {
    it("is auto unless a number of tokens is given, by flag over environment; 0 is off", () => {
      assert.deepStrictEqual(CliConfig.resolveContextBudget({}, {}), { kind: "auto" })
      assert.deepStrictEqual(CliConfig.resolveContextBudget({}, { NOEMA_CONTEXT_BUDGET: "auto" }), {
        kind: "auto"
      })
      assert.deepStrictEqual(CliConfig.resolveContextBudget({}, { NOEMA_CONTEXT_BUDGET: "8000" }), {
        kind: "tokens",
        tokens: 8000
      })
      assert.deepStrictEqual(
        CliConfig.resolveContextBudget({ contextBudget: "0" }, { NOEMA_CONTEXT_BUDGET: "8000" }),
        { kind: "tokens", tokens: 0 }
      )
      assert.throws(
        () => CliConfig.resolveContextBudget({}, { NOEMA_CONTEXT_BUDGET: "-5" }),
        /NOEMA_CONTEXT_BUDGET: "-5" is not a number of tokens/
      )
      assert.throws(() => CliConfig.resolveContextBudget({ contextBudget: "1.5" }, {}), /--context-budget/)
    })
  })

  describe("the session database", () => {
    const files = CliConfig.paths({ NOEMA_HOME: "/srv/noema" })
    const url = "postgres://noema:S3cret-Pass@db.example:5432/sessions?sslmode=require"

    it("defaults to noema.db in NOEMA_HOME", () => {
      assert.deepStrictEqual(CliConfig.resolveDatabase(undefined, {}, files, "/work"), {
        kind: "sqlite",
        path: path.resolve("/srv/noema/noema.db")
      })
      assert.deepStrictEqual(CliConfig.resolveDatabase("  ", { NOEMA_DATABASE_URL: "" }, files, "/work"), {
        kind: "sqlite",
        path: path.resolve("/srv/noema/noema.db")
      })
    })

    it("takes --database over NOEMA_DATABASE_URL, and file paths from the working directory", () => {
      assert.deepStrictEqual(
        CliConfig.resolveDatabase("other.db", { NOEMA_DATABASE_URL: url }, files, "/work"),
        { kind: "sqlite", path: path.resolve("/work/other.db") }
      )
      const fromEnvironment = CliConfig.resolveDatabase(
        undefined,
        { NOEMA_DATABASE_URL: url },
        files,
        "/work"
      )
      assert.strictEqual(fromEnvironment.kind, "postgres")
      assert.strictEqual(fromEnvironment.kind === "postgres" && Redacted.value(fromEnvironment.url), url)
      const postgresql = CliConfig.resolveDatabase("postgresql://db/noema", {}, files, "/work")
      assert.strictEqual(postgresql.kind, "postgres")
    })

    it("never shows the password: not in describe, not when printed or serialised", () => {
      const config = CliConfig.resolveDatabase(url, {}, files, "/work")
      const description = CliConfig.describeDatabase(config)
      assert.strictEqual(description, "postgres://noema:***@db.example:5432/sessions?sslmode=require")
      for (const text of [
        description,
        String(config),
        JSON.stringify(config),
        `${config.kind === "postgres" && config.url}`
      ]) {
        assert.notInclude(text, "S3cret-Pass")
      }
      assert.strictEqual(CliConfig.describeDatabase({ kind: "sqlite", path: "/a/b.db" }), "/a/b.db")
    })

    it("refuses a URL of another scheme without repeating it", () => {
      const attempt = () =>
        CliConfig.resolveDatabase(
          undefined,
          { NOEMA_DATABASE_URL: "mysql://root:Hunter2@db/x" },
          files,
          "/work"
        )
      assert.throws(attempt, UsageError)
      assert.throws(attempt, /NOEMA_DATABASE_URL: unsupported database URL scheme "mysql:"/)
      try {
        attempt()
      } catch (error) {
        assert.notInclude(String(error), "Hunter2")
      }
    })
  })
})
