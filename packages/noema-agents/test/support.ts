import type { Message } from "@noema/core"

/**
 * Messages without what a model call adds to an assistant message (finish
 * reasons and usage), for tests about what an agent said rather than how its
 * model calls ended (SimpleAgent's tests cover those).
 */
export const withoutCallInfo = (messages: ReadonlyArray<Message.Message>): Array<Message.Message> =>
  messages.map((message) => {
    if (message.role !== "assistant") return message
    const { finishReason: _finish, rawFinishReason: _raw, usage: _usage, model: _model, ...rest } = message
    return rest
  })
