import { afterAll, assert, describe, it } from "vitest"
import type { PlanSummary } from "../src/TasksCommand.js"
import { makeHome, removeHome, runCli } from "./support/cli.js"

const home = makeHome()
afterAll(() => removeHome(home))
const env = { NOEMA_HOME: home }

describe("noema tasks list", () => {
  it("lists the stored plans newest first: when, tasks done, the request; --json says the same", async () => {
    const conversation = await runCli(["resources", "put", "-"], {
      env,
      stdin: JSON.stringify({ type: "conversation", name: "no plan here" })
    })
    assert.equal(conversation.code, 0, conversation.stderr)
    const empty = await runCli(["tasks", "list"], { env })
    assert.equal(empty.code, 0, empty.stderr)
    assert.equal(empty.stdout, "")
    assert.match(empty.stderr, /no plans stored/)

    const messages: Array<string> = []
    for (const request of ["what is 12*7", "what is 6*7"]) {
      const planned = await runCli(["plan", request, "--json"], { env })
      assert.equal(planned.code, 0, planned.stderr)
      messages.push(
        (JSON.parse(planned.stdout.trim().split("\n").at(-1)!) as { tree: { message: string } }).tree.message
      )
    }
    const listed = await runCli(["tasks", "list"], { env })
    assert.equal(listed.code, 0, listed.stderr)
    const rows = listed.stdout.trim().split("\n")
    assert.equal(rows.length, 2)
    assert.match(
      rows[0]!,
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z {2}\S+ {2}1\/1 done {2}what is 6\*7$/
    )
    assert.ok(rows[0]!.includes(messages[1]!) && rows[1]!.includes(messages[0]!), listed.stdout)

    const json = await runCli(["tasks", "list", "--json"], { env })
    const plans = JSON.parse(json.stdout) as Array<PlanSummary>
    assert.deepEqual(
      plans.map((plan) => [plan.message, plan.request, plan.tasks, plan.done, plan.failed]),
      [
        [messages[1], "what is 6*7", 1, 1, 0],
        [messages[0], "what is 12*7", 1, 1, 0]
      ]
    )
    assert.ok(plans[0]!.created! > plans[1]!.created!)

    // Through the policy, as --as: an actor it does not name sees no task, and is told so.
    const guest = await runCli(["tasks", "list", "--as", "cld:user.guest"], { env })
    assert.equal(guest.code, 0, guest.stderr)
    assert.equal(guest.stdout, "")
    assert.match(guest.stderr, /2 tasks withheld by the policy/)
  })
})
