import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { Tracing } from "../src/index.js"

describe("Tracing", () => {
  it.effect(
    "without a tracer, span options given as a function are never made (nothing is built per call)",
    () =>
      Effect.gen(function* () {
        let made = 0
        const options = () => {
          made++
          return { kind: "client" as const, attributes: { "gen_ai.request.model": "m" } }
        }
        assert.strictEqual(yield* Tracing.withSpan(Effect.succeed(1), "chat m", options), 1)
        assert.deepStrictEqual(
          yield* Stream.runCollect(Tracing.withSpanStream(Stream.make(1, 2), "chat m", options)),
          [1, 2]
        )
        assert.strictEqual(made, 0)
      })
  )
})
