/**
 * ContextWindow: the resources a task is worked on with, within a token budget.
 *
 * In priority order: the task's path (its ancestors along the URN, the
 * conversation and the request first), then the resources most similar to the
 * task (not already on the path), then the conversation's history, newest
 * first (its messages, named so their names sort by time). Each is read
 * through the `ResourceIndex` as the acting assistant: one the policy denies is
 * left out and reported as `withheld`. What does not fit the budget is
 * summarised by the model when one is given (to the room left), otherwise
 * dropped; either way it is reported, so nothing disappears unseen.
 */
import { type ChatModel, Message, TokenCounter } from "@noema/core"
import { type Resource, type ResourceIndex, Urn, VectorIndex } from "@noema/resources"
import { Effect } from "effect"

export type Source = "path" | "similar" | "history"

export interface Item {
  readonly urn: string
  readonly source: Source
  readonly text: string
  readonly tokens: number
  /** True when the text is the model's summary of the resource. */
  readonly summarized?: boolean
}

export interface Window {
  readonly items: ReadonlyArray<Item>
  readonly tokens: number
  readonly budget: number
  /** Left out for lack of room. */
  readonly dropped: ReadonlyArray<{ readonly urn: string; readonly source: Source; readonly tokens: number }>
  /** Left out because the policy denied the actor. */
  readonly withheld: ReadonlyArray<string>
}

export interface Options {
  readonly index: ResourceIndex.Service
  readonly actor: string
  readonly task: Resource.Resource
  /** Tokens the window may hold. */
  readonly budget: number
  /**
   * Similar resources considered (default 5; 0 for none): found by the index's `search`
   * as the actor (so the index needs its vector index), which filters by the policy
   * before it limits.
   */
  readonly similar?: number
  /** The lowest similarity that counts as similar (an unrelated resource is not). Default 0.1. */
  readonly minScore?: number
  /** History messages considered. Default 10. */
  readonly history?: number
  /**
   * Reads what lies under the conversation as the actor, and what it may not read
   * (`withheld`). Default: the index's `findReadable`; the planner answers from what its run
   * wrote (`filterReadable`: the same decisions, no store read).
   */
  readonly findReadable?: (urn: string) => Effect.Effect<
    {
      readonly resources: ReadonlyArray<Resource.Resource>
      readonly withheld: ReadonlyArray<string>
    },
    ResourceIndex.Failure
  >
  readonly counter?: TokenCounter.TokenCounter
  /** Summarises what does not fit (one call per resource); without it, it is dropped. */
  readonly summarizer?: ChatModel.Service
}

/** A resource as the window shows it: its kind, name and what it says. */
export const render = (resource: Resource.Resource): string => joined(renderedParts(resource))

/** What `render` joins, in order: measured as they are where the counter can (`countJoined`). */
const renderedParts = (resource: Resource.Resource): ReadonlyArray<string> => {
  const head = `[${resource.meta.type}: ${resource.meta.name}]\n`
  const body = VectorIndex.searchText(resource)
  return "output" in resource && typeof resource.output === "string" && resource.output.length > 0
    ? [head, body, "\nOutput: ", resource.output]
    : [head, body]
}

/** The parts as one string. */
const joined = (parts: ReadonlyArray<string>): string => parts.join("")

/**
 * The window for `options.task` (see the module's comment). A resource the policy denies is
 * withheld and one that is gone (a vector outliving its resource) skipped; any other failure of
 * the store or the vector index fails the build: a window is never quietly missing what it
 * could not read.
 */
