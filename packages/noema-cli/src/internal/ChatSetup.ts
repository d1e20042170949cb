/**
 * ChatSetup: what a chat turn runs on, said once for `noema chat` and for the
 * Chat view of `noema serve`: the model, the agent with its tools (built-in
 * unless `--no-tools`, the MCP servers', the plan workflow), the subminds that
 * take a person's messages and decisions on waiting tool calls, and the
 * session's compaction before a turn. Both build a session's runtime
 * (`@noema/runtime`) with `runtimeFor`, so a turn made in the browser and one
 * made in the terminal are the same kind of turn, on the same session.
 */
import type { ChatModel, Tool } from "@noema/core"
import { Runtime as AgentRuntime, Submind } from "@noema/runtime"
import type { Session } from "@noema/session"
import { Effect } from "effect"
import * as Models from "./Models.js"
import * as Sessions from "./Sessions.js"

export interface ChatSetup {
  readonly model: ChatModel.Service
  /** The built-in tools (`--no-tools` turns them off). */
  readonly tools: boolean
  /** The directory the built-in tools may read. */
  readonly cwd: string
  readonly mcpTools?: ReadonlyArray<Tool.Any>
  /** The plan workflow (`/plan on`) instead of the tool loop. */
  readonly plan?: boolean
  /** The model's compaction settings, loaded (tokenizer included) when a runtime first needs them. */
  readonly compaction: () => Promise<Models.CompactionSettings>
}

/** The runtime of `session` (not started): the one `noema chat` and `noema serve`'s Chat view run turns on. */
export const runtimeFor = (setup: ChatSetup, session: Session.Session) =>
  Effect.gen(function* () {
    // The error as it is: the chat tells it in its own words (CliError.describe).
    const compaction = Models.turnCompaction(
      yield* Effect.tryPromise({ try: setup.compaction, catch: (error) => error })
    )
    return yield* AgentRuntime.make({
      session,
      model: setup.model,
      subminds: [Submind.userMessages, Submind.approvalDecisions],
      agent: (steering) =>
        Models.makeAgent({
          tools: setup.tools,
          cwd: setup.cwd,
          ...(setup.mcpTools !== undefined && { mcpTools: setup.mcpTools }),
          ...(setup.plan !== undefined && { plan: setup.plan }),
          steering
        }),
      ...(compaction !== undefined && { turnOptions: { compaction } })
    })
  })

/**
 * The chat as `noema serve` offers it to the browser (`Server.Options.chat`): a session
 * without a system prompt of its own gets the CLI's default before its turn, as in `noema chat`.
 */
export const forServer = (setup: ChatSetup, description: string) => ({
  description,
  systemPrompt: Sessions.defaultSystemPrompt,
  runtime: (session: Session.Session) =>
    Effect.andThen(Sessions.adoptDefaultSystemPrompt(session), runtimeFor(setup, session))
})
