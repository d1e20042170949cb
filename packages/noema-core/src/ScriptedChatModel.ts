/**
 * ScriptedChatModel: a ChatModel whose replies are written in advance.
 *
 * For noema's own tests and for users' tests of their agents: each request
 * takes the next scripted reply (text, tool calls, raw stream chunks, a
 * failure, or a function of the request), and every request is recorded with
 * a snapshot of the messages it carried. Streaming splits text into several
 * deltas and tool-call arguments into several fragments, so consumers meet the
 * same shapes a real provider sends.
 */
import { Cause, Duration, Effect, Layer, Stream } from "effect"
import * as ChatModel from "./ChatModel.js"
import { type Message, text } from "./Message.js"
import * as ModelError from "./ModelError.js"

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

export interface ScriptedToolCall {
  readonly id?: string
  readonly name: string
  /** JSON text, or a value that is serialised to JSON. */
  readonly arguments?: string | object
}

export type Reply =
  | string
  | {
      readonly text?: string
      /** Reasoning the model shows before its answer (streamed as `reasoning-delta`s first). */
      readonly reasoning?: string
      readonly toolCalls?: ReadonlyArray<ScriptedToolCall>
      readonly refusal?: string
      readonly finishReason?: ChatModel.FinishReason
      readonly usage?: ChatModel.Usage
      /** How the text is split when streamed (default: word by word). */
      readonly chunks?: ReadonlyArray<string>
    }
  /** Exact stream chunks; `complete` folds them. `failAfter` fails once they are sent. */
  | { readonly stream: ReadonlyArray<ChatModel.StreamChunk>; readonly failAfter?: ModelError.Reason }
  | { readonly fail: ModelError.Reason }
  /** Never answers: for cancellation tests. */
  | { readonly hang: true }
  | ((request: RecordedRequest) => Reply)

export interface RecordedRequest {
  readonly index: number
  readonly kind: "complete" | "stream"
  /** A snapshot of the messages as they were when the request was made. */
  readonly messages: ReadonlyArray<Message>
  readonly request: ChatModel.ChatRequest
  /** True once the caller interrupted this request before it finished. */
  readonly interrupted: boolean
}

export interface ScriptedChatModel extends ChatModel.Service {
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Replies not used yet. */
  readonly remaining: number
  enqueue(...replies: ReadonlyArray<Reply>): void
}

