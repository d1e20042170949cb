/**
 * Planner: a request planned as a task tree, each task given an assistant,
 * leaves run directly, parents supervising their subtasks through events.
 *
 * 1. **Plan** (`TaskPlanner`): the whole tree in one tool call, persisted as
 *    resources under the request's message.
 * 2. **Assign** (`Assistants.elect`): every task, recursively, gets the
 *    assistant most similar to it; the assignment (scores, candidates, how it
 *    was chosen) is stored on the task.
 * 3. **Execute.** A task without subtasks runs **directly**: its context
 *    window (the resources along its URN path, the most similar ones, the
 *    conversation's history), the assistant's inner tool loop (`ToolAgent`),
 *    and its output persisted as a `message` resource under the task; the task
 *    is then stored `done` (or `failed`, with why). A task with subtasks
 *    **supervises**: it subscribes, as its assistant (which hears only what
 *    the policy lets it read), to `RESOURCE_PUT` events under its URN before
 *    its subtasks start, and learns from those events, not from the fibers,
 *    when each subtask has finished; then it evaluates their results
 *    against its `evaluation` with the model, and when they fall short it adds
 *    corrective subtasks (assigned and run the same way) and evaluates again.
 *    Siblings run in parallel, at most `parallel` leaves at a time.
 * 4. **Answer**: the top-level tasks' outputs, and what is missing.
 *
 * Hard limits: the tree's depth, children and size (at planning), corrective
 * rounds per task, model calls and tokens in all (`Budget`), and stall
 * detection: a supervisor that hears nothing from its subtasks for
 * `stallTimeout` stops them and fails, saying which did not finish. When a
 * limit stops work, the answer says what is missing; nothing loops silently.
 * Every access to resources goes through the `ResourceIndex` (the policy),
 * with the assigned assistant as the actor.
 */

import { ToolAgent } from "@noema/agents"
import { type ChatModel, ConversationContext, Message, StructuredOutput, type Tool } from "@noema/core"
import { Resource, type ResourceEvents, type ResourceIndex, Urn } from "@noema/resources"
import { Cause, Duration, Effect, Fiber, Option, Schema, Semaphore, Stream } from "effect"
import * as Assistants from "./Assistants.js"
import * as Budget from "./Budget.js"
import * as ContextWindow from "./ContextWindow.js"
import * as TaskPlanner from "./TaskPlanner.js"
import * as TaskTree from "./TaskTree.js"

export interface Limits extends TaskTree.Limits, Budget.Limits {
  /** Corrective rounds a supervisor may add. Default 2. */
  readonly maxCorrectiveRounds: number
  /** Leaves worked on at the same time. Default 4. */
  readonly parallel: number
  /** How long a supervisor waits without hearing from its subtasks. Default 2 minutes. */
  readonly stallTimeout: Duration.Input
  /** Model calls of one leaf's inner loop. Default 8. */
  readonly maxSteps: number
  /** Tokens of a leaf's context window. Default 2000. */
  readonly contextTokens: number
}

export const defaultLimits: Limits = {
  ...TaskTree.defaultLimits,
  maxModelCalls: 100,
  maxTokens: 400_000,
  maxCorrectiveRounds: 2,
  parallel: 4,
  stallTimeout: "2 minutes",
  maxSteps: 8,
  contextTokens: 2000
}

/** What the planner reports as it works (the CLI draws the tree from these). */
export type PlannerEvent =
  | { readonly type: "planned"; readonly tree: TaskPlanner.PlannedTree }
  | {
      readonly type: "assigned"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly assignment: Resource.Assignment
    }
  | {
      readonly type: "started"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly mode: "direct" | "supervising"
    }
  | {
      readonly type: "done"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly output: string
    }
  | {
      readonly type: "failed"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly reason: string
    }
  | {
      readonly type: "evaluated"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly successful: boolean
      readonly reason: string
    }
  | {
      readonly type: "corrective"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly tasks: ReadonlyArray<TaskPlanner.PlannedTask>
    }
  | {
      readonly type: "stalled"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly waitingFor: ReadonlyArray<string>
    }
  /** A leaf's context window: what it holds, what did not fit, what the policy withheld. */
  | {
      readonly type: "context"
      readonly urn: string
      readonly title: string
      readonly depth: number
      readonly items: ReadonlyArray<string>
      readonly dropped: ReadonlyArray<string>
      readonly withheld: ReadonlyArray<string>
    }

