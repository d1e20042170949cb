import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Schema, Stream } from "effect"
import { Message, StructuredOutput } from "../src/index.js"
import { parsePartial } from "../src/internal/partialJson.js"
import { ScriptedChatModel } from "../src/testing.js"

const Person = Schema.Struct({ name: Schema.String, age: Schema.Number, tags: Schema.Array(Schema.String) })
const messages = [Message.user("Who is Ada?")]
const valid = { name: "Ada", age: 36, tags: ["math"] }

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  assert.ok(Exit.isFailure(exit), "expected a failure")
  const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
  assert.ok(error !== undefined && error._tag === "Fail", "a typed failure")
  return error.error
}

describe("partial JSON", () => {
  it("closes open structures and keeps what the prefix decides", () => {
    assert.deepStrictEqual(parsePartial(""), undefined)
    assert.deepStrictEqual(parsePartial('{"na'), {})
    assert.deepStrictEqual(parsePartial('{"name": "Ad'), { name: "Ad" })
    assert.deepStrictEqual(parsePartial('{"name": "Ada", "age": 3'), { name: "Ada", age: 3 })
    assert.deepStrictEqual(parsePartial('{"name": "Ada", "age": -'), { name: "Ada" })
    assert.deepStrictEqual(parsePartial('{"ok": tr'), {})
    assert.deepStrictEqual(parsePartial('{"ok": true, "tags": ["a", "b'), { ok: true, tags: ["a", "b"] })
    assert.deepStrictEqual(parsePartial('{"s": "line\\'), { s: "line" })
    assert.deepStrictEqual(parsePartial('{"s": "\\u00e'), { s: "" })
    assert.deepStrictEqual(parsePartial('[{"a": [1, 2.5e3]}, null'), [{ a: [1, 2500] }, null])
    assert.deepStrictEqual(parsePartial('{"a": 1}'), { a: 1 })
  })

  it("gives nothing for text that cannot start JSON", () => {
    assert.equal(parsePartial("Sure! {"), undefined)
    assert.equal(parsePartial('{"a" 1'), undefined)
  })
})

