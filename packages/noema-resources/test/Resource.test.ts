import { assert, describe, expect, it } from "vitest"
import * as Resource from "../src/Resource.js"

describe("Resource", () => {
  it("meta: deterministic hash of parent + type + name, URN from parent + type + hash", () => {
    const a = Resource.makeMeta({ name: "trip", type: "conversation" })
    const b = Resource.makeMeta({ name: "trip", type: "conversation" })
    expect(a).toEqual(b)
    expect(a.hash).toMatch(/^[0-9a-f]{16}$/)
    expect(a.urn).toBe(`cld:conversation.${a.hash}`)
    expect(Resource.makeMeta({ name: "trip2", type: "conversation" }).hash).not.toBe(a.hash)
    expect(Resource.makeMeta({ name: "trip", type: "task" }).hash).not.toBe(a.hash)
    const child = Resource.makeMeta({ name: "trip", type: "message", parent: a.urn, tokens: 12 })
    expect(child.parent).toBe(a.urn)
    expect(child.urn).toBe(`${a.urn}/message.${child.hash}`)
    expect(child.tokens).toBe(12)
    expect(
      Resource.makeMeta({ name: "trip", type: "message", parent: "cld:conversation.other" }).hash
    ).not.toBe(child.hash)
    expect(() => Resource.makeMeta({ name: "x", type: "message", parent: "bad" })).toThrow(
      /invalid URN "bad"/
    )
  })

  it("compiles the four descriptive fields into one structured description", () => {
    const assistant = Resource.make("assistant", {
      name: "planner",
      purpose: "Plan work",
      instructions: "Split into tasks",
      applicability: "Multi-step requests",
      evaluation: "Every task is actionable"
    })
    expect(Resource.describe(assistant)).toBe(
      "**Purpose:** Plan work\n\n**Instructions:** Split into tasks\n\n**Applicability:** Multi-step requests\n\n**Evaluation:** Every task is actionable"
    )
    expect(Resource.describe({ purpose: "only" })).toBe("**Purpose:** only")
    expect(Resource.describe({})).toBe("")
  })

  it("rebuilds a stored resource as its own kind from meta.type", () => {
    const kinds = [
      Resource.make("conversation", { name: "c", title: "t" }),
      Resource.make("message", { name: "m", role: "user", content: "hi" }),
      Resource.make("task", { name: "t", status: "running" }),
      Resource.make("assistant", { name: "a", model: "gpt", tools: ["search"] }),
      Resource.make("chunk", { name: "k", text: "some text", source: "file.md" }),
      Resource.make("tool", { name: "search", parameters: { type: "object" } })
    ]
    for (const resource of kinds) {
      const rebuilt = Resource.decode(JSON.parse(JSON.stringify(resource)))
      expect(rebuilt).toEqual(resource)
      expect(rebuilt.meta.type).toBe(resource.meta.type)
    }
  })

  it("refuses unknown types, schema mismatches and URNs that do not match the meta", () => {
    const message = Resource.make("message", { name: "m", role: "user", content: "hi" })
    expect(() => Resource.decode({ meta: { ...message.meta, type: "widget" } })).toThrow(
      /unknown resource type "widget"/
    )
    expect(() => Resource.decode({ nometa: true })).toThrow(/meta.type is missing/)
    expect(() => Resource.decode({ ...message, role: "robot" })).toThrow(Resource.ResourceDecodeError)
    expect(() => Resource.decode({ ...message, content: undefined })).toThrow(/resource cld:message/)
    expect(() =>
      Resource.decode({ ...message, meta: { ...message.meta, urn: "cld:message.other" } })
    ).toThrow(/URN does not match/)
    expect(() => Resource.decode({ ...message, meta: { ...message.meta, urn: "not a urn" } })).toThrow(
      Resource.ResourceDecodeError
    )
  })
})

describe("Resource.treeOrder", () => {
  it("depth-first, each after its parent; siblings by position, then first stored, then URN", () => {
    const message = Resource.make("message", { name: "m", role: "user", content: "plan this" })
    const task = (name: string, position: number, parent = message.meta.urn) =>
      Resource.make("task", { name, parent, status: "pending", position })
    // URN order is the hashes', not the plan's: they are put in shuffled.
    const [first, second, third] = [task("first", 1), task("second", 2), task("third", 3)]
    const [sub1, sub2] = [task("sub one", 1, first!.meta.urn), task("sub two", 2, first!.meta.urn)]
    const stamped = (resource: Resource.Resource, created: string) =>
      ({ ...resource, meta: { ...resource.meta, created } }) as Resource.Resource
    const later = stamped(
      Resource.make("chunk", { name: "later", parent: message.meta.urn, text: "b" }),
      "2026-02-01T00:00:00.000Z"
    )
    const earlier = stamped(
      Resource.make("chunk", { name: "earlier", parent: message.meta.urn, text: "a" }),
      "2026-01-01T00:00:00.000Z"
    )
    const shuffled = [third!, sub2!, later, message, second!, earlier, sub1!, first!]
    assert.deepStrictEqual(
      Resource.treeOrder(shuffled).map((resource) => resource.meta.name),
      ["m", "first", "sub one", "sub two", "second", "third", "earlier", "later"]
    )
    // Without the message, its tasks start trees of their own, still in order.
    assert.deepStrictEqual(
      Resource.treeOrder([third!, second!, first!]).map((resource) => resource.meta.name),
      ["first", "second", "third"]
    )
  })
})
