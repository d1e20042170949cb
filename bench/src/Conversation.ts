/**
 * Conversation: the messages the store and context benchmarks use, shaped like
 * real turns (a question, a tool call, its results, an answer) with texts of
 * realistic length.
 */
import { Message } from "@noema/core"

// Shared texts keep a million messages affordable in memory; only ids differ between turns.
const question =
  "What is the weather in Paris and in Rome today? Noema keeps the conversation as plain messages; " +
  "this sentence only gives the question a realistic length."
const answer =
  "Paris is sunny and Rome is cloudy. Noema keeps the conversation as plain messages; this sentence " +
  "only gives the answer a realistic length."

/** One turn: user, assistant asking for two tools, two tool results. */
export const turn = (index: number): Array<Message.Message> => [
  Message.user(question),
  Message.assistant("", {
    toolCalls: [
      { id: `call_${index}_0`, name: "get_weather", arguments: '{"city":"Paris"}' },
      { id: `call_${index}_1`, name: "get_weather", arguments: '{"city":"Rome"}' }
    ]
  }),
  Message.toolResult({ toolCallId: `call_${index}_0`, name: "get_weather", content: "Sunny, 21 degrees" }),
  Message.toolResult({ toolCallId: `call_${index}_1`, name: "get_weather", content: "Cloudy, 18 degrees" })
]

/** `count` messages: turns of four, with an answer closing every second turn. */
export const history = (count: number, stamped = false): Array<Message.Message> => {
  const messages: Array<Message.Message> = []
  const createdAt = Date.UTC(2026, 0, 1)
  for (let index = 0; messages.length < count; index++) {
    const part = index % 2 === 1 ? [...turn(index), Message.assistant(answer)] : turn(index)
    for (const message of part) {
      if (messages.length === count) break
      messages.push(
        stamped
          ? { ...message, id: `message-${messages.length}`, createdAt: createdAt + messages.length }
          : message
      )
    }
  }
  return messages
}
