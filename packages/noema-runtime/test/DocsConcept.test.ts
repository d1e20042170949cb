/**
 * docs/concept.md states the runtime's concepts and its layer diagram shows
 * every package of the repository, with the plan loop in the runtime: a new
 * package, or a concept dropped from the page, fails here.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"

const root = path.join(import.meta.dirname, "..", "..", "..")
const concept = fs.readFileSync(path.join(root, "docs", "concept.md"), "utf8")
const section = (title: string): string => {
  const start = concept.indexOf(`## ${title}`)
  expect(start, `a "${title}" section`).toBeGreaterThanOrEqual(0)
  const end = concept.indexOf("\n## ", start + 1)
  return concept.slice(start, end === -1 ? undefined : end)
}

describe("docs/concept.md", () => {
  it("its layer diagram shows every package, and the plan loop in the runtime", () => {
    const layers = section("The layers")
    const diagram = /```\n([\s\S]*?)```/.exec(layers)?.[1] ?? ""
    const packages = fs
      .readdirSync(path.join(root, "packages"))
      .filter((name) => name.startsWith("noema-"))
      .map((name) => `@noema/${name.slice("noema-".length)}`)
    expect(packages.length).toBeGreaterThan(10)
    expect(packages.filter((name) => !new RegExp(`${name}(?![\\w-])`).test(diagram))).toEqual([])
    const runtime = diagram.slice(diagram.indexOf("@noema/runtime"), diagram.indexOf("@noema/runs"))
    expect(runtime).toContain("think -> plan -> step -> validate -> loop -> finalize -> notify")
    expect(runtime).toContain("PlanAgent")
  })

  it("states the runtime's concepts: triggers, subminds, the bucket and its three priorities", () => {
    const runtime = section("The runtime, in plain words")
    for (const concept of [
      "receiveTrigger",
      "TriggerEvent",
      "submind",
      "bucket",
      "RuntimeBuilder",
      "usePlanAgent"
    ]) {
      expect(runtime).toContain(concept)
    }
    expect(runtime).toMatch(/`Interruption` before `ForNextTurn` before `InTheEnd`/)
  })
})
