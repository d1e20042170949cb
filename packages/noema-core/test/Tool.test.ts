import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import { Message, Tool } from "../src/index.js"

class DivideByZero extends Schema.TaggedError<DivideByZero>()("DivideByZero", { message: Schema.String }) {}

const divide = Tool.make({
  name: "divide",
  description: "Divides a by b",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) =>
    b === 0 ? Effect.fail(new DivideByZero({ message: "b must not be 0" })) : Effect.succeed(a / b)
})

const call = (args: string, name = "divide"): Message.ToolCall => ({ id: "c1", name, arguments: args })

describe("Tool", () => {
  it("derives the JSON Schema the model sees", () => {
    const parameters = divide.definition.parameters as {
      type: string
      properties: object
      required: Array<string>
    }
    assert.strictEqual(divide.definition.name, "divide")
    assert.strictEqual(parameters.type, "object")
    assert.deepStrictEqual(Object.keys(parameters.properties), ["a", "b"])
    assert.deepStrictEqual(parameters.required, ["a", "b"])
  })

  it.effect(
    "reads arguments as the JSON Schema it sent describes them: null for an optional field is absent",
    () =>
      Effect.gen(function* () {
        const search = Tool.make({
          name: "search",
          description: "Searches",
          parameters: Schema.Struct({ query: Schema.String, limit: Schema.optional(Schema.Number) }),
          handler: ({ query, limit }) => Effect.succeed(`${query}:${limit ?? "all"}`)
        })
        // What the model is told it may send for the optional field.
        const limit = (
          search.definition.parameters as { properties: { limit: { anyOf: Array<{ type: string }> } } }
        ).properties.limit
        assert.isTrue(limit.anyOf.some((branch) => branch.type === "null"))
        const message = yield* Tool.call(search, {
          id: "c1",
          name: "search",
          arguments: '{"query":"q","limit":null}'
        })
        assert.isFalse(message.isError)
        assert.strictEqual(message.content, "q:all")
        const approval = Tool.withApproval(search, ({ limit }) => limit === undefined)
        assert.isTrue(
          Tool.requiresApproval(approval, {
            id: "c2",
            name: "search",
            arguments: '{"query":"q","limit":null}'
          })
        )
        const wrong = yield* Tool.call(search, { id: "c3", name: "search", arguments: '{"query":null}' })
        assert.isTrue(wrong.isError, "null is absent only where absence is allowed")
      })
  )

  it.effect("runs a valid call", () =>
    Effect.gen(function* () {
      const message = yield* Tool.call(divide, call('{"a":6,"b":3}'))
      assert.deepStrictEqual(message, Message.toolResult({ toolCallId: "c1", name: "divide", content: "2" }))
    })
  )

  it.effect("turns bad JSON, schema mismatches, failures and defects into error results", () =>
    Effect.gen(function* () {
      const notJson = yield* Tool.call(divide, call("{a: 1"))
      assert.isTrue(notJson.isError)
      assert.match(notJson.content, /not valid JSON/)
      const mismatch = yield* Tool.call(divide, call('{"a":"six","b":3}'))
      assert.isTrue(mismatch.isError)
      assert.match(mismatch.content, /Invalid arguments for tool "divide"/)
      assert.match(mismatch.content, /a/)
      const missing = yield* Tool.call(divide, call(""))
      assert.isTrue(missing.isError)
      assert.match(missing.content, /b/)
      const failure = yield* Tool.call(divide, call('{"a":1,"b":0}'))
      assert.deepStrictEqual(
        failure,
        Message.toolResult({
          toolCallId: "c1",
          name: "divide",
          content: 'Tool "divide" failed: b must not be 0',
          isError: true
        })
      )
      const crashing = Tool.make({
        name: "crash",
        description: "throws",
        parameters: Schema.Struct({}),
        handler: () => Effect.sync(() => JSON.parse("{") as unknown)
      })
      const defect = yield* Tool.call(crashing, call("{}", "crash"))
      assert.isTrue(defect.isError)
      assert.match(defect.content, /failed unexpectedly/)
    })
  )

  it.effect("reports unknown tools with the available names", () =>
    Effect.gen(function* () {
      const message = yield* Tool.callIn([divide], call("{}", "multiply"))
      assert.isTrue(message.isError)
      assert.strictEqual(message.content, 'Unknown tool "multiply". Available tools: divide.')
    })
  )

  it.effect("wraps async functions, passing an abort signal that fires on interruption", () =>
    Effect.gen(function* () {
      let aborted = false
      const started = yield* Deferred.make<void>()
      const slow = Tool.fromAsync({
        name: "slow",
        description: "waits",
        parameters: Schema.Struct({ ms: Schema.Number }),
        execute: ({ ms }, { signal }) =>
          new Promise<string>((resolve) => {
            if (ms > 1_000) Deferred.doneUnsafe(started, Exit.void)
            const timer = setTimeout(() => resolve("done"), ms)
            signal.addEventListener("abort", () => {
              aborted = true
              clearTimeout(timer)
            })
          })
      })
      const fast = yield* Tool.call(slow, call('{"ms":1}', "slow"))
      assert.strictEqual(fast.content, "done")
      const fiber = yield* Effect.forkChild(Tool.call(slow, call('{"ms":60000}', "slow")))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      assert.isTrue(aborted)
      const throwing = Tool.fromAsync({
        name: "throws",
        description: "rejects",
        parameters: Schema.Struct({}),
        execute: async () => {
          throw new Error("disk full")
        }
      })
      const rejected = yield* Tool.call(throwing, call("{}", "throws"))
      assert.strictEqual(rejected.content, 'Tool "throws" failed: disk full')
    })
  )

  it("derives a schema's JSON Schema once: tools made again with it share it, frozen", () => {
    const parameters = Schema.Struct({ path: Schema.String, tags: Schema.Array(Schema.String) })
    const first = Tool.make({ name: "a", description: "A.", parameters, handler: () => Effect.succeed("a") })
    const again = Tool.make({ name: "b", description: "B.", parameters, handler: () => Effect.succeed("b") })
    assert.strictEqual(again.definition.parameters, first.definition.parameters)
    assert.deepStrictEqual(first.definition.parameters, Tool.jsonSchema(parameters))
    const properties = first.definition.parameters.properties as Record<string, unknown>
    assert.isTrue(Object.isFrozen(first.definition.parameters) && Object.isFrozen(properties.tags))
    assert.throws(() => {
      ;(properties as { path?: unknown }).path = {}
    })
  })

  it("rejects invalid tool names", () => {
    assert.throws(
      () =>
        Tool.make({
          name: "has space",
          description: "",
          parameters: Schema.Struct({}),
          handler: () => Effect.void
        }),
      /Invalid tool name/
    )
  })

  it("carries annotations, and says which calls may be interrupted", () => {
    const make = (annotations?: Tool.Annotations) =>
      Tool.make({
        name: "t",
        description: "",
        parameters: Schema.Struct({}),
        handler: () => Effect.void,
        ...(annotations !== undefined && { annotations })
      })
    const readOnly = make({ readOnly: true })
    const idempotent = make({ idempotent: true, destructive: true })
    const destructive = make({ destructive: true })
    const unknown = make()
    assert.deepStrictEqual(readOnly.annotations, { readOnly: true })
    assert.deepStrictEqual(unknown.annotations, {})
    assert.isTrue(Tool.isReadOnly(readOnly))
    assert.isFalse(Tool.isReadOnly(idempotent))
    assert.deepStrictEqual([readOnly, idempotent, destructive, unknown].map(Tool.isInterruptible), [
      true,
      true,
      false,
      false
    ])
    // The tool's annotations cannot be changed behind the author's back.
    assert.isTrue(Object.isFrozen(readOnly.annotations))
    const fromAsync = Tool.fromAsync({
      name: "a",
      description: "",
      parameters: Schema.Struct({}),
      execute: async () => "",
      annotations: { readOnly: true }
    })
    assert.isTrue(Tool.isInterruptible(fromAsync))
  })
  describe("fromJsonSchema", () => {
    const schema = {
      type: "object",
      properties: { city: { type: "string", description: "A city" } },
      required: ["city"]
    }
    const weather = Tool.fromJsonSchema({
      name: "weather",
      description: "The weather in a city",
      parameters: schema,
      annotations: { readOnly: true },
      handler: (args) => Effect.succeed(`sunny in ${String(args.city)}`)
    })

    it("shows the model the JSON Schema as given", () => {
      assert.deepStrictEqual(weather.definition.parameters, schema)
      assert.strictEqual(weather.definition.description, "The weather in a city")
      assert.isTrue(Tool.isReadOnly(weather))
    })

    it.effect("passes a JSON object to the handler", () =>
      Effect.gen(function* () {
        const result = yield* Tool.call(weather, { id: "c1", name: "weather", arguments: '{"city":"Oslo"}' })
        assert.strictEqual(result.content, "sunny in Oslo")
        assert.isFalse(result.isError)
      })
    )

    it.effect("rejects arguments that are not a JSON object", () =>
      Effect.gen(function* () {
        const result = yield* Tool.call(weather, { id: "c1", name: "weather", arguments: "[1,2]" })
        assert.isTrue(result.isError)
        assert.match(result.content, /Invalid arguments for tool "weather"/)
      })
    )
  })
})
