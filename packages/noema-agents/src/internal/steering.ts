/**
 * Steering: messages that join a running agent between its steps (what the
 * runtime's `ForNextTurn` and `InTheEnd` items become). One poll, shared by
 * ToolAgent (between model calls) and PlanAgent (between plan steps), so both
 * are told the same things and accept and refuse the same messages.
 */
import { Agent, Message } from "@noema/core"
import { Effect } from "effect"

/** What steering is told when it is polled. */
export interface SteeringInput {
  /** The number of the step that just finished. */
  readonly step: number
  /**
   * The agent would finish now (its model answered without tool calls, its plan
   * has no step left): it ends unless steering returns messages (what a runtime
   * injects "in the end" belongs here).
   */
  readonly final: boolean
}

/**
 * Messages to inject between steps, polled after each step's tool calls have
 * all been answered and before the next step starts. Return what arrived since
 * the last poll (e.g. `Queue.clear(queue)`), or an empty array.
 */
export type Steering = (input: SteeringInput) => Effect.Effect<ReadonlyArray<Message.Message>>

/**
 * Polls `steering` and checks what it returned: injected messages must keep the
 * history valid (no calls to answer, no answers without calls), so a tool call
 * or tool result fails the agent, with `produced` as what it made so far. The
 * caller adds the messages to its output.
 */
export const poll = (
  agent: string,
  steering: Steering,
  input: SteeringInput,
  produced: ReadonlyArray<Message.Message>
): Effect.Effect<ReadonlyArray<Message.Message>, Agent.AgentError> =>
  Effect.flatMap(steering(input), (messages) => {
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i] as Message.Message
      if (message.role === "tool" || Message.hasToolCalls(message)) {
        return Effect.fail(
          new Agent.AgentError({
            agent,
            reason: new Agent.Failed({
              message: `steering returned a ${message.role === "tool" ? "tool result" : "message with tool calls"}; only messages without tool calls or results can be injected`
            }),
            messages: produced.slice()
          })
        )
      }
    }
    return Effect.succeed(messages)
  })
