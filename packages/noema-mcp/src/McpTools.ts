/**
 * McpTools: the tools of Model Context Protocol servers as noema tools.
 *
 * A connection (the official `@modelcontextprotocol/sdk` client, over stdio
 * or streamable HTTP) lives in a Scope: closing the scope closes the client,
 * and for a stdio server ends its process and every process it started (its
 * process group: stdin closed, then SIGTERM, then SIGKILL; see
 * `internal/ProcessTransport`), so no server outlives noema. The same happens
 * at once when a server fails to start, does not answer `initialize` within
 * `initializeTimeout`, or the connecting is interrupted. Each server tool becomes a
 * `Tool.fromJsonSchema` tool: its input schema is what the model sees, its
 * MCP annotations become noema's, and a call is `tools/call`. A result with
 * `isError`, or a call that fails (the server rejects it, the connection
 * drops), is an error result the model can read, never a failure of the turn.
 *
 * Names: a tool is named `<server>__<tool>` (`files__read_file`), so two
 * servers' tools never collide; characters outside `[a-zA-Z0-9_-]` become
 * `_` and the name is cut to 64 characters (what model APIs accept).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { CallToolResult, Tool as McpTool } from "@modelcontextprotocol/sdk/types.js"
import { Tool } from "@noema/core"
import { Cause, Context, Duration, Effect, Exit, Layer, Schema, Scope } from "effect"
import { ProcessTransport } from "./internal/ProcessTransport.js"
import { isHttp, type ServerConfig, type Servers } from "./McpConfig.js"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/** A server could not be reached, started, or listed. */
export class McpError extends Schema.TaggedError<McpError>()("McpError", {
  server: Schema.String,
  message: Schema.String
}) {}

/** A tool call the server answered with `isError`, or that did not complete. */
export class McpToolError extends Schema.TaggedError<McpToolError>()("McpToolError", {
  server: Schema.String,
  tool: Schema.String,
  message: Schema.String
}) {}

export interface Connection {
  readonly server: string
  readonly tools: ReadonlyArray<Tool.Any>
  /** The server process, for a stdio server. */
  readonly pid: number | undefined
}

export interface ConnectOptions {
  /** Who noema says it is in the MCP handshake. */
  readonly clientName?: string
  readonly clientVersion?: string
  /** How long a server may take to start and answer `initialize`. Default 60 seconds (the SDK's). */
  readonly initializeTimeout?: Duration.Input
}

// ---------------------------------------------------------------------------
// Names and results
// ---------------------------------------------------------------------------

/** The noema name of a server's tool: `<server>__<tool>`, sanitised, at most 64 characters. */
export const toolName = (server: string, tool: string): string =>
  `${server}__${tool}`.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 64)

const base64Bytes = (data: string): number =>
  Math.floor((data.length * 3) / 4) - (data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0)

/** The text the model reads for a call's content: text joined, anything else summarised. */
export const formatContent = (result: Pick<CallToolResult, "content" | "structuredContent">): string => {
  const parts = (result.content ?? []).map((part) => {
    switch (part.type) {
      case "text":
        return part.text
      case "image":
      case "audio":
        return `[${part.type}: ${part.mimeType}, ${base64Bytes(part.data)} bytes]`
      case "resource_link":
        return `[resource: ${part.uri}${part.name === part.uri ? "" : ` (${part.name})`}]`
      case "resource": {
        const resource = part.resource
        if ("text" in resource && typeof resource.text === "string") return resource.text
        return `[resource: ${resource.uri}${resource.mimeType === undefined ? "" : `, ${resource.mimeType}`}]`
      }
      default:
        return `[${(part as { type: string }).type} content]`
    }
  })
  if (parts.length === 0 && result.structuredContent !== undefined) {
    return JSON.stringify(result.structuredContent)
  }
  return parts.join("\n")
}

const describe = (error: unknown): string => (error instanceof Error ? error.message : String(error))

const annotationsOf = (tool: McpTool): Tool.Annotations => {
  const hints = tool.annotations
  return {
    ...(hints?.readOnlyHint !== undefined && { readOnly: hints.readOnlyHint }),
    ...(hints?.destructiveHint !== undefined && { destructive: hints.destructiveHint }),
    ...(hints?.idempotentHint !== undefined && { idempotent: hints.idempotentHint })
  }
}

const toNoemaTool = (server: string, client: Client, tool: McpTool): Tool.Any => {
  const { $schema: _ignored, ...parameters } = tool.inputSchema as { readonly [key: string]: unknown }
  return Tool.fromJsonSchema({
    name: toolName(server, tool.name),
    description: tool.description ?? tool.title ?? tool.annotations?.title ?? tool.name,
    parameters,
    annotations: annotationsOf(tool),
    handler: (args) =>
      Effect.tryPromise({
        try: (signal) => client.callTool({ name: tool.name, arguments: args }, undefined, { signal }),
        catch: (error) => new McpToolError({ server, tool: tool.name, message: describe(error) })
      }).pipe(
        Effect.flatMap((result) => {
          const text = formatContent(result as CallToolResult)
          return result.isError === true
            ? Effect.fail(
                new McpToolError({ server, tool: tool.name, message: text || "the server reported an error" })
              )
            : Effect.succeed(text)
        })
      )
  })
}

// ---------------------------------------------------------------------------
// Connecting
// ---------------------------------------------------------------------------

const lastLines = (text: string): string => {
  const lines = text
    .trim()
    .split("\n")
    .filter((line) => line.trim() !== "")
  return lines.slice(-1)[0]?.trim().slice(0, 300) ?? ""
}

