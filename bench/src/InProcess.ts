/**
 * InProcess: framework overhead with no network, each framework driving its
 * own mock model (noema's `ScriptedChatModel`, the AI SDK's
 * `MockLanguageModelV4`, a LangChain fake chat model under LangGraph's
 * `createReactAgent`).
 *
 * The workloads are the same for all: one question answered with text (plain),
 * and a two-step tool loop where the model asks for `get_weather`, the tool's
 * arguments are validated against its schema and it runs, and the model
 * answers from the result (tools). What is timed is one whole turn through
 * each framework's public entry point, as an application calls it.
 */
import { tool as langchainTool } from "@langchain/core/tools"
import { createReactAgent } from "@langchain/langgraph/prebuilt"
import type { ChatModel as ChatModelNamespace } from "@noema/core"
import { Agent, ConversationContext, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { tool as aiTool, generateText, stepCountIs } from "ai"
import { MockLanguageModelV4 } from "ai/test"
import { Effect, Schema } from "effect"
import { z } from "zod"
import { FakeToolCallingChatModel } from "./FakeToolCallingChatModel.ts"
import type { Contender, LatencyOptions } from "./Harness.ts"
import { check, latency } from "./Harness.ts"
import type { Availability } from "./Noema.ts"

const question = "What is the weather in Paris?"
const answer = "It is sunny in Paris, 21 degrees."
const toolName = "get_weather"
const toolArguments = '{"city":"Paris"}'
const weatherFor = (city: string): string => `Sunny in ${city}, 21 degrees`

const aiUsage = {
  inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 9, text: 9, reasoning: undefined }
}

// ---------------------------------------------------------------------------
// noema
// ---------------------------------------------------------------------------

const noemaContext = ConversationContext.of(Message.user(question))

const scriptedTools = (request: ScriptedChatModel.RecordedRequest): ScriptedChatModel.Reply =>
  request.messages.at(-1)?.role === "tool"
    ? answer
    : { toolCalls: [{ name: toolName, arguments: toolArguments }] }

const weatherTool = Tool.make({
  name: toolName,
  description: "The current weather in a city",
  parameters: Schema.Struct({ city: Schema.String }),
  handler: ({ city }) => Effect.succeed(weatherFor(city))
})

const noemaContenders = async (
  noema: Availability,
  figures: { plain: string; tools: string; pipeline: string }
): Promise<{ plain?: Contender; tools?: Contender; pipeline?: Contender }> => {
  const agents = noema.agents
  if (agents === undefined) return {}
  const { SimpleAgent, ToolAgent, AgentPipeline } = agents
  let model: ChatModelNamespace.Service = ScriptedChatModel.make({ fallback: answer })

  const simple = SimpleAgent.make()
  const toolAgent = ToolAgent.make({ tools: [weatherTool] })
  const pipeline = AgentPipeline.make([
    SimpleAgent.make({ name: "search" }),
    SimpleAgent.make({ name: "summarise" }),
    SimpleAgent.make({ name: "translate" })
  ])

  const plainMessages = await Agent.run(simple, noemaContext, model)
  check(
    plainMessages.length === 1 && Message.text(plainMessages[0] as Message.Message) === answer,
    "noema plain answer"
  )
  const toolMessages = await Agent.run(
    toolAgent,
    noemaContext,
    ScriptedChatModel.make({ fallback: scriptedTools })
  )
  const toolResult = toolMessages[1]
  check(
    toolMessages.length === 3 &&
      toolResult?.role === "tool" &&
      !toolResult.isError &&
      toolResult.content === weatherFor("Paris") &&
      Message.text(toolMessages[2] as Message.Message) === answer,
    "noema tool loop: tool called once, answered from its result"
  )
  const pipelineMessages = await Agent.run(pipeline, noemaContext, model)
  check(pipelineMessages.length === 3, "noema pipeline: three answers")

  return {
    plain: {
      figure: figures.plain,
      beforeSample: () => {
        model = ScriptedChatModel.make({ fallback: answer })
      },
      operation: () => Agent.run(simple, noemaContext, model)
    },
    tools: {
      figure: figures.tools,
      beforeSample: () => {
        model = ScriptedChatModel.make({ fallback: scriptedTools })
      },
      operation: () => Agent.run(toolAgent, noemaContext, model)
    },
    pipeline: {
      figure: figures.pipeline,
      beforeSample: () => {
        model = ScriptedChatModel.make({ fallback: answer })
      },
      operation: () => Agent.run(pipeline, noemaContext, model)
    }
  }
}

