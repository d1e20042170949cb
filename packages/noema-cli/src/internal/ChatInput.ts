/**
 * ChatInput: the lines a person types into `noema chat`.
 *
 * `node:readline` with line editing and arrow-key history (kept in
 * `$NOEMA_HOME/history`) on a terminal, plain lines otherwise. Lines typed
 * while a turn runs wait their turn. Ctrl-C at the prompt clears the line
 * being typed, or, on an empty line, ends the input (as Ctrl-D does).
 *
 * While an answer is shown (`beginAnswer` .. `endAnswer`) the terminal stays
 * in raw mode and readline keeps reading, its output muted: keys typed
 * meanwhile are not echoed into the answer, a line finished with Enter is
 * delivered at once (the chat queues it, or interrupts with it), and Ctrl-C
 * arrives as a key (`onCancel`), never as a signal: no wrapper (`npx`, a
 * shell script) ever sees it. When the answer ends, the prompt comes back with
 * whatever was typed since.
 *
 * A message may span lines: a paste is one message (bracketed paste, see
 * `BracketedPaste`), and a line ending in a backslash continues on the next.
 */
import * as fs from "node:fs"
import * as readline from "node:readline"
import * as BracketedPaste from "./BracketedPaste.js"

const historyLimit = 1000

const loadHistory = (file: string): Array<string> => {
  try {
    const lines = fs
      .readFileSync(file, "utf8")
      .split("\n")
      .filter((line) => line.trim() !== "")
    // readline wants the newest entry first.
    return lines.slice(-historyLimit).reverse()
  } catch {
    return []
  }
}

export interface Options {
  readonly stdin: NodeJS.ReadStream
  readonly stdout: NodeJS.WriteStream
  /** Both ends are terminals: prompt, line editing, history. */
  readonly interactive: boolean
  /** The history file. */
  readonly historyFile: string
  readonly prompt: string
  /** The prompt for the lines after one ending in a backslash. */
  readonly continuationPrompt?: string
  /** Ctrl-C while an answer is shown (terminals): cancel it. */
  readonly onCancel?: () => void
}

export class ChatInput {
  readonly #options: Options
  readonly #rl: readline.Interface
  readonly #lines: Array<string> = []
  #waiting: ((line: string | undefined) => void) | undefined
  #closed = false
  #lastHistoryLine: string | undefined
  readonly #paste = new BracketedPaste.Filter()
  #pasteModeOn = false
  /** An answer is being shown: readline's output is muted. */
  #answering = false