/** The transport to a server: a child process of its own group (stdio), or streamable HTTP. */
const transportFor = (config: ServerConfig) =>
  isHttp(config)
    ? new StreamableHTTPClientTransport(new URL(config.url), {
        ...(config.headers !== undefined && { requestInit: { headers: { ...config.headers } } })
      })
    : new ProcessTransport({
        command: config.command,
        args: config.args ?? [],
        // A small default environment (PATH, HOME, ...) plus the server's own, not all of noema's.
        env: { ...getDefaultEnvironment(), ...config.env },
        cwd: config.cwd
      })

/**
 * Starts the client on a new transport and runs the MCP handshake. The transport is closed
 * (a stdio server's process tree ended) when the scope closes, and at once when starting
 * fails, times out or is interrupted: it is registered with the scope before anything starts.
 */
const start = (server: string, config: ServerConfig, options: ConnectOptions) =>
  Effect.gen(function* () {
    const client = new Client({
      name: options.clientName ?? "noema",
      version: options.clientVersion ?? "0.1.0"
    })
    const transport = transportFor(config)
    let stderr = ""
    if (transport instanceof ProcessTransport)
      // Kept to explain a failed start; a server's logs do not belong on noema's terminal.
      transport.stderr.on("data", (chunk: Buffer) => {
        stderr = (stderr + chunk.toString("utf8")).slice(-4096)
      })
    const close = Effect.promise(async () => {
      await client.close().catch(() => undefined)
      await transport.close().catch(() => undefined)
    })
    yield* Effect.addFinalizer(() => close)
    const timeout = Duration.fromInputUnsafe(options.initializeTimeout ?? "60 seconds")
    const failure = (reason: string) => {
      const detail = lastLines(stderr)
      return new McpError({
        server,
        message: `MCP server "${server}" (${isHttp(config) ? config.url : config.command}) failed to start: ${reason}${
          detail === "" ? "" : ` (stderr: ${detail})`
        }`
      })
    }
    yield* Effect.tryPromise({
      try: (signal) => client.connect(transport, { signal, timeout: Duration.toMillis(timeout) }),
      catch: (error) => failure(describe(error))
    }).pipe(
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(failure(`it did not answer initialize within ${Duration.format(timeout)}`))
      }),
      Effect.onError(() => close)
    )
    return { client, pid: transport instanceof ProcessTransport ? transport.pid : undefined }
  })

/**
 * Connects to one server and lists its tools; the connection is closed (a
 * stdio server's process tree ended) when the scope closes.
 */
export const connect = (
  server: string,
  config: ServerConfig,
  options: ConnectOptions = {}
): Effect.Effect<Connection, McpError, Scope.Scope> =>
  Effect.gen(function* () {
    const { client, pid } = yield* start(server, config, options)
    const listed = yield* Effect.tryPromise({
      try: async () => {
        const tools: Array<McpTool> = []
        let cursor: string | undefined
        do {
          const page = await client.listTools(cursor === undefined ? {} : { cursor })
          tools.push(...page.tools)
          cursor = page.nextCursor
        } while (cursor !== undefined)
        return tools
      },
      catch: (error) =>
        new McpError({
          server,
          message: `MCP server "${server}": listing its tools failed: ${describe(error)}`
        })
    })
    const tools = listed.map((tool) => toNoemaTool(server, client, tool))
    return { server, tools, pid }
  })

/**
 * Connects to every server (in parallel) and returns all their tools. One
 * server that fails fails the whole (the others are closed again), and a tool
 * name two servers would share is an error rather than a silent shadowing.
 */
export const connectAll = (
  servers: Servers,
  options: ConnectOptions = {}
): Effect.Effect<ReadonlyArray<Tool.Any>, McpError, Scope.Scope> =>
  Effect.gen(function* () {
    const connections = yield* Effect.forEach(
      Object.entries(servers),
      ([name, config]) => connect(name, config, options),
      { concurrency: "unbounded" }
    )
    const tools = connections.flatMap((connection) => connection.tools)
    const seen = new Set<string>()
    for (const tool of tools) {
      if (seen.has(tool.name)) {
        return yield* new McpError({
          server: tool.name.split("__")[0] ?? "",
          message: `two MCP tools are both named "${tool.name}" (after shortening to 64 characters); rename a server`
        })
      }
      seen.add(tool.name)
    }
    return tools
  })

// ---------------------------------------------------------------------------
// Service and plain async helper
// ---------------------------------------------------------------------------

/** The tools of the configured MCP servers, for as long as the layer lives. */
export class McpTools extends Context.Service<McpTools, { readonly tools: ReadonlyArray<Tool.Any> }>()(
  "@noema/mcp/McpTools"
) {}

export const layer = (servers: Servers, options: ConnectOptions = {}): Layer.Layer<McpTools, McpError> =>
  Layer.effect(
    McpTools,
    Effect.map(connectAll(servers, options), (tools) => ({ tools }))
  )

export interface OpenTools {
  readonly tools: ReadonlyArray<Tool.Any>
  /** Closes every connection and ends the stdio servers' processes. */
  close(): Promise<void>
}

/** For code without Effect: connects to the servers; `close` ends them. Rejects with `McpError`. */
export const open = async (servers: Servers, options: ConnectOptions = {}): Promise<OpenTools> => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(Scope.provide(connectAll(servers, options), scope))
  if (Exit.isFailure(exit)) {
    await Effect.runPromise(Scope.close(scope, exit))
    throw Cause.squash(exit.cause)
  }
  return {
    tools: exit.value,
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