// ---------------------------------------------------------------------------
// AI SDK
// ---------------------------------------------------------------------------

const aiModel = () =>
  new MockLanguageModelV4({
    doGenerate: async (options) => {
      const last = options.prompt.at(-1)
      const wantsTool = options.tools !== undefined && options.tools.length > 0 && last?.role !== "tool"
      return wantsTool
        ? {
            content: [{ type: "tool-call", toolCallId: "call_0", toolName, input: toolArguments }],
            finishReason: { unified: "tool-calls", raw: "tool_calls" },
            usage: aiUsage,
            warnings: []
          }
        : {
            content: [{ type: "text", text: answer }],
            finishReason: { unified: "stop", raw: "stop" },
            usage: aiUsage,
            warnings: []
          }
    }
  })

const aiTools = {
  [toolName]: aiTool({
    description: "The current weather in a city",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => weatherFor(city)
  })
}

const aiContenders = async (figures: { plain: string; tools: string }) => {
  let model = aiModel()
  const plain = () => generateText({ model, prompt: question })
  const tools = () => generateText({ model, prompt: question, tools: aiTools, stopWhen: stepCountIs(5) })

  const plainResult = await plain()
  check(plainResult.text === answer, "AI SDK plain answer")
  const toolsResult = await tools()
  check(
    toolsResult.steps.length === 2 &&
      toolsResult.text === answer &&
      toolsResult.steps[0]?.toolResults[0]?.output === weatherFor("Paris"),
    "AI SDK tool loop: tool called once, answered from its result"
  )
  const fresh = () => {
    model = aiModel()
  }
  return {
    plain: { figure: figures.plain, beforeSample: fresh, operation: plain } satisfies Contender,
    tools: { figure: figures.tools, beforeSample: fresh, operation: tools } satisfies Contender
  }
}

// ---------------------------------------------------------------------------
// LangGraph
// ---------------------------------------------------------------------------

const langgraphWeather = langchainTool(async ({ city }: { city: string }) => weatherFor(city), {
  name: toolName,
  description: "The current weather in a city",
  schema: z.object({ city: z.string() })
})

const langgraphContenders = async (figures: { plain: string; tools: string }) => {
  const plainAgent = createReactAgent({ llm: new FakeToolCallingChatModel({ text: answer }), tools: [] })
  const toolsAgent = createReactAgent({
    llm: new FakeToolCallingChatModel({
      text: answer,
      toolCall: { name: toolName, args: { city: "Paris" } }
    }),
    tools: [langgraphWeather]
  })
  const input = () => ({ messages: [{ role: "user", content: question }] })
  const plain = () => plainAgent.invoke(input())
  const tools = () => toolsAgent.invoke(input())

  const plainResult = await plain()
  check(plainResult.messages.at(-1)?.content === answer, "LangGraph plain answer")
  const toolsResult = await tools()
  const toolMessage = toolsResult.messages.find((message) => message.type === "tool")
  check(
    toolsResult.messages.length === 4 &&
      toolMessage?.content === weatherFor("Paris") &&
      toolsResult.messages.at(-1)?.content === answer,
    "LangGraph tool loop: tool called once, answered from its result"
  )
  return {
    plain: { figure: figures.plain, operation: plain } satisfies Contender,
    tools: { figure: figures.tools, operation: tools } satisfies Contender
  }
}

// ---------------------------------------------------------------------------
// Suite
// ---------------------------------------------------------------------------

export const run = async (noema: Availability, options: LatencyOptions): Promise<Record<string, number>> => {
  const ours = await noemaContenders(noema, {
    plain: "inproc.plain.noema_us",
    tools: "inproc.tools.noema_us",
    pipeline: "inproc.pipeline3.noema_us"
  })
  const ai = await aiContenders({ plain: "inproc.plain.aisdk_us", tools: "inproc.tools.aisdk_us" })
  const graph = await langgraphContenders({
    plain: "inproc.plain.langgraph_us",
    tools: "inproc.tools.langgraph_us"
  })
  const present = (...contenders: ReadonlyArray<Contender | undefined>): Array<Contender> =>
    contenders.filter((contender): contender is Contender => contender !== undefined)

  return {
    ...(await latency(present(ours.plain, ai.plain, graph.plain), options)),
    ...(await latency(present(ours.tools, ai.tools, graph.tools), options)),
    ...(ours.pipeline === undefined ? {} : await latency([ours.pipeline], options))
  }
}