describe("StructuredOutput.generate", () => {
  it.effect("json-schema mode: sends the schema as a strict response format and decodes the answer", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [JSON.stringify(valid)] })
      const value = yield* StructuredOutput.generate(model, { schema: Person, messages, name: "person" })
      assert.deepStrictEqual(value, valid)
      const sent = model.requests[0]?.request
      assert.equal(sent?.tools, undefined)
      const format = sent?.responseFormat
      assert.ok(format?.type === "json-schema")
      assert.equal(format.name, "person")
      assert.equal(format.strict, true)
      assert.equal(format.schema.additionalProperties, false)
      assert.deepStrictEqual(format.schema.required, ["name", "age", "tags"])
    })
  )

  it.effect("derives the JSON Schema sent once per schema: asked again, the same frozen one is sent", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: [JSON.stringify(valid), JSON.stringify(valid)] })
      yield* StructuredOutput.generate(model, { schema: Person, messages, name: "person" })
      yield* StructuredOutput.generate(model, { schema: Person, messages, name: "again" })
      const [first, again] = model.requests.map((request) => request.request.responseFormat)
      assert.ok(first?.type === "json-schema" && again?.type === "json-schema")
      assert.strictEqual(again.schema, first.schema)
      assert.equal(again.name, "again")
      const properties = first.schema.properties as Record<string, unknown>
      assert.isTrue(Object.isFrozen(first.schema) && Object.isFrozen(properties.tags))
      assert.throws(() => {
        ;(properties as { name?: unknown }).name = {}
      })
    })
  )

  it.effect("an optional property makes the schema non-strict", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ['{"name":"Ada"}'] })
      const schema = Schema.Struct({ name: Schema.String, nick: Schema.optionalKey(Schema.String) })
      assert.deepStrictEqual(yield* StructuredOutput.generate(model, { schema, messages }), { name: "Ada" })
      const format = model.requests[0]?.request.responseFormat
      assert.ok(format?.type === "json-schema")
      assert.equal(format.strict, false)
    })
  )

  it.effect("a schema-following model's null for an optional property is read as absent", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ['{"name":"Ada","nick":null}'] })
      const schema = Schema.Struct({ name: Schema.String, nick: Schema.optional(Schema.String) })
      const value = yield* StructuredOutput.generate(model, { schema, messages })
      assert.strictEqual(value.name, "Ada")
      assert.isUndefined(value.nick)
      assert.strictEqual(model.requests.length, 1, "accepted without a repair round")
    })
  )

  it.effect("invalid output is sent back with the issue and the repaired answer is decoded", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: ['{"name": "Ada", "age": "old"}', JSON.stringify(valid)]
      })
      const result = yield* StructuredOutput.run(model, { schema: Person, messages })
      assert.deepStrictEqual(result.value, valid)
      assert.equal(result.attempts, 2)
      const repair = model.requests[1]?.messages ?? []
      assert.equal(repair.length, 3)
      assert.equal(Message.text(repair[1] as Message.Message), '{"name": "Ada", "age": "old"}')
      assert.equal(repair[2]?.role, "user")
      assert.match(Message.text(repair[2] as Message.Message), /age/)
      // The kept message carries the valid JSON and the usage of both calls.
      assert.equal(Message.text(result.message), JSON.stringify(valid))
      const first = model.requests.length
      assert.equal(first, 2)
      assert.ok((result.message.usage?.inputTokens ?? 0) > 0)
    })
  )

  it.effect("invalid twice fails with a typed error carrying the raw text, the issue and the attempts", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["not json", '{"name": 1}'] })
      const exit = yield* Effect.exit(StructuredOutput.generate(model, { schema: Person, messages }))
      const error = failureOf(exit)
      assert.ok(error instanceof StructuredOutput.StructuredOutputError)
      assert.equal(error.reason, "schema-mismatch")
      assert.equal(error.text, '{"name": 1}')
      assert.equal(error.attempts, 2)
      assert.match(error.issue, /Expected string/)
      assert.ok(!error.message.includes("\n"), "one line")
      assert.equal(model.requests.length, 2)
    })
  )

  it.effect("maxRepairs 0 fails on the first invalid answer; a refusal is not repaired", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["nope", { refusal: "I cannot help with that" }] })
      const first = failureOf(
        yield* Effect.exit(StructuredOutput.generate(model, { schema: Person, messages, maxRepairs: 0 }))
      )
      assert.ok(first instanceof StructuredOutput.StructuredOutputError)
      assert.equal(first.reason, "invalid-json")
      assert.equal(first.attempts, 1)
      const second = failureOf(
        yield* Effect.exit(StructuredOutput.generate(model, { schema: Person, messages }))
      )
      assert.ok(second instanceof StructuredOutput.StructuredOutputError)
      assert.equal(second.reason, "refused")
      assert.equal(model.requests.length, 2)
    })
  )

  it.effect("tool mode forces one tool, reads its arguments, and repairs through a tool result", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          { toolCalls: [{ name: "person", arguments: '{"name": "Ada"}' }] },
          { toolCalls: [{ name: "person", arguments: valid }] }
        ]
      })
      const result = yield* StructuredOutput.run(model, {
        schema: Person,
        messages,
        name: "person",
        mode: "tool"
      })
      assert.deepStrictEqual(result.value, valid)
      const sent = model.requests[0]?.request
      assert.equal(sent?.responseFormat, undefined)
      assert.deepStrictEqual(sent?.toolChoice, { tool: "person" })
      assert.equal(sent?.tools?.[0]?.name, "person")
      assert.equal(sent?.tools?.[0]?.strict, true)
      const repair = model.requests[1]?.messages ?? []
      assert.equal(repair[1]?.role, "assistant")
      assert.equal(repair[2]?.role, "tool")
      assert.ok(repair[2]?.role === "tool" && repair[2].isError)
      // The kept message has no dangling tool call: the JSON is its text.
      assert.equal(result.message.toolCalls, undefined)
      assert.equal(result.message.finishReason, "stop")
      assert.deepStrictEqual(JSON.parse(Message.text(result.message)), valid)
    })
  )

  it.effect("auto uses a tool for a model that declares no JSON Schema support, JSON Schema otherwise", () =>
    Effect.gen(function* () {
      const withoutSchema = ScriptedChatModel.make({
        capabilities: { jsonSchema: false },
        replies: [{ toolCalls: [{ name: "output", arguments: valid }] }]
      })
      assert.deepStrictEqual(
        yield* StructuredOutput.generate(withoutSchema, { schema: Person, messages }),
        valid
      )
      assert.deepStrictEqual(withoutSchema.requests[0]?.request.toolChoice, { tool: "output" })
      const plain = ScriptedChatModel.make({ replies: [JSON.stringify(valid)] })
      yield* StructuredOutput.generate(plain, { schema: Person, messages })
      assert.equal(plain.requests[0]?.request.responseFormat?.type, "json-schema")
    })
  )

  it.effect("a non-object root is wrapped as { value } and unwrapped; fenced JSON is accepted", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ['```json\n{"value": ["a", "b"]}\n```'] })
      const value = yield* StructuredOutput.generate(model, { schema: Schema.Array(Schema.String), messages })
      assert.deepStrictEqual(value, ["a", "b"])
      const format = model.requests[0]?.request.responseFormat
      assert.ok(format?.type === "json-schema")
      assert.deepStrictEqual(format.schema.required, ["value"])
    })
  )
})

