/**
 * SessionsCommand: `noema sessions list|show|delete|export`, the saved
 * conversations in `$NOEMA_HOME/noema.db`.
 *
 * These commands only read (or delete), so they never create a database that
 * is not there yet: with no database there are simply no sessions.
 */
import * as fs from "node:fs"
import { Session } from "@noema/session"
import { Effect } from "effect"
import type { Io } from "./Cli.js"
import type { Command } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as Runtime from "./internal/runtime.js"
import * as Terminal from "./Terminal.js"

export type Options = Extract<
  Command,
  { readonly type: "sessions-list" | "sessions-show" | "sessions-delete" | "sessions-export" }
>

const openSession = (idOrPrefix: string) =>
  Effect.flatMap(Runtime.resolveSessionId(idOrPrefix), (id) => Session.open(id))

export const run = async (options: Options, io: Io): Promise<number> => {
  const paths = CliConfig.paths(io.env)
  const style = Terminal.styleFor(io.stdout, io.env)
  const print = (text: string) => io.stdout.write(`${text}\n`)
  if (!fs.existsSync(paths.database)) {
    if (options.type === "sessions-list") {
      print(options.json ? "[]" : (Terminal.sessionTable([])[0] as string))
      return 0
    }
    io.stderr.write(`noema: no session "${options.id}" (there are no sessions yet in ${paths.home})\n`)
    return 1
  }
  const runtime = Runtime.openStore(paths)
  try {
    switch (options.type) {
      case "sessions-list": {
        const sessions = await Runtime.runOn(runtime, Runtime.listSessions)
        if (options.json) print(JSON.stringify(sessions, null, 2))
        else for (const line of Terminal.sessionTable(sessions, { style })) print(line)
        return 0
      }
      case "sessions-show": {
        const session = await Runtime.runOn(runtime, openSession(options.id))
        if (options.json) {
          print(session.exportJson())
          return 0
        }
        const info = session.info
        print(style.bold(info.title ?? "(untitled)"))
        print(
          style.dim(
            `session ${info.id} · created ${Terminal.formatTimestamp(info.createdAt)} · ` +
              `updated ${Terminal.formatTimestamp(info.updatedAt)} · ${info.messageCount} messages`
          )
        )
        if (session.systemPrompt !== undefined) print(style.dim(`system prompt: ${session.systemPrompt}`))
        print("")
        for (const line of Terminal.transcript(session.context(), { style })) print(line)
        return 0
      }
      case "sessions-delete": {
        const id = await Runtime.runOn(runtime, Runtime.resolveSessionId(options.id))
        await Runtime.runOn(runtime, Runtime.deleteSession(id))
        print(`Deleted session ${id}`)
        return 0
      }
      case "sessions-export": {
        const session = await Runtime.runOn(runtime, openSession(options.id))
        io.stdout.write(options.format === "json" ? `${session.exportJson()}\n` : session.exportMarkdown())
        return 0
      }
    }
  } finally {
    await runtime.dispose()
  }
}
