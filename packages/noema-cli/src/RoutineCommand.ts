/**
 * RoutineCommand: `noema routine run FILE [--goal ID]` works through the goals
 * of a work breakdown document with live progress; `noema routine status FILE`
 * shows each goal's tasks (and, with `--write`, writes the progress back into
 * the document). A task is done when the agent says so (`complete_task`); one
 * it could not do stays open with its reason, and a run that leaves tasks open
 * ends with exit code 1 after naming them. State lives in the routines tables of the configured database,
 * keyed by the document's absolute path, saved after every step: a run that was
 * killed continues where it stopped.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Message } from "@noema/core"
import {
  Routine,
  type RoutineContext,
  RoutineStore,
  SqlRoutineStore,
  Variables,
  WorkBreakdown
} from "@noema/routines"
import { SessionStore, SqlStore } from "@noema/session"
import { Cause, Effect, Exit, Layer, ManagedRuntime } from "effect"
import { isMap, isSeq, parseDocument } from "yaml"
import { type RoutineCommand, readsOnly } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as Models from "./internal/Models.js"
import * as Sessions from "./internal/Sessions.js"
import * as Terminal from "./Terminal.js"
import * as BuiltinTools from "./tools/BuiltinTools.js"

const load = (file: string, io: Io) => {
  const full = path.resolve(io.cwd, file)
  let text: string
  try {
    text = fs.readFileSync(full, "utf8")
  } catch (error) {
    throw new Error(
      `routine: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)})`
    )
  }
  return { full, text, breakdown: WorkBreakdown.parse(text, full) }
}

const databaseOf = (options: { readonly database: string | undefined }, io: Io) =>
  CliConfig.resolveDatabase(options.database, io.env, CliConfig.paths(io.env), io.cwd)

/** The stores `routine run` writes to (the SQLite file and its directory are created if need be). */
const openStore = (options: { readonly database: string | undefined }, io: Io) =>
  // The sessions beside the routines: `--session` reads one for message and thread variables.
  ManagedRuntime.make(
    Layer.merge(SqlRoutineStore.layerFromDatabase, SqlStore.layerFromDatabase).pipe(
      Layer.provide(Databases.databaseLayer(databaseOf(options, io)))
    )
  )

/**
 * The stored progress of the chains of the document `file`, read as `routine status`
 * reads (only reading: `Databases.openReadOnlyFirst`). No database yet is no progress
 * yet, and none is created.
 */
const storedStates = (
  options: Extract<RoutineCommand, { type: "routine-status" }>,
  file: string,
  io: Io
): Promise<ReadonlyArray<RoutineStore.ChainState>> => {
  const database = databaseOf(options, io)
  if (database.kind === "sqlite" && !fs.existsSync(database.path)) return Promise.resolve([])
  const list = Effect.flatMap(Effect.service(RoutineStore.RoutineStore), (store) => store.list(file))
  return Effect.runPromise(
    Databases.provideDatabase(
      Effect.provide(list, SqlRoutineStore.layerFromDatabase),
      database,
      readsOnly(options)
    )
  )
}

