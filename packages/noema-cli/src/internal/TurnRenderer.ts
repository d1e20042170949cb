/**
 * Draws one turn's agent events as they arrive: answer text as it streams,
 * the model's reasoning dim where tool lines go (stderr for `ask`, so stdout
 * holds only the answer), one dim line per finished tool call, and (on a
 * colour terminal) a small "thinking" marker while the model has not said
 * anything yet.
 */
import type { Agent, Message } from "@noema/core"
import { type Style, toolLine } from "../Terminal.js"

export interface Output {
  write(text: string): unknown
}

export interface Options {
  /** Where the answer text goes. */
  readonly text: Output
  /** Where tool lines go (stderr for `ask`, so stdout holds only the answer). */
  readonly tools: Output
  readonly textStyle: Style
  readonly toolStyle: Style
  /** Show a transient "thinking" marker (needs cursor control: colour terminals only). */
  readonly indicator: boolean
  /** Text and tool lines end up on the same screen (one stream, or two streams on one terminal). */
  readonly sameScreen: boolean
}

const thinking = "…"

export class TurnRenderer {
  readonly #options: Options
  readonly #calls = new Map<string, Message.ToolCall>()
  #atLineStart = true
  #indicatorShown = false
  /** Reasoning is being written and its line is still open. */
  #reasoningOpen = false
  #text = ""

  constructor(options: Options) {
    this.#options = options
  }

  /** The answer text written so far. */
  get text(): string {
    return this.#text
  }

  start(): void {
    this.#showIndicator()
  }

  event(event: Agent.AgentEvent): void {
    switch (event.type) {
      case "reasoning-delta": {
        if (event.delta.length === 0) return
        this.#hideIndicator()
        if (!this.#reasoningOpen && !this.#atLineStart && this.#options.sameScreen)
          this.#options.text.write("\n")
        this.#options.tools.write(this.#options.toolStyle.dim(event.delta))
        this.#reasoningOpen = !event.delta.endsWith("\n")
        if (this.#options.sameScreen) this.#atLineStart = !this.#reasoningOpen
        return
      }
      case "text-delta": {
        if (event.delta.length === 0) return
        this.#hideIndicator()
        this.#closeReasoning()
        this.#options.text.write(event.delta)
        this.#text += event.delta
        this.#atLineStart = event.delta.endsWith("\n")
        return
      }
      case "tool-call":
        this.#calls.set(event.toolCall.id, event.toolCall)
        return
      case "tool-result": {
        this.#hideIndicator()
        this.#closeReasoning()
        // Tool lines share the terminal with the text; start them on a line of their own.
        if (!this.#atLineStart && this.#options.sameScreen) {
          this.#options.text.write("\n")
          this.#atLineStart = true
        }
        const call = this.#calls.get(event.message.toolCallId)
        this.#options.tools.write(`${toolLine(call, event.message, this.#options.toolStyle)}\n`)
        this.#showIndicator()
        return
      }
      case "message": {
        const message = event.message
        // A refusal arrives only with the finished message; without this it would be silent.
        if (message.role === "assistant" && message.refusal !== undefined) {
          this.#hideIndicator()
          if (!this.#atLineStart) this.#options.text.write("\n")
          this.#options.text.write(`${this.#options.textStyle.yellow(`(refused) ${message.refusal}`)}\n`)
          this.#atLineStart = true
        }
        return
      }
      case "usage":
        return
    }
  }

  /** Ends the turn's output on a fresh line. */
  end(): void {
    this.#hideIndicator()
    this.#closeReasoning()
    if (!this.#atLineStart) {
      this.#options.text.write("\n")
      this.#atLineStart = true
    }
  }

  /** Ends the reasoning's line, so the answer or a tool line starts on its own. */
  #closeReasoning(): void {
    if (!this.#reasoningOpen) return
    this.#options.tools.write("\n")
    this.#reasoningOpen = false
    if (this.#options.sameScreen) this.#atLineStart = true
  }

  #showIndicator(): void {
    if (!this.#options.indicator || this.#indicatorShown || !this.#atLineStart) return
    this.#options.text.write(this.#options.textStyle.dim(thinking))
    this.#indicatorShown = true
  }

  #hideIndicator(): void {
    if (!this.#indicatorShown) return
    // Back to the start of the line and erase it.
    this.#options.text.write("\r\u001b[K")
    this.#indicatorShown = false
  }
}
