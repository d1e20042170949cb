/**
 * OpenAiTokens: OpenAI models' own token counts and context windows.
 *
 * Counting with the model's real BPE encoding (`o200k_base` for GPT-4o,
 * GPT-4.1, GPT-5 and the o-series, `cl100k_base` for GPT-4 and GPT-3.5, ...)
 * through `gpt-tokenizer`, a maintained pure-JavaScript port of OpenAI's
 * `tiktoken` checked against it. A model the package does not know (a local
 * model behind an OpenAI-compatible server, say `llama3.1`) has no exact
 * counter: `counter` then gives core's estimate, and says so (`exact: false`).
 *
 * The encodings are large (~100 ms to load), so they are loaded on first use,
 * never at start-up. Prices are not taken from the package: its catalogue's
 * prices do not match OpenAI's published ones.
 */
import { TokenCounter } from "@noema/core"
import { Effect } from "effect"

/** An encoding's text counter, loaded once per process. */
const encodings = new Map<string, Promise<(text: string) => number>>()

const loadEncoding = (name: string): Promise<(text: string) => number> => {
  let loading = encodings.get(name)
  if (loading === undefined) {
    loading = import(`gpt-tokenizer/encoding/${name}`).then(
      (module: { countTokens: (text: string) => number }) => (text: string) => module.countTokens(text)
    )
    encodings.set(name, loading)
  }
  return loading
}

interface ModelSpec {
  readonly name: string
  readonly context_window?: number
  readonly max_output_tokens?: number
}

/** The catalogue's entry for `model`: its exact name, or the name without a `-YYYY-MM-DD` snapshot suffix. */
const specOf = async (
  model: string
): Promise<{ readonly key: string; readonly spec: ModelSpec } | undefined> => {
  const catalogue = (await import("gpt-tokenizer/models")) as unknown as Record<string, ModelSpec | undefined>
  for (const key of [model, model.replace(/-\d{4}-\d{2}-\d{2}$/, "")]) {
    const spec = catalogue[key]
    if (spec !== undefined && typeof spec === "object" && typeof spec.name === "string") return { key, spec }
  }
  return undefined
}

/** The encoding OpenAI's `model` uses, if `gpt-tokenizer` knows the model. */
export const encodingOf = (model: string): Effect.Effect<string | undefined> =>
  Effect.promise(async () => {
    const known = await specOf(model)
    if (known === undefined) return undefined
    const mapping = (await import("gpt-tokenizer/mapping")) as {
      readonly modelToEncodingMap: Record<string, string | undefined>
      readonly DEFAULT_ENCODING: string
    }
    // Models the map leaves out use the current default encoding (the package's documented rule).
    return mapping.modelToEncodingMap[known.key] ?? mapping.DEFAULT_ENCODING
  })

/**
 * A counter for `model`: exact (its encoding, named `model (encoding)`) when
 * `gpt-tokenizer` knows it, core's `TokenCounter.estimate` otherwise.
 */
export const counter = (model: string): Effect.Effect<TokenCounter.TokenCounter> =>
  Effect.flatMap(encodingOf(model), (encoding) =>
    encoding === undefined
      ? Effect.succeed(TokenCounter.estimate)
      : Effect.map(
          Effect.promise(() => loadEncoding(encoding)),
          (countText) => TokenCounter.make({ name: `${model} (${encoding})`, exact: true, countText })
        )
  )

/** What the catalogue says of `model`'s limits, if it knows the model. */
export interface Limits {
  /** Tokens of input and output together. */
  readonly contextWindow: number
  readonly maxOutputTokens: number | undefined
}

export const limits = (model: string): Effect.Effect<Limits | undefined> =>
  Effect.promise(async () => {
    const spec = (await specOf(model))?.spec
    if (spec?.context_window === undefined) return undefined
    return { contextWindow: spec.context_window, maxOutputTokens: spec.max_output_tokens }
  })
