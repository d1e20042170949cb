/**
 * Resources: what the commands over resources share (`noema resources`, `noema
 * plan`): the embedder, and resources read from a JSON file.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import type { Embedder } from "@noema/core"
import { LocalEmbedder, Resource } from "@noema/resources"
import { Effect } from "effect"
import { UsageError } from "../CliArguments.js"
import type { Io } from "../Io.js"

const present = (value: string | undefined) =>
  value === undefined || value.trim() === "" ? undefined : value.trim()

/** The embedder: the local one, or a model of an OpenAI-compatible server. */
export const makeEmbedder = async (
  command: {
    readonly embeddingModel: string | undefined
    readonly baseUrl?: string | undefined
    readonly apiKey?: string | undefined
  },
  io: Io
): Promise<Embedder.Service> => {
  const model = present(command.embeddingModel) ?? present(io.env.NOEMA_EMBEDDING_MODEL) ?? "local"
  if (model === "local") return LocalEmbedder.make()
  const baseUrl =
    present(command.baseUrl) ?? present(io.env.NOEMA_BASE_URL) ?? present(io.env.OPENAI_BASE_URL)
  const apiKey = present(command.apiKey) ?? present(io.env.OPENAI_API_KEY)
  if (baseUrl === undefined && apiKey === undefined)
    throw new UsageError(`the embedding model "${model}" needs OPENAI_API_KEY or --base-url`)
  const { OpenAiEmbedder } = await import("@noema/openai")
  const { Redacted } = await import("effect")
  return Effect.runPromise(
    OpenAiEmbedder.make({
      model,
      ...(baseUrl !== undefined && { baseURL: baseUrl }),
      ...(apiKey !== undefined && { apiKey: Redacted.make(apiKey) })
    })
  )
}

/** A resources file that cannot be used: which, and why. */
export class ResourcesError extends Error {
  override readonly name = "ResourcesError"
}

/** The resources a FILE holds: every one checked before any is stored. */
export const readResources = (file: string, io: Io): Array<Resource.Resource> => {
  let text: string
  try {
    text = file === "-" ? fs.readFileSync(0, "utf8") : fs.readFileSync(path.resolve(io.cwd, file), "utf8")
  } catch (error) {
    throw new ResourcesError(
      `resources put: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? String(error)})`
    )
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (error) {
    throw new ResourcesError(
      `resources put: ${file} is not JSON (${error instanceof Error ? error.message : String(error)})`
    )
  }
  const items = Array.isArray(parsed) ? parsed : [parsed]
  if (items.length === 0) throw new ResourcesError(`resources put: ${file} holds no resource`)
  return items.map((item, index) => {
    const where = items.length === 1 ? file : `${file}, resource ${index + 1}`
    try {
      if (typeof item !== "object" || item === null) throw new Error("not an object")
      if ("meta" in item) return Resource.decode(item)
      const { type, name, ...fields } = item as { type?: unknown; name?: unknown }
      if (typeof type !== "string" || !Resource.isKind(type))
        throw new Error(
          `"type" must be one of ${Object.keys(Resource.kinds).join(", ")}, got ${JSON.stringify(type)}`
        )
      if (typeof name !== "string" || name === "") throw new Error('"name" must be a non-empty string')
      return Resource.make(type, { name, ...(fields as object) } as never)
    } catch (error) {
      throw new ResourcesError(
        `resources put: ${where}: ${error instanceof Error ? error.message : String(error)}`
      )
    }
  })
}
