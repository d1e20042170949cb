/**
 * TracesCommand: `noema traces list|show`, the turns' traces kept in the
 * database (`TraceStore`; `noema chat`, `noema ask` and the Chat view of
 * `noema serve` record them, see docs/tracing.md).
 *
 * `list` gives the newest traces (one session's with `--session`), `show` one
 * trace's spans in tree order, each on the line the Traces view shows for it
 * (`TraceStore.describeSpan`: the two never disagree), with a tool call's
 * arguments and result under it. Both only read: a database the user may only
 * read still answers them. A trace id may be given as any unique prefix.
 */
import { Tracing } from "@noema/core"
import { SessionStore, SqlStore, TraceStore } from "@noema/session"
import { Effect } from "effect"
import { type Command, readsOnly } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as IdPrefix from "./internal/IdPrefix.js"
import * as Sessions from "./internal/Sessions.js"
import * as Terminal from "./Terminal.js"

export type Options = Extract<Command, { readonly type: "traces-list" | "traces-show" }>

/** How many traces `list` prints, the newest. */
export const listed = 50

/** What a tool's arguments and result may take of a line under its span. */
const contentWidth = 200

/** The trace `idOrPrefix` names: the whole id, or the one kept trace whose id it begins. */
const resolveTrace = (traces: TraceStore.Service, idOrPrefix: string) =>
  Effect.catchTag(traces.get(idOrPrefix.trim()), "TraceNotFoundError", (notFound) =>
    Effect.gen(function* () {
      const all = yield* traces.list({ limit: Number.MAX_SAFE_INTEGER })
      const id = yield* IdPrefix.resolve(
        "trace",
        idOrPrefix,
        all.traces.map((trace) => trace.traceId),
        () => notFound
      )
      return yield* traces.get(id)
    })
  )

const turnOf = (trace: TraceStore.TraceSummary): string =>
  trace.sessionId === undefined
    ? "no session"
    : `session ${trace.sessionId}${trace.messageSeq === undefined ? "" : ` from message ${trace.messageSeq}`}`

const summaryLine = (trace: TraceStore.TraceSummary, style: Terminal.Style): string =>
  [
    trace.traceId,
    Terminal.formatTimestamp(trace.start),
    TraceStore.formatDuration(trace.duration).padStart(8),
    trace.status === "ok" ? "ok" : style.bold(trace.status),
    `${trace.spanCount} spans${trace.droppedSpans > 0 ? ` (+${trace.droppedSpans} dropped)` : ""}`,
    style.dim(turnOf(trace))
  ].join("  ")

/** A tool call's arguments and result, when the trace kept them, as lines under its span. */
const contentLines = (span: TraceStore.FinishedSpan): ReadonlyArray<string> =>
  (
    [
      ["arguments", span.attributes[Tracing.Attributes.toolCallArguments]],
      ["result", span.attributes[Tracing.Attributes.toolCallResult]]
    ] as const
  ).flatMap(([label, value]) =>
    value === undefined
      ? []
      : [
          `${label}: ${Terminal.oneLine(typeof value === "string" ? value : JSON.stringify(value), contentWidth)}`
        ]
  )

/** The trace as `show` prints it: a header line, then each span indented by its depth. */
const traceLines = (trace: TraceStore.StoredTrace, style: Terminal.Style): ReadonlyArray<string> => {
  const depths = TraceStore.depths(trace.spans)
  const lines = [
    style.bold(`trace ${trace.traceId}`),
    style.dim(
      `${turnOf(trace)} · ${Terminal.formatTimestamp(trace.start)} · ${trace.spanCount} spans` +
        (trace.droppedSpans > 0 ? ` (${trace.droppedSpans} more were not kept)` : "")
    )
  ]
  for (const span of TraceStore.treeOrder(trace.spans)) {
    const indent = "  ".repeat(depths.get(span.spanId) ?? 0)
    lines.push(`${indent}${Terminal.oneLine(span.name, 120)}  ${style.dim(TraceStore.describeSpan(span))}`)
    for (const line of contentLines(span)) lines.push(`${indent}    ${style.dim(line)}`)
  }
  return lines
}

/** A summary as JSON: what is not known is `null`, not left out. */
const summaryJson = (trace: TraceStore.TraceSummary) => ({
  ...trace,
  sessionId: trace.sessionId ?? null,
  messageSeq: trace.messageSeq ?? null
})

/** The trace as `show --json` prints it: its summary, and its spans in tree order with their depth and line. */
const traceJson = (trace: TraceStore.StoredTrace) => {
  const depths = TraceStore.depths(trace.spans)
  const { spans, ...summary } = trace
  return {
    ...summaryJson(summary),
    spans: TraceStore.treeOrder(spans).map((span) => ({
      ...span,
      parentSpanId: span.parentSpanId ?? null,
      error: span.error ?? null,
      depth: depths.get(span.spanId) ?? 0,
      line: TraceStore.describeSpan(span)
    }))
  }
}

const program = (options: Options, io: Io) =>
  Effect.gen(function* () {
    const traces = yield* TraceStore.fromDatabase
    const style = Terminal.styleFor(io.stdout, io.env)
    const print = (lines: ReadonlyArray<string>) => io.stdout.write(lines.map((line) => `${line}\n`).join(""))
    if (options.type === "traces-show") {
      const trace = yield* resolveTrace(traces, options.id)
      return print(options.json ? [JSON.stringify(traceJson(trace), null, 2)] : traceLines(trace, style))
    }
    const sessionId =
      options.session === undefined
        ? undefined
        : yield* Effect.provideServiceEffect(
            Sessions.resolveSessionId(options.session),
            SessionStore.SessionStore,
            SqlStore.fromDatabase
          )
    const page = yield* traces.list({ ...(sessionId !== undefined && { sessionId }), limit: listed })
    if (options.json)
      return print([JSON.stringify({ total: page.total, traces: page.traces.map(summaryJson) }, null, 2)])
    if (page.total === 0)
      return io.stderr.write(
        `noema: no traces kept${sessionId === undefined ? "" : ` for session ${sessionId}`} (noema ask and noema chat keep each turn's)\n`
      )
    print(page.traces.map((trace) => summaryLine(trace, style)))
    if (page.total > page.traces.length)
      io.stderr.write(`noema: the newest ${page.traces.length} of ${page.total} traces\n`)
  })

export const run = Effect.fnUntraced(function* (options: Options, io: Io) {
  const database = yield* Effect.try({
    try: () => CliConfig.resolveDatabase(options.database, io.env, CliConfig.paths(io.env), io.cwd),
    catch: (error) => error
  })
  yield* Effect.scoped(Databases.provideDatabase(program(options, io), database, readsOnly(options)))
  return ExitStatus.success
})
