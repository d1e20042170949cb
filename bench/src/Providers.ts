/**
 * Providers: the other adapters side by side with what they wrap, against the
 * local Anthropic wire-format server (`@noema/anthropic/testing`, in its own
 * process), every contender getting the same scripted answer:
 *
 * - a turn and the time to the first text delta with the raw `@anthropic-ai/sdk`
 *   (the floor: retries off, as noema sets them) and with noema's
 *   `@noema/anthropic` adapter inside a SimpleAgent, as `Http.ts` compares
 *   noema's OpenAI adapter with the `openai` SDK;
 * - the same with the AI SDK's `@ai-sdk/anthropic` model called directly
 *   (`doGenerate` / `doStream`, what the bridge wraps) and through noema's
 *   `@noema/ai-sdk` bridge inside a SimpleAgent: the bridge's overhead;
 *   beside them, as references, the model given a fresh `AbortSignal` per call
 *   (what the bridge passes so that interruption aborts the request).
 */
import { createAnthropic } from "@ai-sdk/anthropic"
import Anthropic from "@anthropic-ai/sdk"
import { Agent, type ChatModel, ConversationContext, Message } from "@noema/core"
import { Effect, Redacted } from "effect"
import type { Contender, LatencyOptions } from "./Harness.ts"
import { check, interleavedLatency, now } from "./Harness.ts"
import { type Server, startServer } from "./Http.ts"
import type { Availability } from "./Noema.ts"

const answer = "The weather in Paris is sunny with a light breeze, 21 degrees."
const question = "What is the weather in Paris?"
const modelName = "claude-bench"
const apiKey = "bench-no-key"

export const run = async (noema: Availability, options: LatencyOptions): Promise<Record<string, number>> => {
  const server = await startServer(new URL("./AnthropicServerProcess.ts", import.meta.url), answer)
  try {
    return await measure(server, noema, options)
  } finally {
    await server.close()
  }
}

/**
 * Microseconds from the start of `read` (before the request is sent) to its first call of
 * `mark` (the first text delta); `read` consumes the whole answer, so the connection goes
 * back to the pool. Each contender reads its own stream in a plain loop, as `Http.ts` does.
 */
const firstDelta = async (what: string, read: (mark: () => void) => Promise<void>): Promise<number> => {
  const start = now()
  let first: number | undefined
  await read(() => {
    if (first === undefined) first = now()
  })
  check(first !== undefined, `${what} had a text delta`)
  return ((first as number) - start) * 1000
}

