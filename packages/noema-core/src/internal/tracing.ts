/**
 * The spans of model calls: one per `complete` and one over a whole `stream`,
 * named and annotated as OpenTelemetry's GenAI conventions say.
 */
import { Effect, Stream } from "effect"
import type { ChatRequest, ChatResponse, Service, StreamChunk } from "../ChatModel.js"
import { Attributes, RecordContent, type SpanOptions, withSpan, withSpanStream } from "../Tracing.js"

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

/** `service` with a span around each `complete` and each whole `stream` (when a tracer is installed). */
export const traceChatModel = (service: Service): Service => {
  const name = `chat ${service.model}`
  return {
    ...service,
    complete: (request) => {
      const effect = service.complete(request)
      return withSpan(
        effect,
        name,
        () => spanOptions(service, request),
        () => annotateInput(request).pipe(Effect.andThen(effect), Effect.tap(annotateResponse))
      )
    },
    stream: (request) => {
      const stream = service.stream(request)
      return withSpanStream(
        stream,
        name,
        () => spanOptions(service, request),
        () => Stream.concat(Stream.fromEffectDrain(annotateInput(request)), Stream.tap(stream, annotateChunk))
      )
    }
  }
}
