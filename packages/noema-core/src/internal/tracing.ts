/**
 * The spans of model calls: one per `complete` and one over a whole `stream`,
 * named and annotated as OpenTelemetry's GenAI conventions say.
 */
import { Effect, Stream } from "effect"
import type { ChatRequest, ChatResponse, Service, StreamChunk } from "../ChatModel.js"
import {
  Attributes,
  isTracing,
  RecordContent,
  type SpanOptions,
  withSpan,
  withSpanStream
} from "../Tracing.js"

const requestAttributes = (service: Service, request: ChatRequest): Record<string, unknown> => {
  const attributes: Record<string, unknown> = {
    [Attributes.operationName]: "chat",
    [Attributes.providerName]: service.provider,
    [Attributes.system]: service.provider,
    [Attributes.requestModel]: service.model
  }
  if (request.temperature !== undefined) attributes[Attributes.requestTemperature] = request.temperature
  if (request.topP !== undefined) attributes[Attributes.requestTopP] = request.topP
  if (request.maxTokens !== undefined) attributes[Attributes.requestMaxTokens] = request.maxTokens
  if (request.seed !== undefined) attributes[Attributes.requestSeed] = request.seed
  return attributes
}

const spanOptions = (service: Service, request: ChatRequest): SpanOptions => ({
  kind: "client",
  attributes: requestAttributes(service, request)
})

const annotateInput = (request: ChatRequest): Effect.Effect<void> =>
  Effect.flatMap(RecordContent, (record) =>
    record
      ? Effect.annotateCurrentSpan(Attributes.inputMessages, JSON.stringify(Array.from(request.messages)))
      : Effect.void
  )

const annotateResponse = (response: ChatResponse): Effect.Effect<void> =>
  Effect.flatMap(RecordContent, (record) => {
    const attributes: Record<string, unknown> = {
      [Attributes.responseFinishReasons]: [response.finishReason]
    }
    if (response.model !== undefined) attributes[Attributes.responseModel] = response.model
    if (response.id !== undefined) attributes[Attributes.responseId] = response.id
    if (response.usage !== undefined) {
      attributes[Attributes.usageInputTokens] = response.usage.inputTokens
      attributes[Attributes.usageOutputTokens] = response.usage.outputTokens
    }
    if (record) {
      attributes[Attributes.outputMessages] = JSON.stringify({
        text: response.text,
        toolCalls: response.toolCalls
      })
    }
    return Effect.annotateCurrentSpan(attributes)
  })

/** Chunks that carry what the span records; text deltas pass by untouched. */
const annotateChunk = (chunk: StreamChunk): Effect.Effect<void> => {
  switch (chunk.type) {
    case "finish":
      return Effect.annotateCurrentSpan(Attributes.responseFinishReasons, [chunk.finishReason])
    case "usage":
      return Effect.annotateCurrentSpan({
        [Attributes.usageInputTokens]: chunk.usage.inputTokens,
        [Attributes.usageOutputTokens]: chunk.usage.outputTokens
      })
    case "response-metadata": {
      const attributes: Record<string, unknown> = {}
      if (chunk.model !== undefined) attributes[Attributes.responseModel] = chunk.model
      if (chunk.id !== undefined) attributes[Attributes.responseId] = chunk.id
      return Effect.annotateCurrentSpan(attributes)
    }
    default:
      return Effect.void
  }
}

/** Chunks that are the answer itself (what "time to first token" waits for), not metadata. */
const firstTokenTypes: ReadonlySet<StreamChunk["type"]> = new Set([
  "text-delta",
  "reasoning-delta",
  "refusal-delta",
  "tool-call-delta",
  "tool-call"
])

/** The time from the span's start (retries' waits included: what the user waited) to now. */
const annotateFirstToken: Effect.Effect<void> = Effect.flatMap(Effect.option(Effect.currentSpan), (span) =>
  span._tag === "None"
    ? Effect.void
    : Effect.clockWith((clock) =>
        Effect.sync(() =>
          span.value.attribute(
            Attributes.timeToFirstToken,
            Number((clock.currentTimeNanosUnsafe() - span.value.status.startTime) / 1000n) / 1000
          )
        )
      )
)

/** The stream's chunks annotating its span, the first answer chunk with the time it took. */
const tracedChunks = <E, R>(stream: Stream.Stream<StreamChunk, E, R>): Stream.Stream<StreamChunk, E, R> =>
  Stream.suspend(() => {
    let waiting = true
    return Stream.tap(stream, (chunk) => {
      if (waiting && firstTokenTypes.has(chunk.type)) {
        waiting = false
        return annotateFirstToken
      }
      return annotateChunk(chunk)
    })
  })

/** `service` with a span around each `complete` and each whole `stream` (when a tracer is installed). */
export const traceChatModel = (service: Service): Service => {
  const name = `chat ${service.model}`
  return {
    ...service,
    complete: (request) => {
      const effect = service.complete(request)
      // The span's parts are built inside the check, not passed as thunks: a call without a
      // tracer (the common case) allocates one closure here, not three, and keeps none of
      // them alive while its request is in flight.
      return Effect.withFiber((fiber) =>
        isTracing(fiber)
          ? withSpan(
              annotateInput(request).pipe(Effect.andThen(effect), Effect.tap(annotateResponse)),
              name,
              spanOptions(service, request)
            )
          : effect
      )
    },
    stream: (request) => {
      const stream = service.stream(request)
      return withSpanStream(
        stream,
        name,
        () => spanOptions(service, request),
        () => Stream.concat(Stream.fromEffectDrain(annotateInput(request)), tracedChunks(stream))
      )
    }
  }
}
