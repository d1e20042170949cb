/**
 * ChatInput without a pseudo-terminal: a PassThrough flagged as a TTY stands in
 * for the keyboard, so the bytes a terminal sends for a paste can be fed directly.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PassThrough } from "node:stream"
import { afterEach, describe, expect, it } from "vitest"
import * as BracketedPaste from "../src/internal/BracketedPaste.js"
import { ChatInput } from "../src/internal/ChatInput.js"

const inputs: Array<ChatInput> = []
afterEach(() => {
  for (const input of inputs.splice(0)) input.dispose()
})

/** A keyboard and a screen that claim to be a terminal. */
const terminal = () => {
  const stdin = Object.assign(new PassThrough(), { isTTY: true, setRawMode: () => stdin })
  let shown = ""
  const stdout = Object.assign(new PassThrough(), { isTTY: true, columns: 120, rows: 40 })
  stdout.setEncoding("utf8").on("data", (chunk: string) => {
    shown += chunk
  })
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "noema-input-"))
  const input = new ChatInput({
    stdin: stdin as unknown as NodeJS.ReadStream,
    stdout: stdout as unknown as NodeJS.WriteStream,
    interactive: true,
    historyFile: path.join(home, "history"),
    prompt: "› "
  })
  inputs.push(input)
  return { stdin, input, shown: () => shown }
}

describe("ChatInput", () => {
  it("turns a pasted block into one message, and switches bracketed paste on and off", async () => {
    const { stdin, input, shown } = terminal()
    expect(shown()).toContain(BracketedPaste.enable)
    // The paste arrives in pieces, markers cut in half, as a terminal may send it.
    stdin.write("\u001b[20")
    stdin.write("0~first line\r")
    stdin.write("second line\r\nthird line\u001b[2")
    stdin.write("01~\r")
    stdin.write("typed\r")
    expect(await input.nextLine()).toBe("first line\nsecond line\nthird line")
    expect(await input.nextLine()).toBe("typed")
    expect(shown()).not.toContain(BracketedPaste.disable)
    input.dispose()
    expect(shown()).toContain(BracketedPaste.disable)
  })

  it("continues a line that ends in a backslash", async () => {
    const { stdin, input, shown } = terminal()
    const message = input.nextLine()
    stdin.write("one\\\r")
    // The next line is asked for with the continuation prompt.
    for (let tick = 0; tick < 100 && !shown().includes("… "); tick++) {
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(shown()).toContain("… ")
    stdin.write("two\\\rthree\r")
    expect(await message).toBe("one\ntwo\nthree")
  })
})

describe("BracketedPaste.Filter", () => {
  it("passes typed input through and replaces pasted newlines only", async () => {
    const filter = new BracketedPaste.Filter()
    let output = ""
    filter.on("data", (chunk: string) => {
      output += chunk
    })
    for (const piece of ["a\r\u001b[200~b\r", "\nc\n\u001b[201", "~d\u001b[A"]) filter.write(piece)
    filter.end()
    await new Promise((resolve) => filter.on("end", resolve))
    expect(output).toBe(`a\rb${BracketedPaste.lineBreak}c${BracketedPaste.lineBreak}d\u001b[A`)
  })
})
