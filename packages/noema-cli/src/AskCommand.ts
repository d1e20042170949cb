/**
 * AskCommand: `noema ask`, one question and its answer, for scripts and
 * shells.
 *
 * The answer streams to stdout and nothing else goes there (tool activity and
 * notices go to stderr), so `noema ask ... > answer.txt` keeps just the
 * answer; `--json` prints the turn's messages instead. The turn is saved as a
 * session (a new one, or `--session ID`); a failure exits non-zero with one
 * line on stderr and saves nothing.
 */
import type { Message } from "@noema/core"
import { Session } from "@noema/session"
import { Effect } from "effect"
import { type Command, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as CliError from "./CliError.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as Mcp from "./internal/Mcp.js"
import * as Models from "./internal/Models.js"
import * as Sessions from "./internal/Sessions.js"
import { TurnRenderer } from "./internal/TurnRenderer.js"
import * as Terminal from "./Terminal.js"
import * as TurnRunner from "./TurnRunner.js"

export type Options = Extract<Command, { readonly type: "ask" }>

/** All of `input`; a signal (the frame's) stops the reading, as it stops the turn. */
const readAll = (input: NodeJS.ReadStream, signal: AbortSignal): Promise<string> =>
  new Promise((resolve, reject) => {
    let text = ""
    const onData = (chunk: string) => {
      text += chunk
    }
    const settle = (outcome: () => void) => () => {
      input.off("data", onData).off("end", onEnd).off("error", onError)
      signal.removeEventListener("abort", onAbort)
      outcome()
    }
    const onEnd = settle(() => resolve(text))
    const onError = (error: unknown) => settle(() => reject(error))()
    const onAbort = settle(() => {
      input.pause()
      reject(signal.reason)
    })
    if (signal.aborted) return onAbort()
    input.setEncoding("utf8")
    input.on("data", onData).once("end", onEnd).once("error", onError)
    signal.addEventListener("abort", onAbort, { once: true })
  })

/**
 * The question when both an argument and piped stdin are given: the instruction, then the piped text in a fence longer than any run of
 * backticks inside it, so the model can tell where the text starts and ends.
 */
export const withPipedText = (instruction: string, piped: string): string => {
  let longestRun = 0
  for (const match of piped.matchAll(/`+/g)) longestRun = Math.max(longestRun, match[0].length)
  const fence = "`".repeat(Math.max(3, longestRun + 1))
  return `${instruction}\n\n${fence}\n${piped.replace(/\n+$/, "")}\n${fence}`
}

const question = async (options: Options, io: Io, signal: AbortSignal): Promise<string> => {
  if (options.question !== undefined) {
    if (options.question.trim() === "") throw new UsageError("the question is empty")
    // `git diff | noema ask "Write a commit message:"`: the argument is the instruction, stdin its material.
    if (io.stdin.isTTY === true) return options.question
    const piped = await readAll(io.stdin, signal)
    return piped.trim() === "" ? options.question : withPipedText(options.question, piped)
  }
  if (io.stdin.isTTY === true && !options.explicitStdin) {
    throw new UsageError('no question given; pass it as an argument or on stdin (noema ask "...")')
  }
  const text = (await readAll(io.stdin, signal)).trim()
  if (text === "") throw new UsageError("stdin held no question")
  return text
}

/** The turn's messages and the session they were saved in, for `--json`. */
export interface JsonOutput {
  readonly sessionId: string
  readonly messages: ReadonlyArray<Message.Message>
}

/**
 * One turn. A signal (Ctrl-C, SIGTERM, SIGHUP: the frame's) aborts `signal`, which
 * cancels the turn: the request is aborted, nothing is saved, and the frame exits
 * with 128 + the signal's number.
 */
const ask = async (options: Options, frame: Frame.Shape, signal: AbortSignal): Promise<number> => {
  const { io } = frame
  // The database first: a URL this build cannot use is refused before anything else is said.
  const store = Databases.storeLayer(
    CliConfig.resolveDatabase(options.database, io.env, CliConfig.paths(io.env), io.cwd)
  )
  const text = await question(options, io, signal)
  const contextBudget = CliConfig.resolveContextBudget(options.model, io.env)
  const { config, model, errors, dispose } = await Models.commandModel(options.model, frame)
  const runtime = Databases.openStore(store, frame)
  const mcp = await Mcp.openMcp(options.mcp, io.cwd, { approveAll: options.approveAll }).catch(
    async (error: unknown) => {
      dispose()
      await runtime.dispose()
      throw error
    }
  )
  const agent = Models.makeAgent({ tools: options.tools, cwd: io.cwd, mcpTools: mcp.tools })
  try {
    const session =
      options.session !== undefined
        ? await Databases.runOn(
            runtime,
            Effect.flatMap(Sessions.resolveSessionId(options.session), (id) => Session.open(id))
          )
        : // Stored with its first turn: a question that is cancelled or fails leaves no session.
          await Databases.runOn(
            runtime,
            Session.draft({ systemPrompt: options.system ?? Sessions.defaultSystemPrompt })
          )
    if (options.session !== undefined) {
      await Databases.runOn(
        runtime,
        options.system !== undefined
          ? session.setSystemPrompt(options.system)
          : Sessions.adoptDefaultSystemPrompt(session)
      )
    }
    const renderer = new TurnRenderer({
      text: options.json ? { write: () => undefined } : io.stdout,
      tools: io.stderr,
      textStyle: Terminal.plain,
      toolStyle: Terminal.styleFor(io.stderr, io.env),
      textOnTerminal: io.stdout.isTTY === true,
      toolsOnTerminal: io.stderr.isTTY === true,
      indicator: false,
      sameScreen: io.stdout.isTTY === true && io.stderr.isTTY === true
    })
    // Only a session with history can need compacting: a new one skips loading the tokenizer.
    const compaction =
      session.context().length === 0 || (contextBudget.kind === "tokens" && contextBudget.tokens === 0)
        ? undefined
        : Models.turnCompaction(await Models.makeCompaction(config, contextBudget))
    const outcome = await runtime.runPromise(
      TurnRunner.run({
        session,
        agent,
        model,
        input: text,
        renderer,
        signal,
        ...(compaction !== undefined && { compaction })
      })
    )
    if (outcome._tag !== "Committed") {
      if (outcome._tag === "Cancelled") {
        io.stderr.write("noema: cancelled; nothing was saved\n")
        // Only a signal cancels a turn here: the frame, which saw it, gives the status.
        return ExitStatus.failure
      }
      const error = outcome._tag === "Failed" ? outcome.error : outcome.defect
      CliError.report(error, io, errors)
      return ExitStatus.failure
    }
    if (outcome.cancelRequested) {
      // Ctrl-C came while the finished turn was being saved: it is saved, and the exit says it was cancelled.
      io.stderr.write("noema: interrupted while saving; the turn was saved\n")
      return ExitStatus.failure
    }
    if (options.json) {
      const output: JsonOutput = { sessionId: session.id, messages: outcome.messages }
      io.stdout.write(`${JSON.stringify(output, null, 2)}\n`)
    }
    const waiting = session.pendingApprovals()
    if (waiting.length > 0) {
      // `ask` asks nobody: the calls wait in the session for a person (`noema chat --session`) or `--yes`.
      const calls = waiting.map(Terminal.callLine).join(", ")
      io.stderr.write(
        `noema: ${calls} ${waiting.length === 1 ? "waits" : "wait"} for approval and did not run; ` +
          `decide with: noema chat --session ${Sessions.shortId(session.id)} (or run with --yes)\n`
      )
      return ExitStatus.notDone
    }
    if (options.session === undefined && io.stderr.isTTY === true) {
      const note = `session ${session.id} (continue with: noema ask --session ${Sessions.shortId(session.id)} ...)`
      io.stderr.write(`${Terminal.styleFor(io.stderr, io.env).dim(note)}\n`)
    }
    return ExitStatus.success
  } finally {
    dispose()
    await runtime.dispose()
    await mcp.close()
  }
}

export const run = (options: Options, _io: Io) =>
  Frame.promiseInFrame((frame, signal) => ask(options, frame, signal))
