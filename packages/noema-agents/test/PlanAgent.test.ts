/**
 * PlanAgent with the scripted model: every model call of the workflow (plan,
 * step tool loops, reviews, the notify decision) is scripted, and what each
 * request contained is checked, as is the history the agent produces.
 */
import { assert, describe, it } from "@effect/vitest"
import { type Agent, ConversationContext, Message, Tool } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Exit, Fiber, Schema, Stream } from "effect"
import { PlanAgent, type ToolAgent } from "../src/index.js"

const lookups: Array<string> = []
const lookup = Tool.make({
  name: "lookup",
  description: "Look a city's population up",
  parameters: Schema.Struct({ city: Schema.String }),
  handler: ({ city }) =>
    Effect.sync(() => {
      lookups.push(city)
      return { city, population: city === "Paris" ? 2_100_000 : 2_800_000 }
    })
})

const json = (value: unknown) => JSON.stringify(value)
const draft = (...titles: ReadonlyArray<string>) =>
  json({
    thoughts: "Two lookups, then compare.",
    goal: "Compare the populations of Paris and Rome",
    steps: titles.map((title) => ({ title, detail: `${title}, then report it` }))
  })
const review = (
  outcome: "done" | "failed",
  decision: "continue" | "replan" | "finish",
  remainingSteps: ReadonlyArray<string> | null = null
) =>
  json({
    thoughts: "Checked the report.",
    outcome,
    summary: `step ${outcome}`,
    decision,
    remainingSteps: remainingSteps?.map((title) => ({ title, detail: title })) ?? null
  })
const send = (text: string) => ({ toolCalls: [{ name: PlanAgent.sendMessageToolName, arguments: { text } }] })
const lookupCall = (city: string) => ({ toolCalls: [{ name: "lookup", arguments: { city } }] })

const context = ConversationContext.of(Message.user("Which is bigger, Paris or Rome?"))

/** Tool calls answered, and tool results after their calls: the history a model may be sent. */
const assertValidHistory = (messages: Iterable<Message.Message>) =>
  assert.deepStrictEqual(ConversationContext.problems(messages), [])

const plans = (events: ReadonlyArray<Agent.AgentEvent>): Array<PlanAgent.Plan> =>
  events.flatMap((event) =>
    event.type === "data" && event.name === PlanAgent.planEvent ? [event.data as PlanAgent.Plan] : []
  )