  constructor(options: Options) {
    this.#options = options
    const history = options.interactive ? loadHistory(options.historyFile) : []
    this.#lastHistoryLine = history[0]
    const stdin = options.stdin
    if (stdin.isTTY === true) {
      // readline puts its input in raw mode; the filter passes that on to the terminal.
      Object.assign(this.#paste, {
        isTTY: true,
        setRawMode: (mode: boolean) => {
          stdin.setRawMode(mode)
          return this.#paste
        }
      })
    }
    stdin.pipe(this.#paste)
    if (options.interactive) {
      options.stdout.write(BracketedPaste.enable)
      this.#pasteModeOn = true
    }
    // readline writes through this: muted while an answer is shown, so typing is not echoed into it.
    const stdout = options.stdout
    const output = new Proxy(stdout, {
      get: (target, key) => {
        if (key === "write") {
          return (...args: Parameters<NodeJS.WriteStream["write"]>) =>
            this.#answering ? true : target.write(...args)
        }
        const value = Reflect.get(target, key, target)
        return typeof value === "function" ? value.bind(target) : value
      }
    })
    this.#rl = readline.createInterface({
      input: this.#paste,
      output,
      terminal: options.interactive,
      history,
      historySize: historyLimit,
      removeHistoryDuplicates: true,
      prompt: options.prompt
    })
    this.#rl.on("line", (line) => this.#receive(line))
    this.#rl.on("close", () => {
      // Ctrl-D leaves the cursor after the prompt; the shell's prompt belongs on a line of its own.
      if (options.interactive && !this.#closed) options.stdout.write("\n")
      this.#closed = true
      this.#endPasteMode()
      this.#deliver(undefined)
    })
    // At the prompt (raw mode) Ctrl-C reaches readline as a key.
    this.#rl.on("SIGINT", () => this.#interruptAtPrompt())
  }

  /**
   * The next message (prompting for it on a terminal), or `undefined` once
   * the input ended. A line ending in a backslash continues on the next one;
   * a pasted block arrives whole.
   */
  async nextLine(): Promise<string | undefined> {
    let line = await this.#nextLine(this.#options.prompt)
    if (line === undefined) return undefined
    const lines: Array<string> = []
    while (line.endsWith("\\")) {
      lines.push(line.slice(0, -1))
      const next = await this.#nextLine(this.#options.continuationPrompt ?? "… ")
      if (next === undefined) break
      line = next
    }
    if (!line.endsWith("\\")) lines.push(line)
    return lines.join("\n")
  }

  /** One line answering a question (`prompt` on a terminal), or `undefined` once the input ended. */
  ask(prompt: string): Promise<string | undefined> {
    return this.#nextLine(prompt)
  }

  #nextLine(prompt: string): Promise<string | undefined> {
    const line = this.#lines.shift()
    if (line !== undefined) return Promise.resolve(line)
    if (this.#closed) return Promise.resolve(undefined)
    if (this.#options.interactive) {
      this.#rl.setPrompt(prompt)
      this.#rl.prompt()
    }
    return new Promise((resolve) => {
      this.#waiting = resolve
    })
  }

  /** Keeps `line` in the history file (terminals only; consecutive repeats once). */
  remember(line: string): void {
    if (!this.#options.interactive || line.trim() === "" || line === this.#lastHistoryLine) return
    this.#lastHistoryLine = line
    try {
      fs.appendFileSync(this.#options.historyFile, `${line.replace(/\n/g, " ")}\n`, { mode: 0o600 })
    } catch {
      // History is a convenience; a read-only home must not break the chat.
    }
  }

  /** An answer is shown from now on: typing is not echoed, Ctrl-C cancels (see the module comment). */
  beginAnswer(): void {
    if (!this.#options.interactive || this.#answering) return
    this.#answering = true
  }

  /** The answer ended: the prompt comes back, with what was typed meanwhile. */
  endAnswer(): void {
    if (!this.#options.interactive || !this.#answering) return
    this.#answering = false
    if (!this.#closed) this.#rl.prompt(true)
  }

  /** A waiting `nextLine` resolves to "" (the chat has something to do between lines). */
  wake(): void {
    if (this.#waiting !== undefined) this.#deliver("")
  }

  /** Ends the input: a pending `nextLine` resolves to `undefined`. */
  close(): void {
    this.#rl.close()
  }

  /** Ends the input without the newline a Ctrl-D at the prompt gets. */
  dispose(): void {
    this.#closed = true
    this.#rl.close()
    this.#endPasteMode()
  }

  #endPasteMode(): void {
    this.#options.stdin.unpipe(this.#paste)
    this.#options.stdin.pause()
    if (!this.#pasteModeOn) return
    this.#pasteModeOn = false
    this.#options.stdout.write(BracketedPaste.disable)
  }

  #receive(raw: string): void {
    const line = BracketedPaste.restore(raw)
    if (this.#waiting !== undefined) this.#deliver(line)
    else this.#lines.push(line)
  }

  #deliver(line: string | undefined): void {
    const waiting = this.#waiting
    this.#waiting = undefined
    waiting?.(line)
  }

  #interruptAtPrompt(): void {
    if (this.#answering) {
      this.#options.onCancel?.()
      return
    }
    if (this.#rl.line.length > 0) {
      // Like a shell: Ctrl-C abandons the line being typed, and only an empty line quits.
      this.#options.stdout.write("^C\n")
      this.#rl.write(null, { ctrl: true, name: "e" })
      this.#rl.write(null, { ctrl: true, name: "u" })
      this.#rl.prompt()
      return
    }
    this.#rl.close()
  }
}
