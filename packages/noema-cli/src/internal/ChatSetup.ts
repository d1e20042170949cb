/**
 * ChatSetup: what a chat turn runs on, said once for `noema chat` and for the
 * Chat view of `noema serve`: the model, the agent with its tools (built-in
 * unless `--no-tools`, the MCP servers', the plan workflow), the subminds that
 * take a person's messages and decisions on waiting tool calls, and the
 * session's compaction before a turn. Both build a session's runtime
 * (`@noema/runtime`) with `runtimeFor`, so a turn made in the browser and one
 * made in the terminal are the same kind of turn, on the same session.
 */
import { ToolAgent } from "@noema/agents"
import type { ChatModel, Tool } from "@noema/core"
import { type Runtime, RuntimeBuilder } from "@noema/runtime"
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

/**
 * The runtime of `session` (not started): the one `noema chat` and `noema serve`'s Chat view run
 * turns on. One path for both modes: the builder makes either agent (the tool loop, or the plan
 * workflow with `/plan on`) with the runtime's steering and its built-in subminds.
 */
export const runtimeFor = (
  setup: ChatSetup,
  session: Session.Session
): Effect.Effect<Runtime.Runtime, unknown> =>
  Effect.gen(function* () {
    // The error as it is: the chat tells it in its own words (CliError.describe).
    const compaction = Models.turnCompaction(
      yield* Effect.tryPromise({ try: setup.compaction, catch: (error) => error })
    )
    const builder = RuntimeBuilder.make()
      .registerTools(
        ...Models.tools({
          tools: setup.tools,
          cwd: setup.cwd,
          ...(setup.mcpTools !== undefined && { mcpTools: setup.mcpTools })
        })
      )
      .useModel(setup.model)
      .useSession(session)
    const chosen =
      setup.plan === true
        ? builder.usePlanAgent({ name: "noema" })
        : builder.useAgent(({ tools, steering }) => ToolAgent.make({ name: "noema", tools, steering }))
    return yield* (compaction === undefined ? chosen : chosen.useCompaction(compaction)).build()
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
