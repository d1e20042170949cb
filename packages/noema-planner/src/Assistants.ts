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
 */
import { type ChatModel, Message, StructuredOutput } from "@noema/core"
import type { Resource, VectorIndex } from "@noema/resources"
import { VectorIndex as VectorIndexModule } from "@noema/resources"
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

/** Elects the assistant for `task` (see the module's comment). */
export const elect = (
  vectors: VectorIndex.Service,
  task: Resource.Task,
  options: ElectionOptions = {}
): Effect.Effect<Resource.Assignment, ElectionError> =>
  Effect.gen(function* () {
    const threshold = options.threshold ?? defaultThreshold
    const hits = yield* Effect.mapError(
      vectors.search(
        { text: VectorIndexModule.searchText(task) },
        { type: "assistant", limit: options.candidates ?? 3 }
      ),
      (error) =>
        new ElectionError({
          message: `electing an assistant for "${task.meta.name}": ${error.message}`,
          cause: error
        })
    )
    const candidates = hits.map((hit) => ({ assistant: hit.urn, score: hit.score }))
    const best = candidates[0]
    if (best === undefined && options.fallback?.kind !== "default")
      return yield* Effect.fail(
        new ElectionError({ message: `no assistant to elect for "${task.meta.name}": none is registered` })
      )
    if (best !== undefined && best.score >= threshold)
      return { assistant: best.assistant, score: best.score, candidates, by: "similarity" as const }
    const bestText =
      best === undefined ? "no candidate" : `the best, ${best.assistant}, scored ${best.score.toFixed(3)}`
    const fallback = options.fallback
    if (fallback?.kind === "default")
      return { assistant: fallback.assistant, score: best?.score ?? 0, candidates, by: "default" as const }
    if (fallback?.kind === "model" && best !== undefined) {
      const listing = candidates
        .map((c, i) => `${i + 1}. ${c.assistant} (similarity ${c.score.toFixed(3)})`)
        .join("\n")
      const choice = yield* StructuredOutput.generate(fallback.model, {
        schema: Choice,
        name: "choose_assistant",
        mode: "auto",
        messages: [
          Message.system("Choose the assistant that fits the task best. Answer with its number and why."),
          Message.user(
            `Task: ${task.meta.name}\n${VectorIndexModule.searchText(task)}\n\nAssistants:\n${listing}`
          )
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
            message: `the model chose assistant ${choice.assistant} for "${task.meta.name}", which is not one of the ${candidates.length} offered`
          })
        )
      return { assistant: chosen.assistant, score: chosen.score, candidates, by: "model" as const }
    }
    return yield* Effect.fail(
      new ElectionError({
        message: `no assistant fits "${task.meta.name}": ${bestText}, below the threshold ${threshold}; register a fitting assistant, set a default one, or let the model choose`
      })
    )
  })