export const build = (
  options: Options
): Effect.Effect<Window, ResourceIndex.Failure | VectorIndex.VectorIndexError> =>
  Effect.gen(function* () {
    const counter = options.counter ?? TokenCounter.estimate
    const { index, actor, task } = options
    const withheld: Array<string> = []
    const readable = (urn: string) =>
      index.get(actor, urn).pipe(
        Effect.catch((error) => {
          if (error._tag === "AccessDeniedError") withheld.push(urn)
          else if (error._tag !== "ResourceNotFoundError") return Effect.fail(error)
          return Effect.succeed(undefined)
        })
      )
    const path = Urn.ancestors(task.meta.urn)
    // The path in one read; when the policy denies part of it, each on its own, to know which.
    const onPath = yield* index
      .getMany(actor, path)
      .pipe(
        Effect.catchTag("AccessDeniedError", () =>
          Effect.map(Effect.forEach(path, readable), (found) =>
            found.filter((resource): resource is Resource.Resource => resource !== undefined)
          )
        )
      )
    const candidates: Array<{ readonly resource: Resource.Resource; readonly source: Source }> = onPath.map(
      (resource) => ({ resource, source: "path" })
    )
    const seen = new Set([...path, task.meta.urn])
    const similar = options.similar ?? 5
    if (similar > 0) {
      // Through the index, as the actor: the policy filters before the limit, so a similar
      // resource the actor may not read neither takes a slot nor shows that it exists.
      const hits = yield* index.search(
        actor,
        { text: VectorIndex.searchText(task) },
        { limit: similar + seen.size }
      )
      let taken = 0
      for (const resource of hits) {
        const urn = resource.meta.urn
        if (
          seen.has(urn) ||
          // Who works and with what is given otherwise (the assistant's prompt, its tools).
          resource.meta.type === "assistant" ||
          resource.meta.type === "tool" ||
          (resource.meta.score ?? 0) < (options.minScore ?? 0.1)
        )
          continue
        if (taken >= similar) break
        seen.add(urn)
        candidates.push({ resource, source: "similar" })
        taken++
      }
    }
    const conversation = path[0]
    if (conversation !== undefined) {
      // What the actor may not read is withheld, not a reason to show no history at all.
      const findReadable = options.findReadable ?? ((urn: string) => index.findReadable(actor, urn))
      const everything = yield* findReadable(conversation).pipe(
        Effect.map((found) => {
          for (const urn of found.withheld) if (!withheld.includes(urn)) withheld.push(urn)
          return found.resources
        }),
        Effect.catch((error) => {
          if (error._tag !== "AccessDeniedError") return Effect.fail(error)
          withheld.push(`${conversation}/*`)
          return Effect.succeed([] as ReadonlyArray<Resource.Resource>)
        })
      )
      const messages = everything
        .filter((resource) => resource.meta.type === "message" && !seen.has(resource.meta.urn))
        .sort((a, b) => (a.meta.name < b.meta.name ? 1 : a.meta.name > b.meta.name ? -1 : 0))
        .slice(0, options.history ?? 10)
      for (const resource of messages) candidates.push({ resource, source: "history" })
    }

    const items: Array<Item> = []
    const dropped: Array<{ urn: string; source: Source; tokens: number }> = []
    let used = 0
    const countJoined = counter.countJoined
    for (const { resource, source } of candidates) {
      // Measured before it is rendered whole where the counter can: what does not fit (and is
      // not summarised) is never built, and what fits is copied once, by `toText`.
      const parts = renderedParts(resource)
      let text: string | undefined
      let tokens: number
      if (countJoined !== undefined) tokens = countJoined(parts)
      else {
        text = joined(parts)
        tokens = counter.countText(text)
      }
      if (used + tokens <= options.budget) {
        items.push({ urn: resource.meta.urn, source, text: text ?? joined(parts), tokens })
        used += tokens
        continue
      }
      const room = options.budget - used
      if (options.summarizer !== undefined && room >= 32) {
        text ??= joined(parts)
        const summary = yield* Effect.option(
          options.summarizer.complete({
            messages: [
              Message.system(
                `Summarise the resource in at most ${Math.floor(room * 0.75)} tokens. Keep facts, names and numbers.`
              ),
              Message.user(text)
            ]
          })
        )
        if (summary._tag === "Some") {
          const summaryText = `[${resource.meta.type}: ${resource.meta.name}, summarised]\n${summary.value.text}`
          const summaryTokens = counter.countText(summaryText)
          if (used + summaryTokens <= options.budget) {
            items.push({
              urn: resource.meta.urn,
              source,
              text: summaryText,
              tokens: summaryTokens,
              summarized: true
            })
            used += summaryTokens
            continue
          }
        }
      }
      dropped.push({ urn: resource.meta.urn, source, tokens })
    }
    return { items, tokens: used, budget: options.budget, dropped, withheld }
  })

/** The window as text for a prompt. */
export const toText = (window: Window): string =>
  window.items.map((item) => item.text).join("\n\n") +
  (window.dropped.length === 0
    ? ""
    : `\n\n(${window.dropped.length} more resources did not fit and were left out.)`)
