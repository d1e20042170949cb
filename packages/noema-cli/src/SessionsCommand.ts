/**
 * SessionsCommand: `noema sessions list|show|delete|export|import`, the saved
 * conversations in the session database (`$NOEMA_HOME/noema.db`, or
 * `--database` / `NOEMA_DATABASE_URL`).
 *
 * The reading commands never create a SQLite database that is not there yet:
 * with no database there are simply no sessions. `export --all` and `import`
 * move sessions between databases as JSON lines (see `SessionArchive`), through
 * the store contract only, so any backend can be the source or the target.
 */
import * as fs from "node:fs"
import * as readline from "node:readline"
import { Session, SessionArchive, Usage } from "@noema/session"
import { Effect, Stream } from "effect"
import { type Command, readsOnly } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as CliError from "./CliError.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as Sessions from "./internal/Sessions.js"
import * as Terminal from "./Terminal.js"

export type Options = Extract<
  Command,
  {
    readonly type:
      | "sessions-list"
      | "sessions-show"
      | "sessions-delete"
      | "sessions-export"
      | "sessions-export-all"
      | "sessions-import"
  }
>

const openSession = (idOrPrefix: string) =>
  Effect.flatMap(Sessions.resolveSessionId(idOrPrefix), (id) => Session.open(id))

/** Writes `text`, waiting when the stream's buffer is full (a 100k-message export, a slow pipe). */
const write = (stream: NodeJS.WritableStream, text: string): Promise<void> =>
  new Promise((resolve, reject) => {
    const onError = (error: unknown) => reject(error)
    stream.once("error", onError)
    const done = () => {
      stream.off("error", onError)
      resolve()
    }
    if (stream.write(text)) done()
    else stream.once("drain", done)
  })

const exportAll = async (runtime: Databases.StoreRuntime, io: Io): Promise<number> => {
  let sessions = 0
  await Databases.runOn(
    runtime,
    Stream.runForEach(SessionArchive.exportAll, (line) =>
      Effect.promise(() => write(io.stdout, `${line}\n`).then(() => void sessions++))
    )
  )
  io.stderr.write(`noema: exported ${sessions} session${sessions === 1 ? "" : "s"}\n`)
  return 0
}

/**
 * Imports JSON lines from `file` (stdin when undefined or "-"), one session
 * per line. A line that cannot be read, or a session that cannot be stored,
 * is reported with its line number and nothing of it is stored; a session
 * that already exists is skipped and reported. Any of these makes the status 1.
 */
const importFrom = async (
  file: string | undefined,
  runtime: Databases.StoreRuntime,
  database: string,
  io: Io
): Promise<number> => {
  const fromStdin = file === undefined || file === "-"
  if (!fromStdin && !fs.existsSync(file)) {
    io.stderr.write(`noema: sessions import: no file "${file}"\n`)
    return 1
  }
  const input = fromStdin ? io.stdin : fs.createReadStream(file, { encoding: "utf8" })
  const lines = readline.createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })
  let lineNumber = 0
  let imported = 0
  let messages = 0
  let skipped = 0
  let failed = 0
  for await (const text of lines) {
    lineNumber++
    if (text.trim() === "") continue
    const line = lineNumber
    try {
      const outcome = await Databases.runOn(
        runtime,
        Effect.flatMap(SessionArchive.decodeLine(text, line), SessionArchive.importSession)
      )
      if (outcome._tag === "Imported") {
        imported++
        messages += outcome.messages
      } else {
        skipped++
        io.stderr.write(
          `noema: line ${line}: session ${outcome.id} already exists in ${database}; skipped it (nothing merged)\n`
        )
      }
    } catch (error) {
      failed++
      const detail =
        error instanceof SessionArchive.ArchiveLineError
          ? error.message
          : `line ${line}: ${CliError.describe(error)}`
      io.stderr.write(`noema: ${detail}; nothing of that session was imported\n`)
    }
  }
  io.stderr.write(
    `noema: imported ${imported} session${imported === 1 ? "" : "s"} (${messages} messages) into ${database}` +
      (skipped > 0 ? `, skipped ${skipped} that already existed` : "") +
      (failed > 0 ? `, ${failed} failed` : "") +
      "\n"
  )
  return skipped > 0 || failed > 0 ? 1 : 0
}

