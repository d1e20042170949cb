import { execFileSync } from "node:child_process"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const examples = join(dirname(fileURLToPath(import.meta.url)), "..")
const run = (file: string) =>
  execFileSync(process.execPath, [join(examples, file)], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"]
  })

describe("examples", () => {
  it("typical-flow commits a valid turn and rolls back an invalid one", () => {
    const output = run("typical-flow.ts")
    expect(output).toContain("committed 4 messages")
    expect(output).toContain("rolled back: the answer was empty")
    expect(output).toContain("stored: 4 messages")
    expect(output).toContain("assistant: The sum is 5.")
    expect(output).toContain('[calls add({"a":2,"b":3})]')
  })

  it("pipeline runs three agents, each seeing the previous output", () => {
    const output = run("pipeline.ts")
    const lines = output.trim().split("\n")
    expect(lines[0]).toMatch(/^assistant: Fact: honeybees/)
    expect(lines[1]).toBe("assistant: Summary (3 messages seen): bees dance to give directions.")
    expect(lines[2]).toBe("assistant: Resumo: as abelhas dançam para indicar direções.")
    expect(lines[3]).toBe("the model saw 2, 3, 4 messages")
  })

  it("runtime-timer reacts to a person's message and to each timer tick, losing nothing", () => {
    const output = run("runtime-timer.ts")
    expect(output).toContain("turn 1: I read: start the report")
    expect(output).toContain("I read: (timer) tick 3: report progress")
    expect(output).toContain("stored: 8 messages; left unprocessed: 0")
  })
})
