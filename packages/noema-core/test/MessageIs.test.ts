/**
 * `Message.isPlain` is a fast path in front of the Schema: it may say "not
 * certain" (false) for a valid message, but it must never vouch for something
 * the Schema refuses, and what it vouches for must survive JSON unchanged (the
 * stores write it with `JSON.stringify` instead of encoding it). Checked on
 * generated messages and on the same messages with one value anywhere replaced
 * by something odd.
 */
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import fc from "fast-check"
import { Message } from "../src/index.js"

const schemaIs = Schema.is(Message.Message)
const encode = Schema.encodeSync(Message.Message)

const json: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constant(null),
    fc.boolean(),
    fc.string(),
    // JSON's numbers: -0 comes back from JSON as 0, so it is not plain data (left to the Schema, below).
    fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => (Object.is(n, -0) ? 0 : n)),
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(fc.string(), tie("value"), { maxKeys: 3 })
  )
})).value

const common = fc.record(
  {
    id: fc.string(),
    createdAt: fc.integer({ min: 0 }),
    metadata: fc.dictionary(fc.string(), json, { maxKeys: 3 })
  },
  { requiredKeys: [] }
)
const text = fc.record({ type: fc.constant("text" as const), text: fc.string() })
const reasoning = fc.record(
  {
    type: fc.constant("reasoning" as const),
    text: fc.string(),
    providerMetadata: fc.dictionary(fc.string(), fc.dictionary(fc.string(), json, { maxKeys: 2 }), {
      maxKeys: 2
    })
  },
  { requiredKeys: ["type", "text"] }
)
const file = fc.record(
  {
    type: fc.constant("file" as const),
    uri: fc.string(),
    mediaType: fc.string(),
    name: fc.string(),
    sha256: fc.string(),
    size: fc.nat()
  },
  { requiredKeys: ["type", "uri", "mediaType"] }
)
const toolCall = fc.record({ id: fc.string(), name: fc.string(), arguments: fc.string() })
const usage = fc.record(
  {
    inputTokens: fc.nat(),
    outputTokens: fc.nat(),
    totalTokens: fc.nat(),
    cachedInputTokens: fc.nat(),
    cacheWriteInputTokens: fc.nat(),
    reasoningTokens: fc.nat()
  },
  { requiredKeys: ["inputTokens", "outputTokens", "totalTokens"] }
)
const withCommon = <A extends object>(arbitrary: fc.Arbitrary<A>) =>
  fc.tuple(arbitrary, common).map(([message, extra]) => ({ ...message, ...extra }))

const message: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  withCommon(fc.record({ role: fc.constant("system"), content: fc.string() })),
  withCommon(
    fc.record({ role: fc.constant("user"), content: fc.oneof(fc.string(), fc.array(fc.oneof(text, file))) })
  ),
  withCommon(
    fc.record(
      {
        role: fc.constant("assistant"),
        content: fc.oneof(fc.string(), fc.array(fc.oneof(text, reasoning, file))),
        toolCalls: fc.array(toolCall),
        refusal: fc.string(),
        finishReason: fc.constantFrom("stop", "length", "tool-calls", "content-filter", "other"),
        rawFinishReason: fc.string(),
        usage,
        model: fc.string()
      },
      { requiredKeys: ["role", "content"] }
    )
  ),
  withCommon(
    fc.record({
      role: fc.constant("tool"),
      toolCallId: fc.string(),
      name: fc.string(),
      content: fc.string(),
      isError: fc.boolean()
    })
  )
)

class Box {
  readonly value = 1
}
const odd: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    undefined,
    null,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    -0,
    "",
    "assistant",
    "reasoning",
    "text",
    true,
    0,
    [],
    {},
    new Date(0),
    new Box(),
    new Map(),
    // biome-ignore lint/suspicious/noSparseArray: a hole is one of the odd values
    [, { type: "text", text: "x" }],
    Object.create(null),
    Object.create({ role: "system", content: "inherited" })
  ),
  fc.string(),
  fc.double(),
  json
)

/** Every place in a value: the object or array holding it and the key. */
const places = (value: unknown, out: Array<[Record<string, unknown>, string]> = []) => {
  if (typeof value === "object" && value !== null) {
    for (const key of Object.keys(value)) {
      out.push([value as Record<string, unknown>, key])
      places((value as Record<string, unknown>)[key], out)
    }
  }
  return out
}

/** The message with one value replaced, one key added, or one key removed, somewhere. */
const mutated = fc
  .tuple(message, fc.nat(), odd, fc.constantFrom("replace", "add", "remove"), fc.string())
  .map(([original, at, value, how, key]) => {
    const copy = structuredClone(original)
    const all = places(copy)
    if (all.length === 0) return copy
    const [holder, name] = all[at % all.length] as [Record<string, unknown>, string]
    if (how === "replace") holder[name] = value
    else if (how === "remove") delete holder[name]
    else if (!Array.isArray(holder)) holder[key] = value
    return copy
  })

const vouchesHonestly = (input: unknown) => {
  if (!Message.isPlain(input)) return
  expect(schemaIs(input)).toBe(true)
  // Its own encoding: what JSON gives back equals the message, and equals the Schema's encoding.
  const roundTrip = JSON.parse(JSON.stringify(input))
  expect(roundTrip).toStrictEqual(JSON.parse(JSON.stringify(input)))
  expect(roundTrip).toEqual(input)
  expect(roundTrip).toEqual(JSON.parse(JSON.stringify(encode(input))))
}

describe("Message.isPlain / Message.is", () => {
  it("vouches for every generated message, and what it vouches for survives JSON", () => {
    fc.assert(
      fc.property(message, (input) => {
        expect(Message.isPlain(input)).toBe(true)
        vouchesHonestly(input)
      }),
      { numRuns: 2_000 }
    )
  })

  it("never vouches for what the Schema refuses, and `is` decides exactly as the Schema", () => {
    fc.assert(
      fc.property(mutated, (input) => {
        vouchesHonestly(input)
        expect(Message.is(input)).toBe(schemaIs(input))
      }),
      { numRuns: 10_000 }
    )
  })

  it("leaves to the Schema what it cannot vouch for", () => {
    const base = { role: "system", content: "x" }
    // Accepted by the Schema, not plain: the fast check says "not certain" and `is` still accepts.
    for (const input of [
      { ...base, extra: 1 },
      { ...base, createdAt: Number.NaN },
      // JSON would give -0 back as 0.
      { ...base, metadata: { n: -0 } },
      Object.create(base),
      { ...base, metadata: new Box() }
    ]) {
      expect(Message.isPlain(input)).toBe(false)
      expect(Message.is(input)).toBe(true)
    }
    // Refused by both.
    for (const input of [
      { ...base, id: undefined },
      { ...base, metadata: { at: new Date(0) } },
      { role: "tool", toolCallId: "a", name: "n", content: "c" },
      { role: "user", content: [{ type: "reasoning", text: "not the user's" }] },
      null,
      "system"
    ]) {
      expect(Message.isPlain(input)).toBe(false)
      expect(Message.is(input)).toBe(false)
    }
  })
})