const execute = async (options: Options, io: Io): Promise<number> => {
  const paths = CliConfig.paths(io.env)
  const database = CliConfig.resolveDatabase(options.database, io.env, paths, io.cwd)
  const style = Terminal.styleFor(io.stdout, io.env)
  const print = (text: string) => io.stdout.write(`${text}\n`)
  if (database.kind === "sqlite" && options.type !== "sessions-import" && !fs.existsSync(database.path)) {
    switch (options.type) {
      case "sessions-list":
        print(options.json ? "[]" : (Terminal.sessionTable([])[0] as string))
        return 0
      case "sessions-export-all":
        io.stderr.write(`noema: exported 0 sessions (there is no database at ${database.path})\n`)
        return 0
      default:
        io.stderr.write(`noema: no session "${options.id}" (there are no sessions yet in ${database.path})\n`)
        return 1
    }
  }
  // Only `delete` and `import` write: the others open a SQLite file read-only.
  const runtime = await Databases.openFor(database, readsOnly(options))
  try {
    switch (options.type) {
      case "sessions-export-all":
        return await exportAll(runtime, io)
      case "sessions-import":
        return await importFrom(options.file, runtime, CliConfig.describeDatabase(database), io)
      case "sessions-list": {
        const sessions = await Databases.runOn(runtime, Sessions.listSessions)
        if (options.json) print(JSON.stringify(sessions, null, 2))
        else for (const line of Terminal.sessionTable(sessions, { style })) print(line)
        return 0
      }
      case "sessions-show": {
        const session = await Databases.runOn(runtime, openSession(options.id))
        const turns = Usage.byTurn(session.context())
        const total = Usage.ofMessages(session.context())
        const prices = CliConfig.resolvePrices(io.env, paths)
        const cost = prices === undefined ? undefined : Usage.cost(session.context(), prices)
        if (options.json) {
          // The export format plus the usage figures, which are derived from the messages.
          const usage = {
            total,
            turns: turns.map((turn) => ({ turn: turn.number, ...turn.usage })),
            ...(cost !== undefined && { cost })
          }
          print(JSON.stringify({ ...JSON.parse(session.exportJson()), usage }, null, 2))
          return 0
        }
        const info = session.info
        print(style.bold(info.title === undefined ? "(untitled)" : Terminal.sanitize(info.title)))
        print(
          style.dim(
            `session ${info.id} · created ${Terminal.formatTimestamp(info.createdAt)} · ` +
              `updated ${Terminal.formatTimestamp(info.updatedAt)} · ${info.messageCount} messages`
          )
        )
        if (session.systemPrompt !== undefined)
          print(style.dim(`system prompt: ${Terminal.sanitize(session.systemPrompt)}`))
        print(style.dim(`usage: ${Usage.format(total)}`))
        if (cost !== undefined) print(style.dim(`cost: ${Usage.formatCost(cost)}`))
        for (const turn of turns) {
          print("")
          print(style.dim(`── turn ${turn.number} · ${Usage.format(turn.usage)}`))
          for (const line of Terminal.transcript(turn.messages, { style })) print(line)
        }
        return 0
      }
      case "sessions-delete": {
        const id = await Databases.runOn(runtime, Sessions.resolveSessionId(options.id))
        await Databases.runOn(runtime, Sessions.deleteSession(id))
        print(`Deleted session ${id}`)
        return 0
      }
      case "sessions-export": {
        const session = await Databases.runOn(runtime, openSession(options.id))
        io.stdout.write(options.format === "json" ? `${session.exportJson()}\n` : session.exportMarkdown())
        return 0
      }
    }
  } finally {
    await runtime.dispose()
  }
}

/** `noema sessions ...`: each runs to its end (a signal waits for it; it is short). */
export const run = (options: Options, io: Io) => Frame.promise(() => execute(options, io))
