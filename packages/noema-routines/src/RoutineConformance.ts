/**
 * RoutineConformance: what every routine store must show, directly (state round
 * trips, listing) and through `Routine` (preambles once, the overview after a
 * resume, no task run twice, parallel chains kept apart, setup failures kept,
 * a task done only by the agent's verdict and otherwise kept open with the
 * reason, ticked tasks skipped, a completed chain reopened by new tasks).
 * Runner-independent:
 *
 * ```ts
 * for (const testCase of RoutineConformance.cases) it.effect(testCase.name, () => testCase.run(makeStore))
 * ```
 */
import assert from "node:assert/strict"
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import { Effect, Result, type Scope } from "effect"
import * as Routine from "./Routine.js"
import type { RoutineEvent } from "./RoutineContext.js"
import type { ChainState, Service } from "./RoutineStore.js"
import * as TaskVerdict from "./TaskVerdict.js"
import * as Variables from "./Variables.js"
import * as WorkBreakdown from "./WorkBreakdown.js"

/** Makes a fresh, empty store; it may hold resources until the scope closes. */
export type MakeStore = Effect.Effect<Service, unknown, Scope.Scope>

export interface Case {
  readonly name: string
  readonly run: (makeStore: MakeStore) => Effect.Effect<void, unknown>
}

export const fixture = `title: Reports
variables:
  - documents.brief
  - name: stakeholder.owner.name
  - name: thread.topic
    required: false
skills:
  - id: report
    preamble: "You write reports for {{stakeholder.owner.name}}."
    scenarios:
      - id: quarterly
        preamble: "Brief: {{documents.brief}}"
        tasks:
          - id: gather
            title: Gather the figures
          - id: draft
            title: Draft the summary
            instructions: "Topic: {{thread.topic}}"
          - id: send
            title: Send it
      - id: yearly
        preamble: "The yearly report."
        tasks:
          - id: collect
            title: Collect the quarters
          - id: write
            title: Write the year
`

export const breakdown = (): WorkBreakdown.WorkBreakdown => WorkBreakdown.parse(fixture, "reports.yaml")

export const sources: ReadonlyArray<Variables.Source> = Variables.values({
  "documents.brief": "Q3 numbers",
  "stakeholder.owner.name": "Ada",
  "thread.topic": "growth"
})

/** A scripted reply that answers `text` and says the task is done through `complete_task`. */
export const finish = (text: string): ScriptedChatModel.Reply => ({
  text,
  toolCalls: [{ name: TaskVerdict.toolName, arguments: { done: true, summary: text } }]
})

/** A scripted reply that says the task cannot be done, and why, through `complete_task`. */
export const refuse = (text: string, reason: string): ScriptedChatModel.Reply => ({
  text,
  toolCalls: [{ name: TaskVerdict.toolName, arguments: { done: false, summary: reason } }]
})

/** What the conversation holds after a task finished with `finish(text)`: the answer and the call's result. */
const finished = (text: string) => [`assistant: ${text}`, "tool: Recorded: the task is done."]

const system = `system: ${TaskVerdict.instructions("tool-call")}`
const noTools = "\n\nThis task has no tools: do it with what this conversation holds."

/** The texts of a request's messages, as `role: text`. */
export const texts = (request: ScriptedChatModel.RecordedRequest): Array<string> =>
  request.messages.map((message) => `${message.role}: ${Message.text(message)}`)

const scope = (body: (store: Service) => Effect.Effect<void, unknown>) => (makeStore: MakeStore) =>
  Effect.scoped(Effect.flatMap(makeStore, body))

const state = (chain: string, overrides: Partial<ChainState> = {}): ChainState => ({
  routine: "r1",
  chain,
  status: "active",
  variables: { "documents.brief": "b\u0000 ü 😀" },
  sent: { skillPreamble: true, scenarioPreamble: false },
  completed: [
    {
      task: "t1",
      evidence: Message.assistant("done ✓"),
      completedAt: 5,
      source: "tool-call",
      summary: "did ✓"
    }
  ],
  open: [{ task: "t2", reason: "no access ✗", at: 6 }],
  messages: [Message.user("hello", { metadata: { routine: "task" } }), Message.assistant("done ✓")],
  failures: [],
  updatedAt: 7,
  revision: 1,
  ...overrides
})

