import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { McpConfig } from "../src/index.js"

const parse = (document: unknown) => McpConfig.parse("mcp.json", JSON.stringify(document))
const failure = (document: unknown) => Effect.flip(parse(document))

describe("McpConfig", () => {
  it.effect("reads the Claude Desktop / Cursor format", () =>
    Effect.gen(function* () {
      const servers = yield* parse({
        mcpServers: {
          files: {
            command: "npx",
            args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
            env: { A: "1" }
          },
          remote: { url: "https://example.com/mcp", headers: { Authorization: "Bearer x" } },
          off: { command: "x", disabled: true }
        }
      })
      assert.deepStrictEqual(Object.keys(servers), ["files", "remote"])
      assert.deepStrictEqual(servers.files, {
        command: "npx",
        args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
        env: { A: "1" }
      })
      assert.isTrue(McpConfig.isHttp(servers.remote as McpConfig.ServerConfig))
    })
  )

  it.effect("reads VS Code's `servers` with `type`", () =>
    Effect.gen(function* () {
      const servers = yield* parse({ servers: { web: { type: "http", url: "http://localhost:1/mcp" } } })
      assert.deepStrictEqual(servers, { web: { type: "http", url: "http://localhost:1/mcp" } })
    })
  )

  it.effect("names the file and the bad key in one line", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
        [
          { mcpServers: { fs: { command: "x", args: "not-an-array" } } },
          /^mcp\.json: mcpServers\.fs\.args: Expected array, got "not-an-array"$/
        ],
        [
          { mcpServers: { fs: { command: "x", env: { A: 1 } } } },
          /^mcp\.json: mcpServers\.fs\.env\.A: Expected string, got 1$/
        ],
        [
          { mcpServers: { fs: { args: [] } } },
          /^mcp\.json: mcpServers\.fs: needs "command" \(stdio\) or "url"/
        ],
        [{ mcpServers: { web: { url: "not a url" } } }, /^mcp\.json: mcpServers\.web\.url: not a URL/],
        [{ mcpServers: { "a b": { command: "x" } } }, /^mcp\.json: mcpServers\.a b: a server name/],
        [{ tools: {} }, /^mcp\.json: no "mcpServers" object/],
        [[1], /^mcp\.json: expected a JSON object/]
      ]
      for (const [document, pattern] of cases) {
        const error = yield* failure(document)
        assert.strictEqual(error._tag, "McpConfigError")
        assert.match(error.message, pattern)
        assert.notInclude(error.message, "\n")
      }
      const notJson = yield* Effect.flip(McpConfig.parse("mcp.json", "{ nope"))
      assert.match(notJson.message, /^mcp\.json: not valid JSON/)
    })
  )

  it.effect("loads a file, and says when it cannot", () =>
    Effect.gen(function* () {
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "noema-mcp-"))
      const file = path.join(directory, "mcp.json")
      fs.writeFileSync(file, JSON.stringify({ mcpServers: { a: { command: "a" } } }))
      assert.deepStrictEqual(yield* McpConfig.load(file), { a: { command: "a" } })
      const missing = yield* Effect.flip(McpConfig.load(path.join(directory, "missing.json")))
      assert.match(missing.message, /missing\.json: cannot read \(ENOENT\)$/)
      fs.rmSync(directory, { recursive: true })
    })
  )
})
