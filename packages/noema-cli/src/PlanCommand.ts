/**
 * PlanCommand: `noema plan "request"` (the planner, its tree shown as it is
 * worked on, the answer at the end) and `noema tasks show URN` (a stored tree),
 * over the resources in the configured database, every access through the
 * policy (`--policy`, else the default one, written on first use: `DefaultPolicy`).
 */
import { Planner } from "@noema/planner"
import {
  type Policy,
  Resource,
  ResourceEvents,
  ResourceIndex,
  SqlResourceStore,
  Urn,
  VectorIndex
} from "@noema/resources"
import { Duration, Effect, Option } from "effect"
import { type PlanCommand, plannerActor, readsOnly, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Frame from "./internal/Frame.js"
import * as Models from "./internal/Models.js"
import * as Policies from "./internal/Policies.js"
import * as Resources from "./internal/Resources.js"
import * as Terminal from "./Terminal.js"
import * as BuiltinTools from "./tools/BuiltinTools.js"

/** The team registered when none is: each says what it is for, so tasks find the one that fits. */
export const builtinTeam: ReadonlyArray<{
  readonly name: string
  readonly purpose: string
  readonly instructions: string
  readonly examples: ReadonlyArray<string>
}> = [
  {
    name: "researcher",
    purpose: "find facts, sources, figures and background information about a topic",
    instructions: "Look things up with the tools you have; say where each fact comes from.",
    examples: ["find the facts about", "look up sources on", "research the history of"]
  },
  {
    name: "writer",
    purpose: "write prose: summaries, introductions, articles, letters, conclusions and reports",
    instructions: "Write clearly and briefly for the reader the task names.",
    examples: ["write an introduction", "summarise the findings", "draft a letter"]
  },
  {
    name: "analyst",
    purpose: "calculate, compare, estimate and analyse numbers, data, files, dates and times",
    instructions: "Use the calculator for arithmetic and show the figures you used.",
    examples: ["calculate the total", "compare the prices", "what is 12 * 7", "what time is it"]
  },
  {
    name: "generalist",
    purpose: "answer a question or do a task that fits no specialist",
    instructions: "Answer directly and briefly.",
    examples: ["answer the question", "explain"]
  }
]

const durationOf = (ms: number) => (ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`)

/** The first line of text a model wrote, made safe for the terminal. */
const firstLine = (text: string, max = 100) =>
  Terminal.oneLine(text.split("\n").find((part) => part.trim() !== "") ?? "", max)

/** What the terminal shows for each planner event (undefined: nothing). */
const renderer = (io: Io, names: ReadonlyMap<string, string>) => {
  const style = Terminal.styleFor(io.stdout, io.env)
  const started = new Map<string, number>()
  const indent = (depth: number) => "  ".repeat(depth)
  const nameOf = (urn: string) => Terminal.oneLine(names.get(urn) ?? urn, 80)
  return (raw: Planner.PlannerEvent): string | undefined => {
    // Titles come from the model: shown without escape sequences.
    const event = "title" in raw ? { ...raw, title: Terminal.oneLine(raw.title, 80) } : raw
    switch (event.type) {
      case "planned": {
        const count = (tasks: ReadonlyArray<{ readonly subtasks: ReadonlyArray<unknown> }>): number =>
          tasks.reduce((sum, task) => sum + 1 + count(task.subtasks as never), 0)
        return style.dim(`planned ${count(event.tree.tasks)} tasks under ${event.tree.message}`)
      }
      case "assigned": {
        const { assignment } = event
        const how =
          assignment.by === "similarity"
            ? `similarity ${assignment.score.toFixed(2)}`
            : `${assignment.by === "default" ? "default" : "chosen by the model"}; best similarity ${assignment.score.toFixed(2)}`
        return `${indent(event.depth)}□ ${event.title} ${style.dim(`→ ${nameOf(assignment.assistant)} (${how})`)}`
      }
      case "started":
        started.set(event.urn, Date.now())
        return `${indent(event.depth)}▸ ${event.title} ${style.dim(event.mode === "direct" ? "working" : "supervising its subtasks")}`
      case "done": {
        const since = started.get(event.urn)
        const took =
          event.before === true
            ? " (done before)"
            : since === undefined
              ? ""
              : ` (${durationOf(Date.now() - since)})`
        return `${indent(event.depth)}${style.green("✓")} ${event.title}${style.dim(took)}  ${style.dim(firstLine(event.output, 70))}`
      }
      case "failed":
        return `${indent(event.depth)}${style.red("✗")} ${event.title}: ${firstLine(event.reason)}`
      case "evaluated":
        return `${indent(event.depth)}${event.successful ? "☑" : "☒"} ${event.title} evaluated: ${firstLine(event.reason)}`
      case "corrective":
        return `${indent(event.depth)}+ ${event.title}: corrective ${event.tasks.length === 1 ? "subtask" : "subtasks"} ${event.tasks.map((task) => `"${Terminal.oneLine(task.spec.title, 80)}"`).join(", ")}`
      case "stalled":
        return `${indent(event.depth)}${style.red("⏸")} ${event.title} stalled waiting for ${Terminal.inline(event.waitingFor.join(", "))}`
      case "context":
        return event.withheld.length === 0 && event.dropped.length === 0
          ? undefined
          : `${indent(event.depth + 1)}${style.dim(
              [
                event.withheld.length === 0 ? "" : `${event.withheld.length} withheld by the policy`,
                event.dropped.length === 0 ? "" : `${event.dropped.length} left out for room`
              ]
                .filter((part) => part !== "")
                .join(", ")
            )}`
    }
  }
}

const checkUrn = (flag: string, urn: string | undefined) => {
  if (urn === undefined) return
  const problem = Urn.parseEither(urn)
  if (problem instanceof Urn.InvalidUrnError) throw new UsageError(`${flag}: ${problem.message}`)
}

const fallbackOf = (command: Extract<PlanCommand, { type: "plan" }>) => {
  if (command.fallback === "none") return undefined
  if (command.fallback === "model") return "model" as const
  checkUrn("--fallback", command.fallback)
  return command.fallback
}

const taskLine = (
  task: Resource.Task,
  depth: number,
  names: ReadonlyMap<string, string>,
  output: string | undefined
) => {
  const icon = { pending: "□", running: "▸", done: "✓", failed: "✗" }[task.status]
  const assignment = task.assignment
  const who =
    assignment === undefined
      ? ""
      : `  → ${Terminal.oneLine(names.get(assignment.assistant) ?? assignment.assistant, 80)} (${assignment.by} ${assignment.score.toFixed(2)})`
  const detail =
    task.status === "done" && output !== undefined
      ? `\n${"  ".repeat(depth + 1)}${firstLine(output)}`
      : task.status === "failed" && task.reason !== undefined
        ? `\n${"  ".repeat(depth + 1)}${firstLine(task.reason)}`
        : ""
  return `${"  ".repeat(depth)}${icon} ${Terminal.oneLine(task.meta.name, 80)}${task.corrective === true ? " (corrective)" : ""}${who}${detail}`
}

/** What a plan needs before the database opens: the input checked, the assistants to register, the embedder and the model. */
const prepare = async (command: PlanCommand, frame: Frame.Shape) => {
  const { io } = frame
  if (command.type === "plan" && command.stallTimeout !== undefined) {
    const parsed = Duration.fromInput(command.stallTimeout as Duration.Input)
    if (Option.isNone(parsed) || Duration.toMillis(parsed.value) <= 0)
      throw new UsageError(
        `--stall-timeout needs a duration such as "90 seconds" or "2 minutes", got "${command.stallTimeout}"`
      )
  }
  checkUrn(
    command.type === "plan" ? "--conversation" : "URN",
    command.type === "plan" ? command.conversation : command.urn
  )
  if (command.type === "plan") checkUrn("--resume", command.resume)
  const toRegister =
    command.type === "plan" && command.assistants !== undefined
      ? Resources.readResources(command.assistants, io)
      : []
  if (toRegister.some((resource) => resource.meta.type !== "assistant"))
    throw new UsageError(
      `--assistants ${command.type === "plan" ? command.assistants : ""} holds resources that are not assistants`
    )
  // Retries shown and failures told as `ask` does; `tasks show` runs no model.
  const planning = command.type === "plan" ? await Models.commandModel(command.model, frame) : undefined
  const database = CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd)
  const embedder = await Resources.makeEmbedder(
    {
      embeddingModel: command.embeddingModel,
      ...(command.type === "plan" && { baseUrl: command.model.baseUrl, apiKey: command.model.apiKey })
    },
    io
  )
  const model = planning?.model
  return { toRegister, database, embedder, model, dispose: () => planning?.dispose() }
}

export const run = (command: PlanCommand, io: Io) =>
  Effect.gen(function* () {
    const frame = yield* Frame.Frame
    const { toRegister, database, embedder, model, dispose } = yield* Effect.tryPromise({
      try: () => prepare(command, frame),
      catch: (error) => error
    })
    const print = (text: string) => Effect.sync(() => io.stdout.write(text))

    const program = Effect.gen(function* () {
      const store = yield* SqlResourceStore.fromDatabase
      const vectors = yield* VectorIndex.fromDatabase(embedder)
      const policy: Policy.Service = yield* Policies.engineOf(command, io)
      const events = yield* ResourceEvents.makeMemory(policy)
      const index = ResourceIndex.make(store, policy, { vectors, events })

      if (command.type === "tasks-show") {
        const root = yield* index.get(command.as, command.urn)
        const below = yield* index.findByPrefix(command.as, command.urn)
        const tasks = [root, ...below].filter((r): r is Resource.Task => r.meta.type === "task")
        // A task's output is the newest message under it (the store's one home for it).
        const outputs = new Map<string, string>()
        for (const message of below
          .filter((r): r is Resource.Message => r.meta.type === "message")
          .sort((a, b) => (a.meta.name < b.meta.name ? -1 : 1)))
          if (message.meta.parent !== undefined) outputs.set(message.meta.parent, message.content)
        if (command.json) return yield* print(`${JSON.stringify(tasks)}\n`)
        if (tasks.length === 0)
          return yield* Effect.sync(() => io.stderr.write(`noema: no tasks under ${command.urn}\n`))
        const assistants = yield* store.findByType("assistant")
        const names = new Map(assistants.map((a) => [a.meta.urn, a.meta.name]))
        const children = new Map<string, Array<Resource.Task>>()
        for (const task of tasks) {
          const parent = task.meta.parent ?? ""
          children.set(parent, [...(children.get(parent) ?? []), task])
        }
        const lines: Array<string> = []
        const visit = (task: Resource.Task, depth: number) => {
          lines.push(taskLine(task, depth, names, outputs.get(task.meta.urn)))
          for (const child of (children.get(task.meta.urn) ?? []).sort(
            (a, b) => (a.position ?? 0) - (b.position ?? 0)
          ))
            visit(child, depth + 1)
        }
        const urns = new Set(tasks.map((task) => task.meta.urn))
        const tops = tasks
          .filter((task) => task.meta.parent === undefined || !urns.has(task.meta.parent))
          .sort((a, b) => (a.position ?? 0) - (b.position ?? 0))
        for (const task of tops) visit(task, 0)
        return yield* print(`${lines.join("\n")}\n`)
      }

      // Assistants: the ones given, else the ones stored, else the built-in team.
      for (const resource of toRegister) yield* index.put(plannerActor, resource)
      let assistants = yield* store.findByType("assistant")
      if (assistants.length === 0) {
        for (const member of builtinTeam) {
          const resource = Resource.make("assistant", {
            name: member.name,
            purpose: member.purpose,
            instructions: member.instructions,
            examples: [...member.examples]
          })
          yield* index.put(plannerActor, resource)
        }
        assistants = yield* store.findByType("assistant")
        if (!command.json)
          yield* Effect.sync(() =>
            io.stderr.write(
              `noema: no assistants registered; registered the built-in team (${builtinTeam.map((m) => m.name).join(", ")}); --assistants FILE adds yours\n`
            )
          )
      }
      const names = new Map(assistants.map((a) => [a.meta.urn, a.meta.name]))
      const render = renderer(io, names)
      const fallback = fallbackOf(command)
      const options: Planner.Options = {
        model: model!,
        index,
        events,
        tools: command.noTools ? [] : BuiltinTools.make({ root: io.cwd }),
        ...(command.noTools && { graph: false as const }),
        plannerActor,
        ...(command.conversation !== undefined && { conversation: command.conversation }),
        election: {
          ...(command.threshold !== undefined && { threshold: command.threshold }),
          ...(fallback === "model"
            ? { fallback: { kind: "model" as const, model: model! } }
            : fallback !== undefined
              ? { fallback: { kind: "default" as const, assistant: fallback } }
              : {})
        },
        limits: {
          ...(command.parallel !== undefined && { parallel: command.parallel }),
          ...(command.maxCalls !== undefined && { maxModelCalls: command.maxCalls }),
          ...(command.maxTokens !== undefined && { maxTokens: command.maxTokens }),
          ...(command.maxDepth !== undefined && { maxDepth: command.maxDepth }),
          ...(command.stallTimeout !== undefined && { stallTimeout: command.stallTimeout as never })
        },
        onEvent: (event) =>
          Effect.sync(() => {
            if (command.json) {
              io.stdout.write(`${JSON.stringify(event)}\n`)
              return
            }
            const line = render(event)
            if (line !== undefined) io.stdout.write(`${line}\n`)
          })
      }
      const result = yield* command.resume === undefined
        ? Planner.run(command.request, options)
        : Planner.resume(command.resume, options)
      if (command.json)
        return yield* print(
          `${JSON.stringify({ type: "result", ...result, tree: { conversation: result.tree.conversation, message: result.tree.message } })}\n`
        )
      yield* print(`\n${Terminal.sanitize(result.answer)}\n`)
      yield* Effect.sync(() =>
        io.stderr.write(
          `noema: ${result.tasks.length} tasks (${result.missing.length} not done), ${result.modelCalls} model calls, ${result.tokens} tokens; noema tasks show ${result.tree.message}\n`
        )
      )
      return result.missing.length === 0 ? undefined : ("incomplete" as const)
    })

    // Ctrl-C (or SIGTERM/SIGHUP) stops the work: the tasks under way are stored as interrupted.
    const outcome = yield* Effect.scoped(
      Databases.provideDatabase(program, database, readsOnly(command))
    ).pipe(
      Effect.onInterrupt(() =>
        Effect.sync(() =>
          io.stderr.write(
            "noema: interrupted; the tasks under way are stored as interrupted; noema plan --resume MESSAGE continues the plan\n"
          )
        )
      ),
      Effect.ensuring(Effect.sync(dispose))
    )
    return outcome === "incomplete" ? ExitStatus.notDone : ExitStatus.success
  })
