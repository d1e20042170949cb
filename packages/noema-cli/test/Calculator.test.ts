import { assert, describe, it } from "@effect/vitest"
import { type Message, Tool } from "@noema/core"
import { Effect } from "effect"
import * as Calculator from "../src/tools/Calculator.js"

const value = (expression: string): number => Calculator.evaluateSync(expression)

const errorOf = (expression: string): string => {
  try {
    Calculator.evaluateSync(expression)
  } catch (error) {
    assert.instanceOf(error, Calculator.CalculatorError)
    return (error as Calculator.CalculatorError).message
  }
  return assert.fail(`expected "${expression}" to fail`)
}

describe("Calculator", () => {
  it("respects precedence and parentheses", () => {
    assert.strictEqual(value("2 + 3 * 4"), 14)
    assert.strictEqual(value("(2 + 3) * 4"), 20)
    assert.strictEqual(value("10 - 4 - 3"), 3)
    assert.strictEqual(value("100 / 10 / 5"), 2)
    assert.strictEqual(value("7 % 4 * 2"), 6)
    assert.strictEqual(value("2 * 3 ^ 2"), 18)
  })

  it("makes ^ right-associative and binds it tighter than unary minus", () => {
    assert.strictEqual(value("2 ^ 3 ^ 2"), 512)
    assert.strictEqual(value("(2 ^ 3) ^ 2"), 64)
    assert.strictEqual(value("-2 ^ 2"), -4)
    assert.strictEqual(value("(-2) ^ 2"), 4)
    assert.strictEqual(value("2 ^ -1"), 0.5)
    assert.strictEqual(value("2 ** 10"), 1024)
  })

  it("reads decimals, exponents and unary signs", () => {
    assert.strictEqual(value("1.5 + .5"), 2)
    assert.strictEqual(value("2e3"), 2000)
    assert.strictEqual(value("2.5E-1 * 4"), 1)
    assert.strictEqual(value("--3"), 3)
    assert.strictEqual(value("-(-3 + +1)"), 2)
    assert.strictEqual(value("3 × 4 ÷ 2 − 1"), 5)
  })

  it("knows its functions and constants", () => {
    assert.strictEqual(value("sqrt(16) + abs(-2)"), 6)
    assert.strictEqual(value("round(2.5) + floor(2.7) + ceil(2.1)"), 8)
    assert.strictEqual(value("min(3, 1, 2) + max(4, 9)"), 10)
    assert.strictEqual(value("log(1000)"), 3)
    assert.strictEqual(value("log(8, 2)"), 3)
    assert.strictEqual(value("ln(e)"), 1)
    assert.strictEqual(value("exp(0) + cos(0) + sin(0) + tan(0)"), 2)
    assert.strictEqual(value("PI"), Math.PI)
    assert.strictEqual(Calculator.format(value("sin(pi / 2)")), "1")
  })

  it("formats without floating-point noise", () => {
    assert.strictEqual(Calculator.format(value("0.1 + 0.2")), "0.3")
    assert.strictEqual(Calculator.format(value("1 / 3")), "0.333333333333")
    assert.strictEqual(Calculator.format(value("-0 * 5")), "0")
  })

  it("reports division by zero and values that are not finite reals", () => {
    assert.match(errorOf("1 / 0"), /division by zero/)
    assert.match(errorOf("5 % (2 - 2)"), /modulo by zero/)
    assert.match(errorOf("0 ^ -1"), /division by zero/)
    assert.match(errorOf("sqrt(-1)"), /not a real number/)
    assert.match(errorOf("10 ^ 400"), /too large/)
  })

  it("reports syntax errors with a position", () => {
    assert.match(errorOf("2 +"), /Syntax error: the expression ends too early/)
    assert.match(errorOf("(1 + 2"), /expected "\)"/)
    assert.match(errorOf("1 + 2)"), /unexpected "\)" at position 6/)
    assert.match(errorOf("2 $ 3"), /unexpected "\$" at position 3/)
    assert.match(errorOf("foo(2)"), /unknown name "foo"/)
    assert.match(errorOf("sqrt 4"), /needs parentheses/)
    assert.match(errorOf("sqrt(1, 2)"), /takes 1 argument/)
    assert.match(errorOf(""), /empty/)
    assert.match(errorOf("1 2"), /unexpected number 2/)
  })

  it("never evaluates code", () => {
    assert.match(errorOf("process.exit(1)"), /Syntax error/)
    assert.match(errorOf("constructor"), /unknown name/)
    assert.match(errorOf("toString"), /unknown name/)
  })

  it.effect("is a tool whose failures are error results for the model", () =>
    Effect.gen(function* () {
      const call = (expression: string): Message.ToolCall => ({
        id: "c1",
        name: "calculator",
        arguments: JSON.stringify({ expression })
      })
      const ok = yield* Tool.call(Calculator.tool, call("(2+3)*4"))
      assert.strictEqual(ok.content, "20")
      assert.isFalse(ok.isError)
      const failed = yield* Tool.call(Calculator.tool, call("1/0"))
      assert.isTrue(failed.isError)
      assert.match(failed.content, /division by zero/)
    })
  )
})
