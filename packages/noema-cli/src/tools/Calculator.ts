/**
 * Calculator: the `calculator` tool and the arithmetic parser behind it.
 *
 * Models are unreliable at arithmetic, so the CLI gives them a real evaluator.
 * It is a small recursive-descent parser over a fixed grammar (numbers,
 * + - * / % ^, unary signs, parentheses, a few functions and constants), never
 * `eval` or `Function`: the expression comes from a model and must not be able
 * to run code. Everything that cannot give a finite real number (division by
 * zero, sqrt(-1), overflow, a syntax error) is a `CalculatorError` the model
 * can read and correct.
 */

import { Tool } from "@noema/core"
import { Effect, Schema } from "effect"

export class CalculatorError extends Schema.TaggedError<CalculatorError>()("CalculatorError", {
  expression: Schema.String,
  message: Schema.String
}) {}

// ---------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------

type Token =
  | { readonly kind: "number"; readonly value: number; readonly position: number }
  | { readonly kind: "name"; readonly name: string; readonly position: number }
  | { readonly kind: "symbol"; readonly symbol: string; readonly position: number }
  | { readonly kind: "end"; readonly position: number }

class SyntaxProblem extends Error {}

const numberPattern = /(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/y
const namePattern = /[a-zA-Z_][a-zA-Z_0-9]*/y
const symbols = new Set(["+", "-", "*", "/", "%", "^", "(", ")", ","])
// Characters people paste from documents mean the same operators.
const aliases: Readonly<Record<string, string>> = { "×": "*", "÷": "/", "−": "-", "·": "*" }

const tokenize = (source: string): Array<Token> => {
  const tokens: Array<Token> = []
  let i = 0
  while (i < source.length) {
    const char = source[i] as string
    if (/\s/.test(char)) {
      i++
      continue
    }
    if (/[\d.]/.test(char)) {
      numberPattern.lastIndex = i
      const match = numberPattern.exec(source)
      if (match === null) throw new SyntaxProblem(`unexpected "${char}" at position ${i + 1}`)
      tokens.push({ kind: "number", value: Number(match[0]), position: i })
      i += match[0].length
      continue
    }
    if (/[a-zA-Z_]/.test(char)) {
      namePattern.lastIndex = i
      const match = namePattern.exec(source) as RegExpExecArray
      tokens.push({ kind: "name", name: match[0].toLowerCase(), position: i })
      i += match[0].length
      continue
    }
    if (char === "*" && source[i + 1] === "*") {
      tokens.push({ kind: "symbol", symbol: "^", position: i })
      i += 2
      continue
    }
    const symbol = aliases[char] ?? char
    if (symbols.has(symbol)) {
      tokens.push({ kind: "symbol", symbol, position: i })
      i++
      continue
    }
    throw new SyntaxProblem(`unexpected "${char}" at position ${i + 1}`)
  }
  tokens.push({ kind: "end", position: source.length })
  return tokens
}

// ---------------------------------------------------------------------------
// Functions and constants
// ---------------------------------------------------------------------------

interface MathFunction {
  readonly minArity: number
  readonly maxArity: number
  readonly apply: (args: ReadonlyArray<number>) => number
}

const unary = (apply: (x: number) => number): MathFunction => ({
  minArity: 1,
  maxArity: 1,
  apply: (args) => apply(args[0] as number)
})

const functions: ReadonlyMap<string, MathFunction> = new Map(
  Object.entries({
    sqrt: unary(Math.sqrt),
    abs: unary(Math.abs),
    round: unary(Math.round),
    floor: unary(Math.floor),
    ceil: unary(Math.ceil),
    sin: unary(Math.sin),
    cos: unary(Math.cos),
    tan: unary(Math.tan),
    ln: unary(Math.log),
    exp: unary(Math.exp),
    // log(x) is base 10 as on calculators; log(x, base) for any other base.
    log: {
      minArity: 1,
      maxArity: 2,
      apply: ([x, base]) =>
        base === undefined ? Math.log10(x as number) : Math.log(x as number) / Math.log(base)
    },
    min: { minArity: 1, maxArity: Number.POSITIVE_INFINITY, apply: (args) => Math.min(...args) },
    max: { minArity: 1, maxArity: Number.POSITIVE_INFINITY, apply: (args) => Math.max(...args) }
  } satisfies Record<string, MathFunction>)
)

// Maps, not object literals: a name like "constructor" must not find Object.prototype's.
const constants: ReadonlyMap<string, number> = new Map([
  ["pi", Math.PI],
  ["e", Math.E],
  ["tau", 2 * Math.PI]
])

/** The names the parser knows, for error messages and for recognising expressions in text. */
export const functionNames: ReadonlyArray<string> = [...functions.keys()]
export const constantNames: ReadonlyArray<string> = [...constants.keys()]

// ---------------------------------------------------------------------------
// Parser (evaluates while parsing: the grammar is small and nothing is reused)
// ---------------------------------------------------------------------------

class ArithmeticProblem extends Error {}

/*
 * expression := term (("+" | "-") term)*
 * term       := unary (("*" | "/" | "%") unary)*
 * unary      := ("-" | "+") unary | power
 * power      := primary ("^" unary)?          right-associative; -2^2 = -(2^2)
 * primary    := number | constant | function "(" arguments ")" | "(" expression ")"
 */
class Parser {
  private index = 0
  constructor(private readonly tokens: ReadonlyArray<Token>) {}

  parse(): number {
    const value = this.expression()
    const next = this.peek()
    if (next.kind !== "end")
      throw new SyntaxProblem(`unexpected ${describe(next)} at position ${next.position + 1}`)
    return value
  }

  private peek(): Token {
    return this.tokens[this.index] as Token
  }

  private advance(): Token {
    const token = this.tokens[this.index] as Token
    if (token.kind !== "end") this.index++
    return token
  }

  private isSymbol(symbol: string): boolean {
    const token = this.peek()
    return token.kind === "symbol" && token.symbol === symbol
  }

  private expect(symbol: string): void {
    const token = this.advance()
    if (token.kind !== "symbol" || token.symbol !== symbol) {
      throw new SyntaxProblem(
        `expected "${symbol}" but found ${describe(token)} at position ${token.position + 1}`
      )
    }
  }

  private expression(): number {
    let value = this.term()
    while (this.isSymbol("+") || this.isSymbol("-")) {
      const operator = this.advance() as { symbol: string }
      const right = this.term()
      value = operator.symbol === "+" ? value + right : value - right
    }
    return value
  }

  private term(): number {
    let value = this.unary()
    while (this.isSymbol("*") || this.isSymbol("/") || this.isSymbol("%")) {
      const operator = this.advance() as { symbol: string }
      const right = this.unary()
      if (operator.symbol === "*") {
        value *= right
      } else if (right === 0) {
        throw new ArithmeticProblem(operator.symbol === "/" ? "division by zero" : "modulo by zero")
      } else {
        value = operator.symbol === "/" ? value / right : value % right
      }
    }
    return value
  }

  private unary(): number {
    if (this.isSymbol("-")) {
      this.advance()
      return -this.unary()
    }
    if (this.isSymbol("+")) {
      this.advance()
      return this.unary()
    }
    return this.power()
  }

  private power(): number {
    const base = this.primary()
    if (!this.isSymbol("^")) return base
    this.advance()
    // The exponent goes through `unary` so 2^-1 works and 2^3^2 nests to the right.
    const exponent = this.unary()
    if (base === 0 && exponent < 0) throw new ArithmeticProblem("division by zero (0 to a negative power)")
    return base ** exponent
  }

  private primary(): number {
    const token = this.advance()
    switch (token.kind) {
      case "number":
        return token.value
      case "symbol": {
        if (token.symbol !== "(") {
          throw new SyntaxProblem(`unexpected ${describe(token)} at position ${token.position + 1}`)
        }
        const value = this.expression()
        this.expect(")")
        return value
      }
      case "name":
        return this.named(token.name, token.position)
      case "end":
        throw new SyntaxProblem("the expression ends too early")
    }
  }

  private named(name: string, position: number): number {
    const fn = functions.get(name)
    if (fn !== undefined) {
      if (!this.isSymbol("(")) throw new SyntaxProblem(`${name} needs parentheses, e.g. ${name}(2)`)
      this.advance()
      const args: Array<number> = []
      if (!this.isSymbol(")")) {
        args.push(this.expression())
        while (this.isSymbol(",")) {
          this.advance()
          args.push(this.expression())
        }
      }
      this.expect(")")
      if (args.length < fn.minArity || args.length > fn.maxArity) {
        const expected =
          fn.minArity === fn.maxArity
            ? `${fn.minArity}`
            : fn.maxArity === Number.POSITIVE_INFINITY
              ? `at least ${fn.minArity}`
              : `${fn.minArity} or ${fn.maxArity}`
        throw new SyntaxProblem(`${name} takes ${expected} argument(s), got ${args.length}`)
      }
      return fn.apply(args)
    }
    const constant = constants.get(name)
    if (constant !== undefined) return constant
    throw new SyntaxProblem(
      `unknown name "${name}" at position ${position + 1} (functions: ${functionNames.join(", ")}; constants: ${constantNames.join(", ")})`
    )
  }
}

const describe = (token: Token): string => {
  switch (token.kind) {
    case "number":
      return `number ${token.value}`
    case "name":
      return `"${token.name}"`
    case "symbol":
      return `"${token.symbol}"`
    case "end":
      return "the end of the expression"
  }
}

/** Evaluates an expression; throws a `CalculatorError` when it has no finite real value. */
export const evaluateSync = (expression: string): number => {
  let value: number
  try {
    if (expression.trim() === "") throw new SyntaxProblem("the expression is empty")
    value = new Parser(tokenize(expression)).parse()
  } catch (error) {
    if (error instanceof SyntaxProblem) {
      throw new CalculatorError({ expression, message: `Syntax error: ${error.message}` })
    }
    if (error instanceof ArithmeticProblem) {
      throw new CalculatorError({ expression, message: `Cannot evaluate: ${error.message}` })
    }
    throw error
  }
  if (Number.isNaN(value)) {
    throw new CalculatorError({ expression, message: "Cannot evaluate: the result is not a real number" })
  }
  if (!Number.isFinite(value)) {
    throw new CalculatorError({ expression, message: "Cannot evaluate: the result is too large (infinite)" })
  }
  return value
}

export const evaluate = (expression: string): Effect.Effect<number, CalculatorError> =>
  Effect.try({
    try: () => evaluateSync(expression),
    catch: (error) =>
      error instanceof CalculatorError
        ? error
        : new CalculatorError({ expression, message: `Cannot evaluate: ${String(error)}` })
  })

/**
 * A result as people write it: floating-point noise rounded away
 * (0.1 + 0.2 gives 0.3), no exponent for ordinary magnitudes.
 */
export const format = (value: number): string => {
  const rounded = Number(value.toPrecision(12))
  return Object.is(rounded, -0) ? "0" : String(rounded)
}

// ---------------------------------------------------------------------------
// Tool
// ---------------------------------------------------------------------------

export const Parameters = Schema.Struct({
  expression: Schema.String.annotate({
    description: "An arithmetic expression, e.g. (2 + 3) * 4 ^ 2 / sqrt(16)"
  })
})

export const tool = Tool.make({
  name: "calculator",
  description:
    "Evaluates an arithmetic expression exactly. Supports numbers (1.5, 2e3), + - * / % ^, parentheses, " +
    "sqrt, abs, round, floor, ceil, min, max, sin, cos, tan (radians), log (base 10, or log(x, base)), ln, exp, " +
    "and the constants pi and e. Use it for any calculation instead of doing arithmetic yourself.",
  parameters: Parameters,
  // Pure: the same expression always gives the same answer.
  annotations: { readOnly: true, idempotent: true },
  handler: ({ expression }) => Effect.map(evaluate(expression), format)
})
