/**
 * The frame's signals, where no command handles them itself: a signal interrupts
 * the command, even one waiting for its input (the frame's signal aborts the read),
 * and the exit status is 128 + the signal's number.
 */
import { spawn } from "node:child_process"
import * as os from "node:os"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { binPath, cleanEnv, makeHome, removeHome } from "./support/cli.js"

let home: string
beforeEach(() => {
  home = makeHome()
})
afterEach(() => removeHome(home))

/**
 * `noema ask -` with a stdin that stays open: it waits for the question. Once it says so
 * (the offline-model notice comes first), `signal` is sent.
 */
const askWaitingForStdin = (signal: NodeJS.Signals) =>
  new Promise<{ readonly code: number | null; readonly stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [binPath, "ask", "-"], {
      env: cleanEnv({ NOEMA_HOME: home }),
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stderr = ""
    let sent = false
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`noema ask did not stop: ${stderr}`))
    }, 60_000)
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
      if (sent || !stderr.includes("\n")) return
      sent = true
      child.kill(signal)
    })
    child.on("close", (code) => {
      clearTimeout(timer)
      child.stdin.destroy()
      resolve({ code, stderr })
    })
  })

describe("the frame's signals", () => {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    it(`${signal} stops a command waiting for its input: exit ${128 + os.constants.signals[signal]}`, async () => {
      const result = await askWaitingForStdin(signal)
      expect(result.code, result.stderr).toBe(128 + os.constants.signals[signal])
      expect(result.stderr).not.toMatch(/\n\s+at /)
    })
  }
})
