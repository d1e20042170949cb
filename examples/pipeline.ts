/**
 * A three-agent pipeline: a researcher, a summariser written as a plain async
 * function (no Effect needed), and a translator. Each sees the conversation
 * plus everything the previous agents produced, without copying it.
 *
 * Runs offline on the scripted model: `node examples/pipeline.ts`.
 */
import { AgentPipeline, SimpleAgent } from "@noema/agents"
import { Agent, ChatModel, ConversationContext, Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Stream } from "effect"

const model = ScriptedChatModel.make({
  replies: [
    "Fact: honeybees communicate the direction of food with a waggle dance.",
    (request) => `Summary (${request.messages.length} messages seen): bees dance to give directions.`,
    "Resumo: as abelhas dançam para indicar direções."
  ]
})

const researcher = SimpleAgent.make({ name: "researcher", system: "Find one surprising fact." })

const summariser = Agent.fromAsync("summariser", async ({ context, model }) => {
  const response = await model.complete({
    messages: ConversationContext.compose({
      system: "Summarise the last message in one line.",
      history: context
    })
  })
  return [ChatModel.toMessage(response)]
})

const translator = SimpleAgent.make({
  name: "translator",
  system: "Translate the last message into Portuguese."
})

const pipeline = AgentPipeline.make([researcher, summariser, translator])

const program = Effect.gen(function* () {
  const context = ConversationContext.of(Message.user("Tell me something about bees."))
  // Stream the pipeline: text arrives stage by stage.
  yield* Stream.runForEach(pipeline.executeStream(context, model), (event) =>
    Effect.sync(() => {
      if (event.type === "message") console.log(Message.toText(event.message))
    })
  )
  console.log(`the model saw ${model.requests.map((request) => request.messages.length).join(", ")} messages`)
})

Effect.runPromise(program).catch((error: unknown) => {
  console.error(String(error))
  process.exitCode = 1
})
