/**
 * One model call of an agent, as an Effect (`complete`) or as agent events
 * (`stream`). Shared by SimpleAgent and ToolAgent so both turn a response into
 * the same assistant message and a model failure into the same AgentError.
 */
import { Agent, ChatModel, type Message, type Tool } from "@noema/core"
import { Array as Arr, Cause, Effect, Pull, Stream } from "effect"

/**
 * What one model call ended with. The finish reason is read from the response
 * (not the message): a tool loop must not run calls cut off by the length limit.
 */
export interface Outcome {
  readonly message: Message.AssistantMessage
  readonly finishReason: ChatModel.FinishReason
  readonly usage: ChatModel.Usage | undefined
}

const outcomeOf = (response: ChatModel.ChatResponse, model: string): Outcome => ({
  message: ChatModel.toMessage(response, model),
  finishReason: response.finishReason,
  usage: response.usage
})

/**
 * Calls the model once and appends the assistant message to `produced`. A
 * failure carries a snapshot of `produced`: the caller may keep what ran.
 */
export const complete = (
  agent: string,
  model: ChatModel.Service,
  request: ChatModel.ChatRequest,
  produced: Array<Message.Message>
): Effect.Effect<Outcome, Agent.AgentError> =>
  Effect.mapBoth(model.complete(request), {
    onSuccess: (response) => {
      const outcome = outcomeOf(response, model.model)
      produced.push(outcome.message)
      return outcome
    },
    onFailure: (error) => Agent.modelFailed(agent, error, produced.slice())
  })

/**
 * Calls the model once; its answer is the turn's only message (a SimpleAgent's turn). One
 * step where `complete` and a `map` to the message would be two: a turn's frames, closures and
 * outcome are kept alive while its request is in flight.
 */
export const answer = (
  agent: string,
  model: ChatModel.Service,
  request: ChatModel.ChatRequest
): Effect.Effect<ReadonlyArray<Message.Message>, Agent.AgentError> =>
  Effect.mapBoth(model.complete(request), {
    onSuccess: (response) => [ChatModel.toMessage(response, model.model)],
    onFailure: (error) => Agent.modelFailed(agent, error, [])
  })

/** The annotations of the tool a call names, for `tool-call` events (undefined: none to report). */
export type Annotate = (toolName: string) => Tool.Annotations | undefined

class TurnState {
  readonly response = new ChatModel.ResponseAccumulator()
  constructor(
    readonly annotate: Annotate | undefined,
    readonly model: string
  ) {}

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
        case "tool-call": {
          const annotations = this.annotate?.(chunk.toolCall.name)
          events.push(
            annotations === undefined
              ? { type: "tool-call", toolCall: chunk.toolCall }
              : { type: "tool-call", toolCall: chunk.toolCall, annotations }
          )
          break
        }
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

  outcome(): Outcome {
    return outcomeOf(this.response.build(), this.model)
  }
}

/**
 * Streams one model call as events (text deltas as they arrive, each tool
 * call once complete, usage), then the completed assistant message, which is
 * also appended to `produced` before it is emitted. `produced` is the run's
 * messages so far (a tool loop's); a single call leaves it out and gets a
 * fresh list per run. `onOutcome` hears how the call ended, just before the
 * message is emitted; `annotate` adds tool annotations to `tool-call` events.
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
  produced?: Array<Message.Message>,
  onOutcome?: (outcome: Outcome) => void,
  annotate?: Annotate
): Stream.Stream<Agent.AgentEvent, Agent.AgentError> =>
  Stream.transformPull(model.stream(request), (pull) =>
    Effect.sync(() => {
      const messages = produced ?? []
      const state = new TurnState(annotate, model.model)
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
        const outcome = state.outcome()
        messages.push(outcome.message)
        onOutcome?.(outcome)
        return [{ type: "message", message: outcome.message }]
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
