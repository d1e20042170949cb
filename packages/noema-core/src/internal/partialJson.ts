/**
 * A lenient parser for the prefix of a JSON text, for showing an object while
 * the model is still writing it. It returns the best value the prefix
 * implies: open objects and arrays are closed, an unfinished string is kept
 * as far as it goes, and whatever cannot be decided yet (a key without its
 * value, `tru`, a lone `-`) is left out. A prefix that is not the beginning of
 * any JSON text yields `undefined`, as does an empty one.
 */

const incomplete = Symbol("incomplete")
type Incomplete = typeof incomplete

const whitespace = /\s/

class Parser {
  index = 0
  constructor(readonly text: string) {}

  skipWhitespace(): void {
    while (this.index < this.text.length && whitespace.test(this.text[this.index] as string)) this.index++
  }

  atEnd(): boolean {
    return this.index >= this.text.length
  }

  /** A value, or `incomplete` when the text ends before anything usable; throws on invalid JSON. */
  value(): unknown {
    this.skipWhitespace()
    if (this.atEnd()) return incomplete
    const char = this.text[this.index]
    if (char === "{") return this.object()
    if (char === "[") return this.array()
    if (char === '"') return this.string()
    if (char === "-" || (char !== undefined && char >= "0" && char <= "9")) return this.number()
    return this.literal()
  }

  object(): unknown {
    this.index++
    const result: Record<string, unknown> = {}
    for (;;) {
      this.skipWhitespace()
      if (this.atEnd()) return result
      if (this.text[this.index] === "}") {
        this.index++
        return result
      }
      if (this.text[this.index] === ",") {
        this.index++
        continue
      }
      if (this.text[this.index] !== '"') throw new SyntaxError("expected a key")
      const key = this.string()
      this.skipWhitespace()
      if (this.atEnd() || key === incomplete) return result
      if (this.text[this.index] !== ":") throw new SyntaxError("expected ':'")
      this.index++
      const value = this.value()
      if (value === incomplete) return result
      result[key as string] = value
    }
  }

  array(): unknown {
    this.index++
    const result: Array<unknown> = []
    for (;;) {
      this.skipWhitespace()
      if (this.atEnd()) return result
      if (this.text[this.index] === "]") {
        this.index++
        return result
      }
      if (this.text[this.index] === ",") {
        this.index++
        continue
      }
      const value = this.value()
      if (value === incomplete) return result
      result.push(value)
    }
  }

  /** A string; unfinished, it is kept up to the last complete character. */
  string(): string | Incomplete {
    const start = this.index
    this.index++
    for (;;) {
      if (this.atEnd()) {
        // Drop a dangling escape, then close the string to parse it.
        let body = this.text.slice(start + 1)
        const dangling = body.match(/\\(u[0-9a-fA-F]{0,3})?$/)
        if (dangling !== null) body = body.slice(0, dangling.index)
        try {
          return JSON.parse(`"${body}"`) as string
        } catch {
          return incomplete
        }
      }
      const char = this.text[this.index]
      if (char === "\\") {
        this.index += 2
        continue
      }
      this.index++
      if (char === '"') return JSON.parse(this.text.slice(start, this.index)) as string
    }
  }

  /** A number; one cut off (`-`, `1.`, `1e`) is left out rather than guessed. */
  number(): number | Incomplete {
    const match = /^-?\d*(\.\d*)?([eE][+-]?\d*)?/.exec(this.text.slice(this.index))
    const literal = match?.[0] ?? ""
    this.index += literal.length
    if (this.atEnd()) {
      const complete = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(literal)
      return complete ? Number(literal) : incomplete
    }
    if (literal === "" || literal === "-") throw new SyntaxError("invalid number")
    return Number(literal)
  }

  literal(): unknown {
    for (const [word, value] of [
      ["true", true],
      ["false", false],
      ["null", null]
    ] as const) {
      const rest = this.text.slice(this.index, this.index + word.length)
      if (rest === word) {
        this.index += word.length
        return value
      }
      if (this.index + rest.length === this.text.length && word.startsWith(rest)) {
        this.index = this.text.length
        return incomplete
      }
    }
    throw new SyntaxError("unexpected character")
  }
}

/** The best value a prefix of a JSON text implies, or `undefined` (nothing yet, or not JSON). */
export const parsePartial = (text: string): unknown => {
  try {
    const value = new Parser(text).value()
    return value === incomplete ? undefined : value
  } catch {
    return undefined
  }
}
