/**
 * Terminal: how the CLI draws on a terminal, and when it must not.
 *
 * Colour and cursor codes are used only on a TTY, never when `NO_COLOR` is
 * set or `TERM=dumb`, so piped output and logs stay plain text. Tool activity
 * is one dim line per call (`  ⚙ calculator(2+2) → 4`) and earlier turns are
 * replayed compactly; both are pure functions of messages, tested as text.
 */
import { Message, Printable } from "@noema/core"
import { Compaction, type SessionStore } from "@noema/session"

export type Environment = Readonly<Record<string, string | undefined>>

export interface Style {
  /** True when ANSI codes are written. */
  readonly enabled: boolean
  readonly bold: (text: string) => string
  readonly dim: (text: string) => string
  readonly red: (text: string) => string
  readonly green: (text: string) => string
  readonly yellow: (text: string) => string
  readonly cyan: (text: string) => string
}

/** Whether a stream should get colour: a TTY, no `NO_COLOR`, not a dumb terminal. */
export const colorEnabled = (stream: { readonly isTTY?: boolean }, env: Environment): boolean =>
  stream.isTTY === true && (env.NO_COLOR === undefined || env.NO_COLOR === "") && env.TERM !== "dumb"

const wrap =
  (enabled: boolean, open: number, close: number) =>
  (text: string): string =>
    enabled && text.length > 0 ? `\u001b[${open}m${text}\u001b[${close}m` : text

export const style = (enabled: boolean): Style => ({
  enabled,
  bold: wrap(enabled, 1, 22),
  dim: wrap(enabled, 2, 22),
  red: wrap(enabled, 31, 39),
  green: wrap(enabled, 32, 39),
  yellow: wrap(enabled, 33, 39),
  cyan: wrap(enabled, 36, 39)
})

export const plain: Style = style(false)

export const styleFor = (stream: { readonly isTTY?: boolean }, env: Environment): Style =>
  style(colorEnabled(stream, env))

// ---------------------------------------------------------------------------
// Text from elsewhere on a terminal
// ---------------------------------------------------------------------------

/**
 * Text a model, a tool, a user or the database supplied, made safe to print
 * on a terminal: every control character (C0 but newline and tab, DEL, C1)
 * and every bidirectional-text control is shown as a visible escape (`\x1b`,
 * `\u202e`, see `Printable.escapeControls`), so an escape sequence cannot set
 * the window title or clear the screen, and an override cannot make a line
 * read otherwise; a CRLF is a newline. Only what is shown changes; stored text
 * stays as it was. noema styles the result afterwards.
 *
 * The CLI's one sanitiser, in three shapes: `sanitize` for text of several
 * lines, `oneLine` for prose in a summary line, `inline` for a name or a path
 * (an artifact, a stage, a key) shown exactly, newlines and tabs escaped too.
 */
export const sanitize = (text: string): string =>
  Printable.escapeControls(text.replace(/\r\n/g, "\n"), "\n\t")

/** A name or a path as it is, on one line: every control and bidirectional character escaped. */
export const inline = (text: string): string => Printable.escapeControls(text)

/**
 * `sanitize` for text that arrives in pieces: a carriage return that ends a
 * piece is held back until the next one says whether it begins a CRLF.
 */
export class StreamSanitizer {
  #held = ""

  /** The printable part of `piece` (and of what was held back before it). */
  push(piece: string): string {
    const text = this.#held + piece
    const cut = text.endsWith("\r") ? text.length - 1 : text.length
    this.#held = text.slice(cut)
    return sanitize(text.slice(0, cut))
  }

