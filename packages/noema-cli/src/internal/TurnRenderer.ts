/**
 * Draws one turn's agent events as they arrive: answer text as it streams,
 * the model's reasoning dim where tool lines go (stderr for `ask`, so stdout
 * holds only the answer), one dim line per finished tool call, and (on a
 * colour terminal) a small "thinking" marker while the model has not said
 * anything yet. What goes to a terminal is `sanitize`d (control and
 * bidirectional characters shown as visible escapes): a model cannot set the
 * window title or clear the screen; `text` keeps what the model sent.
 */
import { PlanAgent } from "@noema/agents"
import type { Agent, Message } from "@noema/core"
import type { Session } from "@noema/session"
import { callLine, compactionLine, StreamSanitizer, type Style, sanitize, toolLine } from "../Terminal.js"

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
  /** `text` is a terminal: control characters in the answer are shown escaped. */
  readonly textOnTerminal?: boolean
  /** `tools` is a terminal: control characters in the reasoning are shown escaped. */
  readonly toolsOnTerminal?: boolean
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
  /** The plan last shown (`PlanAgent`'s `plan` data events). */
  #shownPlan: PlanAgent.Plan | undefined
  readonly #textSanitizer: StreamSanitizer | undefined
  readonly #reasoningSanitizer: StreamSanitizer | undefined

  constructor(options: Options) {
    this.#options = options
    this.#textSanitizer = options.textOnTerminal === true ? new StreamSanitizer() : undefined
    this.#reasoningSanitizer = options.toolsOnTerminal === true ? new StreamSanitizer() : undefined
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
        const delta = this.#reasoningSanitizer?.push(event.delta) ?? event.delta
        if (delta.length === 0) return
        this.#hideIndicator()
        if (!this.#reasoningOpen && !this.#atLineStart && this.#options.sameScreen)
          this.#options.text.write("\n")
        this.#options.tools.write(this.#options.toolStyle.dim(delta))
        this.#reasoningOpen = !delta.endsWith("\n")
        if (this.#options.sameScreen) this.#atLineStart = !this.#reasoningOpen
        return
      }
      case "text-delta": {
        this.#text += event.delta
        this.#writeText(this.#textSanitizer?.push(event.delta) ?? event.delta)
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
          const refusal = this.#options.textOnTerminal === true ? sanitize(message.refusal) : message.refusal
          this.#options.text.write(`${this.#options.textStyle.yellow(`(refused) ${refusal}`)}\n`)
          this.#atLineStart = true
        }
        return
      }
      case "usage":
        return
      case "approval-request": {
        this.#hideIndicator()
        this.#closeReasoning()
        if (!this.#atLineStart && this.#options.sameScreen) {
          this.#options.text.write("\n")
          this.#atLineStart = true
        }
        this.#options.tools.write(
          `${this.#options.toolStyle.yellow(`  ⏸ ${callLine(event.toolCall)} waits for your approval`)}\n`
        )
        return
      }
      case "data":
        if (event.name === PlanAgent.planEvent) this.#plan(event.data as PlanAgent.Plan)
        return
    }
  }

  /** The plan as it changes: all of it when it is made or replanned, then one line per step that changed. */
  #plan(plan: PlanAgent.Plan): void {
    const previous = this.#shownPlan
    this.#shownPlan = plan
    const style = this.#options.toolStyle
    const lines: Array<string> = []
    const line = (step: PlanAgent.PlanStep) => {
      const mark = { pending: "·", running: "›", done: "✓", failed: "✗", skipped: "–" }[step.status]
      const result = step.result === undefined || step.status === "running" ? "" : ` — ${step.result}`
      return `  ${mark} ${step.id}. ${sanitize(step.title)}${sanitize(result)}`
    }
    const known = new Map(previous?.steps.map((step) => [step.id, step]))
    if (previous === undefined || plan.steps.some((step) => !known.has(step.id))) {
      lines.push(`  Plan: ${sanitize(plan.goal)}${previous === undefined ? "" : " (revised)"}`)
      for (const step of plan.steps) lines.push(line(step))
    } else {
      for (const step of plan.steps) {
        const before = known.get(step.id)
        if (before?.status !== step.status) lines.push(line(step))
      }
    }
    if (lines.length === 0) return
    this.#hideIndicator()
    this.#closeReasoning()
    if (!this.#atLineStart && this.#options.sameScreen) {
      this.#options.text.write("\n")
      this.#atLineStart = true
    }
    for (const text of lines) this.#options.tools.write(`${style.dim(text)}\n`)
    this.#showIndicator()
  }

  /** A note on a line of its own, where tool lines go (e.g. a message queued while the answer streams). */
  note(text: string): void {
    this.#hideIndicator()
    this.#closeReasoning()
    if (!this.#atLineStart && this.#options.sameScreen) {
      this.#options.text.write("\n")
      this.#atLineStart = true
    }
    this.#options.tools.write(`${this.#options.toolStyle.dim(sanitize(text))}\n`)
    this.#showIndicator()
  }

  /** Older turns were summarised before this one: one dim line where tool lines go. */
  compacted(event: Session.Compacted): void {
    this.#hideIndicator()
    this.#closeReasoning()
    if (!this.#atLineStart && this.#options.sameScreen) {
      this.#options.text.write("\n")
      this.#atLineStart = true
    }
    this.#options.tools.write(`${this.#options.toolStyle.dim(compactionLine(event.info))}\n`)
    this.#showIndicator()
  }

  /** Ends the turn's output on a fresh line. */
  end(): void {
    this.#writeText(this.#textSanitizer?.flush() ?? "")
    this.#hideIndicator()
    this.#closeReasoning()
    if (!this.#atLineStart) {
      this.#options.text.write("\n")
      this.#atLineStart = true
    }
  }

  #writeText(text: string): void {
    if (text.length === 0) return
    this.#hideIndicator()
    this.#closeReasoning()
    this.#options.text.write(text)
    this.#atLineStart = text.endsWith("\n")
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
