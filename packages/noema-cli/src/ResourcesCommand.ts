/**
 * ResourcesCommand: `noema resources ls|show|put|search|reindex`, the resources
 * in the configured database (`--database` / `NOEMA_DATABASE_URL`, default
 * `$NOEMA_HOME/noema.db`), every access through a `ResourceIndex` with the
 * policy (`--policy`, else the default one, see `DefaultPolicy`) and the actor
 * (`--as`), the vector index kept in step on `put`.
 *
 * Where a URN is asked for, its ids may be names (`cld:assistant.analyst`, the
 * assistant named "analyst": `ResourceIndex.resolve`), and `ls cld:<type>` (a
 * type with no id: `cld:assistant`) lists that type. `ls` lists as a tree reads
 * (`Resource.treeOrder`): a plan's tasks in their order.
 */
import {
  Resource,
  ResourceIndex,
  ResourceProcessor,
  SqlResourceStore,
  Urn,
  VectorIndex
} from "@noema/resources"
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

/** The type `ls` lists when its PREFIX is a type's root, `cld:<type>` (no id); undefined otherwise. */
export const typeRoot = (prefix: string): string | undefined => {
  const type = prefix.startsWith(`${Urn.NAMESPACE}:`) ? prefix.slice(Urn.NAMESPACE.length + 1) : undefined
  return type !== undefined && Resource.isKind(type) ? type : undefined
}

/** A resource made by name (its hash its name's) under the parent as `resolve` found it, else as it is. */
const underResolvedParent = (resource: Resource.Resource, parent: string): Resource.Resource => {
  const { meta, ...fields } = resource
  if (meta.parent === undefined || meta.parent === parent) return resource
  if (meta.hash !== Resource.hashOf(meta.parent, meta.type, meta.name)) return resource
  return Resource.make(meta.type as Resource.Kind, { ...fields, name: meta.name, parent } as never)
}

export const run = Effect.fnUntraced(function* (command: ResourcesCommand, io: Io) {
  for (const urn of [
    command.actor,
    ...(command.type === "resources-ls" && typeRoot(command.prefix) === undefined ? [command.prefix] : []),
    ...(command.type === "resources-show" ? [command.urn] : []),
    ...(command.type === "resources-search" && command.prefix !== undefined ? [command.prefix] : [])
  ]) {
    const problem = Urn.parseEither(urn)
    if (problem instanceof Urn.InvalidUrnError) {
      // `ls cld:<word>`: perhaps a type's root, misspelled.
      const root = command.type === "resources-ls" && urn === command.prefix && /^cld:[^./]*$/.test(urn)
      const types = Object.keys(Resource.kinds).join(", ")
      return yield* Effect.fail(
        new UsageError(
          root ? `${problem.message}; a type's root is cld:<type>, one of ${types}` : problem.message
        )
      )
    }
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
        const type = typeRoot(command.prefix)
        const found =
          type === undefined
            ? yield* index.findByPrefix(actor, yield* index.resolve(actor, command.prefix))
            : yield* Effect.tap(index.findReadableByType(actor, type), ({ withheld }) =>
                withheld.length === 0
                  ? Effect.void
                  : Effect.sync(() =>
                      io.stderr.write(`noema: ${withheld.length} ${type} resources withheld by the policy\n`)
                    )
              ).pipe(Effect.map(({ resources }) => resources))
        const ordered = Resource.treeOrder(found)
        if (command.json) return yield* print(`${JSON.stringify(ordered)}\n`)
        if (ordered.length === 0)
          return yield* Effect.sync(() =>
            io.stderr.write(
              `noema: ${type === undefined ? `nothing under ${command.prefix}` : `no ${type} stored`}\n`
            )
          )
        return yield* print(ordered.map((resource) => `${line(resource)}\n`).join(""))
      }
      case "resources-show": {
        const resource = yield* index.get(actor, yield* index.resolve(actor, command.urn))
        return yield* print(
          command.json ? `${JSON.stringify(resource)}\n` : `${JSON.stringify(resource, null, 2)}\n`
        )
      }
      case "resources-put": {
        const stored: Array<Resource.Resource> = []
        // One at a time, in the file's order: a parent put first may be named by those after it.
        for (const given of toPut) {
          const parent = given.meta.parent
          const resource =
            parent === undefined ? given : underResolvedParent(given, yield* index.resolve(actor, parent))
          yield* index.put(actor, resource)
          stored.push(resource)
        }
        if (command.json)
          return yield* print(`${JSON.stringify(stored.map((resource) => resource.meta.urn))}\n`)
        const chunksOf = (resource: Resource.Resource) =>
          resource.meta.type !== "document"
            ? Effect.succeed("")
            : Effect.map(store.findByPrefix(resource.meta.urn), (below) => {
                const chunks = below.filter(ResourceProcessor.isChunkOf).length
                return ` (split into ${chunks} chunk${chunks === 1 ? "" : "s"})`
              })
        for (const resource of stored) yield* print(`put ${resource.meta.urn}${yield* chunksOf(resource)}\n`)
        return
      }
      case "resources-search": {
        const found = yield* index.search(
          actor,
          { text: command.text },
          {
            limit: command.limit,
            ...(command.resourceType !== undefined && { type: command.resourceType }),
            ...(command.prefix !== undefined && { prefix: yield* index.resolve(actor, command.prefix) })
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
