/**
 * Mcp: the tools of the MCP servers `--mcp FILE` names, started with the
 * command and stopped with it; a tool that may change something asks first.
 */
import * as path from "node:path"
import { Tool } from "@noema/core"
import { Cause, Effect, Exit } from "effect"
import { UsageError } from "../CliArguments.js"

export interface McpConnections {
  readonly tools: ReadonlyArray<Tool.Any>
  /** Closes the connections; the stdio servers' processes end. */
  close(): Promise<void>
}

const noMcp: McpConnections = { tools: [], close: async () => undefined }

/**
 * Starts the servers of `--mcp FILE` (relative to `cwd`). A bad file is a
 * `UsageError` (exit 2) naming the file and key; a server that fails to start
 * rejects with the `McpError` line (exit 1). Nothing is loaded without `--mcp`.
 */
export const openMcp = async (
  file: string | undefined,
  cwd: string,
  options: { readonly approveAll?: boolean } = {}
): Promise<McpConnections> => {
  if (file === undefined) return noMcp
  const { McpConfig, McpTools } = await import("@noema/mcp")
  const exit = await Effect.runPromiseExit(McpConfig.load(path.resolve(cwd, file)))
  if (Exit.isFailure(exit)) {
    const error = Cause.squash(exit.cause)
    throw new UsageError(`${error instanceof Error ? error.message : String(error)}`)
  }
  const connections = await McpTools.open(exit.value, { clientName: "noema" })
  return options.approveAll === true
    ? connections
    : { ...connections, tools: connections.tools.map(withApprovalUnlessReadOnly) }
}

/**
 * A server's tool that may change something (not annotated read-only) asks
 * before each call; `--yes` turns that off. The built-in tools only read.
 */
export const withApprovalUnlessReadOnly = (tool: Tool.Any): Tool.Any =>
  Tool.isReadOnly(tool) ? tool : Tool.withApproval(tool)
