import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import * as Resource from "../src/Resource.js"
import * as ResourceStore from "../src/ResourceStore.js"

const conversation = Resource.make("conversation", { name: "trip" })
const task = Resource.make("task", {
  name: "1. Step",
  parent: conversation.meta.urn,
  status: "pending",
  purpose: "find the facts",
  position: 1,
  assignment: {
    assistant: "cld:assistant.writer",
    score: 0.5,
    candidates: [{ assistant: "cld:assistant.writer", score: 0.5 }],
    by: "similarity"
  }
})

/** What the check gave before it copied plain data itself: the JSON round trip, then the Schema. */
const asJsonWould = (input: unknown): { readonly stored: unknown } | { readonly refused: string } => {
  try {
    return { stored: Resource.decode(JSON.parse(JSON.stringify(input))) }
  } catch (error) {
    return { refused: (error as Error).message }
  }
}

const checked = (input: unknown): { readonly stored: unknown } | { readonly refused: string } => {
  const exit = Effect.runSyncExit(ResourceStore.checkResource(input as Resource.Resource))
  return Exit.isSuccess(exit)
    ? { stored: exit.value }
    : {
        refused: Exit.findErrorOption(exit).pipe((found) =>
          found._tag === "Some" ? found.value.message : ""
        )
      }
}

const withOwnProto = (value: object, proto: unknown) => {
  const out = { ...value }
  Object.defineProperty(out, "__proto__", {
    value: proto,
    enumerable: true,
    writable: true,
    configurable: true
  })
  return out
}

const cyclic = (): unknown => {
  const loop: Record<string, unknown> = {}
  loop.self = loop
  return { ...task, extra: loop }
}

/** A list whose first item is a hole. */
const holey = (second: unknown): Array<unknown> => {
  const list = new Array<unknown>(2)
  list[1] = second
  return list
}

const { status: _status, ...withoutStatus } = task

/** Odd inputs a caller may hand a store (JavaScript values that JSON writes its own way). */
const odd: ReadonlyArray<readonly [string, unknown]> = [
  ["plain", task],
  ["frozen, as a store hands it out", Object.freeze({ ...task, meta: Object.freeze({ ...task.meta }) })],
  ["an optional field set to undefined", { ...task, reason: undefined }],
  ["a Date where a string goes", { ...task, completedAt: new Date(Date.UTC(2026, 0, 2)) }],
  ["an invalid Date", { ...task, completedAt: new Date(Number.NaN) }],
  ["NaN where a number goes", { ...task, position: Number.NaN }],
  ["Infinity where a number goes", { ...task, position: Number.POSITIVE_INFINITY }],
  ["-0", { ...task, position: -0 }],
  ["a boxed string", { ...task, output: new String("boxed") }],
  ["a toJSON", { ...task, input: { toJSON: () => "from toJSON" } }],
  [
    "a list with a toJSON",
    { ...task, assignment: { ...task.assignment, candidates: Object.assign([], { toJSON: () => "none" }) } }
  ],
  [
    "a hole in a list",
    { ...task, assignment: { ...task.assignment, candidates: holey(task.assignment?.candidates[0]) } }
  ],
  ["undefined in a list", { ...task, assignment: { ...task.assignment, candidates: [undefined] } }],
  ["a function field", { ...task, extra: () => 1 }],
  ["a class instance field", { ...task, extra: new Map([["a", 1]]) }],
  ["an own __proto__ field", withOwnProto(withoutStatus, { status: "done" })],
  ["a null-prototype object", Object.assign(Object.create(null), task)],
  ["a bigint", { ...task, extra: 1n }],
  ["a cycle", cyclic()],
  ["not an object", "task"],
  ["null", null]
]

describe("ResourceStore.checkResource", () => {
  for (const [name, input] of odd)
    it(`keeps a resource as its JSON would be read back: ${name}`, () => {
      expect(checked(input)).toEqual(asJsonWould(input))
    })

  it("hands back a copy: changing the input afterwards changes nothing stored", () => {
    const input = {
      ...task,
      assignment: { ...task.assignment!, candidates: [...task.assignment!.candidates] }
    }
    const result = checked(input)
    input.assignment.candidates.push({ assistant: "cld:assistant.other", score: 1 })
    expect(result).toEqual(asJsonWould(task))
  })
})