const routine = (store: Service, model: ScriptedChatModel.ScriptedChatModel, events?: Array<RoutineEvent>) =>
  Routine.make({
    breakdown: breakdown(),
    id: "reports",
    model,
    store,
    sources,
    setupRetry: { times: 2, base: "1 millis" },
    ...(events === undefined
      ? {}
      : { onEvent: (event: RoutineEvent) => Effect.sync(() => events.push(event)) })
  })

const quarterly = () => WorkBreakdown.select(breakdown(), "report/quarterly")[0]!
const yearly = () => WorkBreakdown.select(breakdown(), "report/yearly")[0]!

export const cases: ReadonlyArray<Case> = [
  {
    name: "keeps a chain's state exactly, replaces it whole, lists a routine's chains and the routines in order",
    run: scope((store) =>
      Effect.gen(function* () {
        assert.equal(yield* store.load("r1", "a/b"), undefined)
        yield* store.save(state("s/b"))
        yield* store.save(state("s/a"))
        yield* store.save({ ...state("s/c"), routine: "r2" })
        assert.deepEqual(yield* store.load("r1", "s/b"), state("s/b"))
        const replaced = state("s/b", {
          status: "complete",
          completed: [],
          open: [],
          messages: [],
          updatedAt: 9,
          revision: 2
        })
        yield* store.save(replaced)
        assert.deepEqual(yield* store.load("r1", "s/b"), replaced)
        // A save that does not follow the stored revision (another run saved first) is refused.
        for (const revision of [2, 1, 4]) {
          const stale = yield* Effect.flip(store.save({ ...replaced, revision, status: "active" }))
          assert.equal(stale._tag, "RoutineConflictError")
        }
        assert.deepEqual(yield* store.load("r1", "s/b"), replaced)
        assert.deepEqual(
          (yield* store.list("r1")).map((entry) => entry.chain),
          ["s/a", "s/b"]
        )
        assert.deepEqual(
          (yield* store.list("r2")).map((entry) => entry.chain),
          ["s/c"]
        )
        // Each routine once, whatever number of chains it has.
        assert.deepEqual(yield* store.routines(), ["r1", "r2"])
      })
    )
  },
  {
    name: "sends each preamble once, then every task in order, and marks the goal complete",
    run: scope((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["figures", "summary", "sent"].map(finish) })
        const events: Array<RoutineEvent> = []
        yield* routine(store, model, events).runChain(quarterly())
        const gather = `user: Task gather: Gather the figures${noTools}`
        const draft = `user: Task draft: Draft the summary\n\nTopic: growth${noTools}`
        assert.deepEqual(model.requests.map(texts), [
          [system, "user: You write reports for Ada.", "user: Brief: Q3 numbers", gather],
          [
            system,
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            gather,
            ...finished("figures"),
            draft
          ],
          [
            system,
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            gather,
            ...finished("figures"),
            draft,
            ...finished("summary"),
            `user: Task send: Send it${noTools}`
          ]
        ])
        const stored = (yield* store.load("reports", "report/quarterly"))!
        assert.equal(stored.status, "complete")
        assert.deepEqual(
          stored.completed.map((entry) => [entry.task, Message.text(entry.evidence), entry.source]),
          [
            ["gather", "figures", "tool-call"],
            ["draft", "summary", "tool-call"],
            ["send", "sent", "tool-call"]
          ]
        )
        assert.deepEqual(
          events.filter((event) => event.type === "goal-completed"),
          [{ type: "goal-completed", chain: "report/quarterly" }]
        )
        // Complete: running it again asks the model nothing.
        const again = ScriptedChatModel.make()
        yield* routine(store, again).runChain(quarterly())
        assert.equal(again.requests.length, 0)
      })
    )
  },
  {
    name: "a resumed chain is told what is done, gets no preamble again and runs no task twice",
    run: scope((store) =>
      Effect.gen(function* () {
        const first = ScriptedChatModel.make({ replies: [finish("figures")] })
        const result = yield* routine(store, first).step(quarterly())
        assert.deepEqual(result, {
          type: "task",
          chain: "report/quarterly",
          task: "gather",
          goalComplete: false
        })
        // A new routine (a new process) on the same store.
        const second = ScriptedChatModel.make({ replies: ["summary", "sent"].map(finish) })
        const events: Array<RoutineEvent> = []
        yield* routine(store, second, events).runChain(quarterly())
        const overview =
          "user: These tasks of report/quarterly are already completed:\n- gather: Gather the figures (result: figures)\n\nDo not redo them; continue with the remaining tasks."
        const before = [
          system,
          "user: You write reports for Ada.",
          "user: Brief: Q3 numbers",
          `user: Task gather: Gather the figures${noTools}`,
          ...finished("figures"),
          overview,
          `user: Task draft: Draft the summary\n\nTopic: growth${noTools}`
        ]
        assert.deepEqual(second.requests.map(texts), [
          before,
          [...before, ...finished("summary"), `user: Task send: Send it${noTools}`]
        ])
        assert.deepEqual(
          events.filter((event) => event.type === "preamble"),
          []
        )
        assert.deepEqual(
          events.find((event) => event.type === "setup"),
          { type: "setup", chain: "report/quarterly", resumed: true, completed: 1, total: 3 }
        )
      })
    )
  },
  {
    name: "two chains run side by side without mixing their messages",
    run: scope((store) =>
      Effect.gen(function* () {
        // Each reply names the chain whose task it answers, read from the request.
        const model = ScriptedChatModel.make({
          fallback: (request) => {
            const last = Message.text(request.messages.at(-1)!)
            return finish(`done: ${last.split("\n")[0]}`)
          }
        })
        const r = routine(store, model)
        yield* r.runChains([quarterly(), yearly()])
        assert.equal(model.requests.length, 5)
        for (const request of model.requests) {
          const all = texts(request).join("\n")
          const isYearly = all.includes("The yearly report.")
          assert.equal(all.includes("Brief: Q3 numbers"), !isYearly)
          for (const task of isYearly ? ["gather", "draft", "send"] : ["collect", "write"]) {
            assert.ok(
              !all.includes(`Task ${task}:`),
              `a request of one chain holds task ${task} of the other`
            )
          }
        }
        const states = yield* store.list("reports")
        assert.deepEqual(
          states.map((entry) => [entry.chain, entry.status, entry.completed.map((done) => done.task)]),
          [
            ["report/quarterly", "complete", ["gather", "draft", "send"]],
            ["report/yearly", "complete", ["collect", "write"]]
          ]
        )
        assert.deepEqual(r.active, [])
      })
    )
  },
  {
    name: "a task is done only by the agent's verdict; otherwise it stays open with the reason, and runs again",
    run: scope((store) =>
      Effect.gen(function* () {
        const events: Array<RoutineEvent> = []
        // An answer that says it could not, with a verdict saying so: open, with the agent's reason.
        const first = ScriptedChatModel.make({
          replies: [refuse("I could not find the figures.", "the figures are not in the brief")]
        })
        yield* routine(store, first, events).runChain(quarterly())
        assert.equal(first.requests.length, 1)
        let stored = (yield* store.load("reports", "report/quarterly"))!
        assert.deepEqual(stored.completed, [])
        assert.deepEqual(
          stored.open.map((entry) => [entry.task, entry.reason]),
          [["gather", "the figures are not in the brief"]]
        )
        assert.deepEqual(
          events.filter((event) => event.type === "task-open"),
          [
            {
              type: "task-open",
              chain: "report/quarterly",
              task: "gather",
              reason: "the figures are not in the brief"
            }
          ]
        )
        // An answer with no verdict: one nudge, then open as not confirmed (still not completed).
        const second = ScriptedChatModel.make({ replies: ["Here are the figures.", "Done, I think."] })
        yield* routine(store, second).runChain(quarterly())
        assert.equal(second.requests.length, 2)
        assert.deepEqual(texts(second.requests[1]!).slice(-3), [
          `user: Task gather: Gather the figures${noTools}`,
          "assistant: Here are the figures.",
          `user: ${TaskVerdict.nudgeText}`
        ])
        stored = (yield* store.load("reports", "report/quarterly"))!
        assert.deepEqual(stored.completed, [])
        assert.deepEqual(
          stored.open.map((entry) => [entry.task, entry.reason]),
          [["gather", TaskVerdict.notConfirmed]]
        )
        assert.deepEqual(Routine.chainProgress(quarterly(), stored).tasks[0], {
          id: "gather",
          title: "Gather the figures",
          done: false,
          ticked: false,
          open: TaskVerdict.notConfirmed
        })
        // Nudged into a verdict: done; the open entry is gone; the next tasks follow.
        const third = ScriptedChatModel.make({
          replies: ["The figures: 3.", finish("gathered"), ...["summary", "sent"].map(finish)]
        })
        yield* routine(store, third).runChain(quarterly())
        stored = (yield* store.load("reports", "report/quarterly"))!
        assert.equal(stored.status, "complete")
        assert.deepEqual(stored.open, [])
        assert.deepEqual(
          stored.completed.map((entry) => [entry.task, entry.summary, Message.text(entry.evidence)]),
          [
            ["gather", "gathered", "gathered"],
            ["draft", "summary", "summary"],
            ["send", "sent", "sent"]
          ]
        )
      })
    )
  },
  {
    name: "tasks ticked in the document are skipped and named; a complete chain reopens for tasks added since",
    run: scope((store) =>
      Effect.gen(function* () {
        const ticked = WorkBreakdown.parse(
          fixture.replace("title: Draft the summary", "title: Draft the summary\n            done: true"),
          "reports.yaml"
        )
        const events: Array<RoutineEvent> = []
        const model = ScriptedChatModel.make({ replies: ["figures", "sent"].map(finish) })
        const r = Routine.make({
          breakdown: ticked,
          id: "reports",
          model,
          store,
          sources,
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        yield* r.runChain(WorkBreakdown.select(ticked, "report/quarterly")[0]!)
        assert.deepEqual(
          model.requests.map((request) => texts(request).at(-1)!.split("\n")[0]),
          ["user: Task gather: Gather the figures", "user: Task send: Send it"]
        )
        assert.deepEqual(
          events.filter((event) => event.type === "task-skipped"),
          [{ type: "task-skipped", chain: "report/quarterly", task: "draft", title: "Draft the summary" }]
        )
        assert.ok(
          texts(model.requests[0]!)
            .join("\n")
            .includes("- draft: Draft the summary (ticked as done in the document)")
        )
        const quarterlyState = (yield* store.load("reports", "report/quarterly"))!
        assert.equal(quarterlyState.status, "complete")
        assert.deepEqual(
          Routine.chainProgress(
            WorkBreakdown.select(ticked, "report/quarterly")[0]!,
            quarterlyState
          ).tasks.map((task) => [task.id, task.done, task.ticked]),
          [
            ["gather", true, false],
            ["draft", true, true],
            ["send", true, false]
          ]
        )

        yield* routine(store, ScriptedChatModel.make({ replies: ["quarters", "year"].map(finish) })).runChain(
          yearly()
        )
        // The document gains a task in the chain stored as complete: it reopens and runs only that.
        const grown = WorkBreakdown.parse(
          fixture.replace(
            "title: Write the year",
            "title: Write the year\n          - id: publish\n            title: Publish it"
          ),
          "reports.yaml"
        )
        const grownYearly = WorkBreakdown.select(grown, "report/yearly")[0]!
        const before = (yield* store.load("reports", "report/yearly"))!
        assert.equal(Routine.chainProgress(grownYearly, before).status, "reopened")
        const reopened: Array<RoutineEvent> = []
        const again = ScriptedChatModel.make({ replies: [finish("published")] })
        yield* Routine.make({
          breakdown: grown,
          id: "reports",
          model: again,
          store,
          sources,
          onEvent: (event) => Effect.sync(() => reopened.push(event))
        }).runChain(grownYearly)
        assert.equal(again.requests.length, 1)
        assert.equal(texts(again.requests[0]!).at(-1)!.split("\n")[0], "user: Task publish: Publish it")
        assert.deepEqual(
          reopened.filter((event) => event.type === "reopened"),
          [{ type: "reopened", chain: "report/yearly", tasks: ["publish"] }]
        )
        const after = (yield* store.load("reports", "report/yearly"))!
        assert.equal(after.status, "complete")
        assert.deepEqual(
          after.completed.map((entry) => entry.task),
          ["collect", "write", "publish"]
        )
      })
    )
  },
  {
    name: "a missing required variable stops the setup at once, names it, and is kept",
    run: scope((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make()
        const events: Array<RoutineEvent> = []
        const r = Routine.make({
          breakdown: breakdown(),
          id: "reports",
          model,
          store,
          sources: Variables.values({ "documents.brief": "x" }),
          setupRetry: { times: 2, base: 0 },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        const result = yield* Effect.result(r.runChain(quarterly()))
        assert.ok(Result.isFailure(result))
        const error = result.failure as Routine.SetupFailed
        assert.equal(error._tag, "SetupFailed")
        assert.equal(
          error.message,
          "Setting up goal report/quarterly failed after 1 attempt: The required variable {{stakeholder.owner.name}} of goal report/quarterly has no value (no source gives it)"
        )
        assert.equal(model.requests.length, 0)
        const stored = (yield* store.load("reports", "report/quarterly"))!
        assert.deepEqual(
          stored.failures.map((failure) => failure.attempt),
          [1]
        )
        assert.deepEqual(stored.messages, [])
        assert.deepEqual(
          events.map((event) => (event.type === "setup-failed" ? event.willRetry : event.type)),
          [false]
        )
      })
    )
  },
  {
    name: "a source that fails is asked again with backoff; each failure is reported and kept",
    run: scope((store) =>
      Effect.gen(function* () {
        let calls = 0
        const flaky: Variables.Source = {
          namespace: "documents",
          resolve: (name) =>
            Effect.suspend(() =>
              ++calls <= 2
                ? Effect.fail(
                    new Variables.VariableSourceError({
                      variable: `documents.${name}`,
                      detail: `busy ${calls}`
                    })
                  )
                : Effect.succeed("Q3 numbers")
            )
        }
        const model = ScriptedChatModel.make({ replies: ["figures", "summary", "sent"].map(finish) })
        const events: Array<RoutineEvent> = []
        const r = Routine.make({
          breakdown: breakdown(),
          id: "reports",
          model,
          store,
          sources: [flaky, ...sources],
          // No pause between attempts: the case must not depend on the clock (a TestClock stands still).
          setupRetry: { times: 3, base: 0 },
          onEvent: (event) => Effect.sync(() => events.push(event))
        })
        yield* r.runChain(quarterly())
        assert.deepEqual(
          events.filter((event) => event.type === "setup-failed"),
          [
            {
              type: "setup-failed",
              chain: "report/quarterly",
              attempt: 1,
              error: "Could not read {{documents.brief}}: busy 1",
              willRetry: true
            },
            {
              type: "setup-failed",
              chain: "report/quarterly",
              attempt: 2,
              error: "Could not read {{documents.brief}}: busy 2",
              willRetry: true
            }
          ]
        )
        const stored = (yield* store.load("reports", "report/quarterly"))!
        assert.deepEqual(
          stored.failures.map((failure) => [failure.attempt, failure.error]),
          [
            [1, "Could not read {{documents.brief}}: busy 1"],
            [2, "Could not read {{documents.brief}}: busy 2"]
          ]
        )
        assert.equal(stored.status, "complete")
        assert.equal(texts(model.requests[0]!)[2], "user: Brief: Q3 numbers")
      })
    )
  }
]
