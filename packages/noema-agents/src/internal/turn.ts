/**
 * One model call of an agent, as an Effect (`complete`) or as agent events
 * (`stream`). Shared by SimpleAgent and ToolAgent so both turn a response into
 * the same assistant message and a model failure into the same AgentError.
 */
import { Agent, ChatModel, Message } from "@noema/core"
import { Effect, Stream } from "effect"

/**
 * Calls the model once and appends the assistant message to `produced`. A
 * failure carries a snapshot of `produced`: the caller may keep what ran.
 */
export const complete = (
  agent: string,
  model: ChatModel.Service,
  request: ChatModel.ChatRequest,
  produced: Array<Message.Message>
): Effect.Effect<Message.AssistantMessage, Agent.AgentError> =>
  model.complete(request).pipe(
    Effect.map((response) => {
      const message = ChatModel.toMessage(response)
      produced.push(message)
      return message
    }),
    Effect.mapError((error) => Agent.modelFailed(agent, error, produced.slice()))
  )

class TurnState {
  text = ""
  refusal: string | undefined
  readonly toolCalls: Array<Message.ToolCall> = []

  add(chunk: ChatModel.StreamChunk): ReadonlyArray<Agent.AgentEvent> {
    switch (chunk.type) {
      case "text-delta":
        if (chunk.delta.length === 0) return []
        this.text += chunk.delta
        return [{ type: "text-delta", delta: chunk.delta }]
      case "refusal-delta":
        this.refusal = (this.refusal ?? "") + chunk.delta
        return []
      case "tool-call":
        this.toolCalls.push(chunk.toolCall)
        return [{ type: "tool-call", toolCall: chunk.toolCall }]
      case "usage":
        return [{ type: "usage", usage: chunk.usage }]
      default:
        // Deltas of tool calls are reassembled by ChatModel.make into `tool-call` chunks.
        return []
    }
  }

  message(): Message.AssistantMessage {
    return Message.assistant(this.text, {
      toolCalls: this.toolCalls,
      ...(this.refusal !== undefined && { refusal: this.refusal })
    })
  }
}

/**
 * Streams one model call as events (text deltas as they arrive, each tool
 * call once complete, usage), then the completed assistant message, which is
 * also appended to `produced` before it is emitted.
 */
export const stream = (
  agent: string,
  model: ChatModel.Service,
  request: ChatModel.ChatRequest,
  produced: Array<Message.Message>
): Stream.Stream<Agent.AgentEvent, Agent.AgentError> =>
  Stream.suspend(() => {
    const state = new TurnState()
    return model.stream(request).pipe(
      Stream.map((chunk) => state.add(chunk)),
      Stream.flattenIterable,
      // Not `mapAccum`'s `onHalt`: that runs when the model fails too, and a failed call has no message.
      Stream.concat(
        Stream.suspend(() => {
          const message = state.message()
          produced.push(message)
          return Stream.succeed<Agent.AgentEvent>({ type: "message", message })
        })
      ),
      Stream.mapError((error) => Agent.modelFailed(agent, error, produced.slice()))
    )
  })