export interface Options {
  readonly replies?: ReadonlyArray<Reply>
  /** Used whenever the script is exhausted (otherwise such a request fails). */
  readonly fallback?: Reply
  readonly provider?: string
  readonly model?: string
  /** Declared capabilities (e.g. `{ jsonSchema: false }` to test a provider without JSON Schema output). */
  readonly capabilities?: ChatModel.Capabilities
  /** Pause before each streamed chunk (uses the Effect clock, so `TestClock` controls it). */
  readonly chunkDelay?: Duration.Input
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

const estimateTokens = (text: string): number => Math.ceil(text.length / 4)

const defaultUsage = (messages: ReadonlyArray<Message>, output: string): ChatModel.Usage => {
  let input = 0
  for (const message of messages) input += estimateTokens(text(message)) + 4
  const outputTokens = estimateTokens(output)
  return { inputTokens: input, outputTokens, totalTokens: input + outputTokens }
}

const splitWords = (text: string): Array<string> => text.match(/\S+\s*|\s+/g) ?? []

const splitInThree = (text: string): Array<string> => {
  if (text.length < 3) return [text]
  const third = Math.ceil(text.length / 3)
  return [text.slice(0, third), text.slice(third, 2 * third), text.slice(2 * third)]
}

type Resolved =
  | {
      readonly _tag: "response"
      readonly response: ChatModel.ChatResponse
      readonly chunks?: ReadonlyArray<string>
    }
  | {
      readonly _tag: "stream"
      readonly chunks: ReadonlyArray<ChatModel.StreamChunk>
      readonly failAfter?: ModelError.Reason
    }
  | { readonly _tag: "fail"; readonly reason: ModelError.Reason }
  | { readonly _tag: "hang" }

export const make = (options: Options = {}): ScriptedChatModel => {
  const provider = options.provider ?? "scripted"
  const model = options.model ?? "scripted-model"
  const queue: Array<Reply> = [...(options.replies ?? [])]
  const requests: Array<RecordedRequest> = []
  const chunkDelay =
    options.chunkDelay === undefined ? undefined : Duration.fromInputUnsafe(options.chunkDelay)

  const fail = (reason: ModelError.Reason) => ChatModel.error(provider, reason, model)

  const resolve = (reply: Reply, recorded: RecordedRequest): Resolved => {
    if (typeof reply === "function") return resolve(reply(recorded), recorded)
    if (typeof reply === "string") {
      return {
        _tag: "response",
        response: {
          text: reply,
          toolCalls: [],
          finishReason: "stop",
          usage: defaultUsage(recorded.messages, reply)
        }
      }
    }
    if ("fail" in reply) return { _tag: "fail", reason: reply.fail }
    if ("hang" in reply) return { _tag: "hang" }
    if ("stream" in reply) {
      return reply.failAfter === undefined
        ? { _tag: "stream", chunks: reply.stream }
        : { _tag: "stream", chunks: reply.stream, failAfter: reply.failAfter }
    }
    const answer = reply.text ?? ""
    const toolCalls = (reply.toolCalls ?? []).map((call, i) => ({
      id: call.id ?? `call_${recorded.index}_${i}`,
      name: call.name,
      arguments:
        call.arguments === undefined
          ? "{}"
          : typeof call.arguments === "string"
            ? call.arguments
            : JSON.stringify(call.arguments)
    }))
    const response: ChatModel.ChatResponse = {
      text: answer,
      ...(reply.reasoning !== undefined && { reasoning: reply.reasoning }),
      toolCalls,
      finishReason: reply.finishReason ?? (toolCalls.length > 0 ? "tool-calls" : "stop"),
      usage: reply.usage ?? defaultUsage(recorded.messages, answer),
      ...(reply.refusal !== undefined && { refusal: reply.refusal })
    }
    return reply.chunks === undefined
      ? { _tag: "response", response }
      : { _tag: "response", response, chunks: reply.chunks }
  }

  const next = (kind: RecordedRequest["kind"], request: ChatModel.ChatRequest) =>
    Effect.sync((): readonly [RecordedRequest, Resolved] => {
      const recorded: RecordedRequest = {
        index: requests.length,
        kind,
        messages: Array.from(request.messages),
        request,
        interrupted: false
      }
      requests.push(recorded)
      const reply = queue.shift() ?? options.fallback
      if (reply === undefined) {
        const reason = new ModelError.InvalidRequest({
          message: `scripted model has no reply left for request #${recorded.index + 1}`
        })
        return [recorded, { _tag: "fail", reason }]
      }
      return [recorded, resolve(reply, recorded)]
    })

  const streamOf = (resolved: Resolved): Stream.Stream<ChatModel.StreamChunk, ChatModel.ChatModelError> => {
    switch (resolved._tag) {
      case "fail":
        return Stream.fail(fail(resolved.reason))
      case "hang":
        return Stream.fromEffect(Effect.never)
      case "stream": {
        const base = Stream.fromArray(resolved.chunks)
        return resolved.failAfter === undefined
          ? base
          : Stream.concat(base, Stream.fail(fail(resolved.failAfter)))
      }
      case "response": {
        const { response } = resolved
        const chunks: Array<ChatModel.StreamChunk> = []
        if (response.reasoning !== undefined) {
          for (const delta of splitWords(response.reasoning)) chunks.push({ type: "reasoning-delta", delta })
        }
        for (const delta of resolved.chunks ?? splitWords(response.text))
          chunks.push({ type: "text-delta", delta })
        if (response.refusal !== undefined) chunks.push({ type: "refusal-delta", delta: response.refusal })
        response.toolCalls.forEach((call, index) => {
          const [first = "", ...rest] = splitInThree(call.arguments)
          chunks.push({ type: "tool-call-delta", index, id: call.id, name: call.name, argumentsDelta: first })
          for (const part of rest) chunks.push({ type: "tool-call-delta", index, argumentsDelta: part })
        })
        chunks.push({ type: "finish", finishReason: response.finishReason })
        if (response.usage !== undefined) chunks.push({ type: "usage", usage: response.usage })
        return Stream.fromArray(chunks)
      }
    }
  }

  const markInterrupted = <A, E>(recorded: RecordedRequest, effect: Effect.Effect<A, E>) =>
    Effect.onInterrupt(effect, () =>
      Effect.sync(() => {
        ;(recorded as { interrupted: boolean }).interrupted = true
      })
    )

  const delayed = <A, E>(stream: Stream.Stream<A, E>): Stream.Stream<A, E> =>
    chunkDelay === undefined ? stream : Stream.tap(stream, () => Effect.sleep(chunkDelay))

  const service = ChatModel.make({
    provider,
    model,
    ...(options.capabilities !== undefined && { capabilities: options.capabilities }),
    complete: (request) =>
      Effect.flatMap(next("complete", request), ([recorded, resolved]) =>
        markInterrupted(
          recorded,
          (() => {
            switch (resolved._tag) {
              case "response":
                return Effect.succeed(resolved.response)
              case "fail":
                return Effect.fail(fail(resolved.reason))
              case "hang":
                return Effect.never
              case "stream":
                return ChatModel.collect(streamOf(resolved))
            }
          })()
        )
      ),
    stream: (request) =>
      Stream.unwrap(
        Effect.map(next("stream", request), ([recorded, resolved]) => {
          return delayed(streamOf(resolved)).pipe(
            Stream.onExit((exit) =>
              Effect.sync(() => {
                if (exit._tag === "Failure" && Cause.hasInterruptsOnly(exit.cause)) {
                  ;(recorded as { interrupted: boolean }).interrupted = true
                }
              })
            )
          )
        })
      )
  })

  return {
    ...service,
    get requests() {
      return requests
    },
    get remaining() {
      return queue.length
    },
    enqueue: (...replies) => {
      queue.push(...replies)
    }
  }
}

/** A layer providing a scripted model as the `ChatModel` service. */
export const layer = (options: Options = {}): Layer.Layer<ChatModel.ChatModel> =>
  Layer.succeed(ChatModel.ChatModel, make(options))
