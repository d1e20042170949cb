/**
 * McpConfig: the MCP servers file, in the format other MCP clients use.
 *
 * Claude Desktop, Cursor, Claude Code and Windsurf read
 * `{ "mcpServers": { "<name>": { ... } } }`; VS Code reads the same entries
 * under `"servers"`. An entry with `command` starts a local server over stdio
 * (`args`, `env`, `cwd`); an entry with `url` talks to a server over
 * streamable HTTP (`headers`). Keys other clients add (`disabled`,
 * `alwaysAllow`, ...) are ignored, except `disabled: true`, which leaves the
 * server out. A mistake is one `McpConfigError` line naming the file and the
 * key.
 */
import * as fs from "node:fs/promises"
import { Effect, Schema, SchemaIssue } from "effect"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export const StdioServer = Schema.Struct({
  type: Schema.optional(Schema.Literal("stdio")),
  command: Schema.String,
  args: Schema.optional(Schema.Array(Schema.String)),
  /** Added to a small default environment (PATH, HOME, ...), not to the whole of noema's. */
  env: Schema.optional(Schema.Record(Schema.String, Schema.String)),
  cwd: Schema.optional(Schema.String)
})
export type StdioServer = typeof StdioServer.Type

export const HttpServer = Schema.Struct({
  type: Schema.optional(Schema.Literals(["http", "streamable-http", "streamableHttp"])),
  url: Schema.String,
  headers: Schema.optional(Schema.Record(Schema.String, Schema.String))
})
export type HttpServer = typeof HttpServer.Type

export type ServerConfig = StdioServer | HttpServer

/** Servers by name; the name prefixes the server's tool names (see `McpTools.toolName`). */
export type Servers = { readonly [name: string]: ServerConfig }

export class McpConfigError extends Schema.TaggedError<McpConfigError>()("McpConfigError", {
  file: Schema.String,
  message: Schema.String
}) {}

export const isHttp = (server: ServerConfig): server is HttpServer => "url" in server

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

const isRecord = (value: unknown): value is { readonly [key: string]: unknown } =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const decodeServer = (
  file: string,
  key: string,
  value: unknown
): Effect.Effect<ServerConfig, McpConfigError> => {
  const fail = (message: string) => Effect.fail(new McpConfigError({ file, message: `${file}: ${message}` }))
  if (!isRecord(value)) return fail(`${key}: expected an object with "command" or "url"`)
  const http = "url" in value
  if (!http && !("command" in value)) return fail(`${key}: needs "command" (stdio) or "url" (HTTP)`)
  if (http && "command" in value) return fail(`${key}: has both "command" and "url"; keep one`)
  const schema: Schema.Codec<ServerConfig> = http ? HttpServer : StdioServer
  return Schema.decodeUnknownEffect(schema)(value).pipe(
    Effect.mapError((error) => {
      const issue = formatter(error.issue).issues[0]
      const issuePath = (issue?.path ?? []).map(String)
      const where = [key, ...issuePath].join(".")
      // "Expected array | undefined" reads better as what was expected and what was there.
      const expected = (issue?.message ?? error.message).replace(/ \| undefined$/, "")
      const found = issuePath.reduce<unknown>(
        (at, segment) => (isRecord(at) ? at[segment] : undefined),
        value
      )
      const got = /, got /.test(expected) || found === undefined ? "" : `, got ${JSON.stringify(found)}`
      return new McpConfigError({ file, message: `${file}: ${where}: ${expected}${got}` })
    }),
    Effect.flatMap((server) => {
      if (isHttp(server)) {
        try {
          new URL(server.url)
        } catch {
          return fail(`${key}.url: not a URL: ${JSON.stringify(server.url)}`)
        }
      } else if (server.command.trim() === "") {
        return fail(`${key}.command: is empty`)
      }
      return Effect.succeed(server)
    })
  )
}

/** The servers a config document names; `file` is only for the messages. */
export const decode = (file: string, document: unknown): Effect.Effect<Servers, McpConfigError> =>
  Effect.gen(function* () {
    const fail = (message: string) => new McpConfigError({ file, message: `${file}: ${message}` })
    if (!isRecord(document)) return yield* fail('expected a JSON object with "mcpServers"')
    const key = "mcpServers" in document ? "mcpServers" : "servers" in document ? "servers" : undefined
    if (key === undefined)
      return yield* fail('no "mcpServers" object (the format of Claude Desktop and Cursor)')
    const entries = document[key]
    if (!isRecord(entries)) return yield* fail(`${key}: expected an object of servers by name`)
    const servers: { [name: string]: ServerConfig } = {}
    for (const [name, value] of Object.entries(entries)) {
      if (isRecord(value) && value.disabled === true) continue
      if (!/^[a-zA-Z0-9_-]+$/.test(name)) {
        return yield* fail(`${key}.${name}: a server name may use letters, digits, "_" and "-" only`)
      }
      servers[name] = yield* decodeServer(file, `${key}.${name}`, value)
    }
    return servers
  })

/** Parses the text of a config file. */
export const parse = (file: string, text: string): Effect.Effect<Servers, McpConfigError> =>
  Effect.suspend(() => {
    let document: unknown
    try {
      document = JSON.parse(text)
    } catch (error) {
      return Effect.fail(
        new McpConfigError({
          file,
          message: `${file}: not valid JSON (${error instanceof Error ? error.message : String(error)})`
        })
      )
    }
    return decode(file, document)
  })

/** Reads and parses a config file. */
export const load = (file: string): Effect.Effect<Servers, McpConfigError> =>
  Effect.tryPromise({
    try: () => fs.readFile(file, "utf8"),
    catch: (error) =>
      new McpConfigError({
        file,
        message: `${file}: cannot read (${(error as NodeJS.ErrnoException).code ?? String(error)})`
      })
  }).pipe(Effect.flatMap((text) => parse(file, text)))
