/**
 * ProcessTransport: an MCP transport over a child process's stdin and stdout
 * that owns the whole process tree it starts.
 *
 * The SDK's `StdioClientTransport` ends only the process it spawned. A server
 * started through `npx`, `uvx` or a shell runs the real server as a child of
 * that process, and a server may start helpers of its own: when noema gave up
 * on it (no answer to `initialize`, a failed start), those were left running
 * with init as their parent. So the server is started as the leader of a new
 * process group, which everything it starts joins unless it leaves it on
 * purpose, and `close` ends the group, in the order MCP describes for stdio:
 * stdin closed, then SIGTERM, then SIGKILL, each after a grace period, to
 * every process of the group even when the leader has already exited.
 *
 * `close` is safe to call on every path (a start that failed, a timeout, an
 * interruption, the scope closing) and any number of times: it is one
 * shutdown, shared. Windows has no process groups: there, only the server's
 * own process is ended.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { PassThrough } from "node:stream"
import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"

export interface Options {
  readonly command: string
  readonly args: ReadonlyArray<string>
  /** The whole environment of the server. */
  readonly env: Readonly<Record<string, string>>
  readonly cwd?: string | undefined
}

/** How long each step of a shutdown waits before the next, harsher one. */
const grace = 2000
/** How often a shutdown looks whether the group is gone. */
const pollEvery = 25

const groups = process.platform !== "win32"

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref())

/** Signals the process group led by `pid` (the process alone on Windows); false when none is left. */
const signalGroup = (child: ChildProcess, pid: number, signal: NodeJS.Signals | 0): boolean => {
  try {
    if (groups) process.kill(-pid, signal)
    else if (signal !== 0) child.kill(signal)
    else return child.exitCode === null && child.signalCode === null
    return true
  } catch {
    // ESRCH: no process is left in the group.
    return false
  }
}

/** Waits until no process of the group is left, or `ms` have passed. */
const groupGone = async (child: ChildProcess, pid: number, ms: number) => {
  for (let waited = 0; waited < ms && signalGroup(child, pid, 0); waited += pollEvery) await sleep(pollEvery)
}

export class ProcessTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: ((message: JSONRPCMessage) => void) | undefined

  /** What the server writes to stderr (available before `start`, so nothing early is lost). */
  readonly stderr = new PassThrough()

  readonly #options: Options
  readonly #readBuffer = new ReadBuffer()
  #child: ChildProcess | undefined
  #exited: Promise<void> = Promise.resolve()
  #closing: Promise<void> | undefined

  constructor(options: Options) {
    this.#options = options
  }

  /** The server's process id, once started. */
  get pid(): number | undefined {
    return this.#child?.pid
  }

  start(): Promise<void> {
    if (this.#child !== undefined || this.#closing !== undefined)
      return Promise.reject(new Error("ProcessTransport: already started"))
    return new Promise((resolve, reject) => {
      const child = spawn(this.#options.command, [...this.#options.args], {
        env: { ...this.#options.env },
        ...(this.#options.cwd !== undefined && { cwd: this.#options.cwd }),
        stdio: ["pipe", "pipe", "pipe"],
        // The leader of a process group of its own: what it starts can be ended with it.
        detached: groups,
        windowsHide: true
      })
      this.#child = child
      this.#exited = new Promise((settled) => child.once("exit", () => settled()))
      child.once("error", (error) => {
        reject(error)
        this.onerror?.(error)
      })
      child.once("spawn", () => resolve())
      child.once("close", () => this.onclose?.())
      child.stdin?.on("error", (error) => this.onerror?.(error))
      child.stdout?.on("error", (error) => this.onerror?.(error))
      child.stdout?.on("data", (chunk: Buffer) => {
        this.#readBuffer.append(chunk)
        this.#dispatch()
      })
      child.stderr?.pipe(this.stderr)
    })
  }

  #dispatch(): void {
    for (;;) {
      let message: JSONRPCMessage | null
      try {
        message = this.#readBuffer.readMessage()
      } catch (error) {
        this.onerror?.(error instanceof Error ? error : new Error(String(error)))
        continue
      }
      if (message === null) return
      this.onmessage?.(message)
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.#child?.stdin
    if (stdin === undefined || stdin === null || this.#closing !== undefined)
      return Promise.reject(new Error("ProcessTransport: not connected"))
    return new Promise((resolve) => {
      if (stdin.write(serializeMessage(message))) resolve()
      else stdin.once("drain", resolve)
    })
  }

  /** Ends the server and everything it started (see the module's comment); one shutdown, shared. */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown()
    return this.#closing
  }

  async #shutdown(): Promise<void> {
    const child = this.#child
    const pid = child?.pid
    if (child !== undefined && pid !== undefined) {
      child.stdin?.end()
      await Promise.race([this.#exited, sleep(grace)])
      if (signalGroup(child, pid, "SIGTERM")) await groupGone(child, pid, grace)
      // Whatever is left cannot refuse this; the server itself is waited for, so it is gone on return.
      signalGroup(child, pid, "SIGKILL")
      await Promise.race([this.#exited, sleep(grace)])
    }
    this.#readBuffer.clear()
  }
}
