/**
 * ResourcesCommand: `noema resources ls|show|put|search|reindex`, the resources
 * in the configured database (`--database` / `NOEMA_DATABASE_URL`, default
 * `$NOEMA_HOME/noema.db`), every access through a `ResourceIndex` with the
 * policy (`--policy`, else the default one, see `DefaultPolicy`) and the actor
 * (`--as`), the vector index kept in step on `put`.
 */
import { Resource, ResourceIndex, SqlResourceStore, Urn, VectorIndex } from "@noema/resources"
import { Effect } from "effect"
import { type ResourcesCommand, readsOnly, UsageError } from "./CliArguments.js"
import * as CliConfig from "./CliConfig.js"
import * as ExitStatus from "./ExitStatus.js"
import type { Io } from "./Io.js"
import * as Databases from "./internal/Databases.js"
import * as Policies from "./internal/Policies.js"
import * as Resources from "./internal/Resources.js"

const line = (resource: Resource.Resource) =>
  `${resource.meta.urn}  ${resource.meta.type}  ${resource.meta.name}`

export const run = Effect.fnUntraced(function* (command: ResourcesCommand, io: Io) {
  for (const urn of [
    command.actor,
    ...(command.type === "resources-ls" ? [command.prefix] : []),
    ...(command.type === "resources-show" ? [command.urn] : []),
    ...(command.type === "resources-search" && command.prefix !== undefined ? [command.prefix] : [])
  ]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError) return yield* Effect.fail(new UsageError(problem.message))
  }
  const toPut = yield* Effect.try({
    try: () => (command.type === "resources-put" ? Resources.readResources(command.file, io) : []),
    catch: (error) => error
  })
  const database = yield* Effect.try({
    try: () => CliConfig.resolveDatabase(command.database, io.env, CliConfig.paths(io.env), io.cwd),
    catch: (error) => error
  })
  const embedder = yield* Effect.tryPromise({
    try: () => Resources.makeEmbedder(command, io),
    catch: (error) => error
  })
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
  yield* Effect.scoped(Databases.provideDatabase(program, database, readsOnly(command))).pipe(
    Effect.catchIf(
      (error) => error instanceof VectorIndex.VectorIndexError && /built with/.test(error.message),
      (error) =>
        Effect.fail(new Resources.ResourcesError(`${error.message} (noema resources reindex does that)`))
    )
  )
  return ExitStatus.success
})
