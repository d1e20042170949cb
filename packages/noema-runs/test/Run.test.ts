import { assert, describe, it } from "@effect/vitest"
import * as Run from "../src/Run.js"

const at = "2026-11-24T08:00:00.000Z"
let seq = 0
const event = (data: Run.EventData): Run.Event => ({
  event_id: Run.newEventId(),
  run_id: "run_1",
  thread_id: "thr_1",
  seq: ++seq,
  at,
  data
})
const queued = (needsApproval = false): Run.RunView => {
  seq = 0
  const run = Run.apply(
    undefined,
    event({
      type: "RunQueued",
      request: "write",
      pipeline: "default",
      stages: [
        { key: "plan", position: 1, needsApproval },
        { key: "draft", position: 2, needsApproval: false }
      ]
    })
  )
  assert.notInstanceOf(run, Run.IllegalTransition)
  return run as Run.RunView
}
const fold = (run: Run.RunView, ...data: Array<Run.EventData>) => Run.applyAll(run, data.map(event))

describe("ids", () => {
  it("an id is its prefix, the UTC time to the millisecond and 12 hex digits", () => {
    const at = new Date(Date.UTC(2026, 10, 24, 8, 5, 9, 123))
    const id = Run.newId("evt", at)
    assert.match(id, /^evt_20261124T080509123_[0-9a-f]{12}$/)
    assert.notStrictEqual(Run.newId("evt", at), id)
    assert.match(
      Run.newId("run", new Date(Date.UTC(10000, 0, 1))),
      /^run_\+0100000101T000000000_[0-9a-f]{12}$/
    )
  })
})

describe("run state transitions", () => {
  const table: ReadonlyArray<readonly [Run.RunStatus, Run.RunStatus, boolean]> = Run.runStatuses.flatMap(
    (from) =>
      Run.runStatuses.map(
        (to) =>
          [
            from,
            to,
            (
              {
                "queued>running": true,
                "queued>canceled": true,
                "running>waiting_approval": true,
                "running>completed": true,
                "running>failed": true,
                "running>canceled": true,
                "waiting_approval>running": true,
                "waiting_approval>failed": true,
                "waiting_approval>canceled": true,
                "failed>running": true,
                "failed>canceled": true
              } as Record<string, boolean>
            )[`${from}>${to}`] === true
          ] as const
      )
  )
  for (const [from, to, legal] of table) {
    it(`${from} -> ${to}: ${legal ? "legal" : "refused"}`, () => {
      assert.strictEqual(Run.canTransition(from, to), legal)
    })
  }
  it("completed and canceled are final; active is queued, running, waiting_approval", () => {
    assert.deepStrictEqual(Run.runStatuses.filter(Run.isFinal), ["completed", "canceled"])
    assert.deepStrictEqual(Run.runStatuses.filter(Run.isActive), ["queued", "running", "waiting_approval"])
  })
})