export interface Options {
  readonly model: ChatModel.Service
  /**
   * The index every access goes through: its store, its policy, and its vector index (made
   * with `{ vectors }`), which elections and context windows search through the policy.
   */
  readonly index: ResourceIndex.Service
  readonly events: ResourceEvents.Service
  /** Tools the leaves' inner loops may use, by name (an assistant's `tools` picks among them; none named: all). */
  readonly tools?: ReadonlyArray<Tool.Any>
  /** Who plans and persists the tree. Default `cld:assistant.planner`. */
  readonly plannerActor?: string
  readonly election?: Assistants.ElectionOptions
  readonly limits?: Partial<Limits>
  /** An existing conversation to plan in (a new one otherwise). */
  readonly conversation?: string
  readonly onEvent?: (event: PlannerEvent) => Effect.Effect<void>
}

export interface TaskReport {
  readonly urn: string
  readonly title: string
  readonly status: "done" | "failed"
  readonly output?: string
  readonly reason?: string
}

export interface Result {
  readonly tree: TaskPlanner.PlannedTree
  /** The answer for the user: the top-level tasks' results, then what is missing. */
  readonly answer: string
  readonly tasks: ReadonlyArray<TaskReport>
  /** Tasks that did not get done, each with why. */
  readonly missing: ReadonlyArray<TaskReport>
  readonly modelCalls: number
  readonly tokens: number
  /** The limit that stopped work, if one did. */
  readonly limit?: string
}

