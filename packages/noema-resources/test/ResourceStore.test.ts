import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import * as MemoryResourceStore from "../src/MemoryResourceStore.js"
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

describe("a put of Resource.make's own resource (no second copy or decode)", () => {
  const assistant = Resource.make("assistant", {
    name: "writer",
    purpose: "writes",
    tools: ["search"],
    examples: ["write a letter"]
  })
  const message = Resource.make("message", { name: "hello", role: "user", content: "hi" })

  /** A resource as JSON (field order too), its `created` (the clock's) left as a mark in its place. */
  const asJson = (resource: unknown) => JSON.stringify(resource).replace(/"created":"[^"]*"/, '"created":"…"')
  /** The put's result and what the store then gives, as JSON. */
  const putAndRead = (resource: unknown) => {
    const store = MemoryResourceStore.make()
    const exit = Effect.runSyncExit(
      Effect.gen(function* () {
        yield* store.put(conversation)
        const stored = yield* store.put(resource as Resource.Resource)
        return [stored, yield* store.get(stored.meta.urn)] as const
      })
    )
    return Exit.isSuccess(exit)
      ? { stored: asJson(exit.value[0]), read: asJson(exit.value[1]), value: exit.value[1] }
      : {
          refused: String(
            Exit.findErrorOption(exit).pipe((found) => (found._tag === "Some" ? found.value.message : ""))
          )
        }
  }
  /** The same resource, not made by `Resource.make` (its JSON copy), goes through the whole check. */
  const plainOf = (resource: unknown) => JSON.parse(JSON.stringify(resource)) as unknown

  it("stores what a put of the same resource not made by make stores, fields in the same order", () => {
    for (const resource of [task, assistant, message]) {
      const made = putAndRead(resource)
      const plain = putAndRead(plainOf(resource))
      expect("stored" in made && made.stored).toEqual("stored" in plain && plain.stored)
      expect("read" in made && made.read).toEqual("read" in plain && plain.read)
    }
  })

  it("is frozen all the way down, and the put completes a copy, not it", () => {
    expect(Object.isFrozen(task) && Object.isFrozen(task.meta) && Object.isFrozen(task.assignment)).toBe(true)
    expect(Object.isFrozen(task.assignment?.candidates[0])).toBe(true)
    const result = putAndRead(task)
    expect("stored" in result).toBe(true)
    expect(task.meta.tokens).toBeUndefined()
    expect(task.meta.created).toBeUndefined()
  })

  it("leaves a tool's parameters (the caller's own object) unfrozen", () => {
    const parameters = { type: "object" }
    const tool = Resource.make("tool", { name: "lookup", parameters })
    expect(tool.parameters).toBe(parameters)
    expect(Object.isFrozen(parameters)).toBe(false)
  })

  it("checks what JSON would change as before: NaN and Infinity refused, -0 stored as 0", () => {
    for (const position of [Number.NaN, Number.POSITIVE_INFINITY]) {
      const made = Resource.make("task", {
        name: "odd",
        parent: conversation.meta.urn,
        status: "pending",
        position
      })
      const result = putAndRead(made)
      expect("refused" in result).toBe(true)
      expect(result).toEqual(putAndRead(plainOf({ ...made })))
    }
    const negativeZero = Resource.make("task", {
      name: "zero",
      parent: conversation.meta.urn,
      status: "pending",
      position: -0
    })
    const stored = putAndRead(negativeZero)
    expect("value" in stored && Object.is((stored.value as Resource.Task).position, 0)).toBe(true)
  })
})

describe("a put of a spread of a stored resource (only what changed is checked)", () => {
  /** Puts the conversation and the task, then what `change` makes of the stored task. */
  const putChanged = (change: (stored: Resource.Task) => unknown, plain: boolean) => {
    const store = MemoryResourceStore.make()
    const exit = Effect.runSyncExit(
      Effect.gen(function* () {
        yield* store.put(conversation)
        const stored = (yield* store.put(task)) as Resource.Task
        const changed = change(stored)
        // `plain`: the same change as a JSON copy, which no store has seen: the whole check.
        const input = plain ? Object.assign(JSON.parse(JSON.stringify(changed ?? null)) ?? {}, {}) : changed
        const put = yield* store.put(input as Resource.Resource)
        return JSON.stringify(yield* store.get(put.meta.urn)).replace(/"created":"[^"]*"/, '"created":"…"')
      })
    )
    return Exit.isSuccess(exit)
      ? { stored: exit.value }
      : {
          refused: String(
            Exit.findErrorOption(exit).pipe((found) => (found._tag === "Some" ? found.value.message : ""))
          )
        }
  }

  const changes: ReadonlyArray<readonly [string, (stored: Resource.Task) => unknown]> = [
    ["a new status", (stored) => ({ ...stored, status: "running" })],
    [
      "a new field, stored in the kind's order",
      (stored) => ({ ...stored, status: "done", output: "the facts" })
    ],
    ["a new assignment", (stored) => ({ ...stored, assignment: { ...stored.assignment, score: 0.75 } })],
    [
      "an optional field taken away",
      (stored) => {
        const { purpose: _purpose, ...rest } = stored
        return rest
      }
    ],
    [
      "a required field taken away",
      (stored) => {
        const { status: _status, ...rest } = stored
        return rest
      }
    ],
    ["a field the kind does not have", (stored) => ({ ...stored, extra: "dropped" })],
    ["a value the Schema refuses", (stored) => ({ ...stored, status: "lost" })],
    ["a number JSON would not keep", (stored) => ({ ...stored, position: Number.NaN })],
    ["-0", (stored) => ({ ...stored, position: -0 })],
    ["a Date where a string goes", (stored) => ({ ...stored, completedAt: new Date(Date.UTC(2026, 0, 2)) })],
    ["undefined where an optional string goes", (stored) => ({ ...stored, reason: undefined })],
    ["nothing changed", (stored) => ({ ...stored })]
  ]

  for (const [name, change] of changes)
    it(`stores or refuses as the whole check does: ${name}`, () => {
      expect(putChanged(change, false)).toEqual(putChanged(change, true))
    })

  it("takes the changed field's copy, not the caller's object", () => {
    const store = MemoryResourceStore.make()
    const assignment = { assistant: "cld:assistant.other", score: 1, candidates: [], by: "default" as const }
    const stored = Effect.runSync(
      Effect.gen(function* () {
        yield* store.put(conversation)
        const first = (yield* store.put(task)) as Resource.Task
        return yield* store.put({ ...first, assignment })
      })
    ) as Resource.Task
    expect(stored.assignment).toEqual(assignment)
    expect(stored.assignment).not.toBe(assignment)
    expect(Object.isFrozen(assignment)).toBe(false)
  })
})
