/**
 * `/plan on` in `noema chat`: the plan workflow against the local wire-format
 * server, the plan shown as it changes, the answer sent through user_sendMessage.
 */
import { describe, expect, it } from "vitest"
import { runCli, useServerAndHome } from "./support/cli.js"

const suite = useServerAndHome()

const json = (value: unknown) => JSON.stringify(value)

describe("noema chat /plan", () => {
  it("plans, runs the steps with the tools, shows the plan as it changes, and answers", async () => {
    suite.server.enqueue(
      {
        type: "text",
        text: json({
          thoughts: "One calculation.",
          goal: "Compute 6 times 7",
          steps: [{ title: "Multiply", detail: "Use the calculator for 6*7" }]
        })
      },
      { type: "tool-calls", calls: [{ name: "calculator", arguments: json({ expression: "6*7" }) }] },
      { type: "text", text: "6*7 is 42." },
      {
        type: "text",
        text: json({
          thoughts: "Done.",
          outcome: "done",
          summary: "42",
          decision: "finish",
          remainingSteps: null
        })
      },
      {
        type: "tool-calls",
        calls: [{ name: "user_sendMessage", arguments: json({ text: "6 times 7 is 42." }) }]
      }
    )
    const result = await runCli(["chat", "--base-url", suite.server.url, "--api-key", "test"], {
      env: { NOEMA_HOME: suite.home },
      stdin: "/plan on\nwhat is 6 times 7?\n/plan\n/exit\n"
    })
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("Plan workflow on")
    expect(result.stdout).toContain("  Plan: Compute 6 times 7\n  · 1. Multiply\n")
    expect(result.stdout).toContain("  › 1. Multiply\n")
    expect(result.stdout).toContain("⚙ calculator(6*7) → 42")
    expect(result.stdout).toContain("  ✓ 1. Multiply — 42\n")
    expect(result.stdout).toContain("6 times 7 is 42.\n")
    expect(result.stdout).toContain("Plan workflow: on")
    // The plan call asked for structured output; the step got the tools; the last call offered user_sendMessage.
    const body = (index: number) =>
      suite.server.requests[index]?.body as {
        response_format?: { type: string }
        tools?: ReadonlyArray<{ function: { name: string } }>
      }
    expect(body(0).response_format?.type).toBe("json_schema")
    expect(body(1).tools?.map((tool) => tool.function.name)).toContain("calculator")
    expect(body(4).tools?.map((tool) => tool.function.name)).toEqual(["user_sendMessage"])
  })
})
