/**
 * FileResourceStore: one JSON file per URN in a directory, as the seed lists it:
 *
 * ```
 * cld:conversation.c1.json
 * cld:conversation.c1/message.m2.json
 * cld:conversation.c1/message.m2/task.t3.json
 * ```
 *
 * A URN's descendants are exactly the files under the directory named by the
 * URN, so `findByPrefix` lists that directory tree and nothing else. Writes are
 * atomic: the JSON goes to a temporary file in the same directory, is flushed,
 * and is renamed over the target. `findByType` walks the whole tree (files hold
 * no type index); the SQL store indexes the type.
 */
import { randomUUID } from "node:crypto"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import { Effect, Layer } from "effect"
import * as Resource from "./Resource.js"
import {
  type BackendOptions,
  checkUrn,
  fromBackend,
  notFound,
  ResourceStore,
  ResourceStoreError,
  readListed,
  type Service
} from "./ResourceStore.js"

export interface Options extends BackendOptions {
  readonly directory: string
}

const isMissing = (error: unknown) => (error as { code?: unknown } | null)?.code === "ENOENT"

export const make = (options: Options): Service => {
  const root = path.resolve(options.directory)
  const fail = (what: string) => (error: unknown) =>
    new ResourceStoreError({
      message: `${root}: ${what}: ${error instanceof Error ? error.message : String(error)}`,
      cause: error
    })
  const fileOf = (urn: string) => path.join(root, `${urn}.json`)
  const readFile = (file: string) =>
    Effect.tryPromise({
      try: async () => {
        let text: string
        try {
          text = await fs.readFile(file, "utf8")
        } catch (error) {
          if (isMissing(error)) return undefined
          throw error
        }
        return Resource.decode(JSON.parse(text))
      },
      catch: fail(`cannot read ${path.relative(root, file)}`)
    })
  /** Every `.json` file below `directory`, as URN-ordered resources. */
  const walk = (directory: string) =>
    readListed(
      Effect.tryPromise({
        try: async () => {
          let entries: Array<string>
          try {
            entries = (await fs.readdir(directory, { recursive: true })) as Array<string>
          } catch (error) {
            if (isMissing(error)) return []
            throw error
          }
          return entries
            .filter((entry) => entry.endsWith(".json"))
            .map((entry) => path.join(directory, entry))
        },
        catch: fail("cannot list")
      }),
      readFile
    )
  return fromBackend(
    {
      write: (checked) =>
        Effect.tryPromise({
          try: async () => {
            const file = fileOf(checked.meta.urn)
            await fs.mkdir(path.dirname(file), { recursive: true })
            const temporary = path.join(path.dirname(file), `.${path.basename(file)}.${randomUUID()}.tmp`)
            try {
              const handle = await fs.open(temporary, "wx")
              try {
                await handle.writeFile(`${JSON.stringify(checked, null, 2)}\n`)
                await handle.sync()
              } finally {
                await handle.close()
              }
              await fs.rename(temporary, file)
            } catch (error) {
              await fs.rm(temporary, { force: true })
              throw error
            }
          },
          catch: fail(`cannot write ${checked.meta.urn}`)
        }),
      get: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.flatMap(readFile(fileOf(key)), (found) =>
            found === undefined ? Effect.fail(notFound(key)) : Effect.succeed(found)
          )
        ),
      getMany: (urns) =>
        Effect.flatMap(Effect.forEach(urns, checkUrn), (keys) =>
          Effect.map(
            Effect.forEach(keys, (key) => readFile(fileOf(key)), { concurrency: 16 }),
            (found) => found.filter((r): r is Resource.Resource => r !== undefined)
          )
        ),
      findByPrefix: (urn) => Effect.flatMap(checkUrn(urn), (key) => walk(path.join(root, key))),
      findByType: (type) => Effect.map(walk(root), (all) => all.filter((r) => r.meta.type === type)),
      delete: (urn) =>
        Effect.flatMap(checkUrn(urn), (key) =>
          Effect.tryPromise({
            try: async () => {
              try {
                await fs.unlink(fileOf(key))
                return true
              } catch (error) {
                if (isMissing(error)) return false
                throw error
              }
            },
            catch: fail(`cannot delete ${key}`)
          })
        )
    },
    options
  )
}

export const layer = (options: Options): Layer.Layer<ResourceStore> =>
  Layer.sync(ResourceStore, () => make(options))
