/**
 * ResourcesCommand: `noema resources ls|show|put|search|reindex`, the resources
 * in the configured database (`--database` / `NOEMA_DATABASE_URL`, default
 * `$NOEMA_HOME/noema.db`), every access through a `ResourceIndex` with the
 * policy (`--policy`, else the default one, see `DefaultPolicy`) and the actor
 * (`--as`), the vector index kept in step on `put`.
 */
import { Resource, ResourceIndex, SqlResourceStore, Urn, VectorIndex } from "@noema/resources"
import { Cause, Effect, Exit } from "effect"
import { readsOnly, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Policies from "./internal/Policies.js"
import * as Resources from "./internal/Resources.js"
import type { ResourcesCommand } from "./ResourcesArguments.js"

const usage = (message: string) => new UsageError(`${message} (see noema resources --help)`)

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
  const toPut = command.type === "resources-put" ? Resources.readResources(command.file, io) : []
  const database = CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd)
  const embedder = await Resources.makeEmbedder(command, io)
  const program = Effect.gen(function* () {
    const store = yield* SqlResourceStore.fromDatabase
    const vectors = yield* VectorIndex.fromDatabase(embedder, { reset: command.type === "resources-reindex" })
    const policy = yield* Policies.engineOf(command, io)
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
        (effect) => Databases.provideDatabase(effect, database, readsOnly(command)),
        Effect.provide(Policies.stderrLogger(io))
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
    throw new Resources.ResourcesError(`${error.message} (noema resources reindex does that)`)
  throw error
}
