/**
 * Context: what a view over a long history costs. A window of the last 50
 * messages over a context of 1,000,000 (system prompt + history + pending, as
 * a session composes it) is built and read to the end; the messages exist
 * beforehand, as they would in a loaded session. A view reads through to the
 * array underneath, so neither time nor heap should grow with the history.
 */
import { ConversationContext, Message } from "@noema/core"
import { history } from "./Conversation.ts"
import type { Contender, LatencyOptions } from "./Harness.ts"
import { check, latency, megabytes, settledHeap } from "./Harness.ts"

const size = 1_000_000
const windowSize = 50
const heapViews = 10_000

export const run = async (options: LatencyOptions): Promise<Record<string, number>> => {
  const messages = history(size)
  const pending: Array<Message.Message> = [Message.user("And tomorrow?")]
  const windowed = () =>
    ConversationContext.compose({
      system: "You are a helpful assistant.",
      history: messages,
      pending
    }).window(windowSize)
  const read = (view: ConversationContext.ConversationContext): number => {
    let characters = 0
    for (const message of view) characters += Message.text(message).length
    return characters
  }

  const sample = windowed()
  check(sample.length === windowSize && sample.last === pending[0], "the window holds the last 50 messages")
  check(read(sample) > 0, "the window reads its messages")

  const build: Contender = {
    figure: "context.window1m.us",
    operation: async () => read(windowed())
  }
  const timing = await latency([build], options)

  // Heap: one view is a few hundred bytes, below the noise of a heap reading, so the growth is
  // read for many live views at once and divided. A view that copied its window (50 messages)
  // or its history (1,000,000) would show here as kilobytes or megabytes per view.
  // Allocated before the first reading so only the views themselves are counted.
  const views = new Array<ConversationContext.ConversationContext>(heapViews).fill(ConversationContext.empty)
  const before = settledHeap()
  for (let i = 0; i < heapViews; i++) views[i] = windowed()
  const after = settledHeap()
  check(
    views.every((view) => read(view) > 0),
    "the measured views are alive and readable"
  )
  return { ...timing, "context.window1m.heap_mb": megabytes((after - before) / heapViews) }
}