describe("StructuredOutput.stream", () => {
  it.effect("yields growing partial objects in order, then the decoded value", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          {
            text: JSON.stringify(valid),
            chunks: ['{"name": "A', 'da", "ag', 'e": 36, "tags": ["ma', 'th"]}']
          }
        ]
      })
      const events = yield* Stream.runCollect(StructuredOutput.stream(model, { schema: Person, messages }))
      assert.deepStrictEqual(
        events.map((event) => (event.type === "partial" ? event.value : event.type)),
        [{ name: "A" }, { name: "Ada" }, { name: "Ada", age: 36, tags: ["ma"] }, valid, "value"]
      )
      const last = events.at(-1)
      assert.ok(last?.type === "value")
      assert.deepStrictEqual(last.value, valid)
      assert.equal(model.requests[0]?.kind, "stream")
    })
  )

  it.effect("streams tool-call arguments in tool mode, and announces a repair round", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({
        replies: [
          { toolCalls: [{ name: "output", arguments: '{"name": 7}' }] },
          { toolCalls: [{ name: "output", arguments: valid }] }
        ]
      })
      const events = yield* Stream.runCollect(
        StructuredOutput.stream(model, { schema: Person, messages, mode: "tool" })
      )
      const types = events.map((event) => event.type)
      const repairAt = types.indexOf("repair")
      assert.ok(repairAt > 0, "partials of the first attempt, then the repair")
      assert.ok(types.slice(0, repairAt).every((type) => type === "partial"))
      assert.equal(types.at(-1), "value")
      const lastPartial = events.filter((event) => event.type === "partial").at(-1)
      assert.ok(lastPartial?.type === "partial")
      assert.equal(lastPartial.attempt, 2)
      assert.deepStrictEqual(lastPartial.value, valid)
    })
  )

  it.effect("fails with the typed error once repairs are used up", () =>
    Effect.gen(function* () {
      const model = ScriptedChatModel.make({ replies: ["{", "{"] })
      const exit = yield* Effect.exit(
        Stream.runCollect(StructuredOutput.stream(model, { schema: Person, messages }))
      )
      const error = failureOf(exit)
      assert.ok(error instanceof StructuredOutput.StructuredOutputError)
      assert.equal(error.reason, "invalid-json")
      assert.equal(error.text, "{")
      assert.equal(error.attempts, 2)
    })
  )
})

describe("StructuredOutput.fromMessages", () => {
  it.effect("reads the value from the last assistant message, or fails typed", () =>
    Effect.gen(function* () {
      const value = yield* StructuredOutput.fromMessages(
        [Message.user("q"), Message.assistant("{}"), Message.assistant(JSON.stringify(valid))],
        Person
      )
      assert.deepStrictEqual(value, valid)
      const error = failureOf(yield* Effect.exit(StructuredOutput.fromMessages([Message.user("q")], Person)))
      assert.ok(error instanceof StructuredOutput.StructuredOutputError)
      assert.equal(error.reason, "no-output")
    })
  )
})
