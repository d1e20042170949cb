/**
 * Budget: hard limits on the model calls and tokens of one planner run.
 *
 * Every call made through the wrapped model counts; once `maxModelCalls` calls
 * were made, or `maxTokens` tokens used, the next call fails at once with a
 * `QuotaExceeded` reason saying which limit, and `exceeded` tells the planner,
 * which reports it to the user instead of looping.
 */
import { ChatModel, ModelError } from "@noema/core"
import { Effect, Stream } from "effect"

export interface Limits {
  readonly maxModelCalls: number
  readonly maxTokens: number
}

export interface Budget {
  readonly model: ChatModel.Service
  readonly calls: () => number
  readonly tokens: () => number
  /** The limit that stopped a call, if one did. */
  readonly exceeded: () => string | undefined
}

export const make = (model: ChatModel.Service, limits: Limits): Budget => {
  let calls = 0
  let tokens = 0
  let exceeded: string | undefined
  /** The reason a call is refused, or undefined (and the call counted) when it may go. */
  const admit = (): string | undefined => {
    const reason =
      calls >= limits.maxModelCalls
        ? `the limit of ${limits.maxModelCalls} model calls was reached`
        : tokens >= limits.maxTokens
          ? `the limit of ${limits.maxTokens} tokens was reached (${tokens} used)`
          : undefined
    if (reason === undefined) calls++
    else exceeded ??= reason
    return reason
  }
  const refused = (reason: string) =>
    Effect.fail(
      ChatModel.error(
        model.provider,
        new ModelError.QuotaExceeded({ message: `planner budget: ${reason}` }),
        model.model
      )
    )
  const check = Effect.suspend(() => {
    const reason = admit()
    return reason === undefined ? Effect.void : refused(reason)
  })
  const count = (usage: ChatModel.Usage | undefined) => {
    if (usage !== undefined) tokens += usage.totalTokens
  }
  const limited: ChatModel.Service = {
    ...model,
    // One suspend and one map around the call (a check, then a tap running a sync, were four steps).
    complete: (request) =>
      Effect.suspend(() => {
        const reason = admit()
        return reason === undefined
          ? Effect.map(model.complete(request), (response) => {
              count(response.usage)
              return response
            })
          : refused(reason)
      }),
    stream: (request) =>
      Stream.unwrap(
        Effect.as(
          check,
          Stream.tap(model.stream(request), (chunk) =>
            Effect.sync(() => {
              if (chunk.type === "usage") count(chunk.usage)
            })
          )
        )
      )
  }
  return { model: limited, calls: () => calls, tokens: () => tokens, exceeded: () => exceeded }
}