  /** What is still held back, made safe (the stream ended). */
  flush(): string {
    const rest = sanitize(this.#held)
    this.#held = ""
    return rest
  }
}

// ---------------------------------------------------------------------------
// Text helpers
// ---------------------------------------------------------------------------

/** Prose as one line of at most `max` characters (whitespace collapsed, escaped as `inline`, an ellipsis when cut). */
export const oneLine = (text: string, max: number): string => {
  const single = inline(text.replace(/\s+/g, " ").trim())
  return single.length <= max ? single : `${single.slice(0, Math.max(0, max - 1))}…`
}

/**
 * A tool call's arguments as people would write them: the value alone when
 * there is a single string argument (`calculator(2+2)`), `key=value` pairs
 * otherwise, the raw text when it is not a JSON object.
 */
export const formatArguments = (argumentsJson: string, max = 60): string => {
  let parsed: unknown
  try {
    parsed = JSON.parse(argumentsJson.trim() === "" ? "{}" : argumentsJson)
  } catch {
    return oneLine(argumentsJson, max)
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    return oneLine(argumentsJson, max)
  }
  const entries = Object.entries(parsed)
  if (entries.length === 1 && typeof entries[0]?.[1] === "string") return oneLine(entries[0][1], max)
  return oneLine(
    entries
      .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
      .join(", "),
    max
  )
}

/** A tool result in a few words: its first line, or its size when it is long. */
export const formatResult = (content: string, max = 60): string => {
  const lines = content.split("\n")
  if (lines.length > 1) {
    const count = lines.at(-1) === "" ? lines.length - 1 : lines.length
    return `${count} lines, ${content.length} chars`
  }
  return oneLine(content, max)
}

/** `  ⚙ calculator(2+2) → 4`, or `  ⚙ read_file(../x) ✗ Refusing to read ...` for an error. */
export const toolLine = (
  call: Message.ToolCall | undefined,
  result: Message.ToolMessage,
  styled: Style = plain
): string => {
  const name = inline(call?.name ?? result.name)
  const args = call === undefined ? "" : formatArguments(call.arguments)
  const outcome = result.isError ? `✗ ${oneLine(result.content, 100)}` : `→ ${formatResult(result.content)}`
  const line = `  ⚙ ${name}(${args}) ${outcome}`
  return result.isError ? styled.dim(styled.red(line)) : styled.dim(line)
}

/** A call that waits for approval, as the chat asks about it: `delete_file(path: "a.txt")`. */
export const callLine = (call: Message.ToolCall): string =>
  `${inline(call.name)}(${formatArguments(call.arguments)})`

// ---------------------------------------------------------------------------
// Transcripts
// ---------------------------------------------------------------------------

export interface TranscriptOptions {
  /** Cut long assistant answers to this many lines (default: keep everything). */
  readonly maxLines?: number
  readonly style?: Style
  /** The prompt marker in front of user messages. */
  readonly userMarker?: string
}

const limitLines = (text: string, maxLines: number | undefined): string => {
  if (maxLines === undefined) return text
  const lines = text.split("\n")
  if (lines.length <= maxLines) return text
  return `${lines.slice(0, maxLines).join("\n")}\n… (${lines.length - maxLines} more lines)`
}

/**
 * A conversation as the chat showed it: user lines after the prompt marker,
 * answers as text, tool calls as one dim line each. System messages are left
 * out (they are configuration, not conversation), except a compaction's
 * summary, which is one dim line where it was made. Like every summary here
 * (tool lines, titles), it is `sanitize`d whatever the output: it is for
 * reading, and `sessions export` has the exact text.
 */
export const transcript = (
  messages: Iterable<Message.Message>,
  options: TranscriptOptions = {}
): Array<string> => {
  const styled = options.style ?? plain
  const marker = options.userMarker ?? "›"
  const calls = new Map<string, Message.ToolCall>()
  const lines: Array<string> = []
  for (const message of messages) {
    switch (message.role) {
      case "system": {
        const summary = Compaction.summaryOf(message)
        if (summary !== undefined) {
          if (lines.length > 0) lines.push("")
          lines.push(
            styled.dim(`(here the ${summary.replaced} messages before were summarised for the model)`)
          )
        }
        break
      }
      case "user":
        if (lines.length > 0) lines.push("")
        lines.push(`${styled.bold(marker)} ${limitLines(sanitize(Message.text(message)), options.maxLines)}`)
        break
      case "assistant":
        for (const call of message.toolCalls ?? []) calls.set(call.id, call)
        if (message.refusal !== undefined) lines.push(styled.yellow(`(refused) ${sanitize(message.refusal)}`))
        if (Message.text(message).length > 0)
          lines.push(limitLines(sanitize(Message.text(message)), options.maxLines))
        break
      case "tool":
        lines.push(toolLine(calls.get(message.toolCallId), message, styled))
        break
    }
  }
  return lines
}

/** Epoch milliseconds as `2025-03-01 14:05` in local time, for listings. */
export const formatTimestamp = (epochMillis: number): string => {
  const date = new Date(epochMillis)
  const pad = (value: number) => String(value).padStart(2, "0")
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}`
  )
}

/**
 * Sessions as a table: id, last change, message count, title. `current` is
 * marked, so `/sessions` in a chat shows where you are.
 */
export const sessionTable = (
  sessions: ReadonlyArray<SessionStore.SessionInfo>,
  options: { readonly style?: Style; readonly current?: string | undefined } = {}
): Array<string> => {
  const styled = options.style ?? plain
  if (sessions.length === 0) return ["No sessions yet. Start one with: noema chat"]
  const idWidth = Math.max(2, ...sessions.map((info) => info.id.length))
  const header = `  ${"ID".padEnd(idWidth)}  ${"UPDATED".padEnd(16)}  ${"MSGS".padStart(4)}  TITLE`
  const rows = sessions.map((info) => {
    const marker = info.id === options.current ? "*" : " "
    const title = info.title === undefined ? styled.dim("(untitled)") : oneLine(info.title, 60)
    return `${marker} ${info.id.padEnd(idWidth)}  ${formatTimestamp(info.updatedAt)}  ${String(info.messageCount).padStart(4)}  ${title}`
  })
  return [styled.dim(header), ...rows]
}

/** Numbers as people read them: 12,345. */
const count = (value: number): string => value.toLocaleString("en-US")

/** What a compaction did, in one line: how much it replaced, and the tokens before and after. */
export const compactionLine = (info: {
  readonly replaced: number
  readonly tokensBefore: number
  readonly tokensAfter: number
  readonly exact: boolean
}): string =>
  `(compacted: ${count(info.replaced)} earlier messages summarised, ${count(info.tokensBefore)} -> ` +
  `${count(info.tokensAfter)} tokens${info.exact ? "" : " (estimated)"}; the originals stay saved)`
