/**
 * @noema/agents: ready-made agents and ways to combine any agents.
 */
export * as AgentFallback from "./AgentFallback.js"
export * as AgentPipeline from "./AgentPipeline.js"
export * as AgentRouter from "./AgentRouter.js"
export * as PlanAgent from "./PlanAgent.js"
export * as SimpleAgent from "./SimpleAgent.js"
export * as ToolAgent from "./ToolAgent.js"