export class PlannerError extends Schema.TaggedError<PlannerError>()("PlannerError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

const Verdict = Schema.Struct({
  successful: Schema.Boolean,
  reason: Schema.String,
  corrective: Schema.Array(TaskTree.TaskSpec).annotate({
    description: "When unsuccessful: the subtasks that would fix it (empty when none would)"
  })
})

const describe = (error: unknown): string =>
  (error instanceof Error || (typeof error === "object" && error !== null && "message" in error)
    ? String((error as { message: unknown }).message)
    : String(error)
  ).replace(/\s*\n\s*/g, "; ")

const titleOf = (task: TaskPlanner.PlannedTask) => task.spec.title

/**
 * A task's URN holds its conversation, the request and one element per level (a corrective
 * subtask adds one more): refused before anything is asked when that cannot fit a URN.
 */
const checkDepth = (limits: Limits, conversation: string | undefined): Effect.Effect<void, PlannerError> => {
  const parsed = conversation === undefined ? undefined : Urn.parseEither(conversation)
  const above = parsed === undefined || parsed instanceof Urn.InvalidUrnError ? 1 : parsed.elements.length
  const deepest = above + 1 + limits.maxDepth + 1
  return deepest <= Urn.maxElements
    ? Effect.void
    : Effect.fail(
        new PlannerError({
          message: `a plan at most ${limits.maxDepth} levels deep makes URNs of ${deepest} elements here, more than the ${Urn.maxElements} a URN may have: at most ${Urn.maxElements - above - 2} levels`
        })
      )
}

/** Runs the whole flow for `request`. */
export const run = (request: string, options: Options): Effect.Effect<Result, PlannerError> =>
  Effect.gen(function* () {
    const limits: Limits = { ...defaultLimits, ...options.limits }
    yield* checkDepth(limits, options.conversation)
    const budget = Budget.make(options.model, limits)
    const model = budget.model
    const planner = options.plannerActor ?? "cld:assistant.planner"
    const { index, events } = options
    const emit = (event: PlannerEvent) =>
      options.onEvent === undefined ? Effect.void : options.onEvent(event)
    const permits = yield* Semaphore.make(limits.parallel)
    const election = {
      ...options.election,
      ...(options.election?.fallback?.kind === "model" ? { fallback: { kind: "model" as const, model } } : {})
    }
    const reports = new Map<string, TaskReport>()

    const tree = yield* TaskPlanner.planAndPersist({
      model,
      index,
      actor: planner,
      request,
      ...(options.conversation === undefined ? {} : { conversation: options.conversation }),
      limits
    }).pipe(Effect.mapError((error) => new PlannerError({ message: error.message, cause: error })))
    yield* emit({ type: "planned", tree })

    /** Elects and stores the assignment of every task of `tasks`, recursively. */
    const assign = (
      tasks: ReadonlyArray<TaskPlanner.PlannedTask>
    ): Effect.Effect<Array<TaskPlanner.PlannedTask>, PlannerError> =>
      Effect.forEach(tasks, (task) =>
        Effect.gen(function* () {
          const assignment = yield* Assistants.elect(index, planner, task.resource, election).pipe(
            Effect.mapError((error) => new PlannerError({ message: error.message, cause: error }))
          )
          const resource: Resource.Task = { ...task.resource, assignment }
          yield* Effect.mapError(
            index.put(planner, resource),
            (error) =>
              new PlannerError({
                message: `storing the assignment of "${titleOf(task)}": ${error.message}`,
                cause: error
              })
          )
          yield* emit({
            type: "assigned",
            urn: task.urn,
            title: titleOf(task),
            depth: task.depth,
            assignment
          })
          return { ...task, resource, subtasks: yield* assign(task.subtasks) }
        })
      )

    /** Stores the task's new state as its assistant; its PUT event tells its supervisor. */
    const store = (task: TaskPlanner.PlannedTask, actor: string, change: Partial<Resource.Task>) =>
      Effect.mapError(
        Effect.flatMap(index.get(actor, task.urn), (current) =>
          index.put(actor, { ...(current as Resource.Task), ...change } as Resource.Task)
        ),
        (error) => new PlannerError({ message: `storing "${titleOf(task)}": ${error.message}`, cause: error })
      )

    const finish = (task: TaskPlanner.PlannedTask, actor: string, outcome: TaskReport) =>
      Effect.gen(function* () {
        reports.set(task.urn, outcome)
        yield* store(task, actor, {
          status: outcome.status,
          ...(outcome.output === undefined ? {} : { output: outcome.output }),
          ...(outcome.reason === undefined ? {} : { reason: outcome.reason })
        })
        yield* emit(
          outcome.status === "done"
            ? {
                type: "done",
                urn: task.urn,
                title: titleOf(task),
                depth: task.depth,
                output: outcome.output ?? ""
              }
            : {
                type: "failed",
                urn: task.urn,
                title: titleOf(task),
                depth: task.depth,
                reason: outcome.reason ?? "failed"
              }
        )
        return outcome
      })

    /** A leaf: its context, the inner loop, its output as a message under it. */
    const direct = (task: TaskPlanner.PlannedTask, actor: string): Effect.Effect<TaskReport, PlannerError> =>
      Effect.gen(function* () {
        const assistant = yield* Effect.option(index.get(actor, actor))
        const profile = Option.isSome(assistant) ? (assistant.value as Resource.Assistant) : undefined
        const window = yield* ContextWindow.build({
          index,
          actor,
          task: task.resource,
          budget: limits.contextTokens
        }).pipe(
          Effect.mapError(
            (error) =>
              new PlannerError({
                message: `building the context of "${titleOf(task)}": ${error.message}`,
                cause: error
              })
          )
        )
        yield* emit({
          type: "context",
          urn: task.urn,
          title: titleOf(task),
          depth: task.depth,
          items: window.items.map((item) => item.urn),
          dropped: window.dropped.map((item) => item.urn),
          withheld: window.withheld
        })
        const allowed = profile?.tools
        const tools = (options.tools ?? []).filter(
          (tool) => allowed === undefined || allowed.includes(tool.name)
        )
        const agent = ToolAgent.make({
          name: `assistant ${actor}`,
          system: [
            profile === undefined
              ? "You are an assistant."
              : `You are ${profile.meta.name}. ${Resource.describe(profile)}`,
            `Your task: ${task.spec.title}`,
            `Purpose: ${task.spec.purpose}`,
            `Success means: ${task.spec.evaluation}`,
            window.items.length === 0 ? "" : `What you know:\n${ContextWindow.toText(window)}`
          ]
            .filter((part) => part !== "")
            .join("\n\n"),
          tools,
          maxSteps: limits.maxSteps
        })
        const produced = yield* Effect.result(
          agent.execute(ConversationContext.of(Message.user(task.spec.instructions)), model)
        )
        if (produced._tag === "Failure")
          return yield* finish(task, actor, {
            urn: task.urn,
            title: titleOf(task),
            status: "failed",
            reason: describe(produced.failure)
          })
        const last = [...produced.success].reverse().find((message) => message.role === "assistant")
        const output = last === undefined ? "" : Message.text(last)
        const message = Resource.make("message", {
          name: `${new Date().toISOString()} output`,
          parent: task.urn,
          role: "assistant",
          content: output
        })
        yield* Effect.mapError(
          index.put(actor, message),
          (error) =>
            new PlannerError({
              message: `storing the output of "${titleOf(task)}": ${error.message}`,
              cause: error
            })
        )
        return yield* finish(task, actor, { urn: task.urn, title: titleOf(task), status: "done", output })
      }).pipe(
        // The task's own writes may be denied by the policy: it fails, saying why (its supervisor
        // learns it when the subtasks' fibers return, since no event could announce it).
        Effect.catch((error) =>
          Effect.flatMap(
            Effect.sync((): TaskReport => {
              const report: TaskReport = {
                urn: task.urn,
                title: titleOf(task),
                status: "failed",
                reason: error.message
              }
              reports.set(task.urn, report)
              return report
            }),
            (report) =>
              Effect.as(
                emit({
                  type: "failed",
                  urn: task.urn,
                  title: titleOf(task),
                  depth: task.depth,
                  reason: error.message
                }),
                report
              )
          )
        )
      )

    /**
     * Runs `children` and waits until every one is stored done or failed, as the
     * events under `task` say. Stalls (nothing heard for `stallTimeout`) fail.
     */
    const superviseRound = (
      task: TaskPlanner.PlannedTask,
      actor: string,
      children: ReadonlyArray<TaskPlanner.PlannedTask>
    ): Effect.Effect<{ readonly stalled: ReadonlyArray<string> }, PlannerError> =>
      Effect.scoped(
        Effect.gen(function* () {
          const heard = yield* Effect.mapError(
            events.subscribe(
              actor,
              { prefix: task.urn, detailType: "RESOURCE_PUT" },
              { buffer: 4096, overflow: "fail" }
            ),
            (error) => new PlannerError({ message: error.message, cause: error })
          )
          const waiting = new Set(children.map((child) => child.urn))
          const fiber = yield* Effect.forkScoped(
            Effect.forEach(children, execute, { concurrency: "unbounded", discard: true })
          )
          /** Whether the child is stored done or failed (what its PUT event announced). */
          const settled = (urn: string) =>
            Effect.map(Effect.option(index.get(actor, urn)), (found) => {
              if (Option.isNone(found)) return false
              const status = (found.value as Resource.Task).status
              return status === "done" || status === "failed"
            })
          type Signal =
            | { readonly kind: "event"; readonly urns: ReadonlyArray<string> }
            | { readonly kind: "returned" }
          // The events drive it; the children's fibers returning is the backstop for a child that
          // could not store its outcome (a write the policy denied): its report is then final.
          const signals = Stream.merge(
            heard.pipe(
              Stream.map(
                (event): Signal => ({
                  kind: "event",
                  urns: event.resources.filter((urn) => waiting.has(urn))
                })
              ),
              Stream.filter((signal) => signal.kind === "event" && signal.urns.length > 0)
            ),
            Stream.fromEffect(Effect.as(Fiber.await(fiber), { kind: "returned" } as Signal))
          )
          const stalled = yield* signals.pipe(
            Stream.timeoutOrElse({
              duration: limits.stallTimeout,
              orElse: () => Stream.fail("stalled" as const)
            }),
            Stream.mapEffect((signal) =>
              signal.kind === "returned"
                ? Effect.sync(() => {
                    // Every child's work has returned: nothing more will be heard of them.
                    for (const urn of [...waiting]) {
                      if (!reports.has(urn)) {
                        const child = children.find((candidate) => candidate.urn === urn)
                        reports.set(urn, {
                          urn,
                          title: child === undefined ? urn : titleOf(child),
                          status: "failed",
                          reason: "it stopped without reporting an outcome"
                        })
                      }
                      waiting.delete(urn)
                    }
                  })
                : Effect.forEach(
                    signal.urns,
                    (urn) =>
                      Effect.map(settled(urn), (done) => {
                        if (done) waiting.delete(urn)
                      }),
                    { discard: true }
                  )
            ),
            Stream.takeUntil(() => waiting.size === 0),
            Stream.runDrain,
            Effect.as([] as Array<string>),
            Effect.catch((error) =>
              error === "stalled"
                ? Effect.succeed([...waiting])
                : Effect.fail(
                    new PlannerError({
                      message: `listening to "${titleOf(task)}"'s subtasks: ${describe(error)}`,
                      cause: error
                    })
                  )
            )
          )
          if (stalled.length > 0) yield* Fiber.interrupt(fiber)
          else yield* Fiber.join(fiber)
          return { stalled }
        })
      )

    /** A parent: its subtasks, their evaluation, corrective rounds. */
    const supervise = (
      task: TaskPlanner.PlannedTask,
      actor: string
    ): Effect.Effect<TaskReport, PlannerError> =>
      Effect.gen(function* () {
        let children = task.subtasks
        let all = [...children]
        for (let round = 0; ; round++) {
          const { stalled } = yield* superviseRound(task, actor, children)
          if (stalled.length > 0) {
            const names = all.filter((child) => stalled.includes(child.urn)).map(titleOf)
            yield* emit({
              type: "stalled",
              urn: task.urn,
              title: titleOf(task),
              depth: task.depth,
              waitingFor: names
            })
            return yield* finish(task, actor, {
              urn: task.urn,
              title: titleOf(task),
              status: "failed",
              reason: `stalled: ${names.join(", ")} did not finish within ${Duration.format(Duration.fromInputUnsafe(limits.stallTimeout))}`
            })
          }
          const results = all.map(
            (child) =>
              reports.get(child.urn) ?? {
                urn: child.urn,
                title: titleOf(child),
                status: "failed" as const,
                reason: "no result"
              }
          )
          const listing = results
            .map(
              (r) => `## ${r.title} (${r.status})\n${r.status === "done" ? r.output : `Failed: ${r.reason}`}`
            )
            .join("\n\n")
          const verdict = yield* Effect.result(
            StructuredOutput.generate(model, {
              schema: Verdict,
              name: "evaluation",
              messages: [
                Message.system(
                  "You supervise a task done by others. Judge whether the subtasks' results achieve it, by its evaluation criteria. When they do not, propose corrective subtasks that would fix what is missing (or none, if nothing would)."
                ),
                Message.user(
                  `Task: ${task.spec.title}\nPurpose: ${task.spec.purpose}\nSuccess means: ${task.spec.evaluation}\n\nResults:\n${listing}`
                )
              ]
            })
          )
          if (verdict._tag === "Failure")
            return yield* finish(task, actor, {
              urn: task.urn,
              title: titleOf(task),
              status: "failed",
              reason: `could not evaluate: ${describe(verdict.failure)}`
            })
          const { successful, reason, corrective } = verdict.success
          yield* emit({
            type: "evaluated",
            urn: task.urn,
            title: titleOf(task),
            depth: task.depth,
            successful,
            reason
          })
          if (successful)
            return yield* finish(task, actor, {
              urn: task.urn,
              title: titleOf(task),
              status: "done",
              output: `${reason}\n\n${listing}`
            })
          if (corrective.length === 0 || round >= limits.maxCorrectiveRounds)
            return yield* finish(task, actor, {
              urn: task.urn,
              title: titleOf(task),
              status: "failed",
              reason:
                corrective.length === 0
                  ? `unsuccessful: ${reason}`
                  : `unsuccessful after ${limits.maxCorrectiveRounds} corrective rounds: ${reason}`
            })
          const added = yield* TaskPlanner.persistTasks(
            index,
            actor,
            task.urn,
            corrective.slice(0, limits.maxChildren),
            task.depth + 1,
            {
              firstPosition: all.length + 1,
              corrective: true
            }
          ).pipe(Effect.mapError((error) => new PlannerError({ message: error.message, cause: error })))
          children = yield* assign(added)
          all = [...all, ...children]
          yield* emit({
            type: "corrective",
            urn: task.urn,
            title: titleOf(task),
            depth: task.depth,
            tasks: children
          })
        }
      })

    const execute = (task: TaskPlanner.PlannedTask): Effect.Effect<TaskReport, PlannerError> =>
      Effect.gen(function* () {
        const actor = task.resource.assignment?.assistant ?? planner
        const mode = task.subtasks.length === 0 ? "direct" : "supervising"
        yield* store(task, actor, { status: "running" }).pipe(Effect.catch(() => Effect.void))
        yield* emit({ type: "started", urn: task.urn, title: titleOf(task), depth: task.depth, mode })
        return yield* mode === "direct" ? permits.withPermits(1)(direct(task, actor)) : supervise(task, actor)
      }).pipe(
        // Stopped from outside (a stall, Ctrl-C): stored as such, so the tree never shows it running.
        Effect.onInterrupt(() =>
          Effect.ignore(
            store(task, task.resource.assignment?.assistant ?? planner, {
              status: "failed",
              reason: "interrupted before it finished"
            })
          )
        )
      )

    const assigned = yield* assign(tree.tasks)
    const top = yield* Effect.forEach(assigned, execute, { concurrency: "unbounded" })
    const tasks = [...reports.values()]
    const missing = tasks.filter((report) => report.status === "failed")
    const limit = budget.exceeded()
    const answer = [
      ...top.map((report) =>
        report.status === "done"
          ? `## ${report.title}\n${report.output ?? ""}`
          : `## ${report.title} (not done)\n${report.reason ?? ""}`
      ),
      ...(missing.length === 0
        ? []
        : [
            `## What is missing\n${missing.map((report) => `- ${report.title}: ${report.reason ?? "failed"}`).join("\n")}${
              limit === undefined ? "" : `\n\nWork stopped: ${limit}.`
            }`
          ])
    ].join("\n\n")
    return {
      tree: { ...tree, tasks: assigned },
      answer,
      tasks,
      missing,
      modelCalls: budget.calls(),
      tokens: budget.tokens(),
      ...(limit === undefined ? {} : { limit })
    }
  }).pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause) ? Effect.interrupt : Effect.fail(toPlannerError(cause))
    )
  )

const toPlannerError = (cause: Cause.Cause<unknown>): PlannerError => {
  const error = Cause.squash(cause)
  return error instanceof PlannerError ? error : new PlannerError({ message: describe(error), cause: error })
}
