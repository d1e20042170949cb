import { describe, expect, it } from "vitest"
import * as Urn from "../src/Urn.js"

const deep = "cld:conversation.c1/message.m2/plan.task.t3/plan.task.t4"

describe("Urn", () => {
  it("parses and formats round trip, namespaced types split at the last dot", () => {
    const parsed = Urn.parse(deep)
    expect(parsed.elements).toEqual([
      { type: "conversation", id: "c1" },
      { type: "message", id: "m2" },
      { type: "plan.task", id: "t3" },
      { type: "plan.task", id: "t4" }
    ])
    expect(Urn.format(parsed)).toBe(deep)
  })

  it("gives parent, ancestors, type and descendant prefix", () => {
    expect(Urn.parent(deep)).toBe("cld:conversation.c1/message.m2/plan.task.t3")
    expect(Urn.parent("cld:conversation.c1")).toBeUndefined()
    expect(Urn.ancestors(deep)).toEqual([
      "cld:conversation.c1",
      "cld:conversation.c1/message.m2",
      "cld:conversation.c1/message.m2/plan.task.t3"
    ])
    expect(Urn.typeOf(deep)).toBe("plan.task")
    expect(Urn.descendantPrefix("cld:conversation.c1")).toBe("cld:conversation.c1/")
    expect(Urn.isDescendant(deep, "cld:conversation.c1")).toBe(true)
    expect(Urn.isDescendant("cld:conversation.c10/message.m", "cld:conversation.c1")).toBe(false)
    expect(Urn.isDescendant("cld:conversation.c1", "cld:conversation.c1")).toBe(false)
    expect(Urn.child("cld:conversation.c1", "message", "m9")).toBe("cld:conversation.c1/message.m9")
  })

  it("takes a URN of 32 elements and 1,024 characters, and makes none bigger", () => {
    const deepest = `cld:${Array.from({ length: 32 }, (_, i) => `task.t${i}`).join("/")}`
    expect(Urn.isValid(deepest)).toBe(true)
    expect(Urn.isValid(`cld:chunk.${"x".repeat(1024 - 10)}`)).toBe(true)
    expect(() => Urn.child(deepest, "task", "one-more")).toThrow(/has 33 elements, at most 32/)
  })

  it.each([
    ["", /must start with "cld:"/],
    ["urn:conversation.c1", /must start with "cld:"/],
    ["cld:", /has no path/],
    ["cld:conversation", /must be <type>\.<id>/],
    ["cld:.c1", /must be <type>\.<id>/],
    ["cld:conversation.c1/", /empty path element/],
    ["cld:conversation.c1//message.m", /empty path element/],
    ["cld:conversation.c 1", /id "c 1"/],
    ["cld:1conv.c1", /type "1conv"/],
    ["cld:conversation.", /id ""/],
    ["cld:a.b/../c.d", /must be <type>\.<id>|type/],
    [`cld:${Array.from({ length: 33 }, (_, i) => `task.t${i}`).join("/")}`, /has 33 elements, at most 32/],
    [`cld:chunk.${"x".repeat(1020)}`, /has 1030 characters, at most 1024/]
  ])("refuses %j with a clear error", (urn, reason) => {
    expect(Urn.isValid(urn)).toBe(false)
    try {
      Urn.parse(urn)
      expect.unreachable()
    } catch (error) {
      expect(error).toBeInstanceOf(Urn.InvalidUrnError)
      expect((error as Urn.InvalidUrnError).message).toMatch(/^invalid URN/)
      expect((error as Urn.InvalidUrnError).message).toMatch(reason)
    }
  })

  it("parses a URN once: the parse is shared and frozen, so no caller can change what the next one gets", () => {
    const urn = "cld:conversation.shared/message.m1"
    const first = Urn.parse(urn)
    expect(Urn.parse(urn)).toBe(first)
    expect(() => (first.elements as Array<Urn.Element>).push({ type: "task", id: "t" })).toThrow()
    expect(() => {
      ;(first.elements[0] as { id: string }).id = "other"
    }).toThrow()
    expect(Urn.format(Urn.parse(urn))).toBe(urn)
    expect(Urn.check(urn)).toBe(urn)
  })

  it("refuses a bad URN every time it is asked (what does not parse is not remembered)", () => {
    expect(Urn.isValid("cld:conversation.c 1")).toBe(false)
    expect(() => Urn.parse("cld:conversation.c 1")).toThrow(/id "c 1"/)
    expect(() => Urn.check("cld:conversation.c 1")).toThrow(/id "c 1"/)
  })

  it("builds a child from a parent's own spelling, checking the new element and the bounds", () => {
    expect(Urn.child(undefined, "conversation", "c1")).toBe("cld:conversation.c1")
    expect(() => Urn.child("cld:conversation.c1", "message", "m 2")).toThrow(/id "m 2"/)
    expect(() => Urn.child("cld:bad", "message", "m2")).toThrow(/must be <type>\.<id>/)
    expect(() => Urn.child(`cld:chunk.${"x".repeat(1010)}`, "message", "m2")).toThrow(/at most 1024/)
  })

  it("builds a child already known only from its own type and id", () => {
    // Known and valid, but not the child of "cld:a.x" of type "b.y/c": that type holds a "/".
    const known = Urn.child(Urn.child("cld:a.x", "b", "y"), "c", "z")
    expect(known).toBe("cld:a.x/b.y/c.z")
    expect(() => Urn.child("cld:a.x", "b.y/c", "z")).toThrow(/type "b\.y\/c"/)
    // Nor a root of a type that spells the whole path.
    expect(() => Urn.child(undefined, "a.x/b.y/c", "z")).toThrow(/type "a\.x\/b\.y\/c"/)
    expect(Urn.parse(known).elements).toEqual([
      { type: "a", id: "x" },
      { type: "b", id: "y" },
      { type: "c", id: "z" }
    ])
  })

  it("tells whether a URN is a given child without building it", () => {
    const urn = Urn.child("cld:a.x", "plan.task", "t1")
    expect(Urn.isChildOf(urn, "cld:a.x", "plan.task", "t1")).toBe(true)
    expect(Urn.isChildOf(urn, "cld:a.y", "plan.task", "t1")).toBe(false)
    expect(Urn.isChildOf(urn, "cld:a.x", "task", "t1")).toBe(false)
    expect(Urn.isChildOf(urn, "cld:a.x", "plan.task", "t2")).toBe(false)
    expect(Urn.isChildOf(urn, undefined, "plan.task", "t1")).toBe(false)
    // Its last element, under a parent that only starts the same.
    expect(Urn.isChildOf("cld:ab.x/c.z", "cld:a", "c", "z")).toBe(false)
    expect(Urn.isChildOf(Urn.child(undefined, "a", "x"), undefined, "a", "x")).toBe(true)
  })
})
