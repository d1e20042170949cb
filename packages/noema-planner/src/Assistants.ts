/**
 * Assistants: who does each task, elected by similarity.
 *
 * Assistants are resources (`assistant` kind: the four descriptive fields and
 * example requests), kept in the vector index like every resource. For a task,
 * the assistants are ranked by the similarity of their description to the
 * task's; the best one is elected when its score reaches `threshold`. Below
 * it, an explicit fallback decides, and says so in the assignment's `by`: a
 * `default` assistant, or the `model` choosing among the top candidates. With
 * neither, the election fails and says what scored best: never a silent,
 * random pick. The scores considered are kept on the task.
 *
 * The election is an access like any other: the candidates are found through
 * the `ResourceIndex` as the electing actor, so an assistant the policy does not
 * let it read is never a candidate (and takes no candidate's place), and a
 * default assistant it may not read is refused. Messages name assistants by
 * their names, which is how people registered them.
 */
import { type ChatModel, Message, StructuredOutput } from "@noema/core"
import { type Resource, type ResourceIndex, VectorIndex } from "@noema/resources"
import { Effect, Schema } from "effect"

export class ElectionError extends Schema.TaggedError<ElectionError>()("ElectionError", {
  message: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}) {}

export type Fallback =
  | { readonly kind: "default"; readonly assistant: string }
  | { readonly kind: "model"; readonly model: ChatModel.Service }

export interface ElectionOptions {
  /** The lowest similarity that elects an assistant by itself. Default 0.2. */
  readonly threshold?: number
  /** Candidates kept on the task (and offered to the model). Default 3. */
  readonly candidates?: number
  readonly fallback?: Fallback
}

export const defaultThreshold = 0.2

const Choice = Schema.Struct({
  assistant: Schema.Number.annotate({ description: "The number of the assistant that fits the task best" }),
  reason: Schema.String
})

/** The candidates for `task` the actor may read, best first, each with its name. */
const candidatesFor = (
  index: ResourceIndex.Service,
  actor: string,
  task: Resource.Task,
  limit: number
): Effect.Effect<Array<Candidate>, ElectionError> =>
  Effect.mapBoth(index.search(actor, { text: VectorIndex.searchText(task) }, { type: "assistant", limit }), {
    onSuccess: (found) =>
      found.map((resource) => ({
        assistant: resource.meta.urn,
        name: resource.meta.name,
        score: resource.meta.score ?? 0
      })),
    onFailure: (error) =>
      new ElectionError({
        message: `electing an assistant for "${task.meta.name}": ${error.message}`,
        cause: error
      })
  })

interface Candidate {
  readonly assistant: string
  readonly name: string
  readonly score: number
}

const assignment = (
  chosen: Candidate | string,
  candidates: ReadonlyArray<Candidate>,
  by: Resource.Assignment["by"],
  score?: number
): Resource.Assignment => ({
  assistant: typeof chosen === "string" ? chosen : chosen.assistant,
  score: score ?? (typeof chosen === "string" ? 0 : chosen.score),
  candidates: candidates.map(({ assistant, score }) => ({ assistant, score })),
  by
})

/** A default assistant, if the actor may read it (one not stored yet is taken as named). */
const checkDefault = (
  index: ResourceIndex.Service,
  actor: string,
  task: Resource.Task,
  assistant: string
): Effect.Effect<void, ElectionError> =>
  index.get(actor, assistant).pipe(
    Effect.asVoid,
    Effect.catchTag("ResourceNotFoundError", () => Effect.void),
    Effect.mapError(
      (error) =>
        new ElectionError({
          message: `the default assistant ${assistant} cannot be elected for "${task.meta.name}": ${error.message}`,
          cause: error
        })
    )
  )

/** The model's choice among the candidates (one outside them is refused). */
const modelChoice = (
  model: ChatModel.Service,
  task: Resource.Task,
  candidates: ReadonlyArray<Candidate>
): Effect.Effect<Candidate, ElectionError> =>
  Effect.gen(function* () {
    const listing = candidates
      .map((c, i) => `${i + 1}. ${c.name} (similarity ${c.score.toFixed(3)})`)
      .join("\n")
    const choice = yield* StructuredOutput.generate(model, {
      schema: Choice,
      name: "choose_assistant",
      mode: "auto",
      messages: [
        Message.system("Choose the assistant that fits the task best. Answer with its number and why."),
        Message.user(`Task: ${task.meta.name}\n${VectorIndex.searchText(task)}\n\nAssistants:\n${listing}`)
      ]
    }).pipe(
      Effect.mapError(
        (error) =>
          new ElectionError({
            message: `the model could not choose an assistant for "${task.meta.name}": ${error.message}`,
            cause: error
          })
      )
    )
    const chosen = candidates[choice.assistant - 1]
    if (chosen === undefined)
      return yield* Effect.fail(
        new ElectionError({
          message: `the model chose assistant ${choice.assistant} for "${task.meta.name}", which is not one of the ${candidates.length} offered (${candidates.map((c) => c.name).join(", ")})`
        })
      )
    return chosen
  })

/** Elects the assistant for `task`, as `actor` (see the module's comment). */
export const elect = (
  index: ResourceIndex.Service,
  actor: string,
  task: Resource.Task,
  options: ElectionOptions = {}
): Effect.Effect<Resource.Assignment, ElectionError> =>
  Effect.gen(function* () {
    const threshold = options.threshold ?? defaultThreshold
    const candidates = yield* candidatesFor(index, actor, task, options.candidates ?? 3)
    const best = candidates[0]
    const fallback = options.fallback
    if (best === undefined && fallback?.kind !== "default")
      return yield* Effect.fail(
        new ElectionError({
          message: `no assistant to elect for "${task.meta.name}": none is registered that ${actor} may read`
        })
      )
    if (best !== undefined && best.score >= threshold) return assignment(best, candidates, "similarity")
    if (fallback?.kind === "default") {
      yield* checkDefault(index, actor, task, fallback.assistant)
      return assignment(fallback.assistant, candidates, "default", best?.score ?? 0)
    }
    if (fallback?.kind === "model" && best !== undefined)
      return assignment(yield* modelChoice(fallback.model, task, candidates), candidates, "model")
    const bestText =
      best === undefined ? "no candidate" : `the best, ${best.name}, scored ${best.score.toFixed(3)}`
    return yield* Effect.fail(
      new ElectionError({
        message: `no assistant fits "${task.meta.name}": ${bestText}, below the threshold ${threshold}; register a fitting assistant, set a default one, or let the model choose`
      })
    )
  })
