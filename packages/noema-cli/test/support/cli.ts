/**
 * Runs the installed `noema` command (bin/noema.js, which loads the built dist/bin.js) as a child process, the way a
 * person's shell would: plain pipes for `runCli`, a real pseudo-terminal
 * (util-linux `script`) for `startTerminal`. Every run gets a clean
 * environment (no OPENAI_* from the developer's shell) and its own NOEMA_HOME.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { PassThrough, Writable } from "node:stream"
import { fileURLToPath } from "node:url"
import { OpenAiTestServer } from "@noema/openai/testing"
import { afterAll, afterEach, beforeAll, beforeEach } from "vitest"
import * as Cli from "../../src/Cli.js"
import * as CliConfig from "../../src/CliConfig.js"

/**
 * The line every command that builds a model prints first when nothing configures one
 * (the frame prints it: `internal/Frame`).
 */
export const offlineNoticeLine = `${CliConfig.offlineNotice}\n`

export const binPath = fileURLToPath(new URL("../../bin/noema.js", import.meta.url))

if (!fs.existsSync(binPath)) {
  throw new Error(`${binPath} is missing: build the CLI first (npx tsc -b packages/noema-cli)`)
}

export const makeHome = (): string => fs.mkdtempSync(path.join(os.tmpdir(), "noema-cli-test-"))

export const removeHome = (home: string): void => fs.rmSync(home, { recursive: true, force: true })

const isRoot = process.getuid?.() === 0
const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((file) => fs.existsSync(file))
const asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups"]
/** The shell words that bind-mount `$1` on itself, read-only. */
const readOnlyMount = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1"'

/**
 * How `runAsReader` makes a database really read-only for the command, as root ignores file
 * modes: as the user `nobody` where `nobody` can reach this checkout and its Node, else (a
 * checkout in a 0700 directory) as root in a mount namespace of its own where `NOEMA_HOME`
 * is a read-only bind mount. `undefined`: neither can be done here (the tests say so and skip).
 */
export const readerMode: "self" | "nobody" | "read-only mount" | undefined = (() => {
  if (!isRoot) return "self"
  const reaches = (file: string) =>
    setpriv !== undefined && spawnSync(setpriv, [...asNobody, "test", "-r", file]).status === 0
  if (reaches(binPath) && reaches(process.execPath)) return "nobody"
  const probe = fs.mkdtempSync(path.join(os.tmpdir(), "noema-ro-probe-"))
  try {
    const mounted = spawnSync("unshare", [
      "-m",
      "--propagation",
      "private",
      "sh",
      "-c",
      `${readOnlyMount} && ! touch "$1/x"`,
      "sh",
      probe
    ])
    return mounted.status === 0 ? "read-only mount" : undefined
  } finally {
    fs.rmSync(probe, { recursive: true, force: true })
  }
})()

/**
 * `noema <args>` for whom the database in `NOEMA_HOME` can only be read, whatever its modes
 * say to root (see `readerMode`); synchronous, with the output as text.
 */
export const runAsReader = (
  args: ReadonlyArray<string>,
  options: { readonly env: Readonly<Record<string, string>>; readonly cwd?: string }
) => {
  const noema = [process.execPath, binPath, ...args]
  const home = options.env.NOEMA_HOME ?? ""
  const command =
    readerMode === "nobody"
      ? [setpriv as string, ...asNobody, ...noema]
      : readerMode === "read-only mount"
        ? [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            `${readOnlyMount} && shift && exec "$@"`,
            "sh",
            home,
            ...noema
          ]
        : noema
  return spawnSync(command[0] as string, command.slice(1), {
    env: cleanEnv(options.env),
    cwd: options.cwd ?? "/",
    encoding: "utf8",
    timeout: 90_000
  })
}

/** The parent's environment minus everything that configures noema, OpenAI or Anthropic. */
export const cleanEnv = (extra: Readonly<Record<string, string>>): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(OPENAI_|ANTHROPIC_|NOEMA_|OTEL_)/.test(key) || key === "NO_COLOR" || key === "FORCE_COLOR")
      continue
    env[key] = value
  }
  return { ...env, ...extra }
}

export interface Result {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface RunOptions {
  readonly env?: Readonly<Record<string, string>>
  readonly stdin?: string
  readonly cwd?: string
  readonly timeoutMs?: number
  /** Called with the child once it is spawned (e.g. to signal it). */
  readonly onStart?: (child: ChildProcess) => void
}

/**
 * `noema <args>` in this process (`Cli.run`) with streams in memory: for what runs no
 * command (help, version, a command line that does not parse), hundreds of times cheaply.
 */
export const runInProcess = async (
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string>> = {}
): Promise<Result> => {
  const collect = () => {
    let text = ""
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        text += chunk.toString("utf8")
        done()
      }
    })
    return { stream: stream as unknown as NodeJS.WriteStream, text: () => text }
  }
  const stdout = collect()
  const stderr = collect()
  const stdin = new PassThrough()
  stdin.end()
  const code = await Cli.run(args, {
    env: cleanEnv(env),
    stdin: stdin as unknown as NodeJS.ReadStream,
    stdout: stdout.stream,
    stderr: stderr.stream,
    cwd: os.tmpdir()
  })
  return { code, signal: null, stdout: stdout.text(), stderr: stderr.text() }
}

/** `noema <args>` with pipes; resolves when it exits (kills it after `timeoutMs`). */
export const runCli = (args: ReadonlyArray<string>, options: RunOptions = {}): Promise<Result> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [binPath, ...args], {
      env: cleanEnv(options.env ?? {}),
      cwd: options.cwd ?? process.cwd(),
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
    })
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk
    })
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`noema ${args.join(" ")} timed out\nstdout: ${stdout}\nstderr: ${stderr}`))
    }, options.timeoutMs ?? 90_000)
    child.on("error", reject)
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, stdout, stderr })
    })
    // A child that exits (or is killed) before it reads its input closes the pipe: the write's
    // EPIPE says nothing about the command, whose exit and output are what a test checks.
    child.stdin.on("error", () => {})
    child.stdin.end(options.stdin ?? "")
    options.onStart?.(child)
  })

