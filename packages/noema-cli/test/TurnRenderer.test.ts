import { describe, expect, it } from "vitest"
import { TurnRenderer } from "../src/internal/TurnRenderer.js"
import { plain, type Style } from "../src/Terminal.js"

const marking: Style = { ...plain, enabled: true, dim: (text) => `<dim>${text}</dim>` }

const sink = () => {
  const written: Array<string> = []
  return { written, write: (text: string) => written.push(text), all: () => written.join("") }
}

describe("TurnRenderer and reasoning", () => {
  it("writes reasoning dim where tool lines go, and keeps the answer clean on stdout", () => {
    const stdout = sink()
    const stderr = sink()
    const renderer = new TurnRenderer({
      text: stdout,
      tools: stderr,
      textStyle: plain,
      toolStyle: marking,
      indicator: false,
      sameScreen: false
    })
    renderer.event({ type: "reasoning-delta", delta: "Thinking " })
    renderer.event({ type: "reasoning-delta", delta: "hard." })
    renderer.event({ type: "text-delta", delta: "Answer." })
    renderer.end()
    expect(stderr.all()).toBe("<dim>Thinking </dim><dim>hard.</dim>\n")
    expect(stdout.all()).toBe("Answer.\n")
    expect(renderer.text).toBe("Answer.")
  })

  it("on one screen, the answer starts on a line of its own after the reasoning", () => {
    const screen = sink()
    const renderer = new TurnRenderer({
      text: screen,
      tools: screen,
      textStyle: plain,
      toolStyle: marking,
      indicator: false,
      sameScreen: true
    })
    renderer.event({ type: "reasoning-delta", delta: "Hmm." })
    renderer.event({ type: "text-delta", delta: "Yes." })
    renderer.end()
    expect(screen.all()).toBe("<dim>Hmm.</dim>\nYes.\n")
  })
  it("shows control sequences in an answer on a terminal as visible escapes, and keeps the text it got", () => {
    const answer = ["Hi\u001b]0;pw", "ned\u0007 there\u001b[2J", "!"]
    const render = (onTerminal: boolean) => {
      const screen = sink()
      const renderer = new TurnRenderer({
        text: screen,
        tools: screen,
        textStyle: plain,
        toolStyle: plain,
        textOnTerminal: onTerminal,
        toolsOnTerminal: onTerminal,
        indicator: false,
        sameScreen: true
      })
      renderer.event({ type: "reasoning-delta", delta: "think\u001b]0;x\u0007\n" })
      for (const delta of answer) renderer.event({ type: "text-delta", delta })
      renderer.end()
      return { shown: screen.all(), text: renderer.text }
    }
    const terminal = render(true)
    expect(terminal.shown).toBe("think\\x1b]0;x\\x07\nHi\\x1b]0;pwned\\x07 there\\x1b[2J!\n")
    expect(terminal.text).toBe(answer.join(""))
    // A pipe or a file gets the answer exactly as the model sent it.
    expect(render(false).shown).toBe(`think\u001b]0;x\u0007\n${answer.join("")}\n`)
  })
})
