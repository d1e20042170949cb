import { assert, describe, it } from "@effect/vitest"
import { ConversationContext, Message } from "../src/index.js"

const numbered = (count: number) => Array.from({ length: count }, (_, i) => Message.user(`m${i}`))

/** An array whose element reads are counted (to prove views don't touch the whole history). */
const countingArray = (messages: Array<Message.Message>) => {
  const counter = { reads: 0 }
  const proxy = new Proxy(messages, {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) counter.reads++
      return Reflect.get(target, key, receiver)
    }
  })
  return { proxy, counter }
}

const contents = (context: Iterable<Message.Message>) => Array.from(context, (message) => message.content)

describe("ConversationContext", () => {
  it("problems: every tool result right after its call, every call answered", () => {
    const call = (id: string) => ({ id, name: "t", arguments: "{}" })
    const result = (id: string) => Message.toolResult({ toolCallId: id, name: "t", content: "ok" })
    const asking = Message.assistant("", { toolCalls: [call("a"), call("b")] })
    assert.deepStrictEqual(
      ConversationContext.problems([Message.user("u"), asking, result("b"), result("a")]),
      []
    )
    assert.deepStrictEqual(ConversationContext.problems([Message.user("u"), asking, result("a")]), [
      "the end: calls b have no result"
    ])
    assert.deepStrictEqual(
      ConversationContext.problems([asking, result("a"), Message.user("u"), result("b")]),
      ["message 2: calls b have no result before it", "message 3: the result of b does not follow its call"]
    )
  })

  it("skip drops the first messages, stays live, and reads only what it shows", () => {
    const { proxy, counter } = countingArray(numbered(1_000_000))
    const skipped = ConversationContext.fromArray(proxy).skip(999_998)
    assert.strictEqual(skipped.length, 2)
    assert.isTrue(skipped.indexed)
    assert.deepStrictEqual(contents(skipped), ["m999998", "m999999"])
    assert.strictEqual(skipped.at(-1)?.content, "m999999")
    assert.isUndefined(skipped.at(2))
    assert.isBelow(counter.reads, 10)
    proxy.push(Message.user("late"))
    assert.deepStrictEqual(contents(skipped), ["m999998", "m999999", "late"])
    // Over a filter (not indexed), and past the end.
    const filtered = ConversationContext.fromArray(numbered(6)).filter((message) => message.content !== "m1")
    assert.deepStrictEqual(contents(ConversationContext.skip(filtered, 2)), ["m3", "m4", "m5"])
    assert.isTrue(ConversationContext.fromArray(numbered(2)).skip(5).isEmpty)
    assert.throws(() => ConversationContext.fromArray([]).skip(-1), RangeError)
  })

  it("wraps an array without copying and reflects later changes", () => {
    const messages = numbered(3)
    const context = ConversationContext.fromArray(messages)
    assert.strictEqual(context.length, 3)
    assert.isFalse(context.isEmpty)
    messages.push(Message.user("late"))
    assert.strictEqual(context.length, 4)
    assert.strictEqual(context.last?.content, "late")
    assert.strictEqual(context.at(-2)?.content, "m2")
    assert.isUndefined(context.at(4))
    assert.isTrue(ConversationContext.empty.isEmpty)
  })

  it("a window over a million messages reads only the messages it keeps", () => {
    const { proxy, counter } = countingArray(numbered(1_000_000))
    const window = ConversationContext.fromArray(proxy).window(50)
    assert.strictEqual(counter.reads, 0, "building a view reads nothing")
    assert.strictEqual(window.length, 50)
    const seen = contents(window)
    assert.strictEqual(seen.length, 50)
    assert.strictEqual(seen[0], "m999950")
    assert.strictEqual(seen[49], "m999999")
    assert.strictEqual(counter.reads, 50)
    assert.strictEqual(window.at(0)?.content, "m999950")
    assert.strictEqual(counter.reads, 51)
  })

  it("windows shorter histories whole and rejects bad sizes", () => {
    const context = ConversationContext.of(...numbered(3))
    assert.deepStrictEqual(contents(context.window(10)), ["m0", "m1", "m2"])
    assert.deepStrictEqual(contents(ConversationContext.window(context, 0)), [])
    assert.deepStrictEqual(contents(context.window(2)), ["m1", "m2"])
    assert.throws(() => context.window(-1), RangeError)
  })

  it("filters lazily, including without system messages", () => {
    const messages = [
      Message.system("sys"),
      Message.user("a"),
      Message.assistant("b"),
      Message.system("sys2")
    ]
    const { proxy, counter } = countingArray(messages)
    const filtered = ConversationContext.withoutSystem(ConversationContext.fromArray(proxy))
    assert.strictEqual(counter.reads, 0)
    assert.deepStrictEqual(contents(filtered), ["a", "b"])
    assert.strictEqual(filtered.length, 2)
    assert.strictEqual(filtered.at(1)?.content, "b")
    assert.strictEqual(filtered.last?.content, "b")
    assert.deepStrictEqual(contents(filtered.window(1)), ["b"])
    assert.isFalse(filtered.indexed)
  })

  it("composes system prompt, history and pending without copying", () => {
    const history = numbered(1_000)
    const pending: Array<Message.Message> = []
    const { proxy, counter } = countingArray(history)
    const context = ConversationContext.compose({ system: "be brief", history: proxy, pending })
    assert.strictEqual(counter.reads, 0)
    assert.strictEqual(context.length, 1_001)
    pending.push(Message.user("new"))
    assert.strictEqual(context.length, 1_002)
    assert.strictEqual(context.at(0)?.role, "system")
    assert.strictEqual(context.last?.content, "new")
    assert.strictEqual(context.at(500)?.content, "m499")
    assert.strictEqual(counter.reads, 1)
    assert.deepStrictEqual(contents(context.window(2)), ["m999", "new"])
  })

  it("concatenations flatten and stay indexed", () => {
    const a = ConversationContext.of(Message.user("a"))
    const b = ConversationContext.of(Message.user("b"))
    const nested = a.concat(b).concat([Message.user("c")])
    assert.deepStrictEqual(contents(nested), ["a", "b", "c"])
    assert.isTrue(nested.indexed)
    assert.strictEqual(nested.at(-1)?.content, "c")
    assert.deepStrictEqual(contents(ConversationContext.concat()), [])
    assert.strictEqual(ConversationContext.lastOfRole(nested, "user")?.content, "c")
  })

  it("exposes no way to mutate", () => {
    const context = ConversationContext.of(Message.user("x")) as unknown as Record<string, unknown>
    for (const method of ["push", "pop", "splice", "shift", "unshift", "set", "add"]) {
      assert.isUndefined(context[method], method)
    }
  })

  it("exposes no array and no underlying view through any view's public surface", () => {
    const history = numbered(3)
    const pending = [Message.assistant("pending")]
    const base = ConversationContext.fromArray(history)
    const views = {
      array: base,
      window: base.window(2),
      filter: ConversationContext.withoutSystem(base),
      concat: ConversationContext.concat(base, pending),
      composed: ConversationContext.compose({ system: "sys", history: base, pending }),
      nested: ConversationContext.compose({ history: base.window(2).filter(() => true), pending })
    }
    for (const [kind, view] of Object.entries(views)) {
      // Everything reachable from the view's own properties, as a caller (or `any`) would reach it.
      const reached: Array<unknown> = []
      const walk = (value: unknown, depth: number) => {
        if (typeof value !== "object" || value === null || depth > 4) return
        for (const key of Reflect.ownKeys(value)) {
          const child = (value as Record<PropertyKey, unknown>)[key]
          reached.push(child)
          walk(child, depth + 1)
        }
      }
      walk(view, 0)
      for (const value of reached) {
        assert.isFalse(Array.isArray(value), `${kind}: an array is reachable`)
        assert.isFalse(ConversationContext.isConversationContext(value), `${kind}: a view is reachable`)
      }
      // What a caller can get is a copy: changing it leaves the view and the history alone.
      const length = view.length
      const copy = view.toArray()
      copy.push(Message.user("injected"))
      assert.strictEqual(view.length, length, kind)
      assert.strictEqual(history.length, 3, kind)
      assert.isUndefined((view as unknown as { messages?: unknown }).messages, kind)
    }
  })
})
