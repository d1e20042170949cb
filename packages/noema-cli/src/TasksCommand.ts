/**
 * TasksCommand: `noema tasks list`, the plans `noema plan` stored, newest first:
 * for each request (the message its tasks are under) when it was stored, how
 * many of its tasks are done or failed, and the request's first line. It only
 * reads (a database the user may only read still answers it), as the actor
 * `--as` (default the planner), through the policy. `noema tasks show URN`
 * (`PlanCommand`) prints one plan's tree.
 */
import { type Resource, ResourceIndex, SqlResourceStore, Urn } from "@noema/resources"
import { Effect } from "effect"
import { readsOnly, type TasksCommand, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Policies from "./internal/Policies.js"
import * as Terminal from "./Terminal.js"

/** One stored plan, as listed. */
export interface PlanSummary {
  /** The request's message: what `noema tasks show` takes. */
  readonly message: string
  readonly conversation: string | undefined
  /** When the request was stored (ISO-8601); undefined for one stored before noema recorded it. */
  readonly created: string | undefined
  readonly request: string
  readonly tasks: number
  readonly done: number
  readonly failed: number
}

/** The request a task belongs to: the nearest message above it. */
const requestOf = (task: Resource.Task): string | undefined =>
  Urn.ancestors(task.meta.urn)
    .reverse()
    .find((urn) => Urn.typeOf(urn) === "message")

/** The plans among `tasks`, newest first (those stored before times were recorded last, by URN). */
export const summarise = (
  tasks: ReadonlyArray<Resource.Task>,
  messages: ReadonlyArray<Resource.Resource>
): Array<PlanSummary> => {
  const byRequest = new Map<string, Array<Resource.Task>>()
  for (const task of tasks) {
    const request = requestOf(task)
    if (request === undefined) continue
    const planned = byRequest.get(request)
    if (planned === undefined) byRequest.set(request, [task])
    else planned.push(task)
  }
  const summaries = messages.flatMap((message): Array<PlanSummary> => {
    const planned = byRequest.get(message.meta.urn)
    if (planned === undefined || !("content" in message) || message.meta.type !== "message") return []
    return [
      {
        message: message.meta.urn,
        conversation: message.meta.parent,
        created: message.meta.created,
        request: message.content,
        tasks: planned.length,
        done: planned.filter((task) => task.status === "done").length,
        failed: planned.filter((task) => task.status === "failed").length
      }
    ]
  })
  return summaries.sort(
    (a, b) =>
      (b.created ?? "").localeCompare(a.created ?? "") ||
      (a.message < b.message ? -1 : a.message > b.message ? 1 : 0)
  )
}

const lineOf = (plan: PlanSummary) => {
  const failed = plan.failed === 0 ? "" : `, ${plan.failed} failed`
  const request = Terminal.oneLine(plan.request.split("\n").find((part) => part.trim() !== "") ?? "", 80)
  return `${plan.created ?? "-"}  ${plan.message}  ${plan.done}/${plan.tasks} done${failed}  ${request}`
}

export const run = Effect.fnUntraced(function* (command: TasksCommand, io: Io) {
  const problem = Urn.parseEither(command.as)
  if (problem instanceof Urn.InvalidUrnError)
    return yield* Effect.fail(new UsageError(`--as: ${problem.message}`))
  const database = yield* Effect.try({
    try: () => CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd),
    catch: (error) => error
  })
  const program = Effect.gen(function* () {
    const store = yield* SqlResourceStore.fromDatabase
    const index = ResourceIndex.make(store, yield* Policies.engineOf(command, io))
    const { resources, withheld } = yield* index.findReadableByType(command.as, "task")
    const tasks = resources as Array<Resource.Task>
    const requests = [...new Set(tasks.flatMap((task) => requestOf(task) ?? []))]
    const plans = summarise(tasks, yield* index.getMany(command.as, requests))
    if (withheld.length > 0) io.stderr.write(`noema: ${withheld.length} tasks withheld by the policy\n`)
    if (command.json) return io.stdout.write(`${JSON.stringify(plans)}\n`)
    if (plans.length === 0) return io.stderr.write("noema: no plans stored (noema plan REQUEST makes one)\n")
    io.stdout.write(plans.map((plan) => `${lineOf(plan)}\n`).join(""))
  })
  yield* Effect.scoped(Databases.provideDatabase(program, database, readsOnly(command)))
  return ExitStatus.success
})
