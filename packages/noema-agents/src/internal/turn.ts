/**
 * One model call of an agent, as an Effect (`complete`) or as agent events
 * (`stream`). Shared by SimpleAgent and ToolAgent so both turn a response into
 * the same assistant message and a model failure into the same AgentError.
 */
import { Agent, ChatModel, type Message } from "@noema/core"
import { Array as Arr, Cause, Effect, Pull, Stream } from "effect"

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
  Effect.mapBoth(model.complete(request), {
    onSuccess: (response) => {
      const message = ChatModel.toMessage(response)
      produced.push(message)
      return message
    },
    onFailure: (error) => Agent.modelFailed(agent, error, produced.slice())
  })

class TurnState {
  readonly response = new ChatModel.ResponseAccumulator()

  /** The events one batch of chunks amounts to, in order (often none: metadata, finish). */
  events(chunks: ReadonlyArray<ChatModel.StreamChunk>): Array<Agent.AgentEvent> {
    const events: Array<Agent.AgentEvent> = []
    for (let i = 0; i < chunks.length; i++) {
      const chunk = chunks[i] as ChatModel.StreamChunk
      this.response.add(chunk)
      switch (chunk.type) {
        case "text-delta":
          if (chunk.delta.length > 0) events.push({ type: "text-delta", delta: chunk.delta })
          break
        case "reasoning-delta":
          if (chunk.delta.length > 0) events.push({ type: "reasoning-delta", delta: chunk.delta })
          break
        case "tool-call":
          events.push({ type: "tool-call", toolCall: chunk.toolCall })
          break
        case "usage":
          events.push({ type: "usage", usage: chunk.usage })
          break
        default:
          // Deltas of tool calls are reassembled by ChatModel.make into `tool-call` chunks.
          break
      }
    }
    return events
  }

  message(): Message.AssistantMessage {
    return this.response.message()
  }
}

/**
 * Streams one model call as events (text deltas as they arrive, each tool
 * call once complete, usage), then the completed assistant message, which is
 * also appended to `produced` before it is emitted. `produced` is the run's
 * messages so far (a tool loop's); a single call leaves it out and gets a
 * fresh list per run.
 *
 * Written as one pull-level layer (batch of chunks in, its events out; the
 * message once the model is done; model failures as AgentError) rather than
 * map + concat + mapError: every streamed turn pays for each layer, per run
 * and per batch.
 */
export const stream = (
  agent: string,
  model: ChatModel.Service,
  request: ChatModel.ChatRequest,
  produced?: Array<Message.Message>
): Stream.Stream<Agent.AgentEvent, Agent.AgentError> =>
  Stream.transformPull(model.stream(request), (pull) =>
    Effect.sync(() => {
      const messages = produced ?? []
      const state = new TurnState()
      let ended = false
      const events: Pull.Pull<
        Arr.NonEmptyReadonlyArray<Agent.AgentEvent>,
        ChatModel.ChatModelError
      > = Effect.flatMap(pull, (chunks) => {
        const out = state.events(chunks)
        return Arr.isArrayNonEmpty(out) ? Effect.succeed(out) : events
      })
      // Only once the model is done: a failed call has no message.
      const finish = Effect.sync((): Arr.NonEmptyReadonlyArray<Agent.AgentEvent> => {
        ended = true
        const message = state.message()
        messages.push(message)
        return [{ type: "message", message }]
      })
      const failed = (error: ChatModel.ChatModelError) => Agent.modelFailed(agent, error, messages.slice())
      return Effect.suspend(
        (): Pull.Pull<Arr.NonEmptyReadonlyArray<Agent.AgentEvent>, Agent.AgentError> =>
          ended
            ? Cause.done()
            : Effect.mapError(
                Pull.catchDone(events, () => finish),
                failed
              )
      )
    })
  )
