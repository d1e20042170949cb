export * as McpConfig from "./McpConfig.js"
export * as McpTools from "./McpTools.js"