const measure = async (
  server: Server,
  noema: Availability,
  options: LatencyOptions
): Promise<Record<string, number>> => {
  const reset = () => server.reset()
  const context = ConversationContext.of(Message.user(question))
  const agent = noema.agents?.SimpleAgent.make()

  // The floor: the official SDK alone, retries off (noema's client sets them off too).
  const raw = new Anthropic({ apiKey, baseURL: server.url, maxRetries: 0 })
  const rawTurn = () =>
    raw.messages.create({
      model: modelName,
      max_tokens: 1024,
      messages: [{ role: "user", content: question }]
    })
  const rawFirstToken = () =>
    firstDelta("raw Anthropic stream", async (mark) => {
      const stream = await raw.messages.create({
        model: modelName,
        max_tokens: 1024,
        messages: [{ role: "user", content: question }],
        stream: true
      })
      for await (const event of stream) {
        if (
          event.type === "content_block_delta" &&
          event.delta.type === "text_delta" &&
          event.delta.text !== ""
        ) {
          mark()
        }
      }
    })
  const rawAnswer = await rawTurn()
  check(rawAnswer.content[0]?.type === "text" && rawAnswer.content[0].text === answer, "raw Anthropic answer")

  // What the bridge wraps: @ai-sdk/anthropic's model, called the way the bridge calls it.
  const aiModel = createAnthropic({ apiKey, baseURL: `${server.url}/v1` })(modelName)
  const callOptions = () => ({
    prompt: [{ role: "user" as const, content: [{ type: "text" as const, text: question }] }]
  })
  // The bridge also passes an `abortSignal` (interrupting a turn aborts its request), which the
  // model hands to `fetch`: the `_signal` references are the model given a fresh one per call,
  // as `Http.ts`'s `raw_signal` rows are for the openai SDK. Not contenders: what the bridge
  // adds beyond the signal is its figure minus theirs.
  const withSignal = () => ({ ...callOptions(), abortSignal: new AbortController().signal })
  const directTurn = async () => aiModel.doGenerate(callOptions())
  const signalTurn = async () => aiModel.doGenerate(withSignal())
  const directStream = (options: () => ReturnType<typeof callOptions>) => () =>
    firstDelta("@ai-sdk/anthropic stream", async (mark) => {
      const { stream } = await aiModel.doStream(options())
      for await (const part of stream) if (part.type === "text-delta" && part.delta !== "") mark()
    })
  const directFirstToken = directStream(callOptions)
  const signalFirstToken = directStream(withSignal)
  const direct = await directTurn()
  check(direct.content[0]?.type === "text" && direct.content[0].text === answer, "@ai-sdk/anthropic answer")

  // Turns are compared with turns and first tokens with first tokens, each group interleaved call by call.
  const turns: Array<Contender> = [
    { figure: "anthropic.turn.raw_us", operation: rawTurn, beforeSample: reset },
    { figure: "bridge.turn.aisdk_us", operation: directTurn, beforeSample: reset },
    { figure: "bridge.turn.aisdk_signal_us", operation: signalTurn, beforeSample: reset }
  ]
  const firstTokens: Array<Contender> = [
    { figure: "anthropic.ttft.raw_us", operation: rawFirstToken, selfTimed: true, beforeSample: reset },
    { figure: "bridge.ttft.aisdk_us", operation: directFirstToken, selfTimed: true, beforeSample: reset },
    {
      figure: "bridge.ttft.aisdk_signal_us",
      operation: signalFirstToken,
      selfTimed: true,
      beforeSample: reset
    }
  ]
  const noemaContenders = async (prefix: "anthropic" | "bridge", model: ChatModel.Service) => {
    if (agent === undefined) return
    const turn = () => Agent.run(agent, context, model)
    const firstToken = () =>
      firstDelta(`noema ${prefix} stream`, async (mark) => {
        for await (const event of Agent.runStream(agent, context, model)) {
          if (event.type === "text-delta" && event.delta !== "") mark()
        }
      })
    const messages = (await turn()) as ReadonlyArray<Message.Message>
    check(
      messages.length === 1 && Message.text(messages[0] as Message.Message) === answer,
      `noema ${prefix} answer`
    )
    turns.push({ figure: `${prefix}.turn.noema_us`, operation: turn, beforeSample: reset })
    firstTokens.push({
      figure: `${prefix}.ttft.noema_us`,
      operation: firstToken,
      selfTimed: true,
      beforeSample: reset
    })
  }
  if (noema.anthropic !== undefined) {
    await noemaContenders(
      "anthropic",
      await Effect.runPromise(
        noema.anthropic.AnthropicChatModel.make({
          model: modelName,
          baseURL: server.url,
          apiKey: Redacted.make(apiKey)
        })
      )
    )
  }
  if (noema.aiSdk !== undefined) {
    await noemaContenders("bridge", noema.aiSdk.AiSdkChatModel.make(aiModel))
  }
  const figures = {
    ...(await interleavedLatency(turns, options)),
    ...(await interleavedLatency(firstTokens, options))
  }
  const shown = (name: string) => figures[name]?.toFixed(0) ?? "n/a"
  process.stderr.write(
    `  anthropic.turn: raw SDK ${shown("anthropic.turn.raw_us")} us, noema ${shown("anthropic.turn.noema_us")} us; ` +
      `bridge.turn: @ai-sdk/anthropic ${shown("bridge.turn.aisdk_us")} us ` +
      `(${shown("bridge.turn.aisdk_signal_us")} with a signal), noema ${shown("bridge.turn.noema_us")} us\n`
  )
  return figures
}