/** The repository's root, where `npx noema` finds the workspace's `noema`. */
export const repositoryRoot = fileURLToPath(new URL("../../../../", import.meta.url))

export const shellQuote = (value: string): string => `'${value.replace(/'/g, "'\\''")}'`

/** A `noema` running on a pseudo-terminal, as when a person types into it. */
export interface TerminalSession {
  /** Everything the terminal showed so far (with `\r\n` line ends and escape codes). */
  readonly output: () => string
  /** Output since the last `mark()`. */
  readonly sinceMark: () => string
  readonly mark: () => void
  /** Types `text` (use "\r" for Enter, "\x03" for Ctrl-C, "\x04" for Ctrl-D). */
  readonly type: (text: string) => void
  /** Resolves once the output after the last mark, as plain text (`plainText`), matches `pattern`. */
  readonly waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<string>
  /** Resolves with the exit status of `noema` (forwarded by `script -e`). */
  readonly exited: Promise<number | null>
  readonly kill: () => void
}

/**
 * Starts `noema <args>` under util-linux `script`, which gives it a real pty:
 * stdin and stdout are terminals, Ctrl-C typed as "\x03" becomes SIGINT
 * through the terminal's line discipline, exactly as for a person.
 */
export const startTerminal = (
  args: ReadonlyArray<string>,
  options: {
    readonly env?: Readonly<Record<string, string>>
    readonly cwd?: string
    /** A shell command line to run instead of `noema <args>` (e.g. through `npx`, inside `sh -c`). */
    readonly command?: string
  } = {}
): TerminalSession => {
  const command = options.command ?? [process.execPath, binPath, ...args].map(shellQuote).join(" ")
  // A fixed size: without a controlling terminal of its own, `script` would give the pty 0 columns.
  const child: ChildProcess = spawn(
    "script",
    ["-qfec", `stty cols 120 rows 40; exec ${command}`, "/dev/null"],
    {
      env: cleanEnv({ TERM: "xterm-256color", ...options.env }),
      cwd: options.cwd ?? process.cwd(),
      stdio: ["pipe", "pipe", "pipe"]
    }
  )
  let output = ""
  let marked = 0
  const waiters = new Set<() => void>()
  const onData = (chunk: string) => {
    output += chunk
    for (const waiter of waiters) waiter()
  }
  child.stdout?.setEncoding("utf8").on("data", onData)
  child.stderr?.setEncoding("utf8").on("data", onData)
  // Typing into a terminal whose program has exited: what the test checks is the output.
  child.stdin?.on("error", () => {})
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)))
  return {
    output: () => output,
    sinceMark: () => output.slice(marked),
    mark: () => {
      marked = output.length
    },
    type: (text) => {
      child.stdin?.write(text)
    },
    waitFor: (pattern, timeoutMs = 60_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(plainText(output.slice(marked)))
          if (match === null) return
          waiters.delete(check)
          clearTimeout(timer)
          resolve(match[0])
        }
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(
            new Error(
              `timed out waiting for ${pattern}; the terminal showed:\n${JSON.stringify(output.slice(marked))}`
            )
          )
        }, timeoutMs)
        waiters.add(check)
        check()
      }),
    exited,
    kill: () => {
      child.kill("SIGKILL")
    }
  }
}

/** Terminal output without escape codes and carriage returns, for matching text. */
export const plainText = (text: string): string =>
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping terminal escape codes is the point
  text.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, "").replace(/\r/g, "")

/**
 * The usual frame of a CLI test file: one local OpenAI wire-format server for
 * the file, and a fresh `NOEMA_HOME` for each test (removed after it, with
 * the server's replies and requests reset).
 */
export const useServerAndHome = (): {
  readonly server: OpenAiTestServer.TestServer
  readonly home: string
} => {
  let server: OpenAiTestServer.TestServer | undefined
  let home: string | undefined
  beforeAll(async () => {
    server = await OpenAiTestServer.start()
  })
  afterAll(() => server?.close())
  beforeEach(() => {
    home = makeHome()
  })
  afterEach(() => {
    server?.reset()
    if (home !== undefined) removeHome(home)
  })
  return {
    get server() {
      if (server === undefined) throw new Error("the test server starts in beforeAll")
      return server
    },
    get home() {
      if (home === undefined) throw new Error("NOEMA_HOME is made in beforeEach")
      return home
    }
  }
}

/** The messages of the server's request `index` (which must exist), as `[role, content]`, optionally without system ones. */
export const requestMessages = (
  server: OpenAiTestServer.TestServer,
  index: number
): ReadonlyArray<{
  readonly role: string
  readonly content?: string | null
  readonly tool_call_id?: string
}> => {
  const request = server.requests[index]
  if (request === undefined) throw new Error(`the server got no request #${index}`)
  return (
    request.body as {
      messages: ReadonlyArray<{ role: string; content?: string | null; tool_call_id?: string }>
    }
  ).messages
}

/** A run as `runs list --json` prints it (snake_case keys). */
export interface RunJson {
  readonly run_id: string
  readonly thread_id: string
  readonly status: string
  readonly started_at?: string
  readonly finished_at?: string
  readonly stages: ReadonlyArray<{
    readonly key: string
    readonly status: string
    readonly attempts: ReadonlyArray<{
      readonly attempt: number
      readonly status: string
      readonly error?: { readonly error_code: string }
    }>
  }>
}