const runOn = async <A, E>(
  runtime: ManagedRuntime.ManagedRuntime<RoutineStore.RoutineStore | SessionStore.SessionStore, unknown>,
  effect: Effect.Effect<A, E, RoutineStore.RoutineStore | SessionStore.SessionStore>,
  signal?: AbortSignal
): Promise<A> => {
  const exit = await runtime.runPromiseExit(effect, signal === undefined ? {} : { signal })
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/** The first line of what the model said, made safe for the terminal. */
const firstLine = (text: string): string => Terminal.oneLine(text.trim().split("\n")[0] ?? "", 100)

// Chains, tasks and titles come from the document (or a model that wrote it): shown sanitised.
const { inline, oneLine } = Terminal

const progressLine = (event: RoutineContext.RoutineEvent): string | undefined => {
  switch (event.type) {
    case "setup":
      return `▶ ${inline(event.chain)}: ${event.completed} of ${event.total} task${event.total === 1 ? "" : "s"} done${
        event.resumed ? " (resumed)" : ""
      }`
    case "preamble":
      return `  ${event.kind} preamble sent`
    case "overview":
      return `  told what is already done: ${inline(event.completed.join(", "))}`
    case "task-started":
      return `  · ${inline(event.chain)} ${inline(event.task)}: ${oneLine(event.title, 100)}`
    case "task-completed":
      return `  ✓ ${inline(event.chain)} ${inline(event.task)}: ${firstLine(event.summary === "" ? Message.text(event.evidence) : event.summary)}`
    case "task-open":
      return `  ○ ${inline(event.chain)} ${inline(event.task)} left open: ${oneLine(event.reason, 200)}`
    case "task-skipped":
      return `  ⤼ ${inline(event.chain)} ${inline(event.task)}: ticked in the document, not run`
    case "reopened":
      return `↺ ${inline(event.chain)} was complete; reopened for ${inline(event.tasks.join(", "))}`
    case "goal-completed":
      return `✔ ${inline(event.chain)} complete`
    case "setup-failed":
    case "agent":
      return undefined
  }
}

const runGoals = async (
  options: Extract<RoutineCommand, { type: "routine-run" }>,
  frame: Frame.Shape,
  signal: AbortSignal
): Promise<number> => {
  const { io } = frame
  const { full, breakdown } = load(options.file, io)
  const chains = WorkBreakdown.select(breakdown, options.goal)
  // Retries shown; a failure that ends the run is told with the model's server (the frame's report).
  const { model, dispose } = await Models.commandModel(options.model, frame)
  const runtime = openStore(options, io)
  const sessionSources =
    options.session === undefined
      ? []
      : await runOn(
          runtime,
          Effect.gen(function* () {
            const id = yield* Sessions.resolveSessionId(options.session!)
            return Variables.session(yield* Effect.service(SessionStore.SessionStore), id)
          })
        ).catch(async (error: unknown) => {
          dispose()
          await runtime.dispose()
          throw error
        })
  const sources: Array<Variables.Source> = [
    ...Variables.values(options.vars),
    Variables.directory(path.resolve(io.cwd, options.documents ?? path.dirname(full))),
    ...(options.stakeholders === undefined
      ? []
      : [Variables.stakeholders(path.resolve(io.cwd, options.stakeholders))]),
    ...sessionSources
  ]
  const leftOpen: Array<string> = []
  try {
    const store = await runOn(runtime, Effect.service(RoutineStore.RoutineStore))
    const routine = Routine.make({
      breakdown,
      id: full,
      model,
      store,
      tools: options.noTools ? [] : BuiltinTools.make({ root: io.cwd }),
      sources,
      onEvent: (event) =>
        Effect.sync(() => {
          if (event.type === "task-open") leftOpen.push(`${event.chain} ${event.task}`)
          if (event.type === "setup-failed") {
            io.stderr.write(
              `noema: setting up ${inline(event.chain)} failed (attempt ${event.attempt}): ${oneLine(event.error, 300)}${
                event.willRetry ? "; retrying" : ""
              }\n`
            )
            return
          }
          const line = progressLine(event)
          if (line !== undefined) io.stdout.write(`${line}\n`)
        })
    })
    const pending = []
    for (const chain of chains) {
      // A chain stored complete whose document gained tasks runs (it reopens); one the document
      // completed (the rest ticked) runs its setup, which stores it complete.
      const state = await runOn(runtime, store.load(full, WorkBreakdown.chainKey(chain)))
      if (state?.status === "complete" && Routine.chainProgress(chain, state).status === "complete")
        io.stdout.write(`✔ ${inline(WorkBreakdown.chainKey(chain))} already complete\n`)
      else pending.push(chain)
    }
    await runOn(runtime, routine.runChains(pending, { concurrency: options.parallel }), signal)
    if (leftOpen.length === 0) return 0
    io.stderr.write(
      `noema: ${leftOpen.length} task${leftOpen.length === 1 ? "" : "s"} left open (${inline(leftOpen.join(", "))}); \`noema routine status ${oneLine(options.file, 200)}\` says why, and a new run tries again\n`
    )
    return 1
  } finally {
    dispose()
    await runtime.dispose()
  }
}

/** YAML with `done: true|false` on every task, comments and layout kept. */
const yamlWithDone = (text: string, done: (chain: string, task: string) => boolean): string => {
  const document = parseDocument(text)
  const skills = document.get("skills")
  if (!isSeq(skills)) return text
  skills.items.forEach((skill, s) => {
    if (!isMap(skill)) return
    const scenarios = skill.get("scenarios")
    if (!isSeq(scenarios)) return
    scenarios.items.forEach((scenario, c) => {
      if (!isMap(scenario)) return
      const tasks = scenario.get("tasks")
      if (!isSeq(tasks)) return
      tasks.items.forEach((task, t) => {
        if (!isMap(task)) return
        const chain = `${skill.get("id")}/${scenario.get("id")}`
        document.setIn(["skills", s, "scenarios", c, "tasks", t, "done"], done(chain, String(task.get("id"))))
      })
    })
  })
  return document.toString()
}

const status = async (
  options: Extract<RoutineCommand, { type: "routine-status" }>,
  io: Io
): Promise<number> => {
  const { full, text, breakdown } = load(options.file, io)
  const states = await storedStates(options, full, io)
  const progress = Routine.progress(breakdown, states)
  if (options.write) {
    const done = new Set(
      progress.flatMap((chain) =>
        chain.tasks.filter((task) => task.done).map((task) => `${chain.chain} ${task.id}`)
      )
    )
    const isDone = (chain: string, task: string) => done.has(`${chain} ${task}`)
    if (breakdown.format === "json") {
      throw new Error(
        "routine status --write: JSON documents have no place for progress; use YAML or Markdown"
      )
    }
    const written =
      breakdown.format === "markdown"
        ? WorkBreakdown.withCheckboxes(text, isDone)
        : yamlWithDone(text, isDone)
    // Written beside, then renamed: a crash leaves the old document or the new one.
    const temporary = `${full}.${process.pid}.tmp`
    fs.writeFileSync(temporary, written)
    fs.renameSync(temporary, full)
  }
  if (options.json) {
    io.stdout.write(`${JSON.stringify(progress, null, 2)}\n`)
    return 0
  }
  for (const chain of progress) {
    const count = chain.tasks.filter((task) => task.done).length
    io.stdout.write(`${inline(chain.chain)} (${chain.status}, ${count}/${chain.tasks.length})\n`)
    for (const task of chain.tasks) {
      const note = task.ticked
        ? " (ticked in the document, not run)"
        : task.open === undefined
          ? ""
          : ` (open: ${oneLine(task.open, 200)})`
      io.stdout.write(`  [${task.done ? "x" : " "}] ${inline(task.id)}: ${oneLine(task.title, 200)}${note}\n`)
    }
  }
  if (options.write) io.stdout.write(`progress written to ${options.file}\n`)
  return 0
}

/** `noema routine run|status`: a signal stops the run where it is (its progress is saved after every step). */
export const run = (options: RoutineCommand, io: Io) =>
  Frame.promiseInFrame((frame, signal) =>
    options.type === "routine-run" ? runGoals(options, frame, signal) : status(options, io)
  )
