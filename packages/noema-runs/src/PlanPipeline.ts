/**
 * PlanPipeline: a run's stages from the plan of a `PlanAgent` instead of a file.
 *
 * The model plans the request with PlanAgent's own planning step
 * (`PlanAgent.draftPlan`: goal and steps, validated, one repair round); each
 * step becomes a stage: its key from the title (lowercase, `-`, unique), its
 * instructions the step's title and detail with the goal. The result is an
 * ordinary `Pipeline`, stored whole in run.json like any other, so a run
 * planned once is resumed, retried and shown the same way; the plan is never
 * asked again. Steps beyond `maxStages` are not dropped: the last stage is
 * given them too.
 */
import { PlanAgent } from "@noema/agents"
import { type ChatModel, ConversationContext, Message, type StructuredOutput } from "@noema/core"
import { Effect } from "effect"
import type { Pipeline, StageDefinition } from "./Pipeline.js"

/** Which planned stages wait for a person: none, the first, or every one. */
export type Approval = "none" | "first" | "all"

export interface Options {
  /** Tools every stage may use (besides `write_artifact`). */
  readonly tools?: ReadonlyArray<string>
  readonly approval?: Approval
  /** Default 8. */
  readonly maxStages?: number
}

/** A stage key from a step's title: lowercase letters, digits and `-`, starting with a letter, unique. */
export const keyOf = (title: string, taken: ReadonlySet<string>): string => {
  const slug = title
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 40)
    .replace(/-+$/, "")
  const base = /^[a-z]/.test(slug) ? slug : `step-${slug}`.replace(/-+$/, "")
  let key = base
  for (let n = 2; taken.has(key); n++) key = `${base}-${n}`
  return key
}

const artifactHint =
  "Save what this stage produces with write_artifact (Markdown unless the step says otherwise)."

/** The pipeline a plan makes (see the module's comment). */
export const fromPlan = (plan: PlanAgent.Plan, options: Options = {}): Pipeline => {
  const maxStages = Math.max(1, options.maxStages ?? 8)
  const steps = plan.steps
  const kept = steps.slice(0, maxStages)
  const rest = steps.slice(maxStages)
  const taken = new Set<string>()
  const stages: Array<StageDefinition> = kept.map((step, index) => {
    const key = keyOf(step.title, taken)
    taken.add(key)
    const last = index === kept.length - 1
    const also =
      last && rest.length > 0
        ? `\n\nThen also:\n${rest.map((more) => `- ${more.title}: ${more.detail}`).join("\n")}`
        : ""
    return {
      key,
      instructions: `Goal of the whole run: ${plan.goal}\n\nThis stage (${index + 1} of ${kept.length}): ${step.title}. ${step.detail}${also}\n\n${artifactHint}`,
      tools: [...(options.tools ?? [])],
      approval: options.approval === "all" || (options.approval === "first" && index === 0)
    }
  })
  return { name: "plan", stages }
}

/** Plans `request` with the model and makes its pipeline. */
export const plan = (
  request: string,
  model: ChatModel.Service,
  options: Options = {}
): Effect.Effect<Pipeline, StructuredOutput.StructuredOutputError | ChatModel.ChatModelError> =>
  Effect.map(PlanAgent.draftPlan(ConversationContext.of(Message.user(request)), model), (drafted) =>
    fromPlan(
      drafted.steps.length > 0
        ? drafted
        : {
            ...drafted,
            // A plan with no step still makes one stage: the request itself.
            steps: [{ id: 1, title: "Do the request", detail: request, status: "pending" }]
          },
      options
    )
  )
