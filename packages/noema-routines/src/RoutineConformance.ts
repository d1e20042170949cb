/**
 * RoutineConformance: what every routine store must show, directly (state round
 * trips, listing) and through `Routine` (preambles once, the overview after a
 * resume, no task run twice, parallel chains kept apart, setup failures kept).
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
  completed: [{ task: "t1", evidence: Message.assistant("done ✓"), completedAt: 5 }],
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
    name: "keeps a chain's state exactly, replaces it whole, lists a routine's chains in order",
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
      })
    )
  },
  {
    name: "sends each preamble once, then every task in order, and marks the goal complete",
    run: scope((store) =>
      Effect.gen(function* () {
        const model = ScriptedChatModel.make({ replies: ["figures", "summary", "sent"] })
        const events: Array<RoutineEvent> = []
        yield* routine(store, model, events).runChain(quarterly())
        assert.deepEqual(model.requests.map(texts), [
          [
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            "user: Task gather: Gather the figures"
          ],
          [
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            "user: Task gather: Gather the figures",
            "assistant: figures",
            "user: Task draft: Draft the summary\n\nTopic: growth"
          ],
          [
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            "user: Task gather: Gather the figures",
            "assistant: figures",
            "user: Task draft: Draft the summary\n\nTopic: growth",
            "assistant: summary",
            "user: Task send: Send it"
          ]
        ])
        const stored = (yield* store.load("reports", "report/quarterly"))!
        assert.equal(stored.status, "complete")
        assert.deepEqual(
          stored.completed.map((entry) => [entry.task, Message.text(entry.evidence)]),
          [
            ["gather", "figures"],
            ["draft", "summary"],
            ["send", "sent"]
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
        const first = ScriptedChatModel.make({ replies: ["figures"] })
        const result = yield* routine(store, first).step(quarterly())
        assert.deepEqual(result, {
          type: "task",
          chain: "report/quarterly",
          task: "gather",
          goalComplete: false
        })
        // A new routine (a new process) on the same store.
        const second = ScriptedChatModel.make({ replies: ["summary", "sent"] })
        const events: Array<RoutineEvent> = []
        yield* routine(store, second, events).runChain(quarterly())
        const overview =
          "user: These tasks of report/quarterly are already completed:\n- gather: Gather the figures (result: figures)\n\nDo not redo them; continue with the remaining tasks."
        assert.deepEqual(second.requests.map(texts), [
          [
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            "user: Task gather: Gather the figures",
            "assistant: figures",
            overview,
            "user: Task draft: Draft the summary\n\nTopic: growth"
          ],
          [
            "user: You write reports for Ada.",
            "user: Brief: Q3 numbers",
            "user: Task gather: Gather the figures",
            "assistant: figures",
            overview,
            "user: Task draft: Draft the summary\n\nTopic: growth",
            "assistant: summary",
            "user: Task send: Send it"
          ]
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
            return `done: ${last.split("\n")[0]}`
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
        const model = ScriptedChatModel.make({ replies: ["figures", "summary", "sent"] })
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
        assert.equal(texts(model.requests[0]!)[1], "user: Brief: Q3 numbers")
      })
    )
  }
]
