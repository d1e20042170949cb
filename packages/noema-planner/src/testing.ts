/**
 * Test helpers for the planner: a world to plan in (a memory store, the
 * offline embedder, in-process events, a policy) and a scripted model that
 * plays every part of the flow by what each request is for: the planner's
 * `create_tasks` call, a supervisor's evaluation, a leaf's answer. Used by
 * the planner's tests and its benchmark; it is a script, not a model.
 */
import type { ChatModel } from "@noema/core"
import { Message } from "@noema/core"
import { ScriptedChatModel } from "@noema/core/testing"
import {
  LocalEmbedder,
  MemoryResourceStore,
  Policy,
  Resource,
  ResourceEvents,
  ResourceIndex,
  type ResourceStore,
  VectorIndex
} from "@noema/resources"
import { Effect } from "effect"
import * as TaskPlanner from "./TaskPlanner.js"
import type * as TaskTree from "./TaskTree.js"

export interface World {
  readonly store: ResourceStore.Service
  readonly index: ResourceIndex.Service
  readonly events: ResourceEvents.Service
  readonly vectors: VectorIndex.Service
}

/** A world in memory, with `policy` (default: allow-all) on every access. */
export const world = (policy?: Policy.Service): Effect.Effect<World> =>
  Effect.gen(function* () {
    const store = MemoryResourceStore.make()
    const engine = policy ?? (yield* Policy.allowAll)
    const events = yield* ResourceEvents.makeMemory(engine)
    const vectors = yield* Effect.orDie(VectorIndex.makeMemory(LocalEmbedder.make()))
    const index = ResourceIndex.make(store, engine, { events, vectors })
    return { store, index, events, vectors }
  })

/** Registers assistants (stored through the index as `actor`, so they are searchable). */
export const registerAssistants = (
  index: ResourceIndex.Service,
  actor: string,
  assistants: ReadonlyArray<{
    readonly name: string
    readonly purpose: string
    readonly examples?: ReadonlyArray<string>
    readonly tools?: ReadonlyArray<string>
  }>
): Effect.Effect<Array<Resource.Assistant>, ResourceIndex.Failure> =>
  Effect.forEach(assistants, (assistant) => {
    const resource = Resource.make("assistant", {
      name: assistant.name,
      purpose: assistant.purpose,
      ...(assistant.examples === undefined ? {} : { examples: [...assistant.examples] }),
      ...(assistant.tools === undefined ? {} : { tools: [...assistant.tools] })
    })
    return Effect.as(index.put(actor, resource), resource)
  })

/** A leaf task, for scripting plans briefly. */
export const leaf = (title: string, purpose = `do ${title}`): TaskTree.TaskSpec => ({
  title,
  purpose,
  instructions: `Do ${title}.`,
  evaluation: `${title} is done`,
  subtasks: []
})

/** A parent task over `subtasks`. */
export const parent = (
  title: string,
  subtasks: ReadonlyArray<TaskTree.TaskSpec>,
  purpose = `do ${title}`
): TaskTree.TaskSpec => ({
  title,
  purpose,
  instructions: `Get ${title} done through its subtasks.`,
  evaluation: `every part of ${title} is done`,
  subtasks
})

export interface Verdict {
  readonly successful: boolean
  readonly reason: string
  readonly corrective?: ReadonlyArray<TaskTree.TaskSpec>
}

/** What each request of a planner run is for, read from the request itself. */
export type Part =
  | { readonly kind: "plan"; readonly request: string }
  | { readonly kind: "evaluate"; readonly task: string; readonly results: string }
  | { readonly kind: "leaf"; readonly task: string; readonly system: string }
  | { readonly kind: "other" }

export const partOf = (request: ChatModel.ChatRequest): Part => {
  const messages = Array.from(request.messages)
  const system = messages
    .filter((m) => m.role === "system")
    .map(Message.text)
    .join("\n")
  const lastUser = messages.findLast((m) => m.role === "user")
  const asked = lastUser === undefined ? "" : Message.text(lastUser)
  if ((request.tools ?? []).some((tool) => tool.name === TaskPlanner.toolName))
    return { kind: "plan", request: asked }
  if (request.responseFormat?.type === "json-schema" && request.responseFormat.name === "evaluation") {
    const task = /^Task: (.*)$/m.exec(asked)?.[1] ?? ""
    return { kind: "evaluate", task, results: asked }
  }
  const task = /^Your task: (.*)$/m.exec(system)?.[1]
  if (task !== undefined) return { kind: "leaf", task, system }
  return { kind: "other" }
}

export interface ScriptOptions {
  /** The plan sent for every planning request. */
  readonly plan: TaskTree.Plan | ((request: string, attempt: number) => unknown)
  /** A supervisor's verdict on its `round`-th evaluation (from 0). Default: successful. */
  readonly verdict?: (task: string, round: number, results: string) => Verdict
  /** A leaf's reply. Default: `"<title>: done"`. */
  readonly leaf?: (task: string, system: string) => ScriptedChatModel.Reply
}

/** A scripted model playing the planner's parts (see the module's comment). */
export const scriptedModel = (options: ScriptOptions): ScriptedChatModel.ScriptedChatModel => {
  let plans = 0
  const rounds = new Map<string, number>()
  return ScriptedChatModel.make({
    fallback: (recorded): ScriptedChatModel.Reply => {
      const part = partOf(recorded.request)
      switch (part.kind) {
        case "plan": {
          const attempt = plans++
          const plan = typeof options.plan === "function" ? options.plan(part.request, attempt) : options.plan
          return { toolCalls: [{ name: TaskPlanner.toolName, arguments: JSON.stringify(plan) }] }
        }
        case "evaluate": {
          const round = rounds.get(part.task) ?? 0
          rounds.set(part.task, round + 1)
          const verdict = options.verdict?.(part.task, round, part.results) ?? {
            successful: true,
            reason: "every subtask is done"
          }
          return JSON.stringify({ corrective: [], ...verdict })
        }
        case "leaf":
          return options.leaf?.(part.task, part.system) ?? `${part.task}: done`
        case "other":
          return "I only play the planner's parts."
      }
    }
  })
}
