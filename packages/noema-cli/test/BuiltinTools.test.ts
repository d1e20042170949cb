import { assert, describe, it } from "@effect/vitest"
import { Tool } from "@noema/core"
import * as BuiltinTools from "../src/tools/BuiltinTools.js"

describe("BuiltinTools", () => {
  it("are all marked read-only, so a runtime may cancel their calls", () => {
    const tools = BuiltinTools.make({ root: "." })
    assert.deepStrictEqual(
      tools.map((tool) => [tool.name, Tool.isReadOnly(tool), Tool.isInterruptible(tool)]),
      [
        ["calculator", true, true],
        ["current_time", true, true],
        ["read_file", true, true]
      ]
    )
    // Only the calculator is a pure function of its arguments.
    assert.deepStrictEqual(
      tools.map((tool) => tool.annotations.idempotent === true),
      [true, false, false]
    )
  })
})
