import { assert, describe, it } from "@effect/vitest"
import { Tool } from "@noema/core"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import * as CurrentTime from "../src/tools/CurrentTime.js"

const instant = Date.UTC(2025, 2, 1, 13, 5, 9) // 2025-03-01 13:05:09 UTC, a Saturday

describe("CurrentTime", () => {
  it("describes an instant with its offset, weekday and zone", () => {
    assert.strictEqual(CurrentTime.describeTime(instant, "UTC"), "2025-03-01T13:05:09Z (Saturday, UTC)")
    assert.strictEqual(
      CurrentTime.describeTime(instant, "Europe/Paris"),
      "2025-03-01T14:05:09+01:00 (Saturday, Europe/Paris)"
    )
    assert.strictEqual(
      CurrentTime.describeTime(instant, "America/New_York"),
      "2025-03-01T08:05:09-05:00 (Saturday, America/New_York)"
    )
    assert.strictEqual(
      CurrentTime.describeTime(instant, "Australia/Adelaide"),
      "2025-03-01T23:35:09+10:30 (Saturday, Australia/Adelaide)"
    )
  })

  it.effect("reads Effect's clock and reports an unknown zone to the model", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(instant)
      const ok = yield* Tool.call(CurrentTime.tool, {
        id: "c1",
        name: "current_time",
        arguments: '{"timezone":"UTC"}'
      })
      assert.strictEqual(ok.content, "2025-03-01T13:05:09Z (Saturday, UTC)")
      const bad = yield* Tool.call(CurrentTime.tool, {
        id: "c2",
        name: "current_time",
        arguments: '{"timezone":"Mars/Base"}'
      })
      assert.isTrue(bad.isError)
      assert.match(bad.content, /Unknown time zone "Mars\/Base"/)
    })
  )
})