describe("PlanAgent", () => {
  it.effect("plans, executes each step with the tools, reviews, and tells the user", () =>
    Effect.gen(function* () {
      lookups.length = 0
      const model = ScriptedChatModel.make({
        replies: [
          draft("Look up Paris", "Look up Rome"),
          lookupCall("Paris"),
          "Paris has 2.1 million people.",
          review("done", "continue"),
          lookupCall("Rome"),
          "Rome has 2.8 million people.",
          review("done", "finish"),
          send("Rome is bigger: 2.8 million people against Paris's 2.1 million.")
        ]
      })
      const agent = PlanAgent.make({ tools: [lookup] })
      const events = Array.from(yield* Stream.runCollect(agent.executeStream(context, model)))
      const messages = events.flatMap((event) => (event.type === "message" ? [event.message] : []))

      // The history: per step, the step's system message, the tool call and result, the report; then the answer.
      assert.deepStrictEqual(
        messages.map((message) => message.role),
        ["system", "assistant", "tool", "assistant", "system", "assistant", "tool", "assistant", "assistant"]
      )
      assertValidHistory(messages)
      assert.deepStrictEqual(lookups, ["Paris", "Rome"])
      const answer = messages.at(-1) as Message.AssistantMessage
      assert.strictEqual(
        Message.text(answer),
        "Rome is bigger: 2.8 million people against Paris's 2.1 million."
      )
      const final = PlanAgent.planOf(answer)
      assert.deepStrictEqual(
        final?.steps.map((step) => step.status),
        ["done", "done"]
      )
      assert.deepInclude(final, { stopReason: "finished", notified: true, replans: 0 })

      // The plan streamed as it changed: created, step 1 running, done, step 2 running, done, final.
      const statuses = plans(events).map((plan) => plan.steps.map((step) => step.status).join(","))
      assert.deepStrictEqual(statuses.slice(0, 5), [
        "pending,pending",
        "running,pending",
        "done,pending",
        "done,running",
        "done,done"
      ])
      // Only the message to the user streams as text; the steps' reports are reasoning.
      const text = events.flatMap((event) => (event.type === "text-delta" ? [event.delta] : [])).join("")
      assert.strictEqual(text, Message.text(answer))
      const reasoning = events
        .flatMap((event) => (event.type === "reasoning-delta" ? [event.delta] : []))
        .join("")
      assert.include(reasoning, "Paris has 2.1 million people.")

      // What the model was asked: the plan as structured output; the step with the plan in view;
      // the review with the step's report; the notify decision with the one tool.
      assert.strictEqual(model.requests[0]?.request.responseFormat?.type, "json-schema")
      const step = model.requests[1]?.messages ?? []
      assert.include(Message.text(step.at(-1) as Message.Message), "Plan step 1 of 2: Look up Paris.")
      assert.deepStrictEqual(
        model.requests[1]?.request.tools?.map((tool) => tool.name),
        ["lookup"]
      )
      assert.include(
        Message.text(model.requests[3]?.messages.at(-1) as Message.Message),
        "its report: Paris has 2.1 million people."
      )
      assert.deepStrictEqual(
        model.requests[7]?.request.tools?.map((tool) => tool.name),
        [PlanAgent.sendMessageToolName]
      )
    })
  )

  it.effect("repairs an invalid plan, replans within its bound, and skips what never ran", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          '{"goal": "compare", "steps": "not a list"}',
          draft("Look up Paris", "Guess Rome"),
          "Paris: 2.1 million.",
          review("done", "replan", ["Look up Rome properly", "Compare"]),
          "Rome: 2.8 million.",
          // A second replan is over the bound: the loop ends and the rest is skipped.
          review("done", "replan", ["Compare again"]),
          send("Rome is bigger.")
        ]
      })
      const agent = PlanAgent.make({ tools: [lookup], maxReplans: 1 })
      const messages = yield* agent.execute(context, model)
      const final = PlanAgent.planOf(messages.at(-1) as Message.Message)
      // The repair round: the invalid plan was sent back with the reason.
      assert.include(Message.text(model.requests[1]?.messages.at(-1) as Message.Message), "steps")
      assert.strictEqual(final?.replans, 1)
      assert.strictEqual(final?.stopReason, "max-replans")
      assert.deepStrictEqual(
        final?.steps.map((step) => `${step.id}:${step.title}:${step.status}`),
        ["1:Look up Paris:done", "3:Look up Rome properly:done", "4:Compare:skipped"]
      )
    })
  )

  it.effect("stops after maxSteps, and when two steps in a row fail; may stay silent", () =>
    Effect.gen(function* () {
      const bounded = ScriptedChatModel.make({
        replies: [
          draft("One", "Two", "Three"),
          "did one",
          review("done", "continue"),
          { text: "nothing to say" }
        ]
      })
      const boundedMessages = yield* PlanAgent.make({ tools: [], maxSteps: 1 }).execute(context, bounded)
      // No user_sendMessage call: no message to the user; the last message is the step's report.
      assert.strictEqual(Message.text(boundedMessages.at(-1) as Message.Message), "did one")
      const boundedPlan = PlanAgent.planOf(
        boundedMessages.findLast((message) => message.role === "system") as Message.Message
      )
      assert.strictEqual(boundedPlan?.steps.length, 3)

      const stuck = ScriptedChatModel.make({
        replies: [
          draft("One", "Two", "Three"),
          "could not",
          review("failed", "continue"),
          "could not either",
          review("failed", "continue"),
          send("I could not do it: both attempts failed.")
        ]
      })
      const stuckEvents = Array.from(
        yield* Stream.runCollect(PlanAgent.make({ tools: [] }).executeStream(context, stuck))
      )
      const last = plans(stuckEvents).at(-1)
      assert.strictEqual(last?.stopReason, "no-progress")
      assert.deepStrictEqual(
        last?.steps.map((step) => step.status),
        ["failed", "failed", "skipped"]
      )
      assert.strictEqual(last?.notified, true)

      const maxed = plans(
        Array.from(
          yield* Stream.runCollect(
            PlanAgent.make({ tools: [], maxSteps: 1 }).executeStream(
              context,
              ScriptedChatModel.make({
                replies: [draft("One", "Two"), "did one", review("done", "continue"), { text: "" }]
              })
            )
          )
        )
      ).at(-1)
      assert.deepInclude(maxed, { stopReason: "max-steps", notified: false })
      assert.deepStrictEqual(
        maxed?.steps.map((step) => step.status),
        ["done", "skipped"]
      )
    })
  )

  it.effect("a plan that stays invalid fails with the produced messages; interruption stops a step", () =>
    Effect.gen(function* () {
      const invalid = yield* Effect.exit(
        PlanAgent.make({ tools: [] }).execute(
          context,
          ScriptedChatModel.make({ replies: ["not json", "still not json"] })
        )
      )
      assert.isTrue(Exit.isFailure(invalid))
      if (Exit.isFailure(invalid)) assert.include(String(invalid.cause), "plan")

      const hanging = ScriptedChatModel.make({ replies: [draft("Wait"), { hang: true }] })
      const fiber = yield* Effect.forkChild(PlanAgent.make({ tools: [] }).execute(context, hanging))
      yield* Effect.repeat(Effect.yieldNow, { times: 50 })
      assert.strictEqual(hanging.requests.length, 2)
      yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isFailure(yield* Fiber.await(fiber)))
      assert.isTrue(hanging.requests[1]?.interrupted)
    })
  )

  it.effect("steering: what arrives joins after the step, before its review, and later steps see it", () =>
    Effect.gen(function* () {
      const polls: Array<ToolAgent.SteeringInput> = []
      const model = ScriptedChatModel.make({
        replies: [
          draft("Look up Paris", "Look up Rome"),
          "Paris: 2.1 million.",
          review("done", "continue"),
          "Rome: 2.8 million.",
          review("done", "finish"),
          send("Rome is bigger.")
        ]
      })
      const agent = PlanAgent.make({
        tools: [],
        steering: (input) =>
          Effect.sync(() => {
            polls.push(input)
            return polls.length === 1 ? [Message.user("and give the numbers", { id: "late" })] : []
          })
      })
      const messages = yield* agent.execute(context, model)
      assertValidHistory(messages)
      // Polled after each step, and once more when the plan would finish (nothing came then).
      assert.deepStrictEqual(polls, [
        { step: 1, final: false },
        { step: 2, final: false },
        { step: 2, final: true }
      ])
      assert.deepStrictEqual(
        messages.map(
          (message) => `${message.role}:${message.role === "system" ? "" : Message.text(message)}`
        ),
        [
          "system:",
          "assistant:Paris: 2.1 million.",
          "user:and give the numbers",
          "system:",
          "assistant:Rome: 2.8 million.",
          "assistant:Rome is bigger."
        ]
      )
      const sees = (index: number) =>
        (model.requests[index]?.messages ?? []).some((message) => message.id === "late")
      // The review of step 1 saw it (and was told to replan if needed); step 2 and the notify decision too.
      assert.isTrue(sees(2))
      assert.include(Message.text(model.requests[2]?.messages.at(-1) as Message.Message), "Messages arrived")
      assert.isTrue(sees(3))
      assert.isTrue(sees(5))
      assert.isFalse(sees(1))
    })
  )

  it.effect(
    "steering at the end: what arrives as the plan would finish is planned for, and the loop goes on",
    () =>
      Effect.gen(function* () {
        let finals = 0
        const model = ScriptedChatModel.make({
          replies: [
            draft("Look up Paris"),
            "Paris: 2.1 million.",
            review("done", "finish"),
            json({
              thoughts: "One more.",
              goal: "Also Berlin",
              steps: [{ title: "Look up Berlin", detail: "it" }]
            }),
            "Berlin: 3.7 million.",
            review("done", "finish"),
            send("Berlin is the biggest.")
          ]
        })
        const agent = PlanAgent.make({
          tools: [],
          steering: ({ final }) =>
            Effect.sync(() => (final && ++finals === 1 ? [Message.user("and Berlin?", { id: "end" })] : []))
        })
        const events = Array.from(yield* Stream.runCollect(agent.executeStream(context, model)))
        const messages = events.flatMap((event) => (event.type === "message" ? [event.message] : []))
        assertValidHistory(messages)
        assert.strictEqual(finals, 2)
        // The second planning call saw the new message and was told to plan only for it.
        const planning = model.requests[3]?.messages ?? []
        assert.isTrue(planning.some((message) => message.id === "end"))
        assert.include(Message.text(planning.at(-1) as Message.Message), "Plan only the steps")
        const final = plans(events).at(-1)
        assert.deepInclude(final, { goal: "Also Berlin", replans: 1, stopReason: "finished", notified: true })
        assert.deepStrictEqual(
          final?.steps.map((step) => `${step.id}:${step.title}:${step.status}`),
          ["1:Look up Paris:done", "2:Look up Berlin:done"]
        )
        assert.strictEqual(Message.text(messages.at(-1) as Message.Message), "Berlin is the biggest.")
      })
  )

  it.effect(
    "steering waits for the next turn where the bounds leave no room, and is checked as ToolAgent's",
    () =>
      Effect.gen(function* () {
        const polls: Array<ToolAgent.SteeringInput> = []
        const bounded = PlanAgent.make({
          tools: [],
          maxSteps: 1,
          steering: (input) => Effect.sync(() => void polls.push(input)).pipe(Effect.as([]))
        })
        yield* bounded.execute(
          context,
          ScriptedChatModel.make({
            replies: [draft("One"), "did one", review("done", "finish"), { text: "" }]
          })
        )
        // No final poll: at maxSteps the plan cannot act on what would join, so it waits for the next turn.
        assert.deepStrictEqual(polls, [{ step: 1, final: false }])

        const forged = PlanAgent.make({
          tools: [],
          steering: () =>
            Effect.succeed([Message.toolResult({ toolCallId: "x", name: "lookup", content: "forged" })])
        })
        const error = yield* Effect.flip(
          forged.execute(context, ScriptedChatModel.make({ replies: [draft("One"), "did one"] }))
        )
        assert.strictEqual(error.reason._tag, "Failed")
        assert.include(error.message, "steering returned a tool result")
        // What was produced before is carried by the error.
        assert.deepStrictEqual(
          error.messages.map((message) => message.role),
          ["system", "assistant"]
        )
      })
  )
})
