/**
 * BracketedPaste: a pasted block of text is one message, not one per line.
 *
 * A terminal in bracketed-paste mode (`enable`) wraps what is pasted in
 * `ESC[200~` .. `ESC[201~`. `Filter` sits between stdin and readline: it drops
 * the markers and turns the newlines inside a paste into `lineBreak`, which
 * readline keeps within the line being edited; `restore` turns them back into
 * newlines once the line is entered. The markers are recognised in any input
 * (they never occur in typed text), so a pipe carrying them behaves the same.
 */

import { Transform, type TransformCallback } from "node:stream"
import { StringDecoder } from "node:string_decoder"

export const enable = "\u001b[?2004h"
export const disable = "\u001b[?2004l"

const start = "\u001b[200~"
const end = "\u001b[201~"

/** Stands for a pasted newline inside readline's line (shown as ␤ while editing). */
export const lineBreak = "\u2424"

/** The entered line with pasted newlines back. */
export const restore = (line: string): string => line.replaceAll(lineBreak, "\n")

/** How much of `marker` the end of `text` could be the beginning of. */
const partialMarker = (text: string, marker: string): number => {
  for (let length = Math.min(marker.length - 1, text.length); length > 0; length--) {
    if (text.endsWith(marker.slice(0, length))) return length
  }
  return 0
}

export class Filter extends Transform {
  readonly #decoder = new StringDecoder("utf8")
  #pasting = false
  /** The end of the last chunk, held back: perhaps the start of a marker, or a `\r` before `\n`. */
  #held = ""

  constructor() {
    super({ decodeStrings: true, encoding: "utf8" })
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const output = this.#filter(this.#held + this.#decoder.write(chunk))
    if (output.length > 0) this.push(output)
    callback()
  }

  override _flush(callback: TransformCallback): void {
    const rest = this.#held + this.#decoder.end()
    this.#held = ""
    const output = this.#pasting ? this.#lineBreaks(rest) : rest
    if (output.length > 0) this.push(output)
    callback()
  }

  #lineBreaks(text: string): string {
    return text.replace(/\r\n|\r|\n/g, lineBreak)
  }

  #filter(input: string): string {
    let text = input
    let output = ""
    this.#held = ""
    for (;;) {
      const marker = this.#pasting ? end : start
      const index = text.indexOf(marker)
      if (index >= 0) {
        const before = text.slice(0, index)
        output += this.#pasting ? this.#lineBreaks(before) : before
        this.#pasting = !this.#pasting
        text = text.slice(index + marker.length)
        continue
      }
      let keep = partialMarker(text, marker)
      // A pasted "\r\n" cut between chunks is still one line break.
      if (keep === 0 && this.#pasting && text.endsWith("\r")) keep = 1
      const now = text.slice(0, text.length - keep)
      this.#held = text.slice(text.length - keep)
      return output + (this.#pasting ? this.#lineBreaks(now) : now)
    }
  }
}