describe("the run read model, folded from events", () => {
  it("a run goes through its stages in order and completes", () => {
    const run = fold(
      queued(),
      { type: "RunStarted" },
      { type: "StageStarted", position: 1, attempt: 1 },
      {
        type: "ArtifactPublished",
        position: 1,
        attempt: 1,
        path: "plan.md",
        kind: "markdown",
        sha256: "ab",
        size: 2
      },
      { type: "StageCompleted", position: 1, attempt: 1 },
      { type: "StageStarted", position: 2, attempt: 1 },
      { type: "StageCompleted", position: 2, attempt: 1 },
      { type: "RunCompleted" }
    )
    assert.notInstanceOf(run, Run.IllegalTransition)
    const view = run as Run.RunView
    assert.strictEqual(view.status, "completed")
    assert.deepStrictEqual(
      view.stages.map((s) => [s.key, s.status, s.attempts.length]),
      [
        ["plan", "completed", 1],
        ["draft", "completed", 1]
      ]
    )
    assert.strictEqual(view.stages[0]?.attempts[0]?.artifacts[0]?.path, "plan.md")
  })

  it("refuses stages out of order, a skipped attempt number, completing early and events after the end", () => {
    const started = fold(queued(), { type: "RunStarted" }) as Run.RunView
    const outOfOrder = fold(started, { type: "StageStarted", position: 2, attempt: 1 })
    assert.instanceOf(outOfOrder, Run.IllegalTransition)
    seq = started.seq
    assert.instanceOf(fold(started, { type: "StageStarted", position: 1, attempt: 2 }), Run.IllegalTransition)
    seq = started.seq
    assert.instanceOf(fold(started, { type: "RunCompleted" }), Run.IllegalTransition)
    seq = started.seq
    const canceled = fold(started, { type: "RunCanceled", reason: "no" }) as Run.RunView
    assert.strictEqual(canceled.status, "canceled")
    assert.instanceOf(fold(canceled, { type: "RunStarted" }), Run.IllegalTransition)
  })

  it("a failed stage fails the run; a retry adds an attempt and keeps the earlier one", () => {
    const failed = fold(
      queued(),
      { type: "RunStarted" },
      { type: "StageStarted", position: 1, attempt: 1 },
      { type: "StageCompleted", position: 1, attempt: 1 },
      { type: "StageStarted", position: 2, attempt: 1 },
      {
        type: "StageFailed",
        position: 2,
        attempt: 1,
        error_code: "model",
        error_message: "down",
        retryable: true
      },
      { type: "RunFailed", error_code: "model", error_message: "down", retryable: true }
    ) as Run.RunView
    assert.strictEqual(failed.status, "failed")
    assert.strictEqual(failed.error?.error_code, "model")
    assert.strictEqual(failed.stages[0]?.status, "completed")
    const retried = fold(
      failed,
      { type: "RunStarted" },
      { type: "StageStarted", position: 2, attempt: 2 },
      { type: "StageCompleted", position: 2, attempt: 2 },
      { type: "RunCompleted" }
    ) as Run.RunView
    assert.strictEqual(retried.status, "completed")
    assert.isUndefined(retried.error)
    assert.deepStrictEqual(
      retried.stages[1]?.attempts.map((a) => [a.attempt, a.status, a.error?.error_code]),
      [
        [1, "failed", "model"],
        [2, "completed", undefined]
      ]
    )
  })

  it("a stage that needs approval waits for it; a rejection fails the run", () => {
    const started = fold(queued(true), { type: "RunStarted" }) as Run.RunView
    assert.instanceOf(fold(started, { type: "StageStarted", position: 1, attempt: 1 }), Run.IllegalTransition)
    seq = started.seq
    const waiting = fold(started, { type: "ApprovalRequested", position: 1 }) as Run.RunView
    assert.strictEqual(waiting.status, "waiting_approval")
    const granted = fold(
      waiting,
      { type: "ApprovalGranted", position: 1 },
      { type: "StageStarted", position: 1, attempt: 1 }
    ) as Run.RunView
    assert.strictEqual(granted.status, "running")
    seq = waiting.seq
    const rejected = fold(waiting, {
      type: "ApprovalRejected",
      position: 1,
      reason: "not now"
    }) as Run.RunView
    assert.strictEqual(rejected.status, "failed")
    assert.strictEqual(rejected.error?.error_code, "approval_rejected")
  })

  it("project rebuilds the same view from the whole log", () => {
    const events: Array<Run.Event> = []
    seq = 0
    for (const data of [
      {
        type: "RunQueued",
        request: "r",
        pipeline: "p",
        stages: [{ key: "a", position: 1, needsApproval: false }]
      },
      { type: "RunStarted" },
      { type: "StageStarted", position: 1, attempt: 1 }
    ] as Array<Run.EventData>) {
      events.push(event(data))
    }
    const view = Run.project(events) as Run.RunView
    assert.strictEqual(view.status, "running")
    assert.strictEqual(view.seq, 3)
  })
})

describe("a run's model", () => {
  const started = Run.modelIdentity({
    provider: "openai",
    name: "gpt-4.1",
    baseUrl: "http://ada:s3cret@localhost:8080/v1/?api_key=sk-123&api-version=2",
    api: "chat"
  })

  it("an identity names the server without its credentials, and the same server the same way", () => {
    assert.deepStrictEqual(started, {
      provider: "openai",
      name: "gpt-4.1",
      base_url: "http://ada:***@localhost:8080/v1?api_key=***&api-version=2",
      api: "chat"
    })
    const plain = Run.modelIdentity({
      provider: "openai",
      name: "m",
      baseUrl: "http://host:1/v1/",
      api: "chat"
    })
    assert.strictEqual(plain.base_url, "http://host:1/v1")
    assert.isTrue(
      Run.sameModel(
        plain,
        Run.modelIdentity({ provider: "openai", name: "m", baseUrl: "http://host:1/v1", api: "chat" })
      )
    )
    assert.isFalse(Run.sameModel(plain, { ...plain, api: "responses" }))
    assert.isFalse(Run.sameModel(plain, { ...plain, name: "n" }))
    assert.strictEqual(Run.describeModel(plain), "m at http://host:1/v1 (chat API)")
    assert.strictEqual(
      Run.describeModel({ provider: "offline", name: "noema-offline" }),
      "noema-offline (offline)"
    )
  })

  it("a run waits for its model without changing status, until the next event; not once it ended", () => {
    const available = { provider: "offline", name: "noema-offline" }
    const waiting = fold(queued(), { type: "ModelUnavailable", model: started, available }) as Run.RunView
    assert.strictEqual(waiting.status, "queued")
    assert.deepStrictEqual(waiting.waitingForModel, { model: started, available, since: at })
    const carriedOn = fold(waiting, { type: "RunStarted" }) as Run.RunView
    assert.strictEqual(carriedOn.status, "running")
    assert.isUndefined(carriedOn.waitingForModel)
    const inStage = fold(carriedOn, { type: "StageStarted", position: 1, attempt: 1 })
    assert.instanceOf(
      fold(inStage as Run.RunView, { type: "ModelUnavailable", model: started, available }),
      Run.IllegalTransition
    )
    const canceled = fold(queued(), { type: "RunCanceled", reason: "no" }) as Run.RunView
    assert.instanceOf(
      fold(canceled, { type: "ModelUnavailable", model: started, available }),
      Run.IllegalTransition
    )
  })
})
