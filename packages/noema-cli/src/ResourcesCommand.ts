/**
 * ResourcesCommand: `noema resources ls|show|put|search|reindex`, the resources
 * in the configured database (`--database` / `NOEMA_DATABASE_URL`, default
 * `$NOEMA_HOME/noema.db`), every access through a `ResourceIndex` with the
 * policy (`--policy`, else the default one, see `DefaultPolicy`) and the actor
 * (`--as`), the vector index kept in step on `put`.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import type { Embedder } from "@noema/core"
import { LocalEmbedder, Resource, ResourceIndex, SqlResourceStore, Urn, VectorIndex } from "@noema/resources"
import { Cause, Effect, Exit } from "effect"
import type { Io } from "./Cli.js"
import { readsOnly, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as Runtime from "./internal/runtime.js"
import * as PolicyCommand from "./PolicyCommand.js"
import type { ResourcesCommand } from "./ResourcesArguments.js"

const usage = (message: string) => new UsageError(`${message} (see noema resources --help)`)

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
    throw usage(`noema resources: the embedding model "${model}" needs OPENAI_API_KEY or --base-url`)
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

class ResourcesError extends Error {
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

const line = (resource: Resource.Resource) =>
  `${resource.meta.urn}  ${resource.meta.type}  ${resource.meta.name}`

export const run = async (command: ResourcesCommand, io: Io): Promise<number> => {
  for (const urn of [
    command.actor,
    ...(command.type === "resources-ls" ? [command.prefix] : []),
    ...(command.type === "resources-show" ? [command.urn] : []),
    ...(command.type === "resources-search" && command.prefix !== undefined ? [command.prefix] : [])
  ]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError) throw usage(`noema resources: ${problem.message}`)
  }
  const toPut = command.type === "resources-put" ? readResources(command.file, io) : []
  const database = CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd)
  const embedder = await makeEmbedder(command, io)
  const program = Effect.gen(function* () {
    const store = yield* SqlResourceStore.fromDatabase
    const vectors = yield* VectorIndex.fromDatabase(embedder, { reset: command.type === "resources-reindex" })
    const policy = yield* PolicyCommand.engineOf(command, io)
    const index = ResourceIndex.make(store, policy, { vectors })
    const actor = command.actor
    const print = (text: string) => Effect.sync(() => io.stdout.write(text))
    switch (command.type) {
      case "resources-ls": {
        const found = yield* index.findByPrefix(actor, command.prefix)
        if (command.json) return yield* print(`${JSON.stringify(found)}\n`)
        if (found.length === 0)
          return yield* Effect.sync(() => io.stderr.write(`noema: nothing under ${command.prefix}\n`))
        return yield* print(found.map((resource) => `${line(resource)}\n`).join(""))
      }
      case "resources-show": {
        const resource = yield* index.get(actor, command.urn)
        return yield* print(
          command.json ? `${JSON.stringify(resource)}\n` : `${JSON.stringify(resource, null, 2)}\n`
        )
      }
      case "resources-put": {
        for (const resource of toPut) yield* index.put(actor, resource)
        if (command.json)
          return yield* print(`${JSON.stringify(toPut.map((resource) => resource.meta.urn))}\n`)
        return yield* print(toPut.map((resource) => `put ${resource.meta.urn}\n`).join(""))
      }
      case "resources-search": {
        const found = yield* index.search(
          actor,
          { text: command.text },
          {
            limit: command.limit,
            ...(command.resourceType !== undefined && { type: command.resourceType }),
            ...(command.prefix !== undefined && { prefix: command.prefix })
          }
        )
        if (command.json)
          return yield* print(
            `${JSON.stringify(found.map((r) => ({ urn: r.meta.urn, type: r.meta.type, name: r.meta.name, score: r.meta.score })))}\n`
          )
        if (found.length === 0) return yield* Effect.sync(() => io.stderr.write("noema: nothing found\n"))
        return yield* print(found.map((r) => `${(r.meta.score ?? 0).toFixed(3)}  ${line(r)}\n`).join(""))
      }
      case "resources-reindex": {
        let count = 0
        for (const kind of Object.keys(Resource.kinds)) {
          const all = yield* store.findByType(kind)
          for (let offset = 0; offset < all.length; offset += 256)
            yield* vectors.upsert(all.slice(offset, offset + 256))
          count += all.length
        }
        return yield* print(
          `reindexed ${count} resource${count === 1 ? "" : "s"} with ${embedder.provider}/${embedder.model}\n`
        )
      }
    }
  })
  const exit = await Effect.runPromiseExit(
    Effect.scoped(
      program.pipe(
        (effect) => Runtime.provideDatabase(effect, database, readsOnly(command)),
        Effect.provide(PolicyCommand.stderrLogger(io))
      )
    )
  )
  if (Exit.isSuccess(exit)) return 0
  const error = Cause.squash(exit.cause) as { _tag?: string; message?: string }
  if (error?._tag === "ResourceNotFoundError" || error?._tag === "AccessDeniedError") {
    io.stderr.write(`noema: ${error.message}\n`)
    return 1
  }
  if (error?._tag === "VectorIndexError" && /built with/.test(error.message ?? ""))
    throw new ResourcesError(`${error.message} (noema resources reindex does that)`)
  throw error
}
