/**
 * `noema serve`'s Chat view with the real CLI on both sides: a real `noema
 * serve` process (the offline model, the built-in tools), its page in a real
 * headless Chromium, and `noema chat --session ID` as a real process on the
 * same database. A conversation started in the page is continued by the
 * terminal chat (which remembers what was said in the page), the terminal's
 * turn appears in the page without a reload, and the page's next turn goes on
 * from it; a tool call reads in the page as `noema chat` prints it; each turn
 * keeps its trace, those of the page as those of the terminal.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { launchChromium } from "@noema/server/testing"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, removeHome, runCli } from "./support/cli.js"

let home: string
let serve: ChildProcess
let panel: string
let browser: Browser
let serveOutput = ""
const env = () => ({ NOEMA_HOME: path.join(home, "chat") })

beforeAll(async () => {
  home = makeHome()
  serve = spawn(process.execPath, [binPath, "serve", "--port", "0", "--json"], {
    env: cleanEnv({ ...env(), NO_COLOR: "1" }),
    stdio: ["ignore", "pipe", "pipe"]
  })
  panel = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`noema serve did not start: ${serveOutput}`)), 30_000)
    let stdout = ""
    serve.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      serveOutput += chunk
      stdout += chunk
      if (stdout.includes("\n")) {
        clearTimeout(timer)
        resolve((JSON.parse(stdout.split("\n")[0] ?? "") as { panel: string }).panel)
      }
    })
    serve.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      serveOutput += chunk
    })
    serve.on("exit", (code) => reject(new Error(`noema serve exited with ${code}: ${serveOutput}`)))
  })
  browser = await launchChromium()
}, 90_000)

afterAll(async () => {
  await browser?.close()
  serve?.kill("SIGTERM")
  removeHome(home)
})

const say = async (page: Page, text: string) => {
  await page.focus("#chat-input")
  await page.keyboard.type(text)
  await page.keyboard.press("Enter")
}

/** The answer of turn `turn` once stored (the page draws the stored turn when the turn ends). */
const answerOf = async (page: Page, turn: number) => {
  const selector = `#chat-turns article[data-turn="${turn}"] [data-kind="assistant"]:last-of-type .answer`
  await page.waitForSelector(selector, { timeout: 60_000 })
  return (await page.textContent(selector)) ?? ""
}

describe("noema serve's Chat view and noema chat --session, one conversation", () => {
  it("a chat begun in the page goes on in the terminal, and the terminal's turn goes on in the page", async () => {
    const page = await browser.newPage({ viewport: { width: 1100, height: 860 } })
    const problems: Array<string> = []
    page.on("pageerror", (error) => problems.push(error.message))
    await page.goto(`${panel}#view=chat`)
    await page.waitForSelector("#view-chat:not([hidden])")
    await expect
      .poll(() => page.textContent("#chat-agent"), { timeout: 30_000 })
      .toMatch(/offline.* · \d+ tools$/)

    // The same tool call in the page and in `noema chat`: the page shows the line the CLI prints.
    await say(page, "what is 2+2?")
    expect(await answerOf(page, 1)).toBe("2 + 2 = 4")
    const terminal = await runCli(["chat"], { env: env(), stdin: "what is 2+2?\n/exit\n" })
    const cliLine = terminal.stdout
      .split("\n")
      .find((line) => line.includes("⚙"))
      ?.trim()
    expect(cliLine).toBe("⚙ calculator(2+2) → 4")
    expect((await page.textContent('#chat-turns details[data-kind="tool"] summary'))?.trim()).toBe(cliLine)

    await say(page, "my name is Ada")
    expect(await answerOf(page, 2)).toBe("Nice to meet you, Ada. I'll remember that.")
    const id = new URLSearchParams(new URL(page.url()).hash.slice(1)).get("session") as string
    expect(id).toMatch(/\S/)

    // The terminal continues the page's conversation: it knows the name said in the page.
    const continued = await runCli(["chat", "--session", id], {
      env: env(),
      stdin: "what's my name?\n/exit\n"
    })
    expect(continued.code).toBe(0)
    expect(continued.stdout).toBe("Your name is Ada.\n")

    // The page shows the terminal's turn without a reload, and its next turn goes on from it.
    await page.waitForSelector('#chat-turns article[data-turn="3"]', { timeout: 60_000 })
    expect(await page.textContent('#chat-turns article[data-turn="3"] [data-kind="user"] .text')).toBe(
      "what's my name?"
    )
    expect(await answerOf(page, 3)).toBe("Your name is Ada.")
    await say(page, "my name is Grace")
    expect(await answerOf(page, 4)).toBe("Nice to meet you, Grace. I'll remember that.")
    const again = await runCli(["chat", "--session", id], { env: env(), stdin: "what's my name?\n/exit\n" })
    expect(again.stdout).toBe("Your name is Grace.\n")
    // Every turn keeps its trace, the page's (written by serve) as the terminal's: 3 + 2.
    await expect
      .poll(
        async () => {
          const listed = await runCli(["traces", "list", "--json", "--session", id], { env: env() })
          return (JSON.parse(listed.stdout) as { total: number }).total
        },
        { timeout: 30_000 }
      )
      .toBe(5)
    expect(problems).toEqual([])
    await page.close()
  })
})
